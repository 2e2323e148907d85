"""The Envoy variants of the dashboard and the alert rules, and the Helm chart's copies, all
written from the two `serve` files of monitoring/ (scripts/dashboards).

Envoy prints the filter's families under their recorded names and units (docs/observability.md,
"Labels, in Envoy and in serve"), `ferrogate serve` in Prometheus' base units. So in every PromQL
expression of the serve files:

  * `<family>_seconds_bucket` becomes `<family>_ms_bucket` (or `_us_bucket`) and the
    histogram_quantile() around it is divided by 1000 (or 1e6): the result stays in seconds;
  * `<family>_seconds_sum` and `ferrogate_cost_usd_total` become `_ms_sum` / `_us_sum` /
    `ferrogate_cost_microusd_total` and the rate()/increase()/... around them is divided the
    same way (a bare selector is divided itself);
  * `<family>_seconds_count` is renamed only (a count has no unit).

The names and factors come from the catalog (metrics.rs), so a new family with a unit is
rewritten without touching this file. What the rewrite cannot keep right is refused: a bucket
outside histogram_quantile(), an `le` matcher on a renamed bucket (its bounds are in another
unit), two units in one histogram_quantile().

Standard library only.
"""

import json
import re
from pathlib import Path

from . import catalog as catalog_mod

REPO = catalog_mod.REPO
MONITORING = REPO / "monitoring"
DASHBOARD = MONITORING / "grafana" / "ferrogate.json"
DASHBOARD_ENVOY = MONITORING / "grafana" / "ferrogate-envoy.json"
ALERTS = MONITORING / "prometheus" / "ferrogate-alerts.yaml"
ALERTS_ENVOY = MONITORING / "prometheus" / "ferrogate-alerts-envoy.yaml"
CHART_FILES = REPO / "helm" / "ferrogate" / "files"

RANGE_FUNCS = {"rate", "irate", "increase", "delta", "idelta", "deriv", "sum_over_time", "avg_over_time",
               "min_over_time", "max_over_time", "last_over_time", "quantile_over_time"}
IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
GENERATED = "Written by scripts/dashboards from {src}: edit that file and run scripts/dashboards."


class RewriteError(ValueError):
    pass


def renames(catalog):
    """{serve series name: (envoy series name, factor, how)}, how: 'quantile' for buckets,
    'scale' for sums and USD counters, 'rename' for counts."""
    out = {}
    for f in catalog.families:
        if f.factor == 1:
            continue
        serve, envoy = f.serve_name, f.name
        if f.kind == "histogram":
            out[serve + "_bucket"] = (envoy + "_bucket", f.factor, "quantile")
            out[serve + "_sum"] = (envoy + "_sum", f.factor, "scale")
            out[serve + "_count"] = (envoy + "_count", f.factor, "rename")
        else:
            out[serve] = (envoy, f.factor, "scale")
    return out


def _factor(n):
    return "1000" if n == 1000 else "1e6" if n == 1_000_000 else repr(n)


def _scan(expr):
    """Identifiers outside strings with their spans, and each '(' with its ')' and the word
    before it (the function or aggregation called)."""
    idents, calls, stack, i = [], [], [], 0
    while i < len(expr):
        c = expr[i]
        if c in "\"'`":
            j = i + 1
            while j < len(expr) and expr[j] != c:
                j += 2 if expr[j] == "\\" and c != "`" else 1
            i = j + 1
            continue
        if c == "{":  # label matchers: no identifiers that name series, strings skipped above
            j = i
            while j < len(expr) and expr[j] != "}":
                if expr[j] in "\"'`":
                    q, j = expr[j], j + 1
                    while j < len(expr) and expr[j] != q:
                        j += 2 if expr[j] == "\\" else 1
                j += 1
            idents.append(("{", i, j + 1))
            i = j + 1
            continue
        if c == "[":  # range or subquery: durations only
            i = expr.index("]", i) + 1
            continue
        m = IDENT.match(expr, i)
        if m and (i == 0 or not (expr[i - 1].isalnum() or expr[i - 1] in "_.")):
            idents.append((m.group(0), m.start(), m.end()))
            i = m.end()
            continue
        if c == "(":
            # The word right before '(' (spaces allowed), and an aggregation's `by (...)` is
            # not a call: look past a modifier to its aggregation.
            k = i - 1
            while k >= 0 and expr[k].isspace():
                k -= 1
            end = k + 1
            while k >= 0 and (expr[k].isalnum() or expr[k] in "_:"):
                k -= 1
            stack.append([expr[k + 1:end], k + 1, i, None])
        elif c == ")":
            if not stack:
                raise RewriteError(f"unbalanced ')' at {i}: {expr}")
            call = stack.pop()
            call[3] = i
            calls.append(tuple(call))
        i += 1
    if stack:
        raise RewriteError(f"unbalanced '(': {expr}")
    return idents, calls


