"""PromQL expressions: parsed with promql-parser (the Python bindings of GreptimeTeam's Rust port
of Prometheus' parser), then walked for what they use:

  * every series a selector names must exist (in the scrape, or in the catalog);
  * every label a matcher, `by`/`without`, `on`/`ignoring` or `group_left`/`group_right` names
    must be a label the expression's input carries there: a selector carries its series' labels
    (and the target labels Prometheus adds: job, instance), an aggregation the labels it keeps,
    a binary operation what its matching leaves, histogram_quantile() drops `le`,
    count_values() adds its label;
  * a matcher's value on a closed set (outcome, feed, type, ...) must be one of its values;
  * a legend's or annotation's {{label}} must be a label of the result.

Grafana's variables are replaced first: $__rate_interval, $__interval, $__range by durations,
the dashboard's own variables ($model, ${model:regex}, [[model]]) by `.*` (they only ever
stand in a matcher's value).
"""

import re

import promql_parser as pp

from .catalog import TARGET_LABELS

SCALAR, STRING = "scalar", "string"
GRAFANA_DURATIONS = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h", "__auto": "1m"}
GRAFANA_NUMBERS = {"__range_s": "3600", "__range_ms": "3600000", "__interval_ms": "60000"}
VARIABLE = re.compile(r"\$\{(\w+)(?::[\w-]+)?\}|\$(\w+)|\[\[(\w+)(?::[\w-]+)?\]\]")
LITERALS = re.compile(r"^[\w.:-]+(\|[\w.:-]+)*$")
KEEP_ALL = {"topk", "bottomk", "limitk", "limit_ratio"}


def substitute(expr, defined):
    """`expr` with Grafana's variables replaced, and the names of variables the dashboard does
    not define."""
    unknown = []

    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in GRAFANA_DURATIONS:
            return GRAFANA_DURATIONS[name]
        if name in GRAFANA_NUMBERS:
            return GRAFANA_NUMBERS[name]
        if name not in defined:
            unknown.append(name)
        return ".*"

    return VARIABLE.sub(repl, expr), unknown


def variables_used(text):
    return {m.group(1) or m.group(2) or m.group(3) for m in VARIABLE.finditer(text)}


def parse(expr):
    """The syntax tree; ValueError with the parser's message on a syntax error."""
    try:
        return pp.parse(expr)
    except Exception as e:  # the bindings raise ValueError; keep any other error a failure too
        raise ValueError(str(e)) from None


