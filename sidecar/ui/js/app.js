// The dashboard: a single page with hash routes (#/keys, #/audit, ...). Who is logged in and
// what it may call come from GET /api/v1/session; the navigation and every button follow its
// `operations`, and the API refuses anything else in any case.

import { api, setCsrf, setOnExpired } from './api.js';
import { h, fill } from './dom.js';
import { loginPage } from './pages/login.js';
import { keysPage } from './pages/keys.js';
import { groupsPage } from './pages/groups.js';
import { modelsPage } from './pages/models.js';
import { auditPage } from './pages/audit.js';
import { usersPage } from './pages/users.js';
import { tokensPage } from './pages/tokens.js';
import { overviewPage } from './pages/overview.js';
import { limitsPage } from './pages/limits.js';
import { requestsPage } from './pages/requests.js';
import { targetsPage } from './pages/targets.js';
import { pricingPage } from './pages/pricing.js';
import { problemsPage } from './pages/problems.js';

// Set while this browser holds a session we made (the cookie itself is HttpOnly): without it
// the login form shows at once, with no call that would be refused.
const SIGNED_IN = 'ferrogate.signed-in';

const PAGES = [
  { id: 'overview', title: 'Overview', needs: ['get', '/api/v1/analytics/usage'], render: overviewPage },
  { id: 'keys', title: 'Keys', needs: ['get', '/api/v1/keys'], render: keysPage },
  { id: 'groups', title: 'Groups', needs: ['get', '/api/v1/groups'], render: groupsPage },
  { id: 'models', title: 'Models', needs: ['get', '/api/v1/models'], render: modelsPage },
  { id: 'targets', title: 'Providers and targets', needs: ['get', '/api/v1/targets'], render: targetsPage },
  { id: 'pricing', title: 'Pricing', needs: ['get', '/api/v1/pricing'], render: pricingPage },
  { id: 'limits', title: 'Limits and budgets', needs: ['get', '/api/v1/limits'], render: limitsPage },
  { id: 'requests', title: 'Requests', needs: ['get', '/api/v1/requests'], render: requestsPage },
  { id: 'problems', title: 'Configuration problems', needs: ['get', '/api/v1/config/problems'], render: problemsPage },
  { id: 'audit', title: 'Audit log', needs: ['get', '/api/v1/audit'], render: auditPage },
  { id: 'users', title: 'Users', needs: ['get', '/api/v1/users'], render: usersPage },
  { id: 'tokens', title: 'API tokens', needs: ['get', '/api/v1/tokens'], render: tokensPage },
];

const state = { me: null, methods: null };

/** Whether the caller may call `method path` (`path` as the operations table writes it). */
export function can(method, path) {
  const m = method.toLowerCase();
  return Boolean(state.me && state.me.operations.some((o) => o.method === m && o.path === path));
}

const main = () => document.getElementById('main');

function route() {
  const id = (location.hash.replace(/^#\/?/, '').split('?')[0]) || '';
  return id;
}

async function boot() {
  setOnExpired(() => expired());
  document.getElementById('logout').addEventListener('click', logout);
  window.addEventListener('hashchange', () => render());
  try {
    state.methods = await api('GET', '/api/v1/session/methods');
  } catch (e) {
    state.methods = { password: false, oidc: false };
  }
  // Without any login method (the file store), the caller can only be the local owner.
  const noLogin = !state.methods.password && !state.methods.oidc;
  if (localStorage.getItem(SIGNED_IN) || noLogin) {
    try {
      await loadMe();
    } catch (e) {
      localStorage.removeItem(SIGNED_IN);
      state.me = null;
      if (noLogin) {
        showLogin(e.status === 401 ? 'This gateway has no login (it uses the file store): its dashboard needs the Postgres store.' : e.message);
        return;
      }
    }
  }
  render();
}

async function loadMe() {
  const me = await api('GET', '/api/v1/session', undefined, { quiet401: true });
  state.me = me;
  setCsrf(me.csrf_token);
}

/** Called by the login page once the session is open. */
export async function loggedIn(answer) {
  localStorage.setItem(SIGNED_IN, '1');
  setCsrf(answer && answer.csrf_token);
  await loadMe();
  // A new hash renders through the hashchange listener; the same hash renders here.
  const target = `#/${firstPage()}`;
  if (!route() || route() === 'login') {
    if (location.hash !== target) { location.hash = target; return; }
  }
  render();
}

/** Remembers that a single sign-on is under way (the provider sends the browser back to /ui/). */
export function ssoStarting() { localStorage.setItem(SIGNED_IN, '1'); }

function expired() {
  localStorage.removeItem(SIGNED_IN);
  state.me = null;
  setCsrf(null);
  showLogin('Your session has ended: log in again.');
}

async function logout() {
  let next = null;
  try {
    const answer = await api('DELETE', '/api/v1/session');
    next = answer && answer.logout_url;
  } catch {
    // The session is gone either way (expired, or refused): forget it here.
  }
  localStorage.removeItem(SIGNED_IN);
  state.me = null;
  setCsrf(null);
  if (next) { location.assign(next); return; }
  history.replaceState(null, '', '/ui/');
  showLogin('You are logged out.');
}

function firstPage() {
  const p = PAGES.find((x) => can(...x.needs));
  return p ? p.id : 'tokens';
}

function showLogin(message) {
  document.getElementById('top').hidden = true;
  document.title = 'Log in · ferrogate';
  loginPage(main(), { methods: state.methods, message, loggedIn, ssoStarting });
}

function render() {
  if (!state.me) { showLogin(); return; }
  const visible = PAGES.filter((p) => can(...p.needs));
  let id = route();
  if (!visible.some((p) => p.id === id)) {
    id = visible.length ? visible[0].id : '';
    if (id) { history.replaceState(null, '', `#/${id}`); }
  }
  const top = document.getElementById('top');
  top.hidden = false;
  fill(document.getElementById('nav'), visible.map((p) => h('a', {
    href: `#/${p.id}`, 'aria-current': p.id === id ? 'page' : null,
  }, p.title)));
  fill(document.getElementById('who'), `${state.me.name} · ${state.me.role}`);
  document.getElementById('logout').hidden = !state.me.csrf_token;
  const page = visible.find((p) => p.id === id);
  const root = main();
  if (!page) {
    fill(root, h('h1', {}, 'Nothing to show'), h('p', {}, 'Your role may not read any of the dashboard’s pages.'));
    return;
  }
  document.title = `${page.title} · ferrogate`;
  // Each render draws into a view of its own: a slower earlier one finishes into a detached
  // view, never over this one.
  const view = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  fill(root, view);
  page.render(view, { me: state.me, can }).catch((e) => {
    fill(view, h('h1', {}, page.title), h('div', { class: 'alert error', role: 'alert' }, e.message || String(e)));
  });
  root.focus({ preventScroll: true });
}

boot();
