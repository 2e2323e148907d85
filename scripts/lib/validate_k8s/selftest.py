"""`validate-k8s --self-test`: broken copies of the shipped manifests (k8s/, envoy/istio/) and of
a rendered Helm output, each of which must be rejected with the expected message, after the
pristine copies pass (or a rejection would prove nothing). Cases that only the ferrogate
binary can judge run `ferrogate check`; a missing binary fails them rather than skipping."""

import json
import os
import shutil
import tempfile
from pathlib import Path

import yaml

from .cli import validate
from .documents import REPO


def _rename(node, old, new):
    node[new] = node.pop(old)


def _patch_op(d, i):
    return d["spec"]["jsonPatches"][i]["operation"]


def _sidecar(d):
    """The ferrogate container the EnvoyProxy's Deployment patch adds to the Envoy pods."""
    patch = d["spec"]["provider"]["kubernetes"]["envoyDeployment"]["patch"]["value"]
    return patch["spec"]["template"]["spec"]["initContainers"][0]


def _cfg_edit(fn):
    """Mutation of the ferrogate config document inside a ConfigMap."""
    def edit(d):
        key = next(iter(d["data"]))
        cfg = yaml.safe_load(d["data"][key])
        fn(cfg)
        d["data"][key] = yaml.safe_dump(cfg, sort_keys=False)
    return edit


def _ecds(d):
    return next(p for p in d["spec"]["configPatches"] if p["applyTo"] == "EXTENSION_CONFIG")["patch"]


def _ecds_plugin(d, fn):
    """A mutation of the plugin configuration JSON of an EnvoyFilter's ECDS Wasm config."""
    conf = _ecds(d)["value"]["typed_config"]["config"]["configuration"]
    pc = json.loads(conf["value"])
    fn(pc)
    conf["value"] = json.dumps(pc)


def _ep_bootstrap(fn):
    """A mutation of the stats_tags in an EnvoyProxy's spec.bootstrap Merge value (YAML)."""
    def edit(d):
        value = yaml.safe_load(d["spec"]["bootstrap"]["value"])
        fn(value["stats_config"]["stats_tags"])
        d["spec"]["bootstrap"]["value"] = yaml.safe_dump(value, sort_keys=False)
    return edit


def _istio_bootstrap(fn):
    """A mutation of an Istio custom bootstrap ConfigMap's JSON (the whole Bootstrap)."""
    def edit(d):
        value = json.loads(d["data"]["custom_bootstrap.json"])
        fn(value)
        d["data"]["custom_bootstrap.json"] = json.dumps(value, indent=2)
    return edit


