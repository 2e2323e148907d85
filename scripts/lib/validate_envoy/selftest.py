"""`validate-envoy --self-test`: broken copies of the shipped files, each of which must be
rejected with a given text (a plugin configuration's errors, its inline config document's
included, through `ferrogate check --plugin-config`), valid variants that must pass, and a
plugin configuration with no ferrogate binary to judge it, which must be reported rather than
passed. The pristine files are checked first: if they failed, a rejection would prove nothing."""

import json
import os
import tempfile
from pathlib import Path

import yaml

from .cli import validate_file
from .common import REPO
from .config_document import BIN
from .protos import T


def _hcm(d):
    return d["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]


def _wasm_cfg(d):
    hcm = _hcm(d)
    return hcm, hcm["http_filters"][0]["typed_config"]["config"]


def _edit_plugin(d, fn):
    _, cfg = _wasm_cfg(d)
    pc = json.loads(cfg["configuration"]["value"])
    fn(pc)
    cfg["configuration"]["value"] = json.dumps(pc)


def _edit_config(fn):
    """A mutation of the inline config document of a bootstrap's filter."""
    return lambda d: _edit_plugin(d, lambda pc: fn(pc["config"]))


def _rename(node, old, new):
    node[new] = node.pop(old)


def _route_entry(d):
    """The first route of the first listener's HCM (the entry, not its `route` action)."""
    return _hcm(d)["route_config"]["virtual_hosts"][0]["routes"][0]


def _route(d):
    return _route_entry(d)["route"]


def _patch(d, apply_to):
    return next(p for p in d["spec"]["configPatches"] if p["applyTo"] == apply_to)["patch"]["value"]


def _envoyfilter_config(fn):
    """A mutation of the inline config document of an EnvoyFilter's Wasm filter."""
    def edit(d):
        conf = _patch(d, "HTTP_FILTER")["typed_config"]["config"]["configuration"]
        pc = json.loads(conf["value"])
        fn(pc["config"])
        conf["value"] = json.dumps(pc)
    return edit


def _pool_without_kv(pc):
    pool = pc["config"]["providers"][0]
    pool.pop("kv_tokenize")
    for e in pool["endpoints"]:
        e.pop("kv_events")
        e.pop("kv_replay")
    pc["config"]["models"][0].update(strategy="least_loaded")
    pc.pop("sidecar_cluster")


def _dns_pool(pc):
    pool = pc["config"]["providers"][0]
    pool.pop("endpoints")
    pool.update(endpoints_dns="vllm.llm.svc:8000")


E, POOL, OPENAI, SIDECAR = ("envoy/envoy.yaml", "envoy/envoy-pool.yaml", "envoy/envoy-openai.yaml",
                            "envoy/envoy-sidecar.yaml")
ST = "envoy/stats-tags.yaml"  # the stats_tags fragment (a copy keeps its file name, which marks it)


def _tags(d):
    return d["stats_config"]["stats_tags"]

EF, WP = "envoy/istio/envoyfilter.yaml", "envoy/istio/wasmplugin.yaml"

# (description, base file, mutation of its first document, what one error must contain: a text,
# or a tuple of texts one error must all contain; None: the file must validate)
SELF_TESTS = [
    # Envoy's schema.
    ("misspelled route field inside the HCM typed_config", E,
     lambda d: _rename(_route(d), "cluster_header", "cluster_headr"), "cluster_headr"),
    ("misspelled Wasm PluginConfig field", E,
     lambda d: _rename(_wasm_cfg(d)[1], "allow_on_headers_stop_iteration", "allow_on_header_stop_iteration"),
     "allow_on_header_stop_iteration"),
    ("unknown top-level bootstrap field", E, lambda d: _rename(d, "static_resources", "static_resource"),
     "static_resource"),
    ("invalid enum value", E, lambda d: _wasm_cfg(d)[1].update(failure_policy="FAIL_CLOSE"), "FAIL_CLOSE"),
    ("unresolvable @type", E, lambda d: _wasm_cfg(d)[0]["http_filters"][-1]["typed_config"].update(
        {"@type": T + "envoy.extensions.filters.http.router.v3.Routr"}), "Routr"),
    # The filter and its plugin configuration: the filter's own parser, through the binary.
    ("allow_on_headers_stop_iteration false", E,
     lambda d: _wasm_cfg(d)[1].update(allow_on_headers_stop_iteration=False), "allow_on_headers_stop_iteration"),
    ("plugin configuration without `config` or sidecar_cluster", E,
     lambda d: _edit_plugin(d, lambda pc: pc.pop("config")), (BIN, "config: needs an inline config")),
    ("plugin configuration is not JSON", E,
     lambda d: _wasm_cfg(d)[1]["configuration"].update(value="{not json"), "not JSON"),
    ("plugin configuration that is YAML, not JSON (the filter reads JSON)", E,
     lambda d: _wasm_cfg(d)[1]["configuration"].update(value="config: {}"), "not JSON"),
    ("misspelt plugin configuration key", E,
     lambda d: _edit_plugin(d, lambda pc: _rename(pc, "max_body_bytes", "max_body_byte")),
     (BIN, "max_body_byte: unknown key")),
    ("plugin configuration key of the wrong type", E,
     lambda d: _edit_plugin(d, lambda pc: pc.update(max_body_bytes="16MiB")), (BIN, "invalid type")),
    ("max_body_bytes 0", E, lambda d: _edit_plugin(d, lambda pc: pc.update(max_body_bytes=0)),
     (BIN, "max_body_bytes: 0 is not between")),
    ("internal_token without sidecar_cluster", E,
     lambda d: _edit_plugin(d, lambda pc: pc.update(internal_token="t")),
     (BIN, "internal_token: only meaningful with sidecar_cluster")),
    ("sidecar_authority without sidecar_cluster", E,
     lambda d: _edit_plugin(d, lambda pc: pc.update(sidecar_authority="ferrogate-sidecar")),
     (BIN, "sidecar_authority: only meaningful with sidecar_cluster")),
    ("poll_interval_ms 0", SIDECAR, lambda d: _edit_plugin(d, lambda pc: pc.update(poll_interval_ms=0)),
     (BIN, "poll_interval_ms: must be at least 1")),
    ("a duplicate plugin configuration key (the JSON as Envoy hands it is judged)", E,
     lambda d: _wasm_cfg(d)[1]["configuration"].update(
         value=_wasm_cfg(d)[1]["configuration"]["value"].replace("{", '{"max_body_bytes": 1, ', 1)),
     (BIN, "duplicate", "max_body_bytes")),
    # Envoy's side of the plugin configuration, which the binary cannot know.
    ("host_failover in Envoy (the client would set the failover headers)", E,
     lambda d: _edit_plugin(d, lambda pc: pc.update(host_failover=True)), "host_failover: must not be true"),
    ("a cluster_header the routes do not match", E,
     lambda d: _edit_plugin(d, lambda pc: pc.update(cluster_header="x-cluster")), "the shipped routes match"),
    ("sidecar-fed filter naming a missing cluster", SIDECAR,
     lambda d: _edit_plugin(d, lambda pc: pc.update(sidecar_cluster="ferrogate_sidecr")),
     "no cluster named 'ferrogate_sidecr'"),
    # Routes, timeouts, buffers.
    ("route without timeout: 0s", E, lambda d: _route(d).pop("timeout"), "timeout"),
    ("route on a fixed cluster instead of cluster_header", E,
     lambda d: [_route(d).pop("cluster_header"), _route(d).update(cluster="local")], "cluster_header"),
    ("listener buffer below max_body_bytes", E,
     lambda d: d["static_resources"]["listeners"][0].pop("per_connection_buffer_limit_bytes"), "413"),
    ("no request_headers_timeout", E, lambda d: _hcm(d).pop("request_headers_timeout"), "request_headers_timeout"),
    ("a route keeps the clients' failover headers", E,
     lambda d: _route_entry(d).update(request_headers_to_remove=["x-ferrogate-cluster"]), "x-ferrogate-attempt"),
    ("no connection bound", E, lambda d: d.pop("overload_manager"), "global_downstream_max_connections"),
    # Clusters against the config document's providers.
    ("provider without a cluster of its name", E,
     lambda d: [d["static_resources"]["clusters"][0].update(name="local2"),
                d["static_resources"]["clusters"][0]["load_assignment"].update(cluster_name="local2")],
     "has no cluster named 'local'"),
    ("https provider without TLS", OPENAI, lambda d: d["static_resources"]["clusters"][0].pop("transport_socket"),
     "UpstreamTlsContext"),
    ("pool endpoint missing from the override_host cluster", POOL,
     lambda d: d["static_resources"]["clusters"][0]["load_assignment"]["endpoints"][0]["lb_endpoints"].pop(),
     "override_host would skip"),
    ("KV pool without the sidecar", POOL, lambda d: _edit_plugin(d, lambda pc: pc.pop("sidecar_cluster")),
     "holds the KV index"),
    ("flow-controlled model without the sidecar", POOL, lambda d: _edit_plugin(d, _pool_without_kv),
     "flow_control needs the sidecar"),
    ("endpoints_dns pool on a STATIC cluster", POOL, lambda d: _edit_plugin(d, _dns_pool), "must be STRICT_DNS"),
    ("endpoints_dns pool without the sidecar", POOL,
     lambda d: _edit_plugin(d, lambda pc: (_dns_pool(pc), pc.pop("sidecar_cluster"))), "it resolves the name"),
    ("a provider key written in the plugin configuration", E,
     _edit_config(lambda c: c["providers"][0].update(api_key="sk-written")), "providers[0].api_key: a provider key"),
    # The inline config document, judged with its plugin configuration by `ferrogate check`.
    ("KV pool endpoint naming a bind address", POOL,
     _edit_config(lambda c: c["providers"][0]["endpoints"][0].update(kv_events="tcp://*:5557")),
     (BIN, "config.providers[0].endpoints[0].kv_events", "bind address")),
    ("misspelled key in a KV endpoint object", POOL,
     _edit_config(lambda c: _rename(c["providers"][0]["endpoints"][0], "kv_replay", "kv_reply")),
     (BIN, "kv_reply: unknown key")),
    ("misspelled top-level key of the config document (limts)", E,
     _edit_config(lambda c: c.update(limts={"requests_per_day": 1000})), (BIN, "limts: unknown key")),
    ("misspelled top-level key in an EnvoyFilter's inline config", EF,
     _envoyfilter_config(lambda c: c.update(limts={})), (BIN, "limts")),
    ("misspelled provider key in a WasmPlugin's inline config", WP,
     lambda d: _rename(d["spec"]["pluginConfig"]["config"]["providers"][0], "base_url", "base_ulr"),
     (BIN, "base_ulr")),
    ("a target naming no provider", E,
     _edit_config(lambda c: c["models"][0]["targets"][0].update(provider="nowhere")),
     (BIN, "config.models[0].targets[0].provider", "nowhere")),
    ("top-level limits and unpriced in the config document", E,
     _edit_config(lambda c: c.update(limits={"requests_per_day": 1000}, unpriced="block")), None),
    ("top-level limits in a WasmPlugin's inline config", WP,
     lambda d: d["spec"]["pluginConfig"]["config"].update(limits={"requests_per_day": 1000}), None),
    # ferrogate's metric labels: the fragment, and the bootstraps that must carry exactly its tags.
    ("a bootstrap missing a tag of the fragment", E, lambda d: _tags(d).pop(1),
     ("stats_config.stats_tags", "lacks the tag(s) ['model']")),
    ("a bootstrap with a changed regex", POOL, lambda d: _tags(d)[0].update(regex="(;api=([^;]+))"),
     ("stats_config.stats_tags", "tag 'api' is")),
    ("a bootstrap with a tag of its own", OPENAI, lambda d: _tags(d).append({"tag_name": "route",
                                                                             "regex": "(;route=([^;]*))"}),
     "has tag(s) ['route'] that envoy/stats-tags.yaml does not"),
    ("a bootstrap with the tags in another order", SIDECAR, lambda d: _tags(d).reverse(), "another order"),
    ("a bootstrap without stats_config", E, lambda d: d.pop("stats_config"), "lacks the tag(s) ['api'"),
    ("fragment: a regex without the second group (no value)", ST,
     lambda d: _tags(d)[0].update(regex="(;api=[^;]*)"), ("stats_tags[0].regex", "has 1 group(s), expected 2")),
    ("fragment: a regex that does not compile", ST, lambda d: _tags(d)[2].update(regex="(;provider=([^;]*)"),
     ("stats_tags[2].regex", "does not compile")),
    ("fragment: a regex taking another label out of the name", ST,
     lambda d: _tags(d)[1].update(regex="(;api=([^;]*))"), "does not take ';model=<value>' out"),
    ("fragment: a tag named twice (Envoy refuses the bootstrap)", ST,
     lambda d: _tags(d).append(dict(_tags(d)[0])), "'api' is named twice"),
    ("fragment: a fixed_value tag instead of a regex", ST,
     lambda d: _tags(d).__setitem__(0, {"tag_name": "api", "fixed_value": "chat"}), "has no `regex`"),
    ("fragment: misspelled TagSpecifier field (schema)", ST, lambda d: _rename(_tags(d)[0], "tag_name", "tag_nam"),
     ("tag_nam", "envoy.config.bootstrap.v3.Bootstrap")),
    ("fragment: something besides stats_config.stats_tags", ST, lambda d: d.update(stats_flush_interval="5s"),
     "holds only stats_config.stats_tags"),
    # Istio kinds.
    ("EnvoyFilter: misspelled field in a CLUSTER patch", EF,
     lambda d: _rename(_patch(d, "CLUSTER"), "connect_timeout", "conect_timeout"), "conect_timeout"),
    ("EnvoyFilter: misspelled field in the Wasm typed_config", EF,
     lambda d: _rename(_patch(d, "HTTP_FILTER")["typed_config"]["config"], "vm_config", "vm_confg"), "vm_confg"),
    ("WasmPlugin: misspelled spec field", WP, lambda d: _rename(d["spec"], "pluginConfig", "pluginConfg"),
     "pluginConfg"),
]


class Tally:
    """Counts the cases and prints each outcome as it comes."""

    def __init__(self):
        self.passed = self.failed = 0

    def outcome(self, ok, text):
        self.passed, self.failed = self.passed + ok, self.failed + (not ok)
        print(("ok   " if ok else "FAIL ") + text)


def _mutated_errors(tmp, i, base, mutate):
    docs = list(yaml.safe_load_all((REPO / base).read_text()))
    mutate(docs[0])
    broken = Path(tmp) / f"broken-{i}" / Path(base).name  # the fragment is recognised by its name
    broken.parent.mkdir()
    broken.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return validate_file(broken)[1]


def _case(tally, tmp, i, case):
    desc, base, mutate, expect = case
    errs = _mutated_errors(tmp, i, base, mutate)
    if expect is None:
        tally.outcome(not errs, f"accepted: {desc}" + (f" ({errs[:3]})" if errs else ""))
        return
    texts = (expect,) if isinstance(expect, str) else expect
    hit = [e for e in errs if all(t in e for t in texts)]
    if hit:
        tally.outcome(True, f"rejected: {desc}\n       -> {hit[0][:200]}")
    else:
        why = "it validated" if not errs else f"errors did not mention {' + '.join(map(repr, texts))}: {errs}"
        tally.outcome(False, f"not rejected as expected: {desc} ({why})")


def _without_binary(tally, tmp):
    """No ferrogate binary: a plugin configuration is reported unjudged, never passed (the
    sidecar-fed one, with no inline document, too)."""
    saved = os.environ.get("FERROGATE_BIN")
    os.environ["FERROGATE_BIN"] = str(Path(tmp) / "no-such-ferrogate")
    try:
        errs = {f: [e for e in validate_file(REPO / f)[1] if "no ferrogate binary" in e] for f in (E, SIDECAR)}
    finally:
        if saved is None:
            del os.environ["FERROGATE_BIN"]
        else:
            os.environ["FERROGATE_BIN"] = saved
    for f, found in errs.items():
        tally.outcome(bool(found), f"reported, not passed: {f}'s plugin configuration with no ferrogate binary to "
                      "check it" + (f"\n       -> {found[0][:200]}" if found else ""))


def self_test():
    tally = Tally()
    for b in sorted({t[1] for t in SELF_TESTS}):  # the pristine files must pass
        errs = validate_file(REPO / b)[1]
        tally.outcome(not errs, f"pristine {b} validates" if not errs else f"pristine {b} does not validate: {errs[0]}")
    with tempfile.TemporaryDirectory(prefix="validate-envoy-") as tmp:
        for i, case in enumerate(SELF_TESTS):
            _case(tally, tmp, i, case)
        _without_binary(tally, tmp)
    print(f"{tally.passed} passed, {tally.failed} failed")
    return 0 if tally.failed == 0 else 1
