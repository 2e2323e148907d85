"""The checks of one dashboard, one rules file or one scrape, as lists of problems (the main
run and the self-test share them)."""

from . import promql, rules, variants


def dashboard_query_problems(dashboard, series, values):
    """Every query (panel targets, annotations) and template variable of a dashboard against
    `series`: the names, labels and values it uses, its legend's {{labels}}, its variables."""
    problems = []
    variables = (dashboard.get("templating") or {}).get("list") or []
    defined = {v.get("name") for v in variables}

    def panels(ps, prefix=""):
        for p in ps or []:
            title = p.get("title", p.get("id"))
            for t in p.get("targets") or []:
                where = f"{prefix}'{title}' {t.get('refId')}"
                if "expr" not in t:
                    continue
                expr, unknown = promql.substitute(t["expr"], defined)
                problems.extend(f"{where}: ${u} is not a variable of the dashboard" for u in unknown)
                out, found, _ = promql.analyze(expr, series, values)
                problems.extend(f"{where}: {x}" for x in found)
                if isinstance(out, frozenset):
                    for label in sorted(promql.legend_labels(t.get("legendFormat")) - out):
                        problems.append(f"{where}: legend {{{{{label}}}}} is not a label of the result "
                                        f"(it has {', '.join(sorted(out)) or 'none'})")
            panels(p.get("panels"), f"{prefix}row '{title}' / ")

    panels(dashboard.get("panels"))
    for a in (dashboard.get("annotations") or {}).get("list") or []:
        if a.get("expr"):
            expr, unknown = promql.substitute(a["expr"], defined)
            problems.extend(f"annotation {a.get('name')}: {x}" for x in promql.analyze(expr, series, values)[1])
    for v in variables:
        if v.get("type") != "query":
            continue
        query = v.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        expr, unknown = promql.substitute(query or "", defined)
        problems.extend(f"variable {v.get('name')}: ${u} is not a variable of the dashboard" for u in unknown)
        problems.extend(f"variable {v.get('name')}: {x}" for x in promql.variable_query(expr, series, values))
    return problems


def dashboard_selectors(dashboard):
    """{series name: [where]} of every selector of a dashboard's queries and variables."""
    out = {}
    defined = {v.get("name") for v in (dashboard.get("templating") or {}).get("list") or []}
    for where, expr in variants.dashboard_exprs(dashboard):
        expr, _ = promql.substitute(expr, defined)
        for name, _ in promql.analyze(expr, {}, lambda n, label: None)[2]:
            out.setdefault(name, []).append(where)
    return out


def rule_query_problems(doc, series, values):
    """Every alert's expression against `series`, and its annotations' {{ $labels.x }}."""
    problems = []
    for _, r in rules.alerts(doc):
        name = r.get("alert") or r.get("record")
        out, found, _ = promql.analyze(str(r.get("expr", "")), series, values)
        problems.extend(f"{name}: {x}" for x in found)
        if isinstance(out, frozenset):
            have = out | set((r.get("labels") or {}).keys())
            for key, text in (r.get("annotations") or {}).items():
                for label in sorted(promql.annotation_labels(text) - have):
                    problems.append(f"{name}: annotations.{key} uses $labels.{label}, not a label of the alert "
                                    f"(it has {', '.join(sorted(have)) or 'none'})")
    return problems


def rule_selectors(doc):
    out = {}
    for _, r in rules.alerts(doc):
        for name, _ in promql.analyze(str(r.get("expr", "")), {}, lambda n, label: None)[2]:
            out.setdefault(name, []).append(r.get("alert") or r.get("record"))
    return out


def scrape_problems(scraped, catalog, naming="serve"):
    """A scrape ({name: {label: values}}) against the catalog: every series known, with the
    catalog's labels (`key` only where the catalog has it; target labels never), and each closed
    label's values among the listed ones."""
    problems = []
    known = catalog.series(naming)
    for name, labels in sorted(scraped.items()):
        if not name.startswith("ferrogate_"):
            continue
        if name not in known:
            problems.append(f"{name}: in the scrape, not in the catalog (metrics.rs FAMILIES or docs/observability.md)")
            continue
        extra = set(labels) - known[name]
        if extra:
            problems.append(f"{name}: labels {sorted(extra)} are not the catalog's {sorted(known[name])}")
        missing = known[name] - set(labels) - {"key"}
        if missing:
            problems.append(f"{name}: the scrape lacks labels {sorted(missing)} of the catalog")
        for label, vals in labels.items():
            closed = catalog.closed_values(name, label, naming)
            if closed and not vals <= closed:
                problems.append(f"{name}{{{label}}}: values {sorted(vals - closed)} are not the listed {sorted(closed)}")
    return problems