EG, POOL, ISTIO = "k8s/envoy-gateway/", "k8s/inference-pool/", "k8s/istio/ferrogate-oci.yaml"
ISTIO_BOOTSTRAP = "k8s/istio/ferrogate-bootstrap.yaml"
# (description, file, document index, mutation, text an error must contain)
SELF_TESTS = [
    ("core: typo'd Deployment field", POOL + "10-vllm-pool.yaml", 1,
     lambda d: _rename(d["spec"], "replicas", "replica"), "'replica' was unexpected"),
    ("core: Service port of the wrong type", POOL + "10-vllm-pool.yaml", 2,
     lambda d: d["spec"]["ports"][0].update(port="8000"), "'8000' is not of type 'integer'"),
    ("core: typo'd ConfigMap field", EG + "11-ferrogate-config.yaml", 0,
     lambda d: _rename(d, "data", "date"), "'date' was unexpected"),
    ("Gateway API: typo'd HTTPRoute field", EG + "20-gateway.yaml", 3,
     lambda d: _rename(d["spec"]["rules"][0], "backendRefs", "backendRef"), "'backendRef' was unexpected"),
    ("Gateway API: Gateway listener port of the wrong type", EG + "20-gateway.yaml", 1,
     lambda d: d["spec"]["listeners"][0].update(port="80"), "'80' is not of type 'integer'"),
    ("Gateway API: typo'd metadata field", EG + "20-gateway.yaml", 1,
     lambda d: _rename(d["metadata"], "namespace", "namspace"), "'namspace' was unexpected"),
    ("Istio: typo'd EnvoyFilter field", ISTIO, 0,
     lambda d: _rename(d["spec"], "configPatches", "configPatch"), "'configPatch' was unexpected"),
    ("Istio: WasmPlugin priority of the wrong type", "envoy/istio/wasmplugin.yaml", 0,
     lambda d: d["spec"].update(priority="high"), "'high' is not of type 'integer'"),
    ("Istio: typo'd VirtualService field", ISTIO, 2,
     lambda d: _rename(d["spec"]["http"][0], "route", "routes"), "'routes' was unexpected"),
    ("Envoy Gateway: typo'd EnvoyExtensionPolicy field", EG + "30-policies.yaml", 0,
     lambda d: _rename(d["spec"]["wasm"][0], "rootID", "rootId"), "'rootId' was unexpected"),
    ("Envoy Gateway: EnvoyPatchPolicy priority of the wrong type", EG + "40-envoypatchpolicy.yaml", 0,
     lambda d: d["spec"].update(priority="first"), "'first' is not of type 'integer'"),
    ("Envoy Gateway: typo'd field in the EnvoyProxy's sidecar container", EG + "10-gatewayclass.yaml", 1,
     lambda d: _rename(_sidecar(d), "restartPolicy", "restartPolicyy"), "'restartPolicyy' was unexpected"),
    ("Envoy Gateway: a sidecar port of the wrong type in the EnvoyProxy's Deployment patch",
     EG + "10-gatewayclass.yaml", 1, lambda d: _sidecar(d)["ports"][0].update(containerPort="9001"),
     "'9001' is not of type 'integer'"),
    ("Envoy Gateway: a container without its merge key in the EnvoyProxy's Deployment patch",
     EG + "10-gatewayclass.yaml", 1, lambda d: _sidecar(d).pop("name"), "the patch merges by name"),
    ("Envoy Gateway: ClientTrafficPolicy connection limit of the wrong type", EG + "30-policies.yaml", 1,
     lambda d: d["spec"]["connection"]["connectionLimit"].update(value="many"), "'many' is not of type 'integer'"),
    ("Envoy Gateway: typo'd Helm values switch", EG + "install/envoy-gateway-values.yaml", 0,
     lambda d: _rename(d["config"]["envoyGateway"]["extensionApis"], "enableEnvoyPatchPolicy",
                       "enableEnvoyPatchPolicies"), "'enableEnvoyPatchPolicies' was unexpected"),
    ("InferencePool: typo'd field", POOL + "20-inferencepool.yaml", 0,
     lambda d: _rename(d["spec"], "targetPorts", "targetPort"), "'targetPort' was unexpected"),
    ("InferencePool: port number of the wrong type", POOL + "20-inferencepool.yaml", 0,
     lambda d: d["spec"]["targetPorts"][0].update(number="8000"), "'8000' is not of type 'integer'"),
    ("Monitoring: typo'd PodMonitor field", EG + "monitoring/podmonitor.yaml", 0,
     lambda d: _rename(d["spec"], "podMetricsEndpoints", "podMetricEndpoints"), "'podMetricEndpoints' was unexpected"),
    ("Envoy value: typo'd field in a cluster added by an EnvoyPatchPolicy", EG + "40-envoypatchpolicy.yaml", 0,
     lambda d: _rename(_patch_op(d, 5)["value"], "connect_timeout", "conect_timeout"), "conect_timeout"),
    ("Envoy value: a patched Wasm flag of the wrong type", EG + "40-envoypatchpolicy.yaml", 0,
     lambda d: _patch_op(d, 0).update(value="yes"), "allow_on_headers_stop_iteration"),
    ("Envoy value: typo'd override_host field in the pool cluster", POOL + "40-envoypatchpolicy.yaml", 0,
     lambda d: _rename(_patch_op(d, 0)["value"]["load_balancing_policy"]["policies"][0]["typed_extension_config"]
                       ["typed_config"], "override_host_sources", "override_host_source"), "override_host_source"),
    ("Envoy value: typo'd field in the ECDS Wasm config of an EnvoyFilter", ISTIO, 0,
     lambda d: _rename(_ecds(d)["value"]["typed_config"]["config"], "vm_config", "vm_confg"), "vm_confg"),
    ("Envoy value: typo'd field in an EnvoyFilter CLUSTER patch", "envoy/istio/envoyfilter.yaml", 0,
     lambda d: _rename(next(p for p in d["spec"]["configPatches"] if p["applyTo"] == "CLUSTER")["patch"]["value"],
                       "connect_timeout", "conect_timeout"), "conect_timeout"),
    # ferrogate's metric labels: the bootstraps must carry exactly envoy/stats-tags.yaml's stats_tags.
    ("metric labels: an EnvoyProxy bootstrap missing a tag", EG + "10-gatewayclass.yaml", 1,
     _ep_bootstrap(lambda tags: tags.pop(4)), "lacks the tag(s) ['status_class']"),
    ("metric labels: an EnvoyProxy bootstrap with a changed regex", EG + "10-gatewayclass.yaml", 1,
     _ep_bootstrap(lambda tags: tags[1].update(regex="(;model=(.*))")), "tag 'model' is 'model': '(;model=(.*))'"),
    ("metric labels: an EnvoyProxy bootstrap with a tag of its own", EG + "10-gatewayclass.yaml", 1,
     _ep_bootstrap(lambda tags: tags.append({"tag_name": "route", "regex": "(;route=([^;]*))"})),
     "has tag(s) ['route']"),
    ("metric labels: an EnvoyProxy bootstrap Replace (drops Envoy Gateway's own)", EG + "10-gatewayclass.yaml", 1,
     lambda d: d["spec"]["bootstrap"].update(type="Replace"), "spec.bootstrap.type: is 'Replace': use Merge"),
    ("metric labels: the ferrogate EnvoyProxy without a bootstrap", EG + "10-gatewayclass.yaml", 1,
     lambda d: d["spec"].pop("bootstrap"), "spec.bootstrap: missing"),
    ("metric labels: a misspelt Bootstrap field in the EnvoyProxy's Merge value", EG + "10-gatewayclass.yaml", 1,
     lambda d: d["spec"]["bootstrap"].update(value=d["spec"]["bootstrap"]["value"].replace("stats_tags:",
                                                                                           "stat_tags:")),
     "spec.bootstrap.value.stats_config: Message type \"envoy.config.metrics.v3.StatsConfig\" has no field "
     "named \"stat_tags\""),
    ("metric labels: an Istio custom bootstrap missing a tag", ISTIO_BOOTSTRAP, 0,
     _istio_bootstrap(lambda b: b["stats_config"]["stats_tags"].pop()), "lacks the tag(s) ['action']"),
    ("metric labels: an Istio custom bootstrap with a changed regex", ISTIO_BOOTSTRAP, 0,
     _istio_bootstrap(lambda b: b["stats_config"]["stats_tags"][0].update(regex="(;api=([^;]*)")),
     "tag 'api' is 'api': '(;api=([^;]*)'"),
    ("metric labels: an Istio custom bootstrap that is not JSON", ISTIO_BOOTSTRAP, 0,
     lambda d: d["data"].update({"custom_bootstrap.json": "stats_config: {stats_tags: []}"}),
     "data.custom_bootstrap.json: not JSON"),
    ("metric labels: a misspelt TagSpecifier field in an Istio custom bootstrap", ISTIO_BOOTSTRAP, 0,
     _istio_bootstrap(lambda b: b["stats_config"]["stats_tags"][2].update(regx="x")),
     "has no field named \"regx\""),
    ("contract: the flag patch names a Wasm filter Envoy Gateway does not generate", EG + "40-envoypatchpolicy.yaml", 0,
     lambda d: _patch_op(d, 0).update(jsonPath=_patch_op(d, 0)["jsonPath"].replace("wasm/0", "wasm/1")),
     "matches nothing"),
    ("contract: a patch on a listener name Envoy Gateway does not generate", EG + "40-envoypatchpolicy.yaml", 0,
     lambda d: d["spec"]["jsonPatches"][0].update(name="llm/ferrogate/https"), "no Listener named"),
    ("contract: no allow_on_headers_stop_iteration patch", EG + "40-envoypatchpolicy.yaml", 0,
     lambda d: d["spec"]["jsonPatches"].pop(0), "allow_on_headers_stop_iteration"),
    ("contract: the cluster_header route without timeout: 0s", EG + "40-envoypatchpolicy.yaml", 0,
     lambda d: _patch_op(d, 4)["value"].pop("timeout"), "timeout"),
    ("contract: no ferrogate_sidecar cluster", EG + "40-envoypatchpolicy.yaml", 0,
     lambda d: d["spec"]["jsonPatches"].pop(6), "ferrogate_sidecar"),
    ("contract: no listener buffer limit (Envoy Gateway's 32 KiB)", EG + "30-policies.yaml", 1,
     lambda d: d["spec"]["connection"].pop("bufferLimit"), "413"),
    ("contract: no stream_idle_timeout", EG + "30-policies.yaml", 1,
     lambda d: d["spec"]["timeout"]["http"].pop("streamIdleTimeout"), "stream_idle_timeout"),
    ("contract: failOpen on the filter", EG + "30-policies.yaml", 0,
     lambda d: d["spec"]["wasm"][0].update(failOpen=True), "failOpen"),
    ("contract: a provider without a cluster of its name", POOL + "30-ferrogate-config.yaml", 0,
     _cfg_edit(lambda c: [c["providers"][0].update(name="vllm-pool2"),
                          c["models"][0]["targets"][0].update(provider="vllm-pool2")]),
     "no cluster named 'vllm-pool2'"),
    ("contract: a DNS pool whose cluster is not STRICT_DNS", POOL + "40-envoypatchpolicy.yaml", 0,
     lambda d: _patch_op(d, 0)["value"].update(type="LOGICAL_DNS"), "STRICT_DNS"),
    ("contract: ECDS filter naming no EXTENSION_CONFIG", ISTIO, 0,
     lambda d: next(p for p in d["spec"]["configPatches"] if p["applyTo"] == "HTTP_FILTER")["patch"]["value"]
     .update(name="ferrogate2"), "no EXTENSION_CONFIG patch adds"),
    ("contract: EXTENSION_CONFIG MERGE (ignored by Istio)", ISTIO, 0,
     lambda d: _ecds(d).update(operation="MERGE"), "only with ADD"),
    ("contract: the ECDS Wasm config without the flag", ISTIO, 0,
     lambda d: _ecds(d)["value"]["typed_config"]["config"].pop("allow_on_headers_stop_iteration"),
     "allow_on_headers_stop_iteration"),
    ("contract: host_failover in an EnvoyExtensionPolicy's plugin configuration", EG + "30-policies.yaml", 0,
     lambda d: _eep_plugin(d).update(host_failover=True), "host_failover: must not be true"),
    ("contract: a provider key written in a WasmPlugin's inline config", "envoy/istio/wasmplugin.yaml", 0,
     lambda d: d["spec"]["pluginConfig"]["config"]["providers"][0].update(api_key="sk-written"),
     "providers[0].api_key: a provider key"),
]

