"""scripts/check-monitoring --self-test: broken copies of the dashboards, the rules, the
generated files, a scrape and the chart must each be rejected, with the problem named, by the
same functions the main run uses. Queries are judged against the catalog's series (the live
run's scrape goes through the same Analysis); no gateway is started."""

import copy
import json
import tempfile
from pathlib import Path

import yaml

from . import catalog as catalog_mod
from . import checks, grafana, helm, live, promql, rules, tools, variants
from .cli import Tally


def _panel(d, title):
    return next(p for p in d["panels"] if p.get("title") == title)


def _target(d, title, ref="A"):
    return next(t for t in _panel(d, title)["targets"] if t["refId"] == ref)


def dashboard_schema_cases():
    def typo_type(d):
        _panel(d, "Requests/s")["type"] = "timeseris"

    def no_type(d):
        del _panel(d, "Requests by API")["type"]

    def wrong_field_type(d):
        _panel(d, "Errors by reason")["gridPos"]["w"] = "12"

    def misspelt_key(d):
        p = _panel(d, "Request duration")
        p["fieldconfig"] = p.pop("fieldConfig")

    def bad_enum(d):
        _panel(d, "Queue depth")["options"]["legend"]["displayMode"] = "tabel"

    def target_without_expr(d):
        del _target(d, "Targets healthy")["expr"]

    def stat_without_reduce(d):
        del _panel(d, "Cost USD/h")["options"]["reduceOptions"]

    def custom_typo(d):
        _panel(d, "Queue wait")["fieldConfig"]["defaults"]["custom"]["lineWidht"] = 1

    return [
        ("a panel type typo'd (timeseris)", typo_type, "no vendored plugin schema"),
        ("a panel without type", no_type, "'type' is a required property"),
        ("a field of the wrong type (gridPos.w \"12\")", wrong_field_type, "is not of type 'integer'"),
        ("a misspelt key (fieldconfig)", misspelt_key, "Additional properties are not allowed"),
        ("a legend displayMode outside the timeseries plugin's enum", bad_enum, "is not one of"),
        ("a query without expr (Prometheus query schema)", target_without_expr, "'expr' is a required property"),
        ("a stat panel without reduceOptions (stat plugin schema)", stat_without_reduce, "'reduceOptions' is a required property"),
        ("a misspelt custom field option (lineWidht)", custom_typo, "Additional properties are not allowed"),
    ]


def dashboard_convention_cases():
    def dup_id(d):
        _panel(d, "Requests by API")["id"] = _panel(d, "Requests/s")["id"]

    def overlap(d):
        _panel(d, "Requests by API")["gridPos"]["x"] = 6

    def fixed_datasource(d):
        _target(d, "Errors by reason")["datasource"] = {"type": "prometheus", "uid": "prom-1"}

    return [
        ("two panels with one id", dup_id, "is also the id of"),
        ("two overlapping panels", overlap, "overlaps"),
        ("a query on a fixed data source instead of ${datasource}", fixed_datasource, "datasource is not"),
    ]


def dashboard_query_cases():
    def missing_metric(d):
        t = _target(d, "Requests by API")
        t["expr"] = t["expr"].replace("ferrogate_requests_total", "ferrogate_request_total")

    def bad_matcher_label(d):
        t = _target(d, "Errors by reason")
        t["expr"] = t["expr"].replace('model=~"$model"', 'modle=~"$model"')

    def bad_by_label(d):
        t = _target(d, "Tokens/s by model and type")
        t["expr"] = t["expr"].replace("sum by (model, type)", "sum by (model, kind)")

    def bad_on_label(d):
        t = _target(d, "Cost USD/h by group")
        t["expr"] = t["expr"].replace("on (key)", "on (keys)")

    def syntax_error(d):
        t = _target(d, "Queue depth")
        t["expr"] = t["expr"].rstrip(")")

    def bad_value(d):
        t = _target(d, "KV routing hit rate")
        t["expr"] = t["expr"].replace('outcome="hit"', 'outcome="hits"')

    def bad_legend(d):
        _target(d, "Errors by reason")["legendFormat"] = "{{reasons}}"

    def undefined_variable(d):
        t = _target(d, "Requests by API")
        t["expr"] = t["expr"].replace("$model", "$mdoel")

    def bad_variable_query(d):
        v = next(v for v in d["templating"]["list"] if v["name"] == "provider")
        v["query"] = v["definition"] = "label_values(ferrogate_requests_total, providers)"

    def quantile_without_le(d):
        t = _target(d, "Request duration")
        t["expr"] = t["expr"].replace("sum by (le)", "sum by (model)")

    def join_missing_label(d):
        t = _target(d, "Cost USD/h by group")
        t["expr"] = t["expr"].replace("sum by (group) (max by (key, group)", "sum by (group) (max by (key)")

    return [
        ("a query naming a series that does not exist", missing_metric, "series ferrogate_request_total does not exist"),
        ("a matcher on a label the series lacks (modle)", bad_matcher_label, "has no label modle"),
        ("sum by () a label the input lacks", bad_by_label, "kind is not a label of its input"),
        ("on () a label one side lacks", bad_on_label, "on (keys)"),
        ("a PromQL syntax error", syntax_error, "PromQL syntax"),
        ("a closed label value misspelt (outcome=\"hits\")", bad_value, "outcome is one of"),
        ("a legend {{label}} the result lacks", bad_legend, "legend {{reasons}}"),
        ("an undefined dashboard variable", undefined_variable, "$mdoel is not a variable"),
        ("a variable's label_values() of a label the series lacks", bad_variable_query, "providers is not a label"),
        ("histogram_quantile() over an input without le", quantile_without_le, "without `le`"),
        ("a join keeping a label it dropped (group)", join_missing_label, "group is not a label of its input"),
    ]


