// API tokens: the caller's own (owners may show everyone's); create one (shown this once) and
// revoke.

import { api, seg } from '../api.js';
import { h, fill, field, alertBox, statusLine, secretPanel, table, when, confirmButton, localToRfc3339, onSubmit } from '../dom.js';
import { ROLES } from './users.js';

export async function tokensPage(root, { can, me }) {
  const mayCreate = can('post', '/api/v1/tokens');
  const mayRevoke = can('delete', '/api/v1/tokens/{id}');
  const mayAll = me.role === 'owner';
  const status = statusLine();
  const listAlert = alertBox();
  const secretSlot = h('div', {});
  const list = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  const allBox = h('input', { type: 'checkbox', id: 'tokens-all' });

  const reload = async () => {
    const { tokens } = await api('GET', `/api/v1/tokens${mayAll && allBox.checked ? '?all=true' : ''}`);
    fill(list, table('API tokens', ['Name', 'User', 'Role', 'Prefix', 'Created', 'Expires', 'Last used', 'State', ...(mayRevoke ? ['Actions'] : [])],
      tokens.map((t) => [
        h('strong', {}, t.name), t.user, t.role, h('code', {}, `${t.prefix}…`), when(t.created_at),
        when(t.expires_at) || h('span', { class: 'muted' }, 'never'), when(t.last_used_at) || h('span', { class: 'muted' }, 'never'),
        t.revoked_at ? `revoked ${when(t.revoked_at)}` : 'active',
        ...(mayRevoke ? [{ class: 'act', cell: t.revoked_at ? '' : confirmButton('Revoke', `token ${t.name}`, async () => {
          listAlert.clear();
          try {
            await api('DELETE', `/api/v1/tokens/${seg(t.id)}`);
            status.say(`Token ${t.name} revoked.`);
          } catch (e) { listAlert.show(e); }
          await reload();
        }) }] : []),
      ]), 'No API tokens.'));
  };

  const parts = [h('div', { class: 'toolbar' }, h('h1', {}, 'API tokens')), status.el, secretSlot];
  if (!me.csrf_token && me.actor && me.actor.kind !== 'user') {
    parts.push(h('p', { class: 'muted' }, 'API tokens belong to users: log in as one to make them.'));
  } else if (mayCreate) {
    parts.push(createForm(me, secretSlot, status, reload));
  }
  parts.push(h('h2', {}, mayAll ? 'Tokens' : 'Your tokens'));
  if (mayAll) {
    allBox.addEventListener('change', () => reload().catch((e) => listAlert.show(e)));
    parts.push(h('p', {}, h('label', { for: 'tokens-all', class: 'inline' }, allBox, ' Show every user’s tokens')));
  }
  parts.push(listAlert.el, list);
  fill(root, parts);
  await reload();
}

function createForm(me, secretSlot, status, reload) {
  const alert = alertBox();
  const allowed = ROLES.slice(0, ROLES.indexOf(me.role) + 1);
  const name = field('Name', { name: 'name', required: true, autocomplete: 'off', maxlength: '64' }, { hint: 'What it is for: deploy, ci…' });
  const role = field('Role', { name: 'role', value: me.role }, {
    tag: 'select', options: allowed.map((r) => [r, r]), hint: 'At most your own.',
  });
  const expires = field('Expires', { name: 'expires_at', type: 'datetime-local' }, { hint: 'Empty: never (your local time).' });
  const form = h('form', { class: 'panel', id: 'token-create', 'aria-labelledby': 'token-create-title', novalidate: true },
    h('h2', { id: 'token-create-title' }, 'Create an API token'), alert.el,
    h('div', { class: 'fields' }, name.wrap, role.wrap, expires.wrap),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Create token')));
  onSubmit(form, alert, async () => {
    const body = { name: name.input.value.trim(), role: role.input.value };
    const e = localToRfc3339(expires.input.value);
    if (e) body.expires_at = e;
    const answer = await api('POST', '/api/v1/tokens', body);
    form.reset();
    role.input.value = me.role;
    status.say(`Token ${answer.name} created.`);
    fill(secretSlot, secretPanel(`The API token ${answer.name}`, answer.token,
      'Copy it now: it is shown this once. Send it as Authorization: Bearer <token>.'));
    await reload();
  });
  return form;
}
