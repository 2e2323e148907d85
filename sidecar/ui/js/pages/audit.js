// The audit log: filters (actor, action, object, time range), newest first, cursor paging.

import { api } from '../api.js';
import { h, fill, field, alertBox, table, when, onSubmit } from '../dom.js';

export async function auditPage(root) {
  const alert = alertBox();
  const actor = field('Actor', { name: 'actor', autocomplete: 'off', spellcheck: 'false' }, { hint: 'Exact: user:alice, token:3:alice, bootstrap, cli…' });
  const action = field('Action', { name: 'action', autocomplete: 'off', spellcheck: 'false' }, { hint: 'Exact: authn_login_fail, keys.create, token_created…' });
  const object = field('Object', { name: 'object', autocomplete: 'off', spellcheck: 'false' }, { hint: 'Exact: keys/alice, users/bob…' });
  const since = field('Since', { name: 'since', type: 'datetime-local' });
  const until = field('Until', { name: 'until', type: 'datetime-local' });
  const limit = field('Rows per page', { name: 'limit', value: '50' }, {
    tag: 'select', options: [['25', '25'], ['50', '50'], ['100', '100'], ['500', '500']],
  });
  const results = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  const pageInfo = h('span', { class: 'muted', role: 'status' });
  const first = h('button', { type: 'button', class: 'secondary' }, 'First page');
  const next = h('button', { type: 'button', class: 'secondary' }, 'Next page');
  let cursor = null;
  let nextCursor = null;
  let page = 1;

  const query = () => {
    const q = new URLSearchParams();
    for (const [k, f] of [['actor', actor], ['action', action], ['object', object]]) {
      if (f.input.value.trim()) q.set(k, f.input.value.trim());
    }
    for (const [k, f] of [['since', since], ['until', until]]) {
      if (f.input.value) q.set(k, String(new Date(f.input.value).getTime()));
    }
    q.set('limit', limit.input.value);
    if (cursor) q.set('cursor', cursor);
    return q;
  };
  const load = async () => {
    const answer = await api('GET', `/api/v1/audit?${query()}`);
    nextCursor = answer.next_cursor || null;
    next.disabled = !nextCursor;
    first.disabled = page === 1;
    fill(pageInfo, `Page ${page}, ${answer.events.length} event${answer.events.length === 1 ? '' : 's'}`);
    fill(results, table('Audit events', ['When', 'Actor', 'Action', 'Object', 'Status', 'Detail', 'From'],
      answer.events.map((e) => [
        h('span', { title: String(e.at) }, when(e.at)), h('code', {}, e.actor), e.action, e.object ? h('code', {}, e.object) : '',
        { class: 'num', cell: String(e.status) }, e.detail || '',
        [e.method && e.path ? h('div', { class: 'mono' }, `${e.method} ${e.path}`) : null, e.source_ip || ''],
      ]), 'No events match.'));
  };
  const run = async (f) => {
    alert.clear();
    try { await f(); } catch (e) { alert.show(e); }
  };
  first.addEventListener('click', () => run(async () => { cursor = null; page = 1; await load(); }));
  next.addEventListener('click', () => run(async () => {
    if (!nextCursor) return;
    cursor = nextCursor; page += 1; await load();
  }));
  const form = h('form', { class: 'panel', id: 'audit-filters', 'aria-labelledby': 'audit-filter-title', novalidate: true },
    h('h2', { id: 'audit-filter-title' }, 'Filters'),
    h('div', { class: 'fields' }, actor.wrap, action.wrap, object.wrap, since.wrap, until.wrap, limit.wrap),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Apply filters'),
      h('button', { type: 'reset', class: 'secondary' }, 'Clear')));
  onSubmit(form, alert, async () => { cursor = null; page = 1; await load(); });
  form.addEventListener('reset', () => queueMicrotask(() => run(async () => { cursor = null; page = 1; await load(); })));
  fill(root, h('div', { class: 'toolbar' }, h('h1', {}, 'Audit log')), form, alert.el, results,
    h('div', { class: 'pager' }, first, next, pageInfo));
  await load();
}
