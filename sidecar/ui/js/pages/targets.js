// Providers and targets: the providers of the configuration (never their keys), the health and
// load of every routing target, the KV-event streams, and the flow-control queues (read from
// this listener's public /metrics, the only place their gauge is exported). Each section loads
// on its own, so one that fails (say /metrics) shows its error and leaves the others readable.

import { api, seg } from '../api.js';
import { h, fill, alertBox, statusLine, table, confirmButton } from '../dom.js';
import { samples } from '../prom.js';

const muted = (text) => h('span', { class: 'muted' }, text);
const dash = () => muted('—');
const known = (v) => v !== null && v !== undefined;
const pct = (v) => (known(v) ? `${(Number(v) * 100).toFixed(0)} %` : null);
const clock = (ms) => new Date(ms).toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });

/** Bytes as B, KiB, MiB, GiB or TiB. */
export function bytes(n) {
  let v = Number(n);
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let u = 0;
  while (Math.abs(v) >= 1024 && u < units.length - 1) { v /= 1024; u += 1; }
  return u === 0 ? `${v.toFixed(0)} B` : `${v.toFixed(1)} ${units[u]}`;
}

/** An age in milliseconds as "40 ms ago", "3 s ago", "5 min ago". */
function age(ms) {
  if (!known(ms)) return null;
  if (ms < 1000) return `${ms} ms ago`;
  if (ms < 120000) return `${Math.round(ms / 1000)} s ago`;
  return `${Math.round(ms / 60000)} min ago`;
}

/** Rows of `list` grouped by their `provider`, in first-seen order. */
function byProvider(list) {
  const groups = new Map();
  for (const item of list) {
    if (!groups.has(item.provider)) groups.set(item.provider, []);
    groups.get(item.provider).push(item);
  }
  return [...groups];
}

/** Runs `load` into `el`: a loading line first, its error in place of the content. */
async function section(el, load) {
  fill(el, h('p', { class: 'loading' }, 'Loading…'));
  try {
    fill(el, await load());
  } catch (e) {
    fill(el, h('div', { class: 'alert error', role: 'alert' }, e.message || String(e)));
  }
}

export async function targetsPage(root, { can }) {
  const status = statusLine();
  const parts = {
    providers: h('div', { id: 'tg-providers' }),
    targets: h('div', { id: 'tg-targets' }),
    kv: h('div', { id: 'tg-kv' }),
    queues: h('div', { id: 'tg-queues' }),
  };
  const reload = () => Promise.all([
    can('get', '/api/v1/providers') ? section(parts.providers, () => providers(can, status, reload))
      : fill(parts.providers, muted('Your role may not read the providers.')),
    section(parts.targets, targets),
    can('get', '/api/v1/kv') ? section(parts.kv, kvStreams) : fill(parts.kv, muted('Your role may not read the KV-event streams.')),
    section(parts.queues, queues),
  ]);
  const refresh = h('button', { type: 'button', class: 'secondary', onclick: async () => {
    refresh.disabled = true;
    status.say('');
    await reload();
    refresh.disabled = false;
    status.say(`Refreshed at ${clock(Date.now())}.`);
  } }, 'Refresh');
  fill(root, h('div', { class: 'toolbar' }, h('h1', {}, 'Providers and targets'), refresh), status.el,
    h('h2', {}, 'Providers'), parts.providers,
    h('h2', {}, 'Routing targets'), parts.targets,
    h('h2', {}, 'KV-event streams'), parts.kv,
    h('h2', {}, 'Flow-control queues'), parts.queues);
  await reload();
}

// --------------------------------------------------------------------------- providers

function endpointsOf(p) {
  const list = (p.endpoints || []).map((e) => (typeof e === 'string' ? e : e.address));
  if (p.endpoints_dns) list.push(`DNS: ${p.endpoints_dns}`);
  return list;
}

/** Whether the provider has a credential, said without any part of it. */
function keyText(p) {
  if (p.api_key_set) return 'set (stored sealed)';
  if (p.api_key_env) return h('span', {}, 'from ', h('code', {}, p.api_key_env));
  return muted('none');
}

async function providers(can, status, reload) {
  const mayDelete = can('delete', '/api/v1/providers/{name}');
  const alert = alertBox();
  const list = await api('GET', '/api/v1/providers');
  return [alert.el, table('Providers', ['Name', 'Kind', 'Base URL', 'Endpoints', 'Key', ...(mayDelete ? ['Actions'] : [])],
    list.map((p) => [
      h('strong', {}, p.name), p.kind, h('code', {}, p.base_url),
      endpointsOf(p).length ? endpointsOf(p).map((e) => h('div', { class: 'mono' }, e)) : muted('the base URL'),
      keyText(p),
      ...(mayDelete ? [{ class: 'act', cell: confirmButton('Delete', p.name, async () => {
        try {
          await api('DELETE', `/api/v1/providers/${seg(p.name)}`);
          status.say(`Provider ${p.name} deleted.`);
          await reload();
        } catch (e) { alert.show(e); alert.el.focus(); }
      }) }] : []),
    ]), 'No providers are configured.')];
}

// --------------------------------------------------------------------------- targets

/** The health of a target as [word, detail]: the word is also its `data-health`. */
function health(t) {
  if (!t.probed) return ['not probed', 'passive health only'];
  if (t.healthy) return ['healthy', null];
  if (known(t.cooldown_until_ms) && t.cooldown_until_ms > Date.now()) {
    return ['cooling down', `until ${clock(t.cooldown_until_ms)}`];
  }
  return ['unhealthy', null];
}

