// The overview: requests, errors, latency and cost over a chosen range
// (/api/v1/analytics/usage), the month-end cost forecast (/forecast) and the latest refusals
// and failures (/events).

import { api } from '../api.js';
import { h, fill, field, table, when, alertBox } from '../dom.js';
import { chart } from '../charts.js';

const RANGES = [
  ['1h', 'Last hour', 3600e3, 'minute', 60e3],
  ['24h', 'Last 24 hours', 86400e3, 'hour', 3600e3],
  ['7d', 'Last 7 days', 7 * 86400e3, 'hour', 3600e3],
  ['30d', 'Last 30 days', 30 * 86400e3, 'day', 86400e3],
];

export const usd = (v) => (v === null || v === undefined ? '—' : `$${Number(v).toFixed(Math.abs(v) < 1 && v !== 0 ? 4 : 2)}`);
const int = (v) => Number(v || 0).toLocaleString('en-US');
const ms = (v) => (v === null || v === undefined ? '—' : `${Math.round(v)} ms`);

function label(t, stepMs) {
  const d = new Date(t);
  if (stepMs >= 86400e3) return d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' });
  if (stepMs >= 3600e3) return d.toLocaleString(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
  return d.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' });
}

export async function overviewPage(root, { can }) {
  const range = field('Time range', { name: 'range', value: '24h' }, {
    tag: 'select', options: RANGES.map(([v, t]) => [v, t]),
  });
  const alert = alertBox();
  const stats = h('div', { class: 'stats', id: 'ov-stats', 'aria-live': 'polite' });
  const charts = h('div', { class: 'charts' });
  const forecast = h('section', { class: 'panel', 'aria-labelledby': 'ov-fc' });
  const events = h('section', { 'aria-labelledby': 'ov-ev' });
  const refresh = h('button', { type: 'button', class: 'secondary', id: 'ov-refresh' }, 'Refresh');

  const load = async () => {
    alert.clear();
    const [, , span, bucket, step] = RANGES.find((r) => r[0] === range.input.value) || RANGES[1];
    const to = Date.now();
    const from = to - span;
    const answer = await api('GET', `/api/v1/analytics/usage?from=${from}&to=${to}&bucket=${bucket}`);
    const stepMs = answer.bucket_ms || step;
    const start = Math.floor(answer.from / stepMs) * stepMs;
    const slots = [];
    for (let t = start; t < answer.to; t += stepMs) slots.push(t);
    const byStart = new Map();
    for (const sr of answer.series || []) for (const p of sr.points || []) byStart.set(p.start, p);
    const pts = slots.map((t) => byStart.get(t) || null);
    const labels = slots.map((t) => label(t, stepMs));
    const total = (f) => pts.reduce((a, p) => a + (p ? Number(p[f] || 0) : 0), 0);
    const requests = total('requests');
    const errors = total('errors');
    const cost = total('cost_usd');
    const tokens = total('prompt_tokens') + total('completion_tokens');
    const p95s = pts.map((p) => (p && p.latency_ms ? p.latency_ms.p95 : null)).filter((v) => v !== null && v !== undefined);
    const stat = (id, name, value) => h('div', { class: 'stat', id }, h('span', { class: 'stat-label' }, name), h('span', { class: 'stat-value' }, value));
    fill(stats,
      stat('ov-requests', 'Requests', int(requests)),
      stat('ov-errors', 'Errors', `${int(errors)}${requests ? ` (${((100 * errors) / requests).toFixed(1)} %)` : ''}`),
      stat('ov-tokens', 'Tokens', int(tokens)),
      stat('ov-cost', 'Cost', usd(cost)),
      stat('ov-p95', 'Worst p95 latency', p95s.length ? ms(Math.max(...p95s)) : '—'));
    fill(charts,
      chart('Requests', labels, [{ name: 'Requests', values: pts.map((p) => (p ? p.requests : 0)), kind: 'bar', cls: 's0' }], int, { id: 'ov-chart-requests' }),
      chart('Errors (status 400 or more)', labels, [{ name: 'Errors', values: pts.map((p) => (p ? p.errors : 0)), kind: 'bar', cls: 'err' }], int),
      chart('Latency', labels, [
        { name: 'p50', values: pts.map((p) => (p && p.latency_ms ? p.latency_ms.p50 : null)), kind: 'line', cls: 's0' },
        { name: 'p95', values: pts.map((p) => (p && p.latency_ms ? p.latency_ms.p95 : null)), kind: 'line', cls: 's1' },
      ], ms),
      chart('Cost (USD)', labels, [{ name: 'Cost', values: pts.map((p) => (p ? p.cost_usd : 0)), kind: 'bar', cls: 's2' }], usd));

    if (can('get', '/api/v1/analytics/forecast')) {
      const fc = await api('GET', '/api/v1/analytics/forecast');
      const o = fc.overall || {};
      fill(forecast, h('h2', { id: 'ov-fc' }, 'Cost this month'),
        h('dl', { class: 'facts' },
          h('dt', {}, 'Month to date'), h('dd', { id: 'ov-mtd' }, usd(o.month_to_date_usd)),
          h('dt', {}, 'Forecast at month end'), h('dd', { id: 'ov-forecast' }, usd(o.forecast_usd)),
          h('dt', {}, 'Days left'), h('dd', {}, Number(fc.days_left || 0).toFixed(1))),
        h('p', { class: 'hint' }, `Method: ${fc.method || 'linear'}`),
        (fc.by_model || []).length ? table('Forecast by model', ['Model', 'Month to date', 'Forecast'],
          fc.by_model.slice(0, 10).map((m) => [m.name || '—', { class: 'num', cell: usd(m.month_to_date_usd) }, { class: 'num', cell: usd(m.forecast_usd) }])) : null);
    }
    if (can('get', '/api/v1/analytics/events')) {
      const ev = await api('GET', `/api/v1/analytics/events?from=${from}&to=${to}&limit=20`);
      fill(events, h('h2', { id: 'ov-ev' }, 'Latest refusals and failures'),
        table('Latest events', ['When', 'Kind', 'Key', 'Model', 'Provider', 'Status', 'Request'],
          (ev.events || []).map((e) => [when(e.at), e.kind, e.key || '—', e.model || '—', e.provider || '—',
            { class: 'num', cell: String(e.status) }, h('code', {}, e.request_id || '')]),
          'No refusals or failures in this range.'));
    }
  };
  const run = async () => { try { await load(); } catch (e) { alert.show(e); } };
  range.input.addEventListener('change', run);
  refresh.addEventListener('click', run);
  fill(root, h('div', { class: 'toolbar' }, h('h1', {}, 'Overview'),
    h('div', { class: 'actions' }, range.wrap, refresh)),
  alert.el, stats, charts, forecast, events);
  await load();
}
