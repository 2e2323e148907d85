// The Prometheus text exposition format, read: the samples of a metrics page as
// {name, labels, value}. Used for the gauges only /metrics carries (the flow-control queues).
// A line that cannot be read is skipped, never fatal: a page is mostly other families.

/** The value of a sample: a number, or NaN / ±Inf as the format spells them. */
function number(token) {
  if (token === 'NaN') return Number.NaN;
  if (token === '+Inf' || token === 'Inf') return Number.POSITIVE_INFINITY;
  if (token === '-Inf') return Number.NEGATIVE_INFINITY;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(token)) return null;
  return Number(token);
}

/**
 * The label set starting at `text[i]` (just after `{`): [labels, index after `}`], or null.
 * Values are quoted; inside them `\\`, `\"` and `\n` are escapes, so a `}` or `,` in a value
 * does not end it.
 */
function labelSet(text, i) {
  const labels = {};
  for (;;) {
    while (text[i] === ' ' || text[i] === ',') i += 1;
    if (text[i] === '}') return [labels, i + 1];
    const name = /^[a-zA-Z_][a-zA-Z0-9_]*/.exec(text.slice(i));
    if (!name) return null;
    i += name[0].length;
    while (text[i] === ' ') i += 1;
    if (text[i] !== '=') return null;
    i += 1;
    while (text[i] === ' ') i += 1;
    const value = quoted(text, i);
    if (!value) return null;
    [labels[name[0]], i] = value;
  }
}

/** The quoted string at `text[i]`, unescaped: [value, index after the closing quote], or null. */
function quoted(text, i) {
  if (text[i] !== '"') return null;
  let out = '';
  for (i += 1; i < text.length; i += 1) {
    const c = text[i];
    if (c === '"') return [out, i + 1];
    if (c === '\\') {
      i += 1;
      const e = text[i];
      if (e === undefined) return null;
      out += e === 'n' ? '\n' : e;
    } else {
      out += c;
    }
  }
  return null;
}

/** One sample line: {name, labels, value}, or null for a line that is not one. */
export function sampleLine(line) {
  const text = line.trim();
  if (!text || text.startsWith('#')) return null;
  const name = /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(text);
  if (!name) return null;
  let i = name[0].length;
  let labels = {};
  if (text[i] === '{') {
    const set = labelSet(text, i + 1);
    if (!set) return null;
    [labels, i] = set;
  }
  // The value, then an optional timestamp.
  const rest = text.slice(i).trim().split(/\s+/);
  if (!rest[0] || rest.length > 2) return null;
  const value = number(rest[0]);
  if (value === null) return null;
  return { name: name[0], labels, value };
}

/** Every sample of `text`, or only those of metric `name` when it is given. */
export function samples(text, name) {
  const out = [];
  for (const line of String(text || '').split('\n')) {
    const s = sampleLine(line);
    if (s && (name === undefined || s.name === name)) out.push(s);
  }
  return out;
}
