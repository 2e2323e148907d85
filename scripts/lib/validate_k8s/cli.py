"""A whole run of validate-k8s: every document of the targets, then an Envoy Gateway simulation
per Gateway that ferrogate policies reach; the report (`N passed, M failed` last) and the entry
point that picks the mode from the command line."""

import sys

from .documents import DEFAULT_TARGETS, expand, load
from .envoy_api import Problems
from .envoy_gateway import eg_check, gateways_to_simulate
from .kinds import validate_doc
from .schemas import Schemas

_SCHEMAS = []  # built once per process: loading Kubernetes' schemas is the slow part


def _schemas():
    if not _SCHEMAS:
        _SCHEMAS.append(Schemas())
    return _SCHEMAS[0]


def validate(targets):
    """Returns ([(label, what, errors)] for every document and simulation, [notes])."""
    unreadable = {}
    docs = load(expand(targets), unreadable)
    results = [(label, "unreadable", errs) for label, errs in unreadable.items()]
    for d in docs:
        what, errs = validate_doc(d, _schemas())
        results.append((d.label(), what, errs))
    gateways, notes = gateways_to_simulate(docs)
    for (ns, name), gw in gateways.items():
        problems = Problems()
        try:
            eg_check(gw, docs, problems)
        except Exception as e:  # noqa: BLE001 - malformed objects are reported by their schema check
            problems.add("", f"cannot rebuild the xDS ({type(e).__name__}: {e}); see the schema errors above")
        results.append((f"Gateway {ns}/{name}: Envoy Gateway xDS, rebuilt and patched", "simulation",
                        problems.items))
    return results, notes


def run(targets):
    """Validates and prints the report; exit status 1 on any failure or when nothing was found."""
    results, notes = validate(targets)
    for note in notes:
        print(note)
    failed = 0
    for label, what, errs in results:
        if errs:
            failed += 1
            print(f"FAIL {label}" + (f" ({what})" if what else ""))
            for e in errs:
                print(f"  {e}")
        else:
            print(f"ok   {label} ({what})")
    print(f"{len(results) - failed} passed, {failed} failed")
    return 0 if failed == 0 and results else 1


def main(argv, usage):
    if argv[:1] in (["-h"], ["--help"]):
        print(usage)
        return 0
    if argv[:1] == ["--vendor-crd"]:
        from .vendor import vendor_crd
        return vendor_crd(argv[1:])
    if argv == ["--self-test"]:
        from .selftest import self_test
        return self_test()
    if any(a.startswith("-") for a in argv):
        print(f"validate-k8s: unknown option in {argv}; see --help", file=sys.stderr)
        return 2
    return run(argv or [t for t in DEFAULT_TARGETS if t.exists()])