def rules_cases():
    def first(doc):
        return doc["groups"][0]["rules"][0]

    def no_for(doc):
        del first(doc)["for"]

    def no_severity(doc):
        del first(doc)["labels"]["severity"]

    def bad_runbook(doc):
        first(doc)["annotations"]["runbook_url"] = "docs/monitoring.md#no-such-alert"

    def no_summary(doc):
        del first(doc)["annotations"]["summary"]

    def misspelt_field(doc):
        r = first(doc)
        r["exp"] = r.pop("expr")

    def bad_annotation_label(doc):
        first(doc)["annotations"]["summary"] = "{{ $labels.modle }} fails"

    def missing_metric(doc):
        r = first(doc)
        r["expr"] = r["expr"].replace("ferrogate_requests_total", "ferrogate_requests")

    def syntax_error(doc):
        r = first(doc)
        r["expr"] = r["expr"].replace(") > 0.05", " > 0.05", 1)

    def duplicate(doc):
        doc["groups"][0]["rules"].append(copy.deepcopy(first(doc)))

    # (name, mutation, [(judge, what its problem must say)]): judges are conventions, queries
    # (against the serve catalog), promtool (check rules), schema (the PrometheusRule CRD).
    return [
        ("an alert without for:", no_for, [("conventions", "no `for:`")]),
        ("an alert without a severity", no_severity, [("conventions", "labels.severity")]),
        ("a runbook_url to no heading of docs/monitoring.md", bad_runbook, [("conventions", "no heading with that anchor")]),
        ("an alert without a summary", no_summary, [("conventions", "no annotations.summary")]),
        ("a misspelt rule field (exp:)", misspelt_field, [("promtool", "field exp not found"), ("schema", "'exp' was unexpected")]),
        ("an annotation using a label the alert lacks", bad_annotation_label, [("queries", "$labels.modle")]),
        ("an alert on a series that does not exist", missing_metric, [("queries", "series ferrogate_requests does not exist")]),
        ("an alert expression with a syntax error", syntax_error, [("promtool", "parse error"), ("queries", "PromQL syntax")]),
        ("two alerts of one name", duplicate, [("conventions", "a second alert of that name")]),
    ]


