"""A run of validate-envoy over files: each file is an Envoy bootstrap, a set of Istio objects,
or the stats_tags fragment (a file named stats-tags.yaml, as envoy/stats-tags.yaml); the report
(one line per file, its problems under it, `N passed, M failed` last) and the entry point that
picks the mode from the command line."""

import sys
from pathlib import Path

import yaml

from .bootstrap import validate_bootstrap
from .common import REPO, Problems, rel
from .istio import validate_envoyfilter, validate_other_istio, validate_wasmplugin
from .stats_tags import FRAGMENT, validate_fragment

ISTIO_KINDS = {"EnvoyFilter": validate_envoyfilter, "WasmPlugin": validate_wasmplugin,
               "Gateway": validate_other_istio, "VirtualService": validate_other_istio}


def _validate_objects(docs, problems):
    """Kubernetes objects (Istio's kinds); returns what they were, joined by '+'."""
    kinds = []
    for i, d in enumerate(docs):
        path = f"[doc {i}] " if len(docs) > 1 else ""
        path = f"{path}{d['kind']}/{(d.get('metadata') or {}).get('name', '?')}."
        kinds.append(d["kind"])
        check = ISTIO_KINDS.get(d["kind"])
        if check is None:
            problems.add(f"{path}kind", f"{d['kind']!r} is not checked by this script")
        else:
            check(d, path, problems)
    return "+".join(kinds)


def validate_file(file):
    """Returns (description, problems list)."""
    problems = Problems()
    try:
        docs = [d for d in yaml.safe_load_all(Path(file).read_text()) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        problems.add("", f"cannot read YAML: {e}")
        return "unreadable", problems.items
    if not docs:
        problems.add("", "empty file")
        return "empty", problems.items
    if all(isinstance(d, dict) and "kind" in d and "apiVersion" in d for d in docs):
        return _validate_objects(docs, problems), problems.items
    if len(docs) != 1:
        problems.add("", "an Envoy bootstrap must be a single YAML document")
        return "bootstrap", problems.items
    if Path(file).name == FRAGMENT.name:  # merged into bootstraps, not one itself
        return validate_fragment(docs[0], problems), problems.items
    return validate_bootstrap(docs[0], problems), problems.items


def run(files):
    """Validates and prints the report; exit status 1 on any failure or when nothing passed."""
    passed = failed = 0
    for f in files:
        kind, errs = validate_file(f)
        if errs:
            failed += 1
            print(f"FAIL {rel(f)} ({kind})")
            for e in errs:
                print(f"  {rel(f)}: {e}")
        else:
            passed += 1
            print(f"ok   {rel(f)} ({kind})")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


def main(argv, usage):
    if argv[:1] in (["-h"], ["--help"]):
        print(usage)
        return 0
    if argv == ["--self-test"]:
        from .selftest import self_test
        return self_test()
    if any(a.startswith("-") for a in argv):
        print(f"validate-envoy: unknown option in {argv}; see --help", file=sys.stderr)
        return 2
    files = argv or sorted(map(str, (REPO / "envoy").glob("*.yaml"))) + \
        sorted(map(str, (REPO / "envoy" / "istio").glob("*.yaml")))
    if not files:
        print("validate-envoy: no files to check", file=sys.stderr)
        return 1
    return run(files)
