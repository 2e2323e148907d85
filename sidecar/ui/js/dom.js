// Small DOM helpers: elements are built with properties and text nodes only (never HTML
// strings), so nothing the API answers can become markup, and no inline style is ever set.

let uid = 0;
/** A fresh id for a label's `for`. */
export const nextId = (p = 'f') => `${p}-${++uid}`;

/**
 * h('button', {type: 'button', onclick: f, class: 'x'}, 'text', child...): an element. Keys
 * starting with `on` add listeners; `class`, `for`, `aria-*`, `data-*`, `role` and others are
 * attributes; `false`/`null`/`undefined` values and children are skipped.
 */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === false || v === null || v === undefined) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'value') el.value = v;
    else if (k === 'checked') el.checked = Boolean(v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Replaces the children of `el`. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** An input with its label (and optional hint) in a `.field`; returns {wrap, input}. */
export function field(label, attrs = {}, { hint, wide, tag = 'input', options } = {}) {
  const id = nextId();
  const hintId = hint ? `${id}-hint` : null;
  let input;
  if (tag === 'select') {
    input = h('select', { id, ...attrs, 'aria-describedby': hintId },
      (options || []).map(([value, text]) => h('option', { value }, text)));
    if (attrs.value !== undefined) input.value = attrs.value;
  } else {
    input = h(tag, { id, ...attrs, 'aria-describedby': hintId });
  }
  const wrap = h('div', { class: wide ? 'field wide' : 'field' },
    h('label', { for: id }, label), input, hint ? h('span', { class: 'hint', id: hintId }, hint) : null);
  return { wrap, input };
}

/** A group of checkboxes in a fieldset; returns {wrap, values()}. */
export function checks(legend, names, { hint } = {}) {
  const boxes = names.map((n) => {
    const id = nextId('c');
    return { n, box: h('input', { type: 'checkbox', id, value: n }), id };
  });
  const wrap = h('fieldset', { class: 'field wide' }, h('legend', {}, legend),
    boxes.length
      ? h('div', { class: 'checks' }, boxes.map(({ n, box, id }) => h('label', { for: id }, box, n)))
      : h('span', { class: 'hint' }, 'none defined'),
    hint ? h('span', { class: 'hint' }, hint) : null);
  return { wrap, values: () => boxes.filter((b) => b.box.checked).map((b) => b.n) };
}

/** An alert area for a form: shows an ApiError's message and its problems. */
export function alertBox() {
  const el = h('div', { class: 'alert error', role: 'alert', tabindex: '-1' });
  el.hidden = true;
  return {
    el,
    show(err) {
      const problems = (err && err.problems) || [];
      fill(el, h('strong', {}, err && err.message ? err.message : String(err)),
        problems.length ? h('ul', {}, problems.map((p) => h('li', {}, h('code', {}, p.path || ''), ': ', p.message || ''))) : null);
      el.hidden = false;
    },
    clear() { el.replaceChildren(); el.hidden = true; },
  };
}

/** A status line (polite live region). */
export function statusLine() {
  const el = h('p', { class: 'alert ok', role: 'status' });
  el.hidden = true;
  return {
    el,
    say(text) { fill(el, text); el.hidden = !text; },
  };
}

/**
 * The panel that shows a secret (a generated key, an API token) this once: a read-only field,
 * a copy button and a button that hides it for good.
 */
export function secretPanel(title, secret, note) {
  const id = nextId('s');
  const input = h('input', { id, type: 'text', readonly: true, value: secret, spellcheck: 'false', autocomplete: 'off', 'data-secret': '' });
  const said = h('span', { class: 'hint', role: 'status' });
  const panel = h('section', { class: 'secret', 'aria-labelledby': `${id}-t` },
    h('h2', { id: `${id}-t` }, title),
    h('p', {}, note || 'Copy it now: it is shown this once and cannot be read again.'),
    h('div', { class: 'row' },
      h('label', { for: id, class: 'visually-hidden' }, title), input,
      h('button', { type: 'button', onclick: () => copy(input, said) }, 'Copy'),
      h('button', { type: 'button', class: 'secondary', onclick: () => { input.value = ''; panel.remove(); } }, 'Done, hide it')),
    said);
  queueMicrotask(() => { input.focus(); input.select(); });
  return panel;
}

async function copy(input, said) {
  try {
    await navigator.clipboard.writeText(input.value);
    fill(said, 'Copied to the clipboard.');
  } catch {
    input.focus();
    input.select();
    fill(said, 'Select the text and copy it (Ctrl+C): the browser did not allow copying.');
  }
}

/** Milliseconds since 1970, or an RFC 3339 string, as local date and time; '' for none. */
export function when(t) {
  if (t === null || t === undefined || t === '') return '';
  const d = typeof t === 'number' ? new Date(t) : new Date(String(t));
  if (Number.isNaN(d.getTime())) return String(t);
  return d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' });
}

/** A `datetime-local` value as an RFC 3339 UTC string ('' stays ''). */
export function localToRfc3339(v) {
  if (!v) return '';
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? v : d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** Tags for a list of names. */
export const tags = (list) => (list && list.length ? list.map((x) => h('span', { class: 'tag' }, x)) : h('span', { class: 'muted' }, '—'));

/** A table with a caption, headers and rows (each a list of cells: nodes, text or {node, class}). */
export function table(caption, headers, rows, empty = 'Nothing yet.') {
  if (!rows.length) return h('p', { class: 'muted' }, empty);
  return h('div', { class: 'table-wrap' }, h('table', {},
    h('caption', { class: 'visually-hidden' }, caption),
    h('thead', {}, h('tr', {}, headers.map((x) => h('th', { scope: 'col' }, x)))),
    h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => (c && c.cell
      ? h('td', { class: c.class }, c.cell)
      : h('td', {}, c))))))));
}

