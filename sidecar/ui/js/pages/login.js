// The login page: a password form (when the gateway has password logins) and a single sign-on
// button (when GET /api/v1/session/methods says oidc).

import { api } from '../api.js';
import { h, fill, field, alertBox } from '../dom.js';

export function loginPage(root, { methods, message, loggedIn, ssoStarting }) {
  const alert = alertBox();
  const parts = [h('h1', {}, 'Log in to ferrogate')];
  if (message) parts.push(h('p', { class: 'alert ok', role: 'status' }, message));
  parts.push(alert.el);
  if (methods && methods.password) {
    const name = field('User name', { name: 'name', autocomplete: 'username', required: true, autocapitalize: 'none', spellcheck: 'false' });
    const password = field('Password', { name: 'password', type: 'password', autocomplete: 'current-password', required: true });
    const submit = h('button', { type: 'submit' }, 'Log in');
    const form = h('form', { class: 'panel', id: 'login-form', novalidate: true }, name.wrap, password.wrap, submit);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      alert.clear();
      if (!name.input.value || !password.input.value) {
        alert.show(new Error('Enter your user name and password.'));
        (name.input.value ? password.input : name.input).focus();
        return;
      }
      submit.disabled = true;
      try {
        const answer = await api('POST', '/api/v1/session',
          { name: name.input.value.trim(), password: password.input.value }, { quiet401: true });
        password.input.value = '';
        await loggedIn(answer);
      } catch (e) {
        alert.show(e);
        password.input.value = '';
        password.input.focus();
      } finally {
        submit.disabled = false;
      }
    });
    parts.push(form);
    queueMicrotask(() => name.input.focus());
  }
  if (methods && methods.oidc) {
    if (methods.password) parts.push(h('p', { class: 'or' }, 'or'));
    parts.push(h('button', {
      type: 'button', id: 'sso', class: methods.password ? 'secondary' : '',
      onclick: () => { ssoStarting(); location.assign('/api/v1/session/oidc/login?return_to=%2Fui%2F'); },
    }, 'Log in with single sign-on'));
  }
  if (!methods || (!methods.password && !methods.oidc)) {
    parts.push(h('p', { class: 'muted' }, 'No login method is set up on this gateway (logins need the Postgres store).'));
  }
  fill(root, h('div', { class: 'login' }, parts));
}
