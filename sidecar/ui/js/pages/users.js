// Admin users: admins read the list; owners create users, disable and enable them, delete them.

import { api, seg } from '../api.js';
import { h, fill, field, alertBox, statusLine, tags, table, when, names, confirmButton, onSubmit } from '../dom.js';

export const ROLES = ['viewer', 'key-manager', 'admin', 'owner'];

export async function usersPage(root, { can, me }) {
  const mayCreate = can('post', '/api/v1/users');
  const mayChange = can('put', '/api/v1/users/{name}');
  const mayDelete = can('delete', '/api/v1/users/{name}');
  const status = statusLine();
  const listAlert = alertBox();
  const list = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));
  const act = async (f, said) => {
    listAlert.clear();
    try { await f(); status.say(said); } catch (e) { listAlert.show(e); }
    await reload();
  };

  const reload = async () => {
    const { users } = await api('GET', '/api/v1/users');
    const acts = mayChange || mayDelete;
    fill(list, table('Users', ['Name', 'Role', 'Key groups', 'Login', 'State', 'Created', ...(acts ? ['Actions'] : [])],
      users.map((u) => [
        h('strong', {}, u.name), u.role, tags(u.key_groups),
        [u.password_set ? 'password' : null, u.oidc ? 'single sign-on' : null].filter(Boolean).join(', ') || '—',
        u.disabled ? h('strong', {}, 'disabled') : 'enabled', when(u.created_at),
        ...(acts ? [{ class: 'act', cell: [
          mayChange ? h('button', {
            type: 'button', class: 'secondary', 'aria-label': `${u.disabled ? 'Enable' : 'Disable'} ${u.name}`,
            onclick: () => act(() => api('PUT', `/api/v1/users/${seg(u.name)}`, { disabled: !u.disabled }),
              `${u.name} ${u.disabled ? 'enabled' : 'disabled: its sessions have ended'}.`),
          }, u.disabled ? 'Enable' : 'Disable') : null,
          mayDelete && u.name !== me.name ? confirmButton('Delete', u.name,
            () => act(() => api('DELETE', `/api/v1/users/${seg(u.name)}`), `${u.name} deleted, with its sessions and tokens.`)) : null,
        ] }] : []),
      ]), 'No users yet.'));
  };

  const parts = [h('div', { class: 'toolbar' }, h('h1', {}, 'Users')), status.el];
  if (mayCreate) parts.push(createForm(status, reload));
  parts.push(h('h2', {}, 'All users'), listAlert.el, list);
  fill(root, parts);
  await reload();
}

function createForm(status, reload) {
  const alert = alertBox();
  const name = field('Name', { name: 'name', required: true, autocomplete: 'off', spellcheck: 'false', autocapitalize: 'none' },
    { hint: 'Lower case: a-z, 0-9, . _ @ -' });
  const role = field('Role', { name: 'role', value: 'viewer' }, { tag: 'select', options: ROLES.map((r) => [r, r]) });
  const password = field('Password', { name: 'password', type: 'password', autocomplete: 'new-password' },
    { hint: 'Empty: the user logs in with single sign-on only.' });
  const groups = field('Key groups', { name: 'key_groups', autocomplete: 'off', spellcheck: 'false' },
    { hint: 'For a key manager: the groups it manages, comma separated.' });
  const form = h('form', { class: 'panel', id: 'user-create', 'aria-labelledby': 'user-create-title', novalidate: true },
    h('h2', { id: 'user-create-title' }, 'Create a user'), alert.el,
    h('div', { class: 'fields' }, name.wrap, role.wrap, password.wrap, groups.wrap),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Create user')));
  onSubmit(form, alert, async () => {
    const body = { name: name.input.value.trim(), role: role.input.value };
    if (password.input.value) body.password = password.input.value;
    const g = names(groups.input.value);
    if (g.length) body.key_groups = g;
    await api('POST', '/api/v1/users', body);
    form.reset();
    status.say(`User ${body.name} created.`);
    await reload();
  });
  return form;
}