def run():
    t = Tally()
    cat, _ = catalog_mod.load()
    promtool, _ = tools.prometheus_tools()
    helm_bin = tools.helm()
    serve = json.loads(variants.DASHBOARD.read_text())
    envoy = json.loads(variants.DASHBOARD_ENVOY.read_text())
    alerts = yaml.safe_load(variants.ALERTS.read_text())

    def expect(name, problems, needle):
        hit = [p for p in problems if needle in p]
        t.record(bool(hit), f"rejected: {name}", [f"-> {hit[0]}"] if hit else
                 ["accepted" if not problems else f"rejected, but not for '{needle}': {problems[0]}"])

    def series_values(naming):
        return cat.series(naming), (lambda n, label: cat.closed_values(n, label, naming))

    # The originals pass, or the rejections below prove nothing.
    base = grafana.schema_problems(serve) + grafana.convention_problems(serve)
    base += checks.dashboard_query_problems(serve, *series_values("serve"))
    base += checks.dashboard_query_problems(envoy, *series_values("envoy"))
    base += rules.convention_problems(alerts) + checks.rule_query_problems(alerts, *series_values("serve"))
    t.record(not base, "the shipped dashboards and rules pass the checks the cases below break", base)

    for name, mutate, needle in dashboard_schema_cases():
        d = copy.deepcopy(serve)
        mutate(d)
        expect(f"dashboard schema: {name}", grafana.schema_problems(d), needle)
    for name, mutate, needle in dashboard_convention_cases():
        d = copy.deepcopy(serve)
        mutate(d)
        expect(f"dashboard: {name}", grafana.convention_problems(d), needle)
    for name, mutate, needle in dashboard_query_cases():
        d = copy.deepcopy(serve)
        mutate(d)
        expect(f"dashboard query: {name}", checks.dashboard_query_problems(d, *series_values("serve")), needle)

    with tempfile.TemporaryDirectory(prefix="check-monitoring-selftest-") as tmp:
        tmp = Path(tmp)
        # promtool, Prometheus' own parser, refuses the syntax error too.
        d = copy.deepcopy(serve)
        next(m for n, m, _ in dashboard_query_cases() if n == "a PromQL syntax error")(d)
        exprs = [(w, promql.substitute(e, {"datasource", "model", "provider", "key"})[0])
                 for w, e in variants.dashboard_exprs(d)]
        expect("promtool: a dashboard query with a syntax error", rules.promtool_parse(promtool, exprs, tmp),
               "'Queue depth' target A")

        # The Envoy variant is judged by Envoy's names: a serve name there does not exist.
        d = copy.deepcopy(envoy)
        t_ = _target(d, "Request duration")
        t_["expr"] = t_["expr"].replace("ferrogate_request_duration_ms_bucket", "ferrogate_request_duration_seconds_bucket")
        expect("Envoy dashboard query: a serve name (_seconds_bucket)",
               checks.dashboard_query_problems(d, *series_values("envoy")),
               "series ferrogate_request_duration_seconds_bucket does not exist")

        for name, mutate, judges in rules_cases():
            doc = copy.deepcopy(alerts)
            mutate(doc)
            f = tmp / "broken-alerts.yaml"
            f.write_text(yaml.safe_dump(doc, sort_keys=False))
            judge = {
                "conventions": lambda: rules.convention_problems(doc),
                "queries": lambda: checks.rule_query_problems(doc, *series_values("serve")),
                "promtool": lambda: rules.promtool_check(promtool, f),
                "schema": lambda: rules.schema_problems(doc),
            }
            for which, needle in judges:
                expect(f"alert rules ({which}): {name}", judge[which](), needle)

        # Generated files: a hand edit, or a stale copy, is noticed.
        outputs = variants.expected_outputs(cat)
        for path in (variants.DASHBOARD_ENVOY, variants.CHART_FILES / "ferrogate-alerts.yaml"):
            f = tmp / path.name
            f.write_text(outputs[path].replace("ferrogate", "ferrogate ", 1))
            expect(f"generated file edited by hand: {variants.rel(path)}",
                   [f"{f} differs"] if variants.stale({f: outputs[path]}) else [], "differs")
        for expr, needle in (("rate(ferrogate_request_duration_seconds_bucket[5m])", "outside histogram_quantile"),
                             ('histogram_quantile(0.9, rate(ferrogate_queue_duration_seconds_bucket{le="0.5"}[5m]))', "`le` matcher")):
            try:
                variants.rewrite_expr(expr, variants.renames(cat))
                problems = []
            except variants.RewriteError as e:
                problems = [str(e)]
            expect(f"Envoy rewrite refuses what it cannot keep right: {expr}", problems, needle)

        # A scrape: a family the catalog lacks, a label it lacks, a value outside a closed set,
        # a line that is no sample.
        scrape = ("ferrogate_made_up_total 1\n"
                  'ferrogate_tokens_total{model="m",provider="p",type="input",colour="red"} 1\n'
                  'ferrogate_flow_control_total{outcome="dropped"} 1\n'
                  "ferrogate_requests_total{api=chat} 1\n")
        scraped, parse_problems = live.parse_exposition(scrape)
        problems = parse_problems + checks.scrape_problems(scraped, cat)
        for needle in ("ferrogate_made_up_total: in the scrape, not in the catalog", "['colour']",
                       "values ['dropped']", "unreadable labels"):
            expect(f"scrape: {needle}", problems, needle)

        # The chart: its copy of the dashboard differing from monitoring/ is caught in the render.
        chart = helm.copy_chart(tmp)
        (chart / "files" / "ferrogate.json").write_text(variants.DASHBOARD.read_text().replace('"ferrogate"', '"ferrogate2"', 1))
        expect("helm: the chart's files/ferrogate.json differs from monitoring/",
               helm.check_mode(helm_bin, "standalone", chart), "is not monitoring/grafana/ferrogate.json")
        (chart / "files" / "ferrogate.json").write_text(variants.DASHBOARD.read_text())
        text = (chart / "files" / "ferrogate-alerts-envoy.yaml").read_text()
        (chart / "files" / "ferrogate-alerts-envoy.yaml").write_text(text.replace("for: 10m", "for: 1m", 1))
        expect("helm: the chart's files/ferrogate-alerts-envoy.yaml differs from monitoring/",
               helm.check_mode(helm_bin, "sidecar", chart), "are not those of")
    return t.finish()
