// Groups: the list, create, delete.

import { api, seg } from '../api.js';
import { h, fill, field, alertBox, statusLine, tags, table, limitsText, names, confirmButton, limitsFields, onSubmit } from '../dom.js';

export async function groupsPage(root, { can }) {
  const mayCreate = can('post', '/api/v1/groups');
  const mayDelete = can('delete', '/api/v1/groups/{name}');
  const status = statusLine();
  const listAlert = alertBox();
  const list = h('div', {}, h('p', { class: 'loading' }, 'Loading…'));

  const reload = async () => {
    const groups = await api('GET', '/api/v1/groups');
    fill(list, table('Groups', ['Name', 'Models', 'Limits', 'Priority', ...(mayDelete ? ['Actions'] : [])],
      groups.map((g) => [
        h('strong', {}, g.name), tags(g.models), limitsText(g.limits) || h('span', { class: 'muted' }, '—'),
        g.priority ?? '',
        ...(mayDelete ? [{ class: 'act', cell: confirmButton('Delete', g.name, async () => {
          listAlert.clear();
          try {
            await api('DELETE', `/api/v1/groups/${seg(g.name)}`);
            status.say(`Group ${g.name} deleted.`);
          } catch (e) { listAlert.show(e); }
          await reload();
        }) }] : []),
      ]), 'No groups yet.'));
  };

  const parts = [h('div', { class: 'toolbar' }, h('h1', {}, 'Groups')), status.el];
  if (mayCreate) parts.push(createForm(status, reload));
  parts.push(h('h2', {}, 'All groups'), listAlert.el, list);
  fill(root, parts);
  await reload();
}

function createForm(status, reload) {
  const alert = alertBox();
  const name = field('Name', { name: 'name', required: true, autocomplete: 'off', spellcheck: 'false' });
  const models = field('Models', { name: 'models', autocomplete: 'off', spellcheck: 'false' },
    { hint: 'Model names or patterns the group’s keys may use, comma separated.' });
  const priority = field('Priority', { name: 'priority', type: 'number', step: '1' }, { hint: 'Empty: the default.' });
  const limits = limitsFields();
  const form = h('form', { class: 'panel', id: 'group-create', 'aria-labelledby': 'group-create-title', novalidate: true },
    h('h2', { id: 'group-create-title' }, 'Create a group'), alert.el,
    h('div', { class: 'fields' }, name.wrap, models.wrap, priority.wrap, limits.wrap),
    h('div', { class: 'actions' }, h('button', { type: 'submit' }, 'Create group')));
  onSubmit(form, alert, async () => {
    const body = { name: name.input.value.trim() };
    const m = names(models.input.value);
    if (m.length) body.models = m;
    if (priority.input.value !== '') body.priority = Number.parseInt(priority.input.value, 10);
    const l = limits.value();
    if (l) body.limits = l;
    const answer = await api('POST', '/api/v1/groups', body);
    form.reset();
    status.say(`Group ${body.name} created (configuration version ${answer.version}).`);
    await reload();
  });
  return form;
}
