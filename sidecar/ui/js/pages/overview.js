// The overview: requests, errors, latency, time to first token and cost over a chosen range
// (/api/v1/analytics/usage), optionally broken down by model, provider, key, group or client,
// the top-N ranking of the range (/top), the month-end cost forecast (/forecast) and the latest
// refusals and failures (/events).

import { api } from '../api.js';
import { h, fill, field, table, when, alertBox } from '../dom.js';
import { chart } from '../charts.js';

const RANGES = [
  ['1h', 'Last hour', 3600e3, 'minute', 60e3],
  ['24h', 'Last 24 hours', 86400e3, 'hour', 3600e3],
  ['7d', 'Last 7 days', 7 * 86400e3, 'hour', 3600e3],
  ['30d', 'Last 30 days', 30 * 86400e3, 'day', 86400e3],
];
const DIMENSIONS = [['model', 'Model'], ['provider', 'Provider'], ['key', 'Key'], ['group', 'Group'], ['client', 'Client']];
const METRICS = [['requests', 'Requests'], ['cost', 'Cost'], ['tokens', 'Tokens'], ['errors', 'Errors']];
// Series drawn by name in a breakdown; the rest are summed into "other" (the chart stays legible).
const NAMED_SERIES = 6;
const AUTO_REFRESH_MS = 30e3;

export const usd = (v) => (v === null || v === undefined ? '—' : `$${Number(v).toFixed(Math.abs(v) < 1 && v !== 0 ? 4 : 2)}`);
const int = (v) => Number(v || 0).toLocaleString('en-US');
const ms = (v) => (v === null || v === undefined ? '—' : `${Math.round(v)} ms`);

