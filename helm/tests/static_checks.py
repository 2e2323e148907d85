"""Checks of the chart's own files (used by scripts/check-helm).

  * values.schema.json is strict: every object level of the chart's values says
    additionalProperties false (or is a map whose values have a schema), so a misspelt key fails
    instead of being ignored. Kubernetes or ferrogate objects passed through as they are carry
    a "$comment" starting with "passthrough:" and are checked by the API server or by
    `ferrogate check` instead.
  * values.yaml documents every key: each key line has a comment on it or right above it.
  * the chart README has a row for every key of values.yaml.
"""

import json
import re


def check_schema_strict(path):
    problems = []

    def walk(node, where):
        if isinstance(node, list):
            for i, n in enumerate(node):
                walk(n, f"{where}[{i}]")
            return
        if not isinstance(node, dict):
            return
        types = node.get("type")
        is_object = types == "object" or (isinstance(types, list) and "object" in types) or "properties" in node
        passthrough = str(node.get("$comment", "")).startswith("passthrough:")
        if is_object and not passthrough and "additionalProperties" not in node:
            problems.append(f"{path}: {where or '(root)'} is an object without additionalProperties")
        if is_object and node.get("additionalProperties") is True:
            problems.append(f"{path}: {where or '(root)'} allows any key (additionalProperties: true)")
        for key, child in node.items():
            if key in ("properties", "definitions", "$defs"):
                for name, sub in child.items():
                    walk(sub, f"{where}.{name}" if where else name)
            elif isinstance(child, (dict, list)):
                walk(child, f"{where}/{key}" if where else key)

    with open(path) as f:
        walk(json.load(f), "")
    return problems


KEY_LINE = re.compile(r"^(\s*)([A-Za-z_][\w.-]*|\"[^\"]+\"):(\s|$)")


def check_values_documented(path):
    """Every key of values.yaml has a comment on its line or on the line(s) right above it."""
    problems = []
    with open(path) as f:
        lines = f.read().splitlines()
    in_list_item_block = None
    for i, line in enumerate(lines):
        m = KEY_LINE.match(line)
        if not m:
            # Keys inside a list item ("- name: x" and its continuation lines) belong to an
            # example value, not to the chart's keys.
            stripped = line.lstrip()
            if stripped.startswith("- "):
                in_list_item_block = len(line) - len(stripped)
            continue
        indent = len(m.group(1))
        if in_list_item_block is not None and indent > in_list_item_block:
            continue
        in_list_item_block = None
        commented = "#" in line.split(":", 1)[1] or (i > 0 and lines[i - 1].strip().startswith("#"))
        if not commented:
            problems.append(f"{path}:{i + 1}: key {m.group(2)} has no comment")
    return problems


def check_readme_lists_values(values_path, readme_path):
    """Every key path of values.yaml appears as `path` in the chart README's table."""
    import yaml

    with open(values_path) as f:
        values = yaml.safe_load(f) or {}
    with open(readme_path) as f:
        readme = f.read()
    paths = []

    def walk(node, prefix):
        for k, v in node.items():
            p = f"{prefix}.{k}" if prefix else str(k)
            paths.append(p)
            # The configuration document is ferrogate's, described in docs/configuration.md.
            if isinstance(v, dict) and v and p != "config":
                walk(v, p)

    walk(values, "")
    return [f"{readme_path}: no row for `{p}`" for p in paths if f"| `{p}` |" not in readme]