/** The limits of a row, as short text ("requests_per_minute 60, …"). */
export function limitsText(limits) {
  if (!limits || typeof limits !== 'object') return '';
  return Object.entries(limits)
    .filter(([, v]) => v !== null && v !== undefined && typeof v !== 'object')
    .map(([k, v]) => `${k} ${v}`).join(', ');
}

/** Comma- or space-separated names from a text field. */
export const names = (v) => String(v || '').split(/[\s,]+/).map((s) => s.trim()).filter(Boolean);

/**
 * An inline confirmation for a destructive action: the button becomes "Confirm …" and
 * "Cancel"; `run` is called on confirmation.
 */
export function confirmButton(label, what, run) {
  const cell = h('span', {});
  const ask = () => {
    const yes = h('button', { type: 'button', class: 'danger', onclick: async () => { yes.disabled = true; await run(); } }, `Confirm: ${what}`);
    const no = h('button', { type: 'button', class: 'secondary', onclick: () => { fill(cell, start); start.focus(); } }, 'Cancel');
    fill(cell, yes, no);
    yes.focus();
  };
  const start = h('button', { type: 'button', class: 'danger', onclick: ask, 'aria-label': `${label} ${what}` }, label);
  fill(cell, start);
  return cell;
}

/** The limits a form offers (the API takes more: see docs/limits.md). */
const LIMIT_FIELDS = [
  ['requests_per_minute', 'Requests per minute', 'int'],
  ['requests_per_day', 'Requests per day', 'int'],
  ['tokens_per_minute', 'Tokens per minute', 'int'],
  ['tokens_per_day', 'Tokens per day', 'int'],
  ['tokens_per_month', 'Tokens per month', 'int'],
  ['cost_usd_per_month', 'USD per month', 'float'],
];

/** Number fields for limits in a fieldset; `value()` is the limits object, or undefined. */
export function limitsFields() {
  const inputs = LIMIT_FIELDS.map(([key, label, kind]) => [key, kind,
    field(label, { type: 'number', min: '0', step: kind === 'int' ? '1' : 'any', name: key, inputmode: kind === 'int' ? 'numeric' : 'decimal' })]);
  const wrap = h('fieldset', { class: 'field wide' }, h('legend', {}, 'Limits (empty: none)'),
    h('div', { class: 'fields' }, inputs.map(([, , f]) => f.wrap)));
  return {
    wrap,
    value() {
      const out = {};
      for (const [key, kind, f] of inputs) {
        if (f.input.value === '') continue;
        out[key] = kind === 'int' ? Number.parseInt(f.input.value, 10) : Number(f.input.value);
      }
      return Object.keys(out).length ? out : undefined;
    },
  };
}

/** A form's submit wiring: disables the button while `run` works, shows its error. */
export function onSubmit(form, alert, run) {
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    alert.clear();
    const buttons = form.querySelectorAll('button[type=submit]');
    buttons.forEach((b) => { b.disabled = true; });
    try {
      await run();
    } catch (e) {
      alert.show(e);
      alert.el.focus();
    } finally {
      buttons.forEach((b) => { b.disabled = false; });
    }
  });
}
