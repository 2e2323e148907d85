"""The Helm chart's dashboard ConfigMap and PrometheusRule, rendered by the real helm:

  * off by default (the profiles render neither);
  * on, per mode: the ConfigMap carries the dashboard variant of the mode byte for byte, with
    the Grafana sidecar's label; the PrometheusRule's groups are the alert rules of the mode,
    and pass the PrometheusRule CRD's schema;
  * the options: disabledAlerts leaves those alerts out (and refuses a name that is none),
    additionalRuleLabels adds labels (severity stays), runbookBaseURL prefixes runbook_url.

The chart's copies in helm/ferrogate/files/ are compared with monitoring/ by the generator
check (variants.stale).
"""

import subprocess
from pathlib import Path

import yaml

from . import rules, variants

REPO = variants.REPO
CHART = REPO / "helm" / "ferrogate"
PROFILES = CHART / "profiles"
# mode -> (profile, extra --set, namespace, dashboard file, alerts file)
MODES = {
    "standalone": ("standalone.yaml", [], "ferrogate", variants.DASHBOARD, variants.ALERTS),
    "sidecar": ("sidecar.yaml", ["gatewayRef.name=gw"], "ferrogate", variants.DASHBOARD_ENVOY, variants.ALERTS_ENVOY),
    "ingress-pod": ("ingress-pod.yaml", [], "envoy-gateway-system", variants.DASHBOARD_ENVOY, variants.ALERTS_ENVOY),
    "epp": ("epp.yaml", [], "llm", variants.DASHBOARD, variants.ALERTS),
}
ON = ["metrics.dashboard.enabled=true", "metrics.prometheusRule.enabled=true"]


def render(helm, mode, sets, chart=CHART):
    profile, extra, ns, _, _ = MODES[mode]
    cmd = [str(helm), "template", "fg", str(chart), "-f", str(PROFILES / profile), "--namespace", ns]
    for s in extra + sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return [d for d in yaml.safe_load_all(r.stdout) if d], None


def _find(docs, kind, suffix=""):
    return [d for d in docs if d.get("kind") == kind and d["metadata"]["name"].endswith(suffix)]


def check_mode(helm, mode, chart=CHART):
    """Problems of one mode's render with both objects on."""
    _, _, _, dash_file, alerts_file = MODES[mode]
    docs, err = render(helm, mode, ON, chart)
    if err:
        return [f"helm template ({mode}): {err[-400:]}"]
    problems = []
    cms = _find(docs, "ConfigMap", "-dashboard")
    if len(cms) != 1:
        return [f"{mode}: {len(cms)} dashboard ConfigMaps rendered, expected 1"]
    cm = cms[0]
    if cm["metadata"].get("labels", {}).get("grafana_dashboard") != "1":
        problems.append(f"{mode}: the dashboard ConfigMap has no grafana_dashboard: \"1\" label")
    data = cm.get("data") or {}
    if list(data) != [dash_file.name]:
        problems.append(f"{mode}: the dashboard ConfigMap holds {list(data)}, expected [{dash_file.name}]")
    elif data[dash_file.name] != dash_file.read_text():
        problems.append(f"{mode}: the dashboard ConfigMap's {dash_file.name} is not {variants.rel(dash_file)}")
    prs = _find(docs, "PrometheusRule")
    if len(prs) != 1:
        return problems + [f"{mode}: {len(prs)} PrometheusRules rendered, expected 1"]
    spec = prs[0].get("spec") or {}
    want = yaml.safe_load(alerts_file.read_text())
    if spec.get("groups") != want["groups"]:
        problems.append(f"{mode}: the PrometheusRule's groups are not those of {variants.rel(alerts_file)}")
    problems += [f"{mode}: {p}" for p in rules.schema_problems(spec)]
    return problems


def check_default_off(helm, chart=CHART):
    problems = []
    for mode in MODES:
        docs, err = render(helm, mode, [], chart)
        if err:
            problems.append(f"helm template ({mode}): {err[-400:]}")
            continue
        if _find(docs, "ConfigMap", "-dashboard") or _find(docs, "PrometheusRule"):
            problems.append(f"{mode}: the profile renders a dashboard ConfigMap or PrometheusRule by default")
    return problems


def check_options(helm, chart=CHART):
    problems = []
    sets = ["metrics.prometheusRule.enabled=true", "metrics.prometheusRule.disabledAlerts={FerrogateProviderDown}",
            "metrics.prometheusRule.additionalRuleLabels.team=llm",
            "metrics.prometheusRule.additionalRuleLabels.severity=page",
            "metrics.prometheusRule.runbookBaseURL=https://docs.example/ferrogate/",
            "metrics.dashboard.enabled=true", "metrics.dashboard.namespace=grafana",
            "metrics.dashboard.annotations.grafana_folder=LLM"]
    docs, err = render(helm, "standalone", sets, chart)
    if err:
        return [f"helm template (options): {err[-400:]}"]
    rule_list = [r for g in _find(docs, "PrometheusRule")[0]["spec"]["groups"] for r in g["rules"]]
    names = {r["alert"] for r in rule_list}
    if "FerrogateProviderDown" in names:
        problems.append("disabledAlerts: FerrogateProviderDown is still rendered")
    source = {r["alert"] for _, r in rules.alerts(yaml.safe_load(variants.ALERTS.read_text()))}
    if names != source - {"FerrogateProviderDown"}:
        problems.append(f"disabledAlerts: other alerts went missing: {sorted(source - names - {'FerrogateProviderDown'})}")
    for r in rule_list:
        if r["labels"].get("team") != "llm":
            problems.append(f"additionalRuleLabels: {r['alert']} has no team label")
        if r["labels"].get("severity") not in rules.SEVERITIES:
            problems.append(f"additionalRuleLabels: {r['alert']}'s own severity was overridden")
        if not r["annotations"]["runbook_url"].startswith("https://docs.example/ferrogate/docs/monitoring.md#"):
            problems.append(f"runbookBaseURL: {r['alert']}'s runbook_url is {r['annotations']['runbook_url']}")
    cm = _find(docs, "ConfigMap", "-dashboard")[0]["metadata"]
    if cm["namespace"] != "grafana" or (cm.get("annotations") or {}).get("grafana_folder") != "LLM":
        problems.append("metrics.dashboard.namespace/annotations are not on the ConfigMap")
    docs, err = render(helm, "standalone", ["metrics.prometheusRule.enabled=true",
                                            "metrics.prometheusRule.disabledAlerts={FerrogateNoSuchAlert}"], chart)
    if not err or "FerrogateNoSuchAlert" not in err:
        problems.append("disabledAlerts: an unknown alert name was accepted")
    return problems


def copy_chart(tmp):
    """A copy of the chart (for the self-test's broken files)."""
    import shutil
    dst = Path(tmp) / "ferrogate"
    shutil.copytree(CHART, dst)
    return dst