# The config of 11-ferrogate-config.yaml, inline in the filter's plugin configuration, with the
# top-level keys a list kept beside the binary once lacked.
INLINE = {"providers": [{"name": "vllm", "kind": "openai_compatible",
                         "base_url": "http://vllm.llm.svc.cluster.local:8000"}],
          "models": [{"name": "chat", "targets": [{"provider": "vllm", "model": "llama"}]}],
          "limits": {"requests_per_day": 100000}, "unpriced": "block"}


def _eep_plugin(d):
    """The plugin configuration of an EnvoyExtensionPolicy's ferrogate entry."""
    return d["spec"]["wasm"][0]["config"]


def _patched_plugin(d):
    """An EnvoyPatchPolicy patch rewriting the filter's plugin configuration: no policy wrote it as
    it ends up, so the Envoy Gateway simulation judges it."""
    first = d["spec"]["jsonPatches"][0]
    value = json.dumps({"sidecar_cluster": "ferrogate_sidecar", "poll_interval_ms": 0})
    d["spec"]["jsonPatches"].append({"type": first["type"], "name": first["name"], "operation": {
        "op": "replace", "jsonPath": first["operation"]["jsonPath"], "path": "/configuration/value", "value": value}})


def _inline(cfg):
    return lambda d: _eep_plugin(d).update(config=cfg)