function label(t, stepMs) {
  const d = new Date(t);
  if (stepMs >= 86400e3) return d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' });
  if (stepMs >= 3600e3) return d.toLocaleString(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
  return d.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' });
}

/** The buckets of an answer (missing ones included, as null points) and their labels. */
function slotsOf(answer, step) {
  const stepMs = answer.bucket_ms || step;
  const slots = [];
  for (let t = Math.floor(answer.from / stepMs) * stepMs; t < answer.to; t += stepMs) slots.push(t);
  return { slots, labels: slots.map((t) => label(t, stepMs)) };
}

function pointsOf(series, slots) {
  const byStart = new Map((series.points || []).map((p) => [p.start, p]));
  return slots.map((t) => byStart.get(t) || null);
}

const stat = (id, name, value) => h('div', { class: 'stat', id },
  h('span', { class: 'stat-label' }, name), h('span', { class: 'stat-value' }, value));

function renderStats(el, pts) {
  const total = (f) => pts.reduce((a, p) => a + (p ? Number(p[f] || 0) : 0), 0);
  const requests = total('requests');
  const errors = total('errors');
  const p95s = pts.map((p) => (p && p.latency_ms ? p.latency_ms.p95 : null)).filter((v) => v !== null && v !== undefined);
  fill(el,
    stat('ov-requests', 'Requests', int(requests)),
    stat('ov-errors', 'Errors', `${int(errors)}${requests ? ` (${((100 * errors) / requests).toFixed(1)} %)` : ''}`),
    stat('ov-tokens', 'Tokens', int(total('prompt_tokens') + total('completion_tokens'))),
    stat('ov-cost', 'Cost', usd(total('cost_usd'))),
    stat('ov-p95', 'Worst p95 latency', p95s.length ? ms(Math.max(...p95s)) : '—'));
}

const pick = (pts, f) => pts.map((p) => (p && p[f] ? p[f] : null));
const pct = (pts, f, q) => pts.map((p) => (p && p[f] ? p[f][q] : null));

function overallCharts(labels, pts) {
  const zero = (f) => pts.map((p) => (p ? p[f] : 0));
  return [
    chart('Requests', labels, [{ name: 'Requests', values: zero('requests'), kind: 'bar', cls: 's0' }], int, { id: 'ov-chart-requests' }),
    chart('Errors (status 400 or more)', labels, [{ name: 'Errors', values: zero('errors'), kind: 'bar', cls: 'err' }], int),
    chart('Latency', labels, [
      { name: 'p50', values: pct(pts, 'latency_ms', 'p50'), kind: 'line', cls: 's0' },
      { name: 'p95', values: pct(pts, 'latency_ms', 'p95'), kind: 'line', cls: 's1' },
    ], ms),
    chart('Time to first token (streamed answers)', labels, [
      { name: 'p50', values: pct(pts, 'ttft_ms', 'p50'), kind: 'line', cls: 's0' },
      { name: 'p95', values: pct(pts, 'ttft_ms', 'p95'), kind: 'line', cls: 's1' },
    ], ms, { id: 'ov-chart-ttft' }),
    chart('Cost (USD)', labels, [{ name: 'Cost', values: zero('cost_usd'), kind: 'bar', cls: 's2' }], usd),
  ];
}

/** One line per series of a breakdown: the first NAMED_SERIES by name, the rest as "other". */
function breakdownLines(answer, slots, f) {
  const lines = [];
  const rest = slots.map(() => 0);
  let restUsed = false;
  (answer.series || []).forEach((sr, i) => {
    const values = pointsOf(sr, slots).map((p) => (p ? Number(p[f] || 0) : 0));
    if (i < NAMED_SERIES && !sr.other) {
      lines.push({ name: sr.name || '(none)', values, kind: 'line', cls: `s${i}` });
    } else {
      restUsed = true;
      values.forEach((v, k) => { rest[k] += v; });
    }
  });
  if (restUsed) lines.push({ name: 'other', values: rest, kind: 'line', cls: 'other' });
  return lines;
}

function breakdownCharts(answer, slots, labels, dim) {
  const title = (DIMENSIONS.find((d) => d[0] === dim) || [dim, dim])[1].toLowerCase();
  return [
    chart(`Requests by ${title}`, labels, breakdownLines(answer, slots, 'requests'), int, { id: 'ov-chart-by-requests' }),
    chart(`Cost by ${title} (USD)`, labels, breakdownLines(answer, slots, 'cost_usd'), usd, { id: 'ov-chart-by-cost' }),
  ];
}

function forecastPanel(fc) {
  const o = fc.overall || {};
  return [h('h2', { id: 'ov-fc' }, 'Cost this month'),
    h('dl', { class: 'facts' },
      h('dt', {}, 'Month to date'), h('dd', { id: 'ov-mtd' }, usd(o.month_to_date_usd)),
      h('dt', {}, 'Forecast at month end'), h('dd', { id: 'ov-forecast' }, usd(o.forecast_usd)),
      h('dt', {}, 'Days left'), h('dd', {}, Number(fc.days_left || 0).toFixed(1))),
    h('p', { class: 'hint' }, `Method: ${fc.method || 'linear'}`),
    (fc.by_model || []).length ? table('Forecast by model', ['Model', 'Month to date', 'Forecast'],
      fc.by_model.slice(0, 10).map((m) => [m.name || '—', { class: 'num', cell: usd(m.month_to_date_usd) }, { class: 'num', cell: usd(m.forecast_usd) }])) : null];
}

function topTable(top, dimTitle) {
  return table(`Top ${dimTitle.toLowerCase()}s`, [dimTitle, 'Requests', 'Errors', 'Tokens', 'Cost'],
    (top.items || []).map((t) => [h('code', {}, t.name || '(none)'), { class: 'num', cell: int(t.requests) },
      { class: 'num', cell: int(t.errors) }, { class: 'num', cell: int(t.tokens) }, { class: 'num', cell: usd(t.cost_usd) }]),
    'No requests in this range.');
}

function eventsTable(ev) {
  return [h('h2', { id: 'ov-ev' }, 'Latest refusals, failures and store incidents'),
    table('Latest events', ['When', 'Kind', 'Key', 'Model', 'Provider', 'Status', 'Request or store'],
      (ev.events || []).map((e) => [when(e.at), e.kind, e.key || '—', e.model || '—', e.provider || '—',
        { class: 'num', cell: e.status ? String(e.status) : '—' },
        // Store incidents have no request: which store, which replica, and what happened.
        e.store ? `${e.store} (${e.replica || '?'}): ${e.detail || ''}` : h('code', {}, e.request_id || '')]),
      'No refusals, failures or store incidents in this range.')];
}

/** The page's controls: range, breakdown, ranking, auto refresh. */
function controls() {
  return {
    range: field('Time range', { name: 'range', value: '24h' }, { tag: 'select', options: RANGES.map(([v, t]) => [v, t]) }),
    by: field('Break down by', { name: 'by', value: '' }, { tag: 'select', options: [['', 'Nothing (totals)'], ...DIMENSIONS] }),
    rank: field('Rank', { name: 'rank', value: 'model' }, { tag: 'select', options: DIMENSIONS }),
    metric: field('By', { name: 'metric', value: 'requests' }, { tag: 'select', options: METRICS }),
    auto: autoRefresh(),
  };
}

function autoRefresh() {
  const input = h('input', { type: 'checkbox', id: 'ov-auto', name: 'auto' });
  return { input, wrap: h('div', { class: 'field check' }, h('label', { for: 'ov-auto' }, input, ' Refresh every 30 s')) };
}

export async function overviewPage(root, { can }) {
  const c = controls();
  const alert = alertBox();
  const el = {
    stats: h('div', { class: 'stats', id: 'ov-stats', 'aria-live': 'polite' }),
    charts: h('div', { class: 'charts' }),
    top: h('div', { id: 'ov-top' }),
    forecast: h('section', { class: 'panel', 'aria-labelledby': 'ov-fc' }),
    events: h('section', { 'aria-labelledby': 'ov-ev' }),
  };
  const refresh = h('button', { type: 'button', class: 'secondary', id: 'ov-refresh' }, 'Refresh');
  const load = () => loadAll(c, el, can);
  const run = async () => { try { alert.clear(); await load(); } catch (e) { alert.show(e); } };
  for (const x of [c.range, c.by, c.rank, c.metric]) x.input.addEventListener('change', run);
  refresh.addEventListener('click', run);
  // Polls only while this page is on screen: a detached view stops its own timer.
  const timer = setInterval(() => {
    if (!root.isConnected) { clearInterval(timer); return; }
    if (c.auto.input.checked) run();
  }, AUTO_REFRESH_MS);
  fill(root, h('div', { class: 'toolbar' }, h('h1', {}, 'Overview'),
    h('div', { class: 'actions' }, c.range.wrap, c.by.wrap, c.auto.wrap, refresh)),
  alert.el, el.stats, el.charts,
  h('section', { class: 'panel', 'aria-labelledby': 'ov-top-h' }, h('div', { class: 'toolbar' },
    h('h2', { id: 'ov-top-h' }, 'Top of the range'), h('div', { class: 'actions' }, c.rank.wrap, c.metric.wrap)), el.top),
  el.forecast, el.events);
  await load();
}

async function loadAll(c, el, can) {
  const [, , span, bucket, step] = RANGES.find((r) => r[0] === c.range.input.value) || RANGES[1];
  const to = Date.now();
  const from = to - span;
  const q = `from=${from}&to=${to}`;
  const dim = c.by.input.value;
  const rank = c.rank.input.value;
  const [answer, split, top] = await Promise.all([
    api('GET', `/api/v1/analytics/usage?${q}&bucket=${bucket}`),
    dim ? api('GET', `/api/v1/analytics/usage?${q}&bucket=${bucket}&by=${dim}`) : null,
    can('get', '/api/v1/analytics/top') ? api('GET', `/api/v1/analytics/top?${q}&by=${rank}&metric=${c.metric.input.value}&limit=10`) : null,
  ]);
  const { slots, labels } = slotsOf(answer, step);
  const pts = pointsOf((answer.series || [])[0] || {}, slots);
  renderStats(el.stats, pts);
  fill(el.charts, ...(split ? breakdownCharts(split, slots, labels, dim) : []), ...overallCharts(labels, pts));
  fill(el.top, top ? topTable(top, (DIMENSIONS.find((d) => d[0] === rank) || [rank, rank])[1]) : null);
  if (can('get', '/api/v1/analytics/forecast')) fill(el.forecast, ...forecastPanel(await api('GET', '/api/v1/analytics/forecast')));
  if (can('get', '/api/v1/analytics/events')) fill(el.events, ...eventsTable(await api('GET', `/api/v1/analytics/events?${q}&limit=20`)));
}