function healthCell(t) {
  const [word, detail] = health(t);
  const cls = word === 'unhealthy' || word === 'cooling down' ? 'level over' : null;
  return h('span', { 'data-health': word },
    h('span', { class: cls }, word), detail ? [' ', muted(detail)] : null);
}

function load(t) {
  const bits = [];
  if (known(t.running)) bits.push(`${t.running} running`);
  if (known(t.waiting)) bits.push(`${t.waiting} waiting`);
  if (known(t.kv_usage)) bits.push(`KV ${pct(t.kv_usage)}`);
  return bits.length ? bits.join(', ') : dash();
}

function cacheCell(t) {
  const c = t.cache || {};
  const bits = [];
  if (known(t.cache_occupancy)) bits.push(`occupancy ${pct(t.cache_occupancy)}`);
  if (known(c.cpu_bytes)) bits.push(`CPU ${bytes(c.cpu_bytes)}`);
  if (known(c.storage_bytes)) bits.push(`storage ${bytes(c.storage_bytes)}`);
  if (known(c.lookup_hit_rate)) bits.push(`hit rate ${pct(c.lookup_hit_rate)}`);
  else if (c.external_query_tokens) bits.push(`hit rate ${pct((c.external_hit_tokens || 0) / c.external_query_tokens)}`);
  return bits.length ? bits.join(', ') : dash();
}

function targetRow(t) {
  return [
    h('code', { 'data-target': `${t.provider}/${t.endpoint}` }, t.endpoint), healthCell(t),
    String(t.consecutive_failures ?? 0),
    t.last_error ? h('span', { class: 'mono' }, t.last_error) : dash(),
    load(t), cacheCell(t),
    (t.adapters || []).length
      ? [(t.adapters).map((a) => h('span', { class: 'tag' }, a)), known(t.max_loras) ? muted(` of ${t.max_loras}`) : null]
      : dash(),
  ];
}

async function targets() {
  const answer = await api('GET', '/api/v1/targets');
  const list = answer.targets || [];
  if (!list.length) return h('p', { class: 'muted' }, 'No routing targets: the configuration has no providers.');
  const every = answer.probe_interval_ms ? ` Probed endpoints are checked every ${answer.probe_interval_ms / 1000} s.` : '';
  return [h('p', { class: 'muted' }, `Every endpoint of every provider.${every}`),
    byProvider(list).map(([provider, rows]) => h('section', { 'aria-label': `Targets of ${provider}` },
      h('h3', {}, provider),
      table(`Targets of ${provider}`, ['Endpoint', 'Health', 'Failures in a row', 'Last error', 'Engine load', 'Cache', 'LoRA adapters'],
        rows.map(targetRow))))];
}

// --------------------------------------------------------------------------- KV-event streams

function kvRow(provider, e) {
  return [
    h('code', { 'data-kv': `${provider}/${e.endpoint}` }, e.endpoint),
    e.kv_events ? (e.connected ? 'connected' : h('span', { class: 'level over' }, 'disconnected')) : muted('does not publish'),
    known(e.last_sequence) ? String(e.last_sequence) : dash(),
    `${e.gpu_blocks ?? 0} / ${e.cpu_blocks ?? 0} / ${e.storage_blocks ?? 0}`,
    age(e.last_event_age_ms) || dash(),
    `${e.gaps ?? 0} / ${e.replays ?? 0} / ${e.restarts ?? 0}`,
  ];
}

async function kvStreams() {
  const answer = await api('GET', '/api/v1/kv');
  const list = answer.providers || [];
  if (!list.length) return h('p', { class: 'muted', id: 'kv-empty' }, 'No engine publishes KV events.');
  return list.map((p) => h('section', { 'aria-label': `KV events of ${p.provider}` },
    h('h3', {}, `${p.provider} `, muted(`(${p.blocks ?? 0} blocks indexed)`)),
    table(`KV-event streams of ${p.provider}`,
      ['Endpoint', 'Stream', 'Last sequence', 'Blocks GPU / CPU / storage', 'Last event', 'Gaps / replays / restarts'],
      (p.endpoints || []).map((e) => kvRow(p.provider, e)))));
}

// --------------------------------------------------------------------------- queues

async function queues() {
  let answer;
  try {
    answer = await fetch('/metrics', { credentials: 'same-origin', cache: 'no-store' });
  } catch (e) {
    throw new Error(`/metrics cannot be read: ${e.message}`);
  }
  if (!answer.ok) throw new Error(`/metrics answered HTTP ${answer.status}`);
  const found = samples(await answer.text(), 'ferrogate_queue_depth')
    .map((s) => ({ model: s.labels.model ?? '', band: s.labels.band ?? '', depth: s.value }))
    .sort((a, b) => a.model.localeCompare(b.model) || Number(b.band) - Number(a.band));
  if (!found.length) {
    return h('p', { class: 'muted', id: 'queues-empty' },
      'No request is waiting in a flow-control queue here: this listener’s /metrics has no ferrogate_queue_depth series. '
      + 'Under Envoy the queues live in the proxy, and its own stats carry that gauge.');
  }
  return [h('p', { class: 'muted' }, 'Requests waiting per model and priority band (ferrogate_queue_depth of /metrics, set on each tick).'),
    table('Flow-control queues', ['Model', 'Band', 'Waiting'], found.map((q) => [
      h('code', { 'data-queue': `${q.model}/${q.band}` }, q.model), q.band, String(q.depth),
    ]))];
}