# What only the ferrogate binary knows: `ferrogate check --plugin-config` judges every plugin
# configuration (the filter's own parser, inline config included), `--config` a ConfigMap's.
BINARY_CASES = [
    ("a misspelt key of an EnvoyExtensionPolicy's plugin configuration", EG + "30-policies.yaml", 0,
     lambda d: _rename(_eep_plugin(d), "max_body_bytes", "max_body_byte"),
     "ferrogate check: max_body_byte: unknown key"),
    ("a misspelt key of a WasmPlugin's pluginConfig", "envoy/istio/wasmplugin.yaml", 0,
     lambda d: _rename(d["spec"]["pluginConfig"], "cluster_header", "cluster_headers"),
     "ferrogate check: cluster_headers: unknown key"),
    ("a misspelt key of an EnvoyFilter's plugin configuration (ECDS)", ISTIO, 0,
     lambda d: _ecds_plugin(d, lambda pc: _rename(pc, "max_body_bytes", "max_body_bytess")),
     "ferrogate check: max_body_bytess: unknown key"),
    ("poll_interval_ms 0 in an EnvoyExtensionPolicy's plugin configuration", EG + "30-policies.yaml", 0,
     lambda d: _eep_plugin(d).update(poll_interval_ms=0), "poll_interval_ms: must be at least 1"),
    ("sidecar_authority without sidecar_cluster", EG + "30-policies.yaml", 0,
     lambda d: _eep_plugin(d).pop("sidecar_cluster"), "sidecar_authority: only meaningful with sidecar_cluster"),
    ("a plugin configuration an EnvoyPatchPolicy rewrites (poll_interval_ms 0)", EG + "40-envoypatchpolicy.yaml", 0,
     _patched_plugin, "configuration.value: ferrogate check: poll_interval_ms: must be at least 1"),
    ("an unknown strategy", POOL + "30-ferrogate-config.yaml", 0,
     _cfg_edit(lambda c: c["models"][0].update(strategy="least_loadd")), "least_loadd"),
    ("a typo'd endpoints_dns key", POOL + "30-ferrogate-config.yaml", 0,
     _cfg_edit(lambda c: _rename(c["providers"][0], "endpoints_dns", "endpoint_dns")), "endpoint_dns"),
    ("a typo'd top-level key (limts)", EG + "11-ferrogate-config.yaml", 0,
     _cfg_edit(lambda c: c.update(limts={"requests_per_day": 100000})), "limts"),
    ("an unknown unpriced policy", EG + "11-ferrogate-config.yaml", 0,
     _cfg_edit(lambda c: c.update(unpriced="deny")), "unpriced"),
    ("a typo'd top-level key of an EnvoyExtensionPolicy's inline config", EG + "30-policies.yaml", 0,
     _inline(dict(INLINE, limts={})), "limts"),
]
# Valid documents: they must pass (a list of keys kept beside the binary once rejected them all).
ACCEPTED_CASES = [
    ("a top-level limits and unpriced in a ConfigMap's config", EG + "11-ferrogate-config.yaml", 0,
     _cfg_edit(lambda c: c.update(limits={"requests_per_day": 100000}, unpriced="block")), None),
    ("a top-level limits and unpriced in an EnvoyExtensionPolicy's inline config", EG + "30-policies.yaml", 0,
     _inline(INLINE), None),
    ("a top-level limits in a WasmPlugin's inline config", "envoy/istio/wasmplugin.yaml", 0,
     lambda d: d["spec"]["pluginConfig"]["config"].update(limits={"requests_per_day": 100000}), None),
]

