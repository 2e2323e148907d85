// The request log: GET /api/v1/requests with filters (key, model, status class, time range),
// cursor paging and a CSV export of the rows shown (built here, as a Blob download).

import { api } from '../api.js';
import { h, fill, field, alertBox, table, when, onSubmit } from '../dom.js';

const COLUMNS = [
  ['started_at_unix_ms', 'When'], ['request_id', 'Request id'], ['key', 'Key'], ['model_requested', 'Model'],
  ['provider', 'Provider'], ['upstream_model', 'Upstream model'], ['status', 'Status'],
  ['prompt_tokens', 'Prompt tokens'], ['completion_tokens', 'Completion tokens'], ['cost_micro_usd', 'Cost (micro-USD)'],
  ['latency_ms', 'Latency ms'], ['ttft_ms', 'TTFT ms'], ['streamed', 'Streamed'], ['attempts', 'Attempts'],
];

/** One CSV field (RFC 4180): quoted when it holds a comma, quote or line break. */
export function csvField(v) {
  const t = v === null || v === undefined ? '' : (Array.isArray(v) ? v.join(' ') : String(v));
  // A leading = + - @ would be a formula in a spreadsheet: prefix it.
  const safe = /^[=+\-@\t\r]/.test(t) && !/^-?\d/.test(t) ? `'${t}` : t;
  return /[",\r\n]/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
}

export async function requestsPage(root) {
  const alert = alertBox();
  const key = field('Key', { name: 'key', autocomplete: 'off', spellcheck: 'false' }, { hint: 'Exact key name' });
  const model = field('Model', { name: 'model', autocomplete: 'off', spellcheck: 'false' }, { hint: 'Exact model as requested' });
  const status = field('Status class', { name: 'status_class', value: '' }, {
    tag: 'select', options: [['', 'Any'], ['2xx', '2xx'], ['4xx', '4xx'], ['5xx', '5xx'], ['1xx', '1xx'], ['3xx', '3xx']],
  });
  const since = field('Since', { name: 'since', type: 'datetime-local' });
  const until = field('Until', { name: 'until', type: 'datetime-local' });
  const limit = field('Rows per page', { name: 'limit', value: '50' }, {
    tag: 'select', options: [['25', '25'], ['50', '50'], ['100', '100'], ['500', '500']],
  });
  const results = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  const pageInfo = h('span', { class: 'muted', role: 'status' });
  const first = h('button', { type: 'button', class: 'secondary' }, 'First page');
  const next = h('button', { type: 'button', class: 'secondary' }, 'Next page');
  const exportCsv = h('button', { type: 'button', id: 'requests-csv' }, 'Export CSV');
  let cursor = null;
  let nextCursor = null;
  let page = 1;
  let shown = [];

  const query = () => {
    const q = new URLSearchParams();
    for (const [k, f] of [['key', key], ['model', model]]) {
      if (f.input.value.trim()) q.set(k, f.input.value.trim());
    }
    if (status.input.value) q.set('status_class', status.input.value);
    for (const [k, f] of [['since', since], ['until', until]]) {
      if (f.input.value) q.set(k, String(new Date(f.input.value).getTime()));
    }
    q.set('limit', limit.input.value);
    if (cursor) q.set('cursor', cursor);
    return q;
  };
  const load = async () => {
    const answer = await api('GET', `/api/v1/requests?${query()}`);
    shown = answer.requests || [];
    nextCursor = answer.next_cursor || null;
    next.disabled = !nextCursor;
    first.disabled = page === 1;
    exportCsv.disabled = !shown.length;
    fill(pageInfo, `Page ${page}, ${shown.length} request${shown.length === 1 ? '' : 's'}`);
    fill(results, table('Requests', ['When', 'Request id', 'Key', 'Model', 'Provider', 'Status', 'Tokens in / out', 'Cost USD', 'Latency ms'],
      shown.map((r) => [
        when(r.started_at_unix_ms), h('code', {}, r.request_id || ''), r.key || '—', r.model_requested || '—',
        r.provider ? `${r.provider}${r.upstream_model ? ` / ${r.upstream_model}` : ''}` : '—',
        { class: 'num', cell: String(r.status) },
        { class: 'num', cell: `${r.prompt_tokens ?? 0} / ${r.completion_tokens ?? 0}` },
        { class: 'num', cell: r.cost_micro_usd === null || r.cost_micro_usd === undefined ? '—' : (r.cost_micro_usd / 1e6).toFixed(6) },
        { class: 'num', cell: r.latency_ms === null || r.latency_ms === undefined ? '—' : String(r.latency_ms) },
      ]), 'No requests match.'));
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
  exportCsv.addEventListener('click', () => {
    const lines = [COLUMNS.map(([, t]) => csvField(t)).join(',')];
    for (const r of shown) {
      lines.push(COLUMNS.map(([k]) => csvField(k === 'started_at_unix_ms' ? new Date(r[k]).toISOString() : r[k])).join(','));
    }
    const blob = new Blob([`${lines.join('\r\n')}\r\n`], { type: 'text/csv;charset=utf-8' });
    const url = URL.createObjectURL(blob);
    const a = h('a', { href: url, download: `ferrogate-requests-page${page}.csv`, hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  });
  const form = h('form', { class: 'panel', id: 'requests-filters', 'aria-labelledby': 'requests-filter-title', novalidate: true },
    h('h2', { id: 'requests-filter-title' }, 'Filters'),
    h('div', { class: 'fields' }, key.wrap, model.wrap, status.wrap, since.wrap, until.wrap, limit.wrap),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Apply filters'),
      h('button', { type: 'reset', class: 'secondary' }, 'Clear')));
  onSubmit(form, alert, async () => { cursor = null; page = 1; await load(); });
  form.addEventListener('reset', () => queueMicrotask(() => run(async () => { cursor = null; page = 1; await load(); })));
  fill(root, h('div', { class: 'toolbar' }, h('h1', {}, 'Requests'), exportCsv), form, alert.el, results,
    h('div', { class: 'pager' }, first, next, pageInfo));
  await load();
}
