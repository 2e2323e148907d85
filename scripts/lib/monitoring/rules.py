"""The alert rules files:

  * `promtool check rules`: Prometheus' own loader (structure, durations, templates, every
    expression parsed);
  * the `groups` against the PrometheusRule CRD's schema (testdata/k8s-schemas/
    monitoring.coreos.com/prometheusrules.json, Prometheus Operator v0.93.0), read closed as an
    API server with strict field validation does: what the Helm chart's PrometheusRule carries;
  * ferrogate's conventions: every rule an alert with `for:`, a `severity` of critical, warning
    or info, a summary, a description and a runbook_url whose anchor is a heading of
    docs/monitoring.md; unique names; every {{ $labels.x }} a label of the alert.
"""

import json
import re
import subprocess
from pathlib import Path

import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[3]
CRD = REPO / "testdata" / "k8s-schemas" / "monitoring.coreos.com" / "prometheusrules.json"
RUNBOOKS = REPO / "docs" / "monitoring.md"
SEVERITIES = {"critical", "warning", "info"}


def promtool_check(promtool, path):
    r = subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True, text=True)
    if r.returncode == 0:
        return []
    lines = [x.strip() for x in (r.stdout + r.stderr).splitlines() if x.strip() and not x.startswith("Checking")]
    return ["promtool: " + x for x in lines] or [f"promtool exit status {r.returncode}"]


def promtool_parse(promtool, exprs, tmpdir):
    """Every expression through Prometheus' own parser: written as recording rules of a
    throw-away rules file, which `promtool check rules` loads. [(where, problem)]."""
    doc = {"groups": [{"name": "parse", "rules": [{"record": f"expr:{i}", "expr": e} for i, (_, e) in enumerate(exprs)]}]}
    path = Path(tmpdir) / "exprs.rules.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    problems = promtool_check(promtool, path)
    out = []
    for p in problems:
        m = re.search(r"group \"parse\", rule (\d+)", p)
        where = exprs[int(m.group(1)) - 1][0] if m and 0 < int(m.group(1)) <= len(exprs) else "?"
        out.append(f"{where}: {p}")
    return out


def _close(node):
    """A structural schema read strictly: an object with `properties` takes no other key."""
    if isinstance(node, dict):
        node = {k: _close(v) for k, v in node.items()}
        if "properties" in node and "additionalProperties" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [_close(v) for v in node]
    return node


def spec_validator():
    crd = json.loads(CRD.read_text())
    spec = crd["versions"]["v1"]["properties"]["spec"]
    return jsonschema.Draft7Validator(_close(spec))


def schema_problems(doc, validator=None):
    validator = validator or spec_validator()
    if not isinstance(doc, dict) or set(doc) != {"groups"}:
        return [f"a rules file is a mapping with `groups` alone, not {type(doc).__name__} {sorted(doc) if isinstance(doc, dict) else ''}"]
    out = []
    for e in validator.iter_errors(doc):
        path = "/".join(str(p) for p in e.absolute_path)
        out.append(f"PrometheusRule spec/{path}: {e.message[:240]}")
    return out


def github_anchors(markdown):
    """The anchors GitHub gives the headings of a page."""
    anchors, seen = set(), {}
    in_code = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        text = line.lstrip("#").strip()
        slug = re.sub(r"[^\w\- ]", "", text.lower().replace("`", "")).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def alerts(doc):
    """[(group name, rule)] of every rule."""
    out = []
    for g in (doc or {}).get("groups") or []:
        for r in g.get("rules") or []:
            out.append((g.get("name"), r))
    return out


def convention_problems(doc, runbooks_md=None):
    text = runbooks_md if runbooks_md is not None else (RUNBOOKS.read_text() if RUNBOOKS.exists() else "")
    anchors = github_anchors(text)
    problems, names = [], set()
    for group, r in alerts(doc):
        name = r.get("alert") or r.get("record")
        where = f"group {group} rule {name}"
        if "alert" not in r:
            problems.append(f"{where}: not an alert (this file holds alerts only)")
            continue
        if name in names:
            problems.append(f"{where}: a second alert of that name")
        names.add(name)
        if not r.get("for"):
            problems.append(f"{where}: no `for:` (one bad scrape would page)")
        sev = (r.get("labels") or {}).get("severity")
        if sev not in SEVERITIES:
            problems.append(f"{where}: labels.severity is {sev!r}, not one of {', '.join(sorted(SEVERITIES))}")
        ann = r.get("annotations") or {}
        for a in ("summary", "description", "runbook_url"):
            if not ann.get(a):
                problems.append(f"{where}: no annotations.{a}")
        url = ann.get("runbook_url") or ""
        if url:
            page, _, anchor = url.partition("#")
            if page != "docs/monitoring.md" or not anchor:
                problems.append(f"{where}: runbook_url {url!r} is not docs/monitoring.md#<anchor>")
            elif anchor not in anchors:
                problems.append(f"{where}: runbook_url {url!r}: docs/monitoring.md has no heading with that anchor")
    return problems
