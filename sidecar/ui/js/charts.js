// Charts as inline SVG, built with DOM APIs and CSS classes only (no style attribute, no HTML
// strings), each with a text equivalent: an aria-label summary and a table of its figures.

import { h } from './dom.js';

const NS = 'http://www.w3.org/2000/svg';

/** An SVG element with attributes (set one by one, never a style). */
export function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v !== null && v !== undefined) el.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c !== null && c !== undefined) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

const W = 600;
const H = 160;
const PAD = { l: 48, r: 8, t: 10, b: 22 };

/**
 * A chart of `labels` (x, text) and `series` ([{name, values, kind: 'bar'|'line', cls}]),
 * with `fmt` for the numbers; returns a <figure> with the SVG, a caption and a table.
 */
export function chart(title, labels, series, fmt = (v) => String(v), { id } = {}) {
  const all = series.flatMap((x) => x.values.filter((v) => v !== null && v !== undefined));
  const peakAll = Math.max(0, ...all);
  const max = peakAll || 1;
  const n = Math.max(labels.length, 1);
  const iw = W - PAD.l - PAD.r;
  const ih = H - PAD.t - PAD.b;
  const x = (i) => PAD.l + (iw * (i + 0.5)) / n;
  const y = (v) => PAD.t + ih - (ih * v) / max;
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', preserveAspectRatio: 'none' });
  svg.append(s('line', { x1: PAD.l, x2: W - PAD.r, y1: PAD.t + ih, y2: PAD.t + ih, class: 'axis' }));
  svg.append(s('line', { x1: PAD.l, x2: W - PAD.r, y1: PAD.t, y2: PAD.t, class: 'grid' }));
  svg.append(s('text', { x: PAD.l - 4, y: PAD.t + 4, class: 'tick end' }, peakAll ? fmt(max) : 'none'));
  svg.append(s('text', { x: PAD.l - 4, y: PAD.t + ih, class: 'tick end' }, fmt(0)));
  if (labels.length) {
    svg.append(s('text', { x: PAD.l, y: H - 6, class: 'tick' }, labels[0]));
    svg.append(s('text', { x: W - PAD.r, y: H - 6, class: 'tick end' }, labels[labels.length - 1]));
  }
  series.forEach((sr, k) => {
    const cls = sr.cls || `s${k}`;
    if (sr.kind === 'bar') {
      const bw = Math.max(1, (iw / n) * 0.8);
      sr.values.forEach((v, i) => {
        if (!v) return;
        svg.append(s('rect', { x: x(i) - bw / 2, y: y(v), width: bw, height: PAD.t + ih - y(v), class: `bar ${cls}` },
          s('title', {}, `${labels[i]}: ${fmt(v)}`)));
      });
    } else {
      const pts = sr.values.map((v, i) => (v === null || v === undefined ? null : `${x(i).toFixed(1)},${y(v).toFixed(1)}`));
      // Gaps (no value) split the line.
      let run = [];
      const flush = () => {
        if (run.length > 1) svg.append(s('polyline', { points: run.join(' '), class: `line ${cls}` }));
        if (run.length === 1) {
          const [px, py] = run[0].split(',');
          svg.append(s('circle', { cx: px, cy: py, r: 2.5, class: `dot ${cls}` }));
        }
        run = [];
      };
      pts.forEach((p) => { if (p) run.push(p); else flush(); });
      flush();
    }
  });
  const totals = series.map((sr) => {
    const vals = sr.values.filter((v) => v !== null && v !== undefined);
    const peak = vals.length ? Math.max(...vals) : null;
    return `${sr.name}: peak ${peak === null ? 'none' : fmt(peak)}`;
  });
  svg.setAttribute('aria-label', `${title}, ${labels.length} intervals from ${labels[0] || '—'} to ${labels[labels.length - 1] || '—'}; ${totals.join('; ')}`);
  const legend = series.length > 1
    ? h('ul', { class: 'legend' }, series.map((sr, k) => h('li', {}, h('span', { class: `swatch ${sr.cls || `s${k}`}`, 'aria-hidden': 'true' }), sr.name)))
    : null;
  const rows = labels.map((l, i) => h('tr', {}, h('th', { scope: 'row' }, l),
    series.map((sr) => h('td', { class: 'num' }, sr.values[i] === null || sr.values[i] === undefined ? '—' : fmt(sr.values[i])))));
  const tbl = h('details', { class: 'chart-data' }, h('summary', {}, `${title}: the figures`),
    h('div', { class: 'table-wrap' }, h('table', {}, h('caption', { class: 'visually-hidden' }, title),
      h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Interval'), series.map((sr) => h('th', { scope: 'col' }, sr.name)))),
      h('tbody', {}, rows))));
  return h('figure', { class: 'panel chart-box', id },
    h('figcaption', {}, title), svg, legend, tbl);
}

/** A horizontal bar of `used` out of `limit`: class `warn` at 80 % or more, `over` at 100 %. */
export function usageBar(used, limit, label) {
  const pct = limit > 0 ? (100 * used) / limit : (used > 0 ? 100 : 0);
  const level = pct >= 100 ? 'over' : (pct >= 80 ? 'warn' : 'ok');
  const svg = s('svg', { viewBox: '0 0 100 10', preserveAspectRatio: 'none', class: `meter ${level}`, role: 'img',
    'aria-label': `${label}: ${pct.toFixed(1)} % used` },
  s('rect', { x: 0, y: 0, width: 100, height: 10, class: 'track' }),
  s('rect', { x: 0, y: 0, width: Math.min(100, pct).toFixed(2), height: 10, class: 'fill' }));
  return { svg, pct, level };
}