class Analysis:
    """Walks one expression against `series` ({name: labels}); `values(name, label)` gives a
    closed set of values or None."""

    def __init__(self, series, values=lambda name, label: None):
        self.series, self.values = series, values
        self.problems, self.selectors = [], []

    def run(self, node):
        return self.labels(node)

    def problem(self, text):
        if text not in self.problems:
            self.problems.append(text)

    # -- the label set each node yields: a frozenset, SCALAR, STRING, or None when unknown --
    def labels(self, node):
        t = type(node)
        if t is pp.NumberLiteral:
            return SCALAR
        if t is pp.StringLiteral:
            return STRING
        if t in (pp.ParenExpr, pp.UnaryExpr, pp.SubqueryExpr):
            return self.labels(node.expr)
        if t is pp.MatrixSelector:
            return self.labels(node.vector_selector)
        if t is pp.VectorSelector:
            return self.selector(node)
        if t is pp.Call:
            return self.call(node)
        if t is pp.AggregateExpr:
            return self.aggregate(node)
        if t is pp.BinaryExpr:
            return self.binary(node)
        self.problem(f"unknown expression node {t.__name__}")
        return None

    def selector(self, vs):
        name = vs.name
        matchers = list(vs.matchers.matchers) if vs.matchers else []
        if name is None:
            name = next((m.value for m in matchers if m.name == "__name__" and str(m.op).endswith("Equal")), None)
        if name is None:
            self.problem(f"a selector without a metric name: {vs}")
            return None
        used = [(m.name, str(m.op).split(".")[-1], m.value) for m in matchers if m.name != "__name__"]
        self.selectors.append((name, used))
        if name not in self.series:
            self.problem(f"series {name} does not exist")
            return None
        have = frozenset(self.series[name]) | TARGET_LABELS
        for label, op, value in used:
            if label not in have:
                self.problem(f"{name}{{{label}...}}: {name} has no label {label} (it has {', '.join(sorted(self.series[name])) or 'none'})")
                continue
            closed = self.values(name, label)
            if closed and op in ("Equal", "Re") and LITERALS.match(value):
                for v in value.split("|"):
                    if v not in closed:
                        self.problem(f"{name}{{{label}=\"{v}\"}}: {label} is one of {', '.join(sorted(closed))}")
        return have

    def call(self, node):
        func = node.func.name
        args = [self.labels(a) for a in node.args]
        vectors = [a for a in args if isinstance(a, frozenset)]
        if any(a is None for a in args):
            return None
        if func == "histogram_quantile":
            v = args[1]
            if isinstance(v, frozenset) and "le" not in v:
                self.problem(f"histogram_quantile() over an input without `le` (labels: {', '.join(sorted(v)) or 'none'})")
            return v - {"le"} if isinstance(v, frozenset) else v
        if func in ("label_replace", "label_join"):
            v, dst = args[0], node.args[1].val
            srcs = [node.args[3].val] if func == "label_replace" else [a.val for a in node.args[3:]]
            for s in srcs:
                if s and isinstance(v, frozenset) and s not in v:
                    self.problem(f"{func}(): source label {s} is not a label of its input")
            return v | {dst} if isinstance(v, frozenset) else v
        if func in ("vector", "absent", "absent_over_time"):
            return frozenset()
        if func in ("scalar", "time", "pi"):
            return SCALAR
        return vectors[0] if vectors else SCALAR

    def aggregate(self, node):
        op = str(node.op)
        inner = self.labels(node.expr)
        if node.param is not None:
            self.labels(node.param)
        if inner is None:
            return None
        if not isinstance(inner, frozenset):
            self.problem(f"{op}() over a {inner}")
            return None
        mod = node.modifier
        if op in KEEP_ALL:
            out = inner
        elif mod is None:
            out = frozenset()
        elif str(mod.type).endswith("By"):
            for label in mod.labels:
                if label not in inner:
                    self.problem(f"{op} by ({label}): {label} is not a label of its input (it has {', '.join(sorted(inner)) or 'none'})")
            out = frozenset(mod.labels)
        else:
            for label in mod.labels:
                if label not in inner:
                    self.problem(f"{op} without ({label}): {label} is not a label of its input")
            out = inner - set(mod.labels)
        if op == "count_values":
            out = out | {node.param.val}
        return out

    def binary(self, node):
        op = str(node.op)
        lhs, rhs = self.labels(node.lhs), self.labels(node.rhs)
        if lhs is None or rhs is None:
            return None
        if lhs == SCALAR and rhs == SCALAR:
            return SCALAR
        if lhs == SCALAR:
            return rhs
        if rhs == SCALAR:
            return lhs
        mod = node.modifier
        matching = mod.matching if mod is not None else None
        card = str(mod.card).split(".")[-1] if mod is not None else "OneToOne"
        names = list(matching.labels) if matching is not None else []
        include = matching is not None and str(matching.type).endswith("Include")
        if include:
            for n in names:
                for side, labels in (("left", lhs), ("right", rhs)):
                    if n not in labels:
                        self.problem(f"on ({n}): {n} is not a label of the {side} side of `{op}` (it has {', '.join(sorted(labels)) or 'none'})")
        group = list(mod.group_labels) if mod is not None and mod.group_labels else []
        if card == "ManyToOne":
            for g in group:
                if g not in rhs:
                    self.problem(f"group_left ({g}): {g} is not a label of the right side")
            return lhs | set(group)
        if card == "OneToMany":
            for g in group:
                if g not in lhs:
                    self.problem(f"group_right ({g}): {g} is not a label of the left side")
            return rhs | set(group)
        if op in ("and", "unless"):
            return lhs
        if op == "or":
            return lhs | rhs
        if include:
            return frozenset(names)
        if matching is not None:
            return lhs - set(names)
        return lhs & rhs


def analyze(expr, series, values=lambda name, label: None):
    """(result labels or None, problems, selectors) of one expression (syntax errors are
    problems)."""
    try:
        tree = parse(expr)
    except ValueError as e:
        return None, [f"PromQL syntax: {e}"], []
    a = Analysis(series, values)
    out = a.run(tree)
    return out, a.problems, a.selectors


PLACEHOLDER = re.compile(r"\{\{\s*\.?(\w+)\s*\}\}")
LABELS_REF = re.compile(r"\$labels\.(\w+)")


def legend_labels(text):
    return set(PLACEHOLDER.findall(text or ""))


def annotation_labels(text):
    return set(LABELS_REF.findall(text or ""))


LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(.*),\s*)?(\w+)\s*\)\s*$", re.S)


def variable_query(query, series, values=lambda name, label: None):
    """Problems of a Prometheus template variable's query: label_values(selector, label) or
    label_values(label); a plain PromQL query otherwise."""
    m = LABEL_VALUES.match(query)
    if not m:
        return analyze(query, series, values)[1]
    selector, label = m.group(1), m.group(2)
    if selector is None:
        if not any(label in labels for labels in series.values()):
            return [f"label_values({label}): no series has a label {label}"]
        return []
    out, problems, _ = analyze(selector, series, values)
    if isinstance(out, frozenset) and label not in out:
        problems.append(f"label_values(..., {label}): {label} is not a label of {selector.strip()}")
    return problems