# A chart rendered with `helm template --output-dir`: `# Source:` comments, empty documents, and
# an Istio Gateway options ConfigMap whose `deployment` is a strategic-merge patch.
RENDERED = """---
# Source: ferrogate/templates/configmap.yaml
apiVersion: v1
kind: ConfigMap
metadata: { name: ferrogate, labels: { app.kubernetes.io/name: ferrogate } }
data:
  config.yaml: |
    providers: [{ name: local, kind: openai_compatible, base_url: "http://sim:8000" }]
    models: [{ name: chat, targets: [{ provider: local, model: sim-small }] }]
    limits: { requests_per_day: 1000 }
---
---
# Source: ferrogate/templates/servicemonitor.yaml
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: { name: ferrogate }
spec:
  selector: { matchLabels: { app.kubernetes.io/name: ferrogate } }
  endpoints: [{ port: admin, path: /metrics }]
---
# Source: ferrogate/templates/istio-gateway-options.yaml
apiVersion: v1
kind: ConfigMap
metadata: { name: ferrogate-gateway-options }
data:
  deployment: |
    spec:
      template:
        spec:
          containers:
            - name: ferrogate
              args: [sidecar, --config, /etc/ferrogate/config.yaml]
              ports: [{ name: fg-admin, containerPort: 9001 }]
---
# Source: ferrogate/templates/inferencepool.yaml
apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata: { name: ferrogate, namespace: llm }
spec:
  selector: { matchLabels: { app: vllm-pool } }
  targetPorts: [{ number: 8000 }]
  appProtocol: http
  endpointPickerRef:
    group: ""
    kind: Service
    name: ferrogate
    port: { number: 9002 }
    failureMode: FailClose
---
# Source: ferrogate/templates/httproute.yaml
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: { name: ferrogate, namespace: llm }
spec:
  parentRefs: [{ group: gateway.networking.k8s.io, kind: Gateway, name: inference-gateway, namespace: istio-ingress }]
  rules:
    - matches: [{ path: { type: PathPrefix, value: / } }]
      backendRefs: [{ group: inference.networking.k8s.io, kind: InferencePool, name: ferrogate }]
---
# Source: ferrogate/templates/rbac.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: { name: ferrogate, namespace: llm }
rules:
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["get", "list", "watch"]
  - apiGroups: ["inference.networking.k8s.io"]
    resources: ["inferencepools"]
    verbs: ["get", "list", "watch"]
---
# Source: ferrogate/templates/rbac.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: { name: ferrogate, namespace: llm }
roleRef: { apiGroup: rbac.authorization.k8s.io, kind: Role, name: ferrogate }
subjects:
  - kind: ServiceAccount
    name: ferrogate
    namespace: llm
"""
RENDERED_BROKEN = [
    ("a typo'd endpointPickerRef field in a rendered InferencePool", "failureMode: FailClose",
     "failMode: FailClose", "'failMode' was unexpected"),
    ("a rendered endpointPickerRef failureMode outside its enum", "failureMode: FailClose",
     "failureMode: Closed", "'Closed' is not one of"),
    ("a rendered endpointPickerRef port number of the wrong type", "port: { number: 9002 }",
     'port: { number: "9002" }', "'9002' is not of type 'integer'"),
    ("a rendered InferencePool without targetPorts", "  targetPorts: [{ number: 8000 }]\n", "",
     "'targetPorts' is a required property"),
    ("a typo'd backendRefs in a rendered HTTPRoute rule", "backendRefs:", "backendRef:", "'backendRef' was unexpected"),
    ("a rendered ServiceMonitor endpoint port of the wrong type", "port: admin", "port: 9001",
     "is not of type 'string'"),
    ("a typo'd container field in a rendered Istio Deployment overlay", "args:", "argz:", "'argz' was unexpected"),
    ("a typo'd rule field in a rendered Role (verb)", '    resources: ["pods"]\n    verbs:',
     '    resources: ["pods"]\n    verb:', "'verb' was unexpected"),
    ("a rendered Role rule's verbs as a string", 'resources: ["inferencepools"]\n    verbs: ["get", "list", "watch"]',
     'resources: ["inferencepools"]\n    verbs: "get"', "is not of type 'array'"),
    ("a rendered RoleBinding without its roleRef",
     "roleRef: { apiGroup: rbac.authorization.k8s.io, kind: Role, name: ferrogate }\n", "",
     "'roleRef' is a required property"),
    ("a typo'd subject field in a rendered RoleBinding (namespce)", "    name: ferrogate\n    namespace: llm\n",
     "    name: ferrogate\n    namespce: llm\n", "'namespce' was unexpected"),
]