def rewrite_expr(expr, table):
    """The Envoy form of one serve PromQL expression (see the module's doc)."""
    idents, calls = _scan(expr)
    edits = []  # (start, end, replacement)
    wraps = {}  # (start, end) -> factor
    for n, (word, start, end) in enumerate(idents):
        if word not in table:
            continue
        envoy, factor, how = table[word]
        matchers = idents[n + 1] if n + 1 < len(idents) and idents[n + 1][0] == "{" and idents[n + 1][1] == end else None
        edits.append((start, end, envoy))
        enclosing = sorted((c for c in calls if c[2] < start < c[3]), key=lambda c: c[2], reverse=True)
        if how == "quantile":
            if matchers and re.search(r"(^|[{,\s])le\s*(=|!=|=~|!~)", expr[matchers[1] + 1:matchers[2] - 1]):
                raise RewriteError(f"{word}: an `le` matcher cannot be carried over to {envoy} (other unit): {expr}")
            call = next((c for c in enclosing if c[0] == "histogram_quantile"), None)
            if call is None:
                raise RewriteError(f"{word} outside histogram_quantile(): its bounds would be in another unit in Envoy: {expr}")
        elif how == "scale":
            call = next((c for c in enclosing if c[0] in RANGE_FUNCS), None)
            if call is None:
                sel_end = matchers[2] if matchers else end
                if sel_end < len(expr) and expr[sel_end:].lstrip().startswith("["):
                    raise RewriteError(f"{word}: a range selector outside rate()/increase()/..._over_time(): {expr}")
                span = (start, sel_end)
                if wraps.get(span, factor) != factor:
                    raise RewriteError(f"two units in one selector: {expr}")
                wraps[span] = factor
                continue
        else:
            continue
        span = (call[1], call[3] + 1)
        if wraps.get(span, factor) != factor:
            raise RewriteError(f"{call[0]}() over families of two units: {expr}")
        wraps[span] = factor
    out = list(expr)
    # Insert from the end so earlier offsets hold; renames replace their characters.
    inserts = []
    for (start, end), factor in wraps.items():
        inserts.append((end, 0, f" / {_factor(factor)})"))
        inserts.append((start, 1, "("))
    for start, end, text in sorted(edits, reverse=True):
        out[start:end] = [text] + [""] * (end - start - 1)
    for pos, _, text in sorted(inserts, key=lambda x: (x[0], x[1]), reverse=True):
        out.insert(pos, text)
    return "".join(out)


def rename_words(text, table):
    """Plain renames (descriptions, annotations): no arithmetic."""
    return IDENT.sub(lambda m: table[m.group(0)][0] if m.group(0) in table else m.group(0), text)


# --- the dashboard ---------------------------------------------------------------------------

SERVE_NAMES = "Metric names of ferrogate serve (and ferrogate sidecar)."
ENVOY_NAMES = ("Metric names of the filter in Envoy (_ms, _us, _microusd) and of ferrogate sidecar. "
               + GENERATED.format(src="monitoring/grafana/ferrogate.json"))


