"""scripts/check-monitoring: the checks in order, then `N passed, M failed`."""

import json
import os
import tempfile
import time
import traceback
from pathlib import Path

import yaml

from . import catalog as catalog_mod
from . import checks, grafana, helm, live, promql, rules, tools, variants

REPO = variants.REPO
# Dashboard queries a healthy check run leaves empty, and why (every other query must return
# data from the live gateway).
EXPECTED_EMPTY = {
    ("Sidecar call errors", "A"): "no call to the sidecar fails in a healthy run; the outcome=\"error\" "
                                  "series appear at the first failure",
}


class Tally:
    def __init__(self):
        self.passed = self.failed = 0

    def record(self, ok, name, detail=(), info=()):
        print(f"{'PASS' if ok else 'FAIL'}  {name}", flush=True)
        for line in list(detail)[:25]:
            print(f"        {line}")
        if len(list(detail)) > 25:
            print(f"        ... and {len(list(detail)) - 25} more")
        for line in info:
            print(f"        {line}")
        if ok:
            self.passed += 1
        else:
            self.failed += 1

    def guard(self, name, fn):
        """Runs fn() -> problems, recording a crash as a failure."""
        try:
            problems = fn()
        except Exception as e:  # a check that cannot run is a failure, not a pass
            problems = [f"{type(e).__name__}: {e}", *traceback.format_exc().strip().splitlines()[-3:]]
        self.record(not problems, name, problems)
        return problems

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        return 0 if self.failed == 0 else 1


def find_ferrogate():
    cands = [Path(os.environ["FERROGATE_BIN"])] if os.environ.get("FERROGATE_BIN") else [
        REPO / "target" / "native" / "ferrogate", REPO / "target" / "debug" / "ferrogate"]
    return next((c for c in cands if os.access(c, os.X_OK)), None), cands


def load_inputs():
    return {
        "serve": (json.loads(variants.DASHBOARD.read_text()), yaml.safe_load(variants.ALERTS.read_text()),
                  variants.DASHBOARD, variants.ALERTS),
        "envoy": (json.loads(variants.DASHBOARD_ENVOY.read_text()), yaml.safe_load(variants.ALERTS_ENVOY.read_text()),
                  variants.DASHBOARD_ENVOY, variants.ALERTS_ENVOY),
    }


def main(argv, doc):
    if any(a in ("-h", "--help") for a in argv):
        print(doc)
        return 0
    if argv == ["--self-test"]:
        from . import selftest
        return selftest.run()
    if argv:
        print(f"check-monitoring: unknown arguments {' '.join(argv)} (try --help)")
        return 2
    t = Tally()
    cat, doc_labels = catalog_mod.load()
    promtool, prometheus = tools.prometheus_tools()
    helm_bin = tools.helm()
    print(f"{tools.describe_prometheus()} | promql-parser {_version('promql-parser')} | "
          f"jsonschema {_version('jsonschema')} | helm {helm_bin}")

    # -- what everything else stands on --------------------------------------------------------
    t.guard("catalog: metrics.rs FAMILIES and docs/observability.md's Filter metrics table agree",
            lambda: catalog_mod.docs_agree(cat, doc_labels))
    outputs = variants.expected_outputs(cat)
    for path in outputs:
        t.guard(f"{variants.rel(path)} is what scripts/dashboards writes from monitoring/",
                lambda path=path: [] if path not in variants.stale({path: outputs[path]}) else
                ["differs from the generator's output: run scripts/dashboards (and commit the result)"])
    t.guard("testdata/grafana-schemas: the vendored schemas are unchanged", grafana.pinned_problems)

    inputs = load_inputs()
    validator = rules.spec_validator()
    with tempfile.TemporaryDirectory(prefix="check-monitoring-") as tmp:
        for naming, (dash, alerts, dash_path, alerts_path) in inputs.items():
            series = cat.series(naming)

            def values(name, label, naming=naming):
                return cat.closed_values(name, label, naming)

            d = variants.rel(dash_path)
            t.guard(f"{d}: Grafana's dashboard, panel and Prometheus-query schemas", lambda: grafana.schema_problems(dash))
            t.guard(f"{d}: unique ids, no overlap, the ${{datasource}} variable", lambda: grafana.convention_problems(dash))
            exprs = variants.dashboard_exprs(dash)
            defined = {v.get("name") for v in dash["templating"]["list"]}
            subst = [(w, promql.substitute(e, defined)[0]) for w, e in exprs]
            t.guard(f"{d}: promtool parses all {len(exprs)} queries", lambda: rules.promtool_parse(promtool, subst, tmp))
            t.guard(f"{d}: every query's series, labels, label values, legend and variables exist in the "
                    f"{naming} catalog", lambda: checks.dashboard_query_problems(dash, series, values))
            a = variants.rel(alerts_path)
            t.guard(f"{a}: promtool check rules", lambda: rules.promtool_check(promtool, alerts_path))
            t.guard(f"{a}: the PrometheusRule CRD's schema (Prometheus Operator v0.93.0)",
                    lambda: rules.schema_problems(alerts, validator))
            t.guard(f"{a}: for, severity, summary, description, runbook_url into docs/monitoring.md",
                    lambda: rules.convention_problems(alerts))
            t.guard(f"{a}: every expression's series and labels exist in the {naming} catalog",
                    lambda: checks.rule_query_problems(alerts, series, values))

        live_checks(t, cat, inputs, prometheus, Path(tmp))

    for mode in helm.MODES:
        t.guard(f"helm: {mode} with metrics.dashboard and metrics.prometheusRule on renders this mode's "
                "dashboard and rules (CRD schema)", lambda mode=mode: helm.check_mode(helm_bin, mode))
    t.guard("helm: the profiles render neither by default", lambda: helm.check_default_off(helm_bin))
    t.guard("helm: disabledAlerts, additionalRuleLabels, runbookBaseURL, dashboard namespace and annotations",
            lambda: helm.check_options(helm_bin))
    return t.finish()


