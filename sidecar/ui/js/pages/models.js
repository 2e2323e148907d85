// Models: the list and a create form (targets: a provider and its upstream model, weighted;
// the routing strategy; fallbacks).

import { api, seg } from '../api.js';
import { h, fill, field, alertBox, statusLine, tags, table, confirmButton, names, onSubmit } from '../dom.js';

export async function modelsPage(root, { can }) {
  const mayCreate = can('post', '/api/v1/models');
  const mayDelete = can('delete', '/api/v1/models/{name}');
  const status = statusLine();
  const listAlert = alertBox();
  const list = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  const providers = mayCreate && can('get', '/api/v1/providers')
    ? (await api('GET', '/api/v1/providers')).map((p) => p.name) : [];

  const reload = async () => {
    const models = await api('GET', '/api/v1/models');
    fill(list, table('Models', ['Name', 'Targets', 'Strategy', 'Fallbacks', ...(mayDelete ? ['Actions'] : [])],
      models.map((m) => [
        h('strong', {}, m.name),
        (m.targets || []).map((t) => h('div', { class: 'mono' },
          `${t.provider} → ${t.model}${t.weight !== undefined && t.weight !== null ? ` (weight ${t.weight})` : ''}`)),
        typeof m.strategy === 'string' ? m.strategy : (m.strategy ? JSON.stringify(m.strategy) : h('span', { class: 'muted' }, 'default')),
        tags(m.fallbacks),
        ...(mayDelete ? [{ class: 'act', cell: confirmButton('Delete', m.name, async () => {
          listAlert.clear();
          try {
            await api('DELETE', `/api/v1/models/${seg(m.name)}`);
            status.say(`Model ${m.name} deleted.`);
          } catch (e) { listAlert.show(e); }
          await reload();
        }) }] : []),
      ]), 'No models yet.'));
  };

  const parts = [h('div', { class: 'toolbar' }, h('h1', {}, 'Models')), status.el];
  if (mayCreate) parts.push(createForm(providers, status, reload));
  parts.push(h('h2', {}, 'All models'), listAlert.el, list);
  fill(root, parts);
  await reload();
}

// The routing strategies (docs/routing.md); the API checks the name and what it needs.
const STRATEGIES = ['round_robin', 'priority', 'random', 'weighted', 'least_loaded', 'power_of_two', 'consistent_hash',
  'cache_aware', 'precise_cache_aware', 'lmcache_aware', 'pipeline', 'predicted_latency', 'lora_aware'];

function createForm(providers, status, reload) {
  const alert = alertBox();
  const strategy = field('Strategy', { name: 'strategy', value: '' }, {
    tag: 'select', options: [['', 'default (round_robin)'], ...STRATEGIES.map((x) => [x, x])],
    hint: 'How a target is picked: see the routing page of the manual.',
  });
  const name = field('Name', { name: 'name', required: true, autocomplete: 'off', spellcheck: 'false' },
    { hint: 'The name clients send as "model".' });
  const fallbacks = field('Fallbacks', { name: 'fallbacks', autocomplete: 'off', spellcheck: 'false' },
    { hint: 'Other models to try when this one fails, comma separated.' });
  const targets = h('div', { class: 'field wide' });
  const rows = [];
  const addTarget = () => {
    const n = rows.length + 1;
    const provider = field(`Target ${n}: provider`, { name: `provider-${n}`, required: true }, {
      tag: 'select', options: providers.map((p) => [p, p]),
    });
    const upstream = field(`Target ${n}: upstream model`, { name: `model-${n}`, required: true, autocomplete: 'off', spellcheck: 'false' });
    const weight = field(`Target ${n}: weight`, { name: `weight-${n}`, type: 'number', min: '0', step: '1' }, { hint: 'Empty: equal shares.' });
    rows.push({ provider, upstream, weight });
    targets.append(h('div', { class: 'fields' }, provider.wrap, upstream.wrap, weight.wrap));
    if (n > 1) upstream.input.focus();
  };
  addTarget();
  const form = h('form', { class: 'panel', id: 'model-create', 'aria-labelledby': 'model-create-title', novalidate: true },
    h('h2', { id: 'model-create-title' }, 'Create a model'), alert.el,
    h('div', { class: 'fields' }, name.wrap, strategy.wrap, fallbacks.wrap, targets),
    h('div', { class: 'actions' },
      h('button', { type: 'button', class: 'secondary', onclick: addTarget }, 'Add a target'),
      h('button', { type: 'submit' }, 'Create model')));
  onSubmit(form, alert, async () => {
    const body = {
      name: name.input.value.trim(),
      targets: rows.filter((r) => r.upstream.input.value.trim()).map((r) => {
        const t = { provider: r.provider.input.value, model: r.upstream.input.value.trim() };
        if (r.weight.input.value !== '') t.weight = Number.parseInt(r.weight.input.value, 10);
        return t;
      }),
    };
    if (strategy.input.value) body.strategy = strategy.input.value;
    const f = names(fallbacks.input.value);
    if (f.length) body.fallbacks = f;
    const answer = await api('POST', '/api/v1/models', body);
    form.reset();
    status.say(`Model ${body.name} created (configuration version ${answer.version}).`);
    await reload();
  });
  return form;
}
