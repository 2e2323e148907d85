// Keys: the list with each key's usage this month, a create form (a generated key is shown this
// once), revoke (delete).

import { api, seg } from '../api.js';
import { usd } from './overview.js';
import { h, fill, field, checks, alertBox, statusLine, secretPanel, when, tags, table, limitsText, names, confirmButton, limitsFields, localToRfc3339, onSubmit } from '../dom.js';

export async function keysPage(root, { can }) {
  const mayCreate = can('post', '/api/v1/keys');
  const mayDelete = can('delete', '/api/v1/keys/{name}');
  const status = statusLine();
  const listAlert = alertBox();
  const secretSlot = h('div', {});
  const list = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  const groups = can('get', '/api/v1/groups') ? (await api('GET', '/api/v1/groups')).map((g) => g.name) : [];

  const reload = async () => {
    const [keys, usage] = await Promise.all([api('GET', '/api/v1/keys'), monthUsage(can)]);
    const used = (k) => {
      const u = usage && usage.get(k.name);
      if (u) return `${u.requests.toLocaleString('en-US')} requests · ${usd(u.cost_usd)}`;
      // The ranking holds the 100 busiest keys: past them, "none" would not be known.
      return h('span', { class: 'muted' }, usage.size >= TOP_KEYS ? 'below the 100 busiest' : 'none');
    };
    const rows = keys.map((k) => [
      h('strong', {}, k.name), tags(k.groups), tags(k.models), when(k.expires_at) || h('span', { class: 'muted' }, 'never'),
      limitsText(k.limits) || h('span', { class: 'muted' }, '—'),
      ...(usage ? [{ class: 'num', cell: used(k) }] : []),
      ...(mayDelete ? [{ class: 'act', cell: confirmButton('Revoke', k.name, async () => {
        listAlert.clear();
        try {
          await api('DELETE', `/api/v1/keys/${seg(k.name)}`);
          status.say(`Key ${k.name} revoked: the gateway refuses it from its next snapshot (a few seconds).`);
          await reload();
        } catch (e) { listAlert.show(e); await reload(); }
      }) }] : []),
    ]);
    fill(list, table('Keys', ['Name', 'Groups', 'Models', 'Expires', 'Limits', ...(usage ? ['This month'] : []),
      ...(mayDelete ? ['Actions'] : [])], rows,
      'No keys yet.'));
  };

  const parts = [h('div', { class: 'toolbar' }, h('h1', {}, 'Keys'))];
  parts.push(status.el, secretSlot);
  if (mayCreate) parts.push(createForm(groups, secretSlot, status, reload));
  parts.push(h('h2', {}, 'All keys'), listAlert.el, list);
  fill(root, parts);
  await reload();
}

/**
 * Each key's requests and cost since the start of the month (UTC), from the analytics ranking;
 * null when the caller may not read it or the store has no analytics (the file store: 409), so
 * the list simply goes without the column.
 */
const TOP_KEYS = 100;

async function monthUsage(can) {
  if (!can('get', '/api/v1/analytics/top')) return null;
  const now = new Date();
  const from = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1);
  try {
    const top = await api('GET', `/api/v1/analytics/top?by=key&metric=requests&limit=${TOP_KEYS}&from=${from}&to=${Date.now() + 1}`);
    return new Map((top.items || []).map((t) => [t.name, t]));
  } catch {
    return null;
  }
}

function createForm(groups, secretSlot, status, reload) {
  const alert = alertBox();
  const name = field('Name', { name: 'name', required: true, autocomplete: 'off', spellcheck: 'false' },
    { hint: 'Lower-case letters, digits and - (a slug).' });
  const groupBoxes = checks('Groups', groups, { hint: 'The key gets the models and limits of its groups.' });
  const models = field('Models', { name: 'models', autocomplete: 'off', spellcheck: 'false' },
    { hint: 'Model names or patterns the key may use, comma separated (besides its groups’).' });
  const expires = field('Expires', { name: 'expires_at', type: 'datetime-local' }, { hint: 'Empty: never (your local time).' });
  const limits = limitsFields();
  const form = h('form', { class: 'panel', id: 'key-create', 'aria-labelledby': 'key-create-title', novalidate: true },
    h('h2', { id: 'key-create-title' }, 'Create a key'),
    alert.el,
    h('div', { class: 'fields' }, name.wrap, models.wrap, expires.wrap, groupBoxes.wrap, limits.wrap),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Create key')),
    h('p', { class: 'hint' }, 'The gateway generates the key and shows it once.'));
  onSubmit(form, alert, async () => {
    const body = { name: name.input.value.trim() };
    const g = groupBoxes.values();
    if (g.length) body.groups = g;
    const m = names(models.input.value);
    if (m.length) body.models = m;
    const e = localToRfc3339(expires.input.value);
    if (e) body.expires_at = e;
    const l = limits.value();
    if (l) body.limits = l;
    const answer = await api('POST', '/api/v1/keys', body);
    form.reset();
    status.say(`Key ${body.name} created (configuration version ${answer.version}).`);
    if (answer.key) fill(secretSlot, secretPanel(`The key ${body.name}`, answer.key));
    await reload();
  });
  return form;
}