def live_checks(t, cat, inputs, prometheus, tmp):
    binary, cands = find_ferrogate()
    if binary is None:
        t.record(False, "live: a ferrogate binary", [f"none of {', '.join(map(str, cands))}: build it or set FERROGATE_BIN"])
        return
    wasm = os.environ.get("FERROGATE_FILTER_WASM")
    dash, alerts = inputs["serve"][0], inputs["serve"][1]
    work = tmp / "live"
    work.mkdir()
    started = time.time()
    with live.Stack(binary, prometheus, work) as s:
        try:
            s.start(wasm)
            statuses = s.traffic()
            time.sleep(4)  # a few scrapes after the last request: rate() needs two samples
            text = s.scrape()
        except Exception as e:
            t.record(False, "live: ferrogate sim + serve + prometheus start, and take the traffic",
                     [f"{type(e).__name__}: {e}"])
            return
        t.record(True, f"live: ferrogate sim + serve ({binary}) + prometheus started, traffic sent "
                       f"({time.time() - started:.0f}s)", info=[f"{k}: {v}" for k, v in statuses.items()])
        scraped, parse_problems = live.parse_exposition(text)
        t.guard(f"live: the scrape ({len(scraped)} series names) parses and agrees with the catalog",
                lambda: parse_problems + checks.scrape_problems(scraped, cat, "serve"))

        known = cat.series("serve")
        series = {n: known[n] for n in scraped if n in known}
        only = {n: known[n] for n in live.CATALOG_ONLY if n in known}
        series.update(only)

        def values(name, label):
            return cat.closed_values(name, label, "serve")

        for label, doc, selectors, fn in (
                (variants.rel(variants.DASHBOARD), dash, checks.dashboard_selectors(dash),
                 lambda: checks.dashboard_query_problems(dash, series, values)),
                (variants.rel(variants.ALERTS), alerts, checks.rule_selectors(alerts),
                 lambda: checks.rule_query_problems(alerts, series, values))):
            used_only = sorted(n for n in selectors if n in only)
            problems = fn()
            t.record(not problems, f"live: every series {label} selects is in the scrape of ferrogate serve "
                                   "(or catalog-only), with its labels", problems,
                     info=[f"catalog-only: {n} ({live.CATALOG_ONLY[n]})" for n in used_only])

        defined = {v.get("name") for v in dash["templating"]["list"]}
        problems, empty, ran = [], [], 0
        for p in dash["panels"]:
            for tg in p.get("targets") or []:
                where = (p.get("title"), tg.get("refId"))
                expr = promql.substitute(tg["expr"], defined)[0]
                ran += 1
                try:
                    result = s.query(expr)
                except ValueError as e:
                    problems.append(f"'{where[0]}' {where[1]}: prometheus: {e}")
                    continue
                names = {n for n, _ in promql.analyze(expr, {})[2]}
                if not result and where not in EXPECTED_EMPTY and not (names and names <= set(only)):
                    problems.append(f"'{where[0]}' {where[1]}: no data from the live gateway: {expr}")
                elif not result:
                    empty.append(f"empty as expected: '{where[0]}' {where[1]} "
                                 f"({EXPECTED_EMPTY.get(where) or 'catalog-only series'})")
        t.record(not problems, f"live: prometheus evaluates all {ran} dashboard queries without error, each with "
                               "data but those expected empty", problems, info=empty)
        problems = []
        for _, r in rules.alerts(alerts):
            try:
                s.query(r["expr"])
            except ValueError as e:
                problems.append(f"{r['alert']}: prometheus: {e}")
        t.record(not problems, f"live: prometheus evaluates every alert expression of "
                               f"{variants.rel(variants.ALERTS)} without error", problems)


def _version(dist):
    from importlib.metadata import version
    try:
        return version(dist)
    except Exception:
        return "?"
