"""ferrogate's metric labels in Envoy: envoy/stats-tags.yaml, the bootstrap fragment whose
`stats_config.stats_tags` take each `;label=value` segment out of the filter's stat names and
make it a tag (a Prometheus label), and the bootstraps that must carry it.

The fragment is parsed as an envoy.config.bootstrap.v3.Bootstrap (so each tag is a valid
envoy.config.metrics.v3.TagSpecifier) and holds nothing but `stats_config.stats_tags`: unique
tag names (Envoy refuses a bootstrap naming a tag twice), each a `regex` that compiles (Python's
`re` reads these patterns as Envoy's ECMAScript regexes do) with two groups - the first leaves
the name, the second is the value - and that takes `;<its tag>=value` out of a stat name.

Every bootstrap ferrogate ships carries exactly the fragment's list: the same tags, regexes and
order (compared on the parsed messages), whether it is a static bootstrap (envoy/*.yaml), an
EnvoyProxy's `spec.bootstrap` (Envoy Gateway) or an Istio custom bootstrap ConfigMap
(validate-k8s). `ferrogate serve` applies the same file (sidecar/src/services/metrics.rs)."""

import re

import yaml

from .common import REPO, Problems
from .protos import ROOT, bootstrap_pb2, parse_message

FRAGMENT = REPO / "envoy" / "stats-tags.yaml"
FRAGMENT_REL = "envoy/stats-tags.yaml"
_SAMPLE_FAMILY = "wasmcustom.ferrogate.requests_total"  # how Envoy names a Wasm's stat


def _tags(b):
    """The stats_tags of a parsed (canonical) Bootstrap dict, as a list of dicts."""
    return ((b or {}).get("stats_config") or {}).get("stats_tags") or []


def _check_regex(tag, path, problems):
    """One fragment tag: a regex, two groups, and it extracts `;<tag>=value` from a stat name."""
    name, regex = tag.get("tag_name", ""), tag.get("regex")
    if regex is None:
        problems.add(path, f"tag {name!r} has no `regex` (ferrogate's tags are extracted from the names, "
                     "not fixed values)")
        return
    try:
        compiled = re.compile(regex)
    except re.error as e:
        problems.add(f"{path}.regex", f"{regex!r} does not compile: {e}")
        return
    if compiled.groups != 2:
        problems.add(f"{path}.regex", f"{regex!r} has {compiled.groups} group(s), expected 2: the first is cut "
                     "out of the stat name, the second is the tag's value")
        return
    sample = f"{_SAMPLE_FAMILY};{name}=v1;zz_other=v2"
    m = compiled.search(sample)
    if not m or m.group(2) != "v1" or sample[:m.start(1)] + sample[m.end(1):] != f"{_SAMPLE_FAMILY};zz_other=v2":
        got = "no match" if not m else f"groups {m.group(1)!r}, {m.group(2)!r}"
        problems.add(f"{path}.regex", f"{regex!r} does not take ';{name}=<value>' out of a stat name "
                     f"({sample!r}: {got}); ferrogate's form is (;{name}=([^;]*))")


def validate_fragment(doc, problems):
    """envoy/stats-tags.yaml (or a copy): returns what it was checked as."""
    b = parse_message(doc, bootstrap_pb2.Bootstrap, ROOT, problems)
    if b is None:
        return "stats_config fragment"
    extra = sorted(set(b) - {"stats_config"}) + sorted(f"stats_config.{k}" for k in
                                                      set(b.get("stats_config") or {}) - {"stats_tags"})
    for k in extra:
        problems.add(k, "the fragment holds only stats_config.stats_tags (it is merged into other bootstraps)")
    tags = _tags(b)
    if not tags:
        problems.add("stats_config.stats_tags", "empty: no label would leave the stat names")
    seen = set()
    for i, t in enumerate(tags):
        path = f"stats_config.stats_tags[{i}]"
        if t.get("tag_name") in seen:
            problems.add(f"{path}.tag_name", f"{t.get('tag_name')!r} is named twice (Envoy refuses the bootstrap)")
        seen.add(t.get("tag_name"))
        _check_regex(t, path, problems)
    return "stats_config fragment"


_EXPECTED = []  # the fragment's tags, parsed once per process


def expected_tags():
    """The parsed stats_tags of envoy/stats-tags.yaml, or a string saying why there are none."""
    if not _EXPECTED:
        problems = Problems()
        try:
            doc = yaml.safe_load(FRAGMENT.read_text())
        except (OSError, yaml.YAMLError) as e:
            return f"cannot read {FRAGMENT_REL}: {e}"
        validate_fragment(doc, problems)
        if problems.items:
            return f"{FRAGMENT_REL} is not valid ({problems.items[0]}; see scripts/validate-envoy)"
        _EXPECTED.append(_tags(parse_message(doc, bootstrap_pb2.Bootstrap, ROOT, problems)))
    return _EXPECTED[0]


def _show(t):
    return f"{t.get('tag_name')!r}: {t.get('regex', t.get('fixed_value'))!r}"


def compare_tags(got, path, problems, where="this bootstrap"):
    """`got` (parsed stats_tags) must be exactly the fragment's: same tags, regexes, order."""
    want = expected_tags()
    if isinstance(want, str):
        problems.add(path, want)
        return
    if got == want:
        return
    names_got = [t.get("tag_name") for t in got]
    names_want = [t.get("tag_name") for t in want]
    by_name = {t.get("tag_name"): t for t in got}
    missing = [n for n in names_want if n not in by_name]
    extra = [n for n in names_got if n not in names_want]
    changed = [(by_name[t["tag_name"]], t) for t in want if t["tag_name"] in by_name and by_name[t["tag_name"]] != t]
    if missing:
        problems.add(path, f"{where} lacks the tag(s) {missing} of {FRAGMENT_REL}: those labels stay in the "
                     "stat names")
    if extra:
        problems.add(path, f"{where} has tag(s) {extra} that {FRAGMENT_REL} does not: keep exactly its list")
    for g, w in changed:
        problems.add(path, f"tag {g.get('tag_name')!r} is {_show(g)}, {FRAGMENT_REL} has {_show(w)}")
    if not (missing or extra or changed):
        problems.add(path, f"the tags are in another order than {FRAGMENT_REL}'s: {names_got}, expected "
                     f"{names_want}")


def check_bootstrap_tags(b, path, problems, where="this bootstrap"):
    """A parsed Bootstrap carries exactly envoy/stats-tags.yaml's stats_tags."""
    prefix = f"{path}." if path and path != ROOT else ""
    compare_tags(_tags(b), f"{prefix}stats_config.stats_tags", problems, where)
