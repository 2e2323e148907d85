// Configuration problems: GET /api/v1/config/problems. The rows the served snapshot had to drop
// (a model naming an unknown provider, a negative price, ...) and, while the latest change could
// not be built at all, why: each with the path of the row and the builder's message.

import { api } from '../api.js';
import { h, fill, statusLine, table } from '../dom.js';

const rows = (list) => (list || []).map((p) => [
  h('code', { 'data-problem': p.path || '' }, p.path || ''), p.message || '',
]);

function render(view, answer) {
  const dropped = answer.dropped || [];
  const rejected = answer.rejected || [];
  fill(view,
    h('p', { id: 'problems-version' }, answer.version === null || answer.version === undefined
      ? 'No configuration snapshot is served yet.'
      : ['Served configuration version ', h('strong', {}, String(answer.version)), '.']),
    h('h2', {}, 'Rows dropped from the served snapshot'),
    h('p', { class: 'muted' }, 'The gateway serves the rest of the configuration without them, and without the rows that depend on them.'),
    table('Rows dropped from the served snapshot', ['Path', 'Problem'], rows(dropped), 'All rows are in use.'),
    h('h2', {}, 'The latest change, rejected'),
    table('Why the latest change was rejected', ['Path', 'Problem'], rows(rejected),
      'Nothing is rejected: the latest change is the one served.'));
}

export async function problemsPage(root) {
  const status = statusLine();
  const view = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  const reload = async () => render(view, await api('GET', '/api/v1/config/problems'));
  const refresh = h('button', { type: 'button', class: 'secondary', onclick: async () => {
    refresh.disabled = true;
    status.say('');
    try {
      await reload();
      status.say('Refreshed.');
    } catch (e) {
      fill(view, h('div', { class: 'alert error', role: 'alert' }, e.message || String(e)));
    } finally {
      refresh.disabled = false;
    }
  } }, 'Refresh');
  fill(root, h('div', { class: 'toolbar' }, h('h1', {}, 'Configuration problems'), refresh), status.el, view);
  await reload();
}