class Tally:
    """Counts the cases and prints each outcome as it comes."""

    def __init__(self):
        self.passed = self.failed = 0

    def outcome(self, ok, text):
        self.passed, self.failed = self.passed + ok, self.failed + (not ok)
        print(("ok   " if ok else "FAIL ") + text)


def _errors(targets):
    return [e for _, _, errs in validate(targets)[0] for e in errs]


def _mutated(tally, targets, case, prefix):
    """Applies one mutation to a copy, validates, restores; `expect` None means it must pass."""
    desc, file, index, mutate, expect = case
    path = targets[0].parent / file
    original = path.read_text()
    docs = list(yaml.safe_load_all(original))
    mutate(docs[index])
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    errs = _errors(targets)
    path.write_text(original)
    if expect is None:
        tally.outcome(not errs, f"accepted: {desc}" + (f" ({errs[:3]})" if errs else ""))
        return
    hit = [e for e in errs if expect in e]
    tally.outcome(bool(hit), f"{prefix}: {desc}\n       -> {hit[0][:220]}" if hit else
                  f"not {prefix} as expected: {desc} ({'it validated' if not errs else errs[:3]})")


def _without_binary(tally, targets, tmp):
    """No ferrogate binary: the plugin configurations and config documents are reported
    unjudged, never passed, whichever kind carries them."""
    saved = os.environ.get("FERROGATE_BIN")
    os.environ["FERROGATE_BIN"] = str(tmp / "no-such-ferrogate")
    try:
        results = validate(targets)[0]
    finally:
        if saved is None:
            del os.environ["FERROGATE_BIN"]
        else:
            os.environ["FERROGATE_BIN"] = saved
    for kind in ("EnvoyExtensionPolicy", "WasmPlugin", "EnvoyFilter", "ConfigMap"):
        errs = [e for label, _, es in results if f" {kind}/" in label for e in es if "no ferrogate binary" in e]
        tally.outcome(bool(errs), f"reported, not passed: the configuration in {kind} documents with no "
                      "ferrogate binary to check it" + (f"\n       -> {errs[0][:220]}" if errs else ""))


