"""The dashboards against Grafana's own schemas (testdata/grafana-schemas/, see its README):

  * the whole dashboard against the dashboard kind's schema (schema v1, the JSON Grafana stores
    and exports), closed: a misspelt key, a value of the wrong type, a panel without `type`
    are refused;
  * each panel's `options` and `fieldConfig.defaults.custom` against its panel plugin's schema
    (a panel type without a vendored schema is refused: vendor it first);
  * each query against the Prometheus data source's query schema;
  * and what no schema says: panel ids unique, panels do not overlap, every query and variable
    uses the `${datasource}` variable, which must be a Prometheus data source variable.
"""

import hashlib
import json
from pathlib import Path

import jsonschema

REPO = Path(__file__).resolve().parents[3]
SCHEMAS = REPO / "testdata" / "grafana-schemas"
# sha256 of each vendored file as fetched (README.md says from where); a changed file is noticed.
PINNED = {
    "dashboard.jsonschema.json": "67451cd5b288f97e3f68eccd52ffa4f75151fc87c669b8cd93c051056b294265",
    "timeseries.jsonschema.json": "77ba36d66bbfcb363eeb5e6957813ca4b4cbc5a5bc4e8a12034d4c3b8cbbbde4",
    "stat.jsonschema.json": "da547c8b1e52883a77e876f34d90d6034266ca8488a5601900ca26fc01d74b9e",
    "prometheus.jsonschema.json": "726fc97eeb1e37791dbbf988c3cf40de17bb8e623926e6979c4a3f947cb1af87",
}
PANEL_PLUGINS = ("timeseries", "stat")
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def pinned_problems():
    problems = []
    for name, want in PINNED.items():
        p = SCHEMAS / name
        if not p.exists():
            problems.append(f"testdata/grafana-schemas/{name} is missing")
        elif hashlib.sha256(p.read_bytes()).hexdigest() != want:
            problems.append(f"testdata/grafana-schemas/{name} is not the vendored file (sha256 differs; "
                            "re-vendor it as its README says and update PINNED in scripts/lib/monitoring/grafana.py)")
    return problems


def _load(name):
    return json.loads((SCHEMAS / name).read_text())


def _validator(schema, definition=None):
    if definition:
        schema = {**schema, "$ref": f"#/definitions/{definition}"}
    return jsonschema.Draft7Validator(schema)


def _errors(validator, instance, where):
    out = []
    for e in sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.absolute_path]):
        # A oneOf/anyOf (a panel is a Panel or a RowPanel) says only that no branch matched:
        # name the closest branch's own error instead.
        while e.context:
            branches = {}
            for sub in e.context:
                branches.setdefault(sub.relative_schema_path[0], []).append(sub)
            e = min(branches.values(), key=len)[0]
        path = "/".join(str(p) for p in e.absolute_path)
        msg = e.message if len(e.message) < 240 else e.message[:240] + "..."
        out.append(f"{where}{'/' + path if path else ''}: {msg}")
    return out


def all_panels(dashboard):
    """Every panel, rows' nested panels included, with the path to it."""
    out = []
    for i, p in enumerate(dashboard.get("panels") or []):
        out.append((f"panels/{i}", p))
        for j, q in enumerate(p.get("panels") or [] if isinstance(p, dict) else []):
            out.append((f"panels/{i}/panels/{j}", q))
    return out


def schema_problems(dashboard):
    """Problems of one dashboard (a parsed JSON object) against Grafana's schemas."""
    problems = _errors(_validator(_load("dashboard.jsonschema.json")), dashboard, "dashboard")
    plugins = {name: _load(f"{name}.jsonschema.json") for name in PANEL_PLUGINS}
    query = _validator(_load("prometheus.jsonschema.json"))
    for where, p in all_panels(dashboard):
        if not isinstance(p, dict):
            continue
        kind = p.get("type")
        if kind == "row":
            continue
        if kind not in plugins:
            problems.append(f"{where}: panel type {kind!r} has no vendored plugin schema "
                            f"(testdata/grafana-schemas has {', '.join(PANEL_PLUGINS)})")
            continue
        schema = plugins[kind]
        problems += _errors(_validator(schema, "Options"), p.get("options", {}), f"{where}/options")
        custom = ((p.get("fieldConfig") or {}).get("defaults") or {}).get("custom")
        if "FieldConfig" in schema["definitions"]:
            if custom is not None:
                problems += _errors(_validator(schema, "FieldConfig"), custom, f"{where}/fieldConfig/defaults/custom")
        elif custom:
            problems.append(f"{where}/fieldConfig/defaults/custom: a {kind} panel has no custom field config")
        for k, t in enumerate(p.get("targets") or []):
            problems += _errors(query, t, f"{where}/targets/{k}")
    return problems


def convention_problems(dashboard):
    """What the schemas leave open: unique ids, no overlapping panels, the datasource variable."""
    problems, ids, boxes = [], {}, []
    variables = {v.get("name"): v for v in (dashboard.get("templating") or {}).get("list") or []}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        problems.append("templating: no `datasource` variable of type datasource with query prometheus")
    for where, p in all_panels(dashboard):
        if not isinstance(p, dict):
            continue
        if p.get("id") in ids:
            problems.append(f"{where}: id {p.get('id')} is also the id of {ids[p['id']]}")
        ids[p.get("id")] = where
        g = p.get("gridPos") or {}
        if "panels/" not in where[len("panels/"):]:  # top-level panels share one grid
            box = (g.get("x", 0), g.get("y", 0), g.get("w", 0), g.get("h", 0))
            for other_where, o in boxes:
                if box[0] < o[0] + o[2] and o[0] < box[0] + box[2] and box[1] < o[1] + o[3] and o[1] < box[1] + box[3]:
                    problems.append(f"{where} ({p.get('title')}): overlaps {other_where}")
            boxes.append((where, box))
        if p.get("type") != "row":
            if p.get("datasource") != DATASOURCE:
                problems.append(f"{where} ({p.get('title')}): datasource is not {DATASOURCE}")
            for t in p.get("targets") or []:
                if t.get("datasource") != DATASOURCE:
                    problems.append(f"{where} ({p.get('title')}) target {t.get('refId')}: datasource is not {DATASOURCE}")
    for name, v in variables.items():
        if v.get("type") == "query" and v.get("datasource") != DATASOURCE:
            problems.append(f"templating {name}: datasource is not {DATASOURCE}")
    return problems
