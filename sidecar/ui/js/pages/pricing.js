// Pricing: the price of each upstream model (USD per million tokens) from GET /api/v1/pricing,
// a create form and delete. Prices are what the gateway's costs and USD budgets are counted in.

import { api, seg } from '../api.js';
import { h, fill, field, alertBox, statusLine, table, confirmButton, onSubmit } from '../dom.js';

// Cents at least, and the fractions of a cent cheap models are priced in.
const usd = (v) => (v === null || v === undefined
  ? h('span', { class: 'muted' }, '—')
  : `$${Number(v).toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 6 })}`);

export async function pricingPage(root, { can }) {
  const mayCreate = can('post', '/api/v1/pricing');
  const mayDelete = can('delete', '/api/v1/pricing/{name}');
  const status = statusLine();
  const listAlert = alertBox();
  const list = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));

  const reload = async () => {
    // The API lists prices as an object keyed by upstream model.
    const prices = Object.entries(await api('GET', '/api/v1/pricing') || {})
      .sort(([a], [b]) => a.localeCompare(b));
    fill(list, table('Prices', ['Upstream model', 'Input', 'Output', 'Cached input', ...(mayDelete ? ['Actions'] : [])],
      prices.map(([model, p]) => [
        h('code', { 'data-price': model }, model),
        usd(p.input_per_mtok), usd(p.output_per_mtok), usd(p.cached_input_per_mtok),
        ...(mayDelete ? [{ class: 'act', cell: confirmButton('Delete', model, async () => {
          listAlert.clear();
          try {
            await api('DELETE', `/api/v1/pricing/${seg(model)}`);
            status.say(`Price of ${model} deleted.`);
          } catch (e) { listAlert.show(e); }
          await reload();
        }) }] : []),
      ]), 'No prices yet: requests are counted without cost.'));
  };

  const parts = [h('div', { class: 'toolbar' }, h('h1', {}, 'Pricing')), status.el,
    h('p', { class: 'muted' }, 'USD per million tokens. Cached input is the price of prompt tokens served from the provider’s prompt cache (empty: the input price).')];
  if (mayCreate) parts.push(createForm(status, reload));
  parts.push(h('h2', {}, 'All prices'), listAlert.el, list);
  fill(root, parts);
  await reload();
}

/** A price field: a decimal number of USD per million tokens. */
const money = (label, name, hint) => field(label, { name, type: 'number', step: 'any', inputmode: 'decimal' }, { hint });

function createForm(status, reload) {
  const alert = alertBox();
  const model = field('Upstream model', { name: 'model', required: true, autocomplete: 'off', spellcheck: 'false' },
    { hint: 'provider/model, or a model id every provider shares.' });
  const input = money('Input (USD per million tokens)', 'input_per_mtok');
  const output = money('Output (USD per million tokens)', 'output_per_mtok');
  const cached = money('Cached input (USD per million tokens)', 'cached_input_per_mtok', 'Empty: the input price.');
  const form = h('form', { class: 'panel', id: 'price-create', 'aria-labelledby': 'price-create-title', novalidate: true },
    h('h2', { id: 'price-create-title' }, 'Add a price'), alert.el,
    h('div', { class: 'fields' }, model.wrap, input.wrap, output.wrap, cached.wrap),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Add price')));
  onSubmit(form, alert, async () => {
    // Empty fields are left out: the API names a missing price itself.
    const body = { model: model.input.value.trim() };
    for (const [key, f] of [['input_per_mtok', input], ['output_per_mtok', output], ['cached_input_per_mtok', cached]]) {
      if (f.input.value !== '') body[key] = Number(f.input.value);
    }
    const answer = await api('POST', '/api/v1/pricing', body);
    form.reset();
    status.say(`Price of ${body.model} added (configuration version ${answer.version}).`);
    await reload();
  });
  return form;
}
