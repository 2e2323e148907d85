// Limits and budgets: every limit of GET /api/v1/limits as a bar of used / limit (class `warn`
// at 80 % or more, `over` at 100 %) with the numbers as text.

import { api } from '../api.js';
import { h, fill, table } from '../dom.js';
import { usageBar } from '../charts.js';

const amount = (metric, v) => (metric === 'usd'
  ? `$${(Number(v) / 1e6).toFixed(2)}`
  : Number(v).toLocaleString('en-US'));

export async function limitsPage(root) {
  const answer = await api('GET', '/api/v1/limits');
  const limits = [...(answer.limits || [])].sort((a, b) => (b.limit ? b.used / b.limit : 0) - (a.limit ? a.used / a.limit : 0));
  const rows = limits.map((l) => {
    const what = `${l.scope} ${l.name || '(org)'} ${l.metric} per ${l.window}`;
    const { svg, pct, level } = usageBar(Number(l.used), Number(l.limit), what);
    return [
      l.scope, h('code', {}, l.name || '(org)'), l.metric === 'usd' ? 'USD' : l.metric, `per ${l.window}`,
      { class: 'bar-cell', cell: svg },
      { class: `num ${level}`, cell: h('span', { class: `level ${level}`, 'data-limit': `${l.scope}/${l.name}/${l.metric}/${l.window}` },
        `${amount(l.metric, l.used)} of ${amount(l.metric, l.limit)} (${pct.toFixed(0)} %)${level === 'over' ? ' · over' : (level === 'warn' ? ' · near' : '')}`) },
      { class: 'num', cell: amount(l.metric, l.remaining) },
    ];
  });
  fill(root, h('div', { class: 'toolbar' }, h('h1', {}, 'Limits and budgets')),
    answer.synced === false
      ? h('div', { class: 'alert error', role: 'alert' }, 'The shared counters cannot be read (Redis): the figures are this replica’s view.')
      : null,
    h('p', { class: 'muted' }, 'Most used first. Used amounts trail the gateway by the usage delivery delay; 80 % or more is marked “near”, 100 % “over”.'),
    table('Limits', ['Scope', 'Name', 'Metric', 'Window', 'Used (bar)', 'Used of limit', 'Remaining'], rows,
      'No limits are configured.'));
}