def envoy_dashboard(dashboard, table):
    """The Envoy variant of a dashboard: every query rewritten, every other text's series names
    renamed, its own uid, title and tag."""

    def walk(node, key=None):
        if isinstance(node, dict):
            return {k: walk(v, k) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, key) for v in node]
        if isinstance(node, str):
            return rewrite_expr(node, table) if key == "expr" else rename_words(node, table)
        return node

    d = walk(dashboard)
    d["uid"] = d.get("uid", "ferrogate") + "-envoy"
    d["title"] = d.get("title", "ferrogate") + " (Envoy)"
    desc = d.get("description", "")
    d["description"] = desc.replace(SERVE_NAMES, ENVOY_NAMES) if SERVE_NAMES in desc else f"{desc} {ENVOY_NAMES}".strip()
    d["tags"] = list(d.get("tags", [])) + (["envoy"] if "envoy" not in d.get("tags", []) else [])
    return d


def dump_json(obj):
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def dashboard_exprs(dashboard):
    """[(where, expr)] of every panel target and annotation of a dashboard."""
    out = []

    def panels(ps, where):
        for p in ps:
            title = p.get("title", p.get("id"))
            for t in p.get("targets", []) or []:
                if "expr" in t:
                    out.append((f"{where}panel '{title}' target {t.get('refId')}", t["expr"]))
            panels(p.get("panels", []) or [], f"{where}row '{title}' / ")

    panels(dashboard.get("panels", []) or [], "")
    for a in (dashboard.get("annotations") or {}).get("list", []) or []:
        if a.get("expr"):
            out.append((f"annotation '{a.get('name')}'", a["expr"]))
    return out


# --- the alert rules (YAML, read as text: the standard library has no YAML) -------------------

EXPR_LINE = re.compile(r"^(\s*)(-\s+)?expr:\s*(.*)$")


def envoy_alerts(text, table):
    """The Envoy form of a rules file: each `expr:` (a `|` block or one line) rewritten, every
    other line's series names renamed, the leading comment replaced by a generated one."""
    lines = text.splitlines()
    i = 0
    while i < len(lines) and lines[i].startswith("#"):
        i += 1
    head = ["# Prometheus alert rules for ferrogate with the filter in Envoy (Envoy's metric names:",
            "# _ms, _us, _microusd; the sidecar's as in ferrogate-alerts.yaml). Meaning and runbooks:",
            "# docs/monitoring.md.",
            "# " + GENERATED.format(src="ferrogate-alerts.yaml")]
    out = head[:]
    while i < len(lines):
        line = lines[i]
        m = EXPR_LINE.match(line)
        if not m:
            out.append(rename_words(line, table))
            i += 1
            continue
        indent = len(m.group(1)) + len(m.group(2) or "")
        value = m.group(3)
        if value.strip() in ("|", "|-", ">", ">-"):
            block = []
            i += 1
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                block.append(lines[i])
                i += 1
            out.append(line)
            out.extend(rewrite_expr("\n".join(block), table).split("\n"))
        else:
            if value.startswith(("'", '"')):
                raise RewriteError(f"quoted one-line expr (write it as a `|` block): {line.strip()}")
            out.append(line[: len(line) - len(value)] + rewrite_expr(value, table))
            i += 1
    return "\n".join(out) + "\n"


# --- everything scripts/dashboards writes ----------------------------------------------------

def expected_outputs(catalog=None):
    """{path: text} of every generated file, from the serve files as they are now."""
    catalog = catalog or catalog_mod.load()[0]
    table = renames(catalog)
    dash_text = DASHBOARD.read_text()
    alerts_text = ALERTS.read_text()
    envoy_dash = dump_json(envoy_dashboard(json.loads(dash_text), table))
    envoy_rules = envoy_alerts(alerts_text, table)
    return {
        DASHBOARD_ENVOY: envoy_dash,
        ALERTS_ENVOY: envoy_rules,
        CHART_FILES / "ferrogate.json": dash_text,
        CHART_FILES / "ferrogate-envoy.json": envoy_dash,
        CHART_FILES / "ferrogate-alerts.yaml": alerts_text,
        CHART_FILES / "ferrogate-alerts-envoy.yaml": envoy_rules,
    }


def stale(outputs):
    """Paths whose file differs from what the generator writes (or is missing)."""
    return [p for p, text in outputs.items() if not p.exists() or p.read_text() != text]


def rel(p):
    try:
        return str(Path(p).resolve().relative_to(REPO))
    except ValueError:
        return str(p)