def _rendered(tally, tmp):
    rendered = tmp / "rendered" / "ferrogate" / "templates"
    rendered.mkdir(parents=True)
    (rendered / "all.yaml").write_text(RENDERED)
    errs = _errors([tmp / "rendered"])
    tally.outcome(not errs, "a rendered Helm output directory validates" + (f": {errs[:3]}" if errs else ""))
    for desc, old, new, expect in RENDERED_BROKEN:
        (rendered / "all.yaml").write_text(RENDERED.replace(old, new))
        errs = [e for e in _errors([tmp / "rendered"]) if expect in e]
        tally.outcome(bool(errs), f"rejected: {desc}" + (f"\n       -> {errs[0][:220]}" if errs else ""))


def self_test():
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="validate-k8s-") as tmp:
        tmp = Path(tmp)
        shutil.copytree(REPO / "k8s", tmp / "k8s")
        shutil.copytree(REPO / "envoy" / "istio", tmp / "envoy" / "istio")
        targets = [tmp / "k8s", tmp / "envoy" / "istio"]
        errs = _errors(targets)  # the pristine files must pass, or a rejection proves nothing
        tally.outcome(not errs, "pristine k8s/ and envoy/istio/ validate" + (f": {errs[:3]}" if errs else ""))
        for case in SELF_TESTS:
            _mutated(tally, targets, case, "rejected")
        for case in BINARY_CASES:
            _mutated(tally, targets, case, "rejected by `ferrogate check`")
        for case in ACCEPTED_CASES:
            _mutated(tally, targets, case, "accepted")
        _without_binary(tally, targets, tmp)
        _rendered(tally, tmp)
    print(f"{tally.passed} passed, {tally.failed} failed")
    return 0 if tally.failed == 0 else 1
