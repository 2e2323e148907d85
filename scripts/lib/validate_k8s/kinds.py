"""One document: its schema (Kubernetes' for core kinds, the vendored CRD's for the others,
ObjectMeta for a CRD's metadata), then the checks of what its kind carries: ferrogate's plugin
and config documents, Envoy values in patches (parsed with Envoy's protos), the partial objects
of EnvoyProxy and Istio Deployment patches, the Envoy bootstraps that carry ferrogate's metric
labels (an EnvoyProxy's spec.bootstrap, an Istio custom bootstrap ConfigMap: parsed as
envoy.config.bootstrap.v3.Bootstrap, their stats_tags exactly envoy/stats-tags.yaml's), Envoy
Gateway's Helm values."""

import copy
import json

import yaml

from .documents import K8S_VERSION
from .envoy_api import (EG_RESOURCE_TYPES, NAME, T_WASM, Problems, bootstrap_pb2, check_bootstrap_tags,
                        check_config_document, check_plugin_config, hcm_pb2, parse_message, validate_envoyfilter,
                        validate_wasmplugin)
from .ferrogate_config import ferrogate_config_in
from .schemas import schema_errors

# EnvoyProxy spec.provider.kubernetes.<field>.patch: the object each patch applies to.
ENVOYPROXY_PATCHED = {
    "envoyDeployment": ("apps/v1", "Deployment"),
    "envoyDaemonSet": ("apps/v1", "DaemonSet"),
    "envoyService": ("v1", "Service"),
    "envoyHpa": ("autoscaling/v2", "HorizontalPodAutoscaler"),
    "envoyPDB": ("policy/v1", "PodDisruptionBudget"),
}


def check_eep(doc, schemas, problems):
    """EnvoyExtensionPolicy: the ferrogate entry's names, failOpen and plugin configuration."""
    for i, w in enumerate(doc.spec.get("wasm") or []):
        if not isinstance(w, dict) or NAME not in (w.get("rootID"), w.get("name")):
            continue
        wp = f"spec.wasm[{i}]"
        if w.get("rootID") != NAME:
            problems.add(f"{wp}.rootID", f"is {w.get('rootID')!r}, expected {NAME!r} (the filter's root context)")
        if w.get("name") != NAME:
            problems.add(f"{wp}.name", f"is {w.get('name')!r}, expected {NAME!r} (prefixes logs and metrics)")
        if w.get("failOpen"):
            problems.add(f"{wp}.failOpen", "must be false: a failed filter would let requests bypass authentication")
        check_plugin_config(w.get("config"), f"{wp}.config", problems)


def check_epp_values(doc, schemas, problems):
    """EnvoyPatchPolicy: whole resources added by a patch are Envoy messages of its type."""
    for i, p in enumerate(doc.spec.get("jsonPatches") or []):
        op = (p or {}).get("operation") or {}
        cls = EG_RESOURCE_TYPES.get((p or {}).get("type"))
        if cls is None or op.get("op") != "add" or op.get("path") or op.get("jsonPath"):
            continue
        value = parse_message(op.get("value"), cls, f"spec.jsonPatches[{i}].operation.value", problems)
        if value is not None and value.get("name") != p.get("name"):
            problems.add(f"spec.jsonPatches[{i}].name", f"is {p.get('name')!r} but the added resource is "
                         f"named {value.get('name')!r}")


def _ecds_configs(patches, problems):
    """{name: TypedExtensionConfig} of the EXTENSION_CONFIG patches (Istio applies only ADD)."""
    ecds = {}
    for i, cp in enumerate(patches):
        if not isinstance(cp, dict) or cp.get("applyTo") != "EXTENSION_CONFIG":
            continue
        patch = cp.get("patch") or {}
        if patch.get("operation") != "ADD":
            problems.add(f"spec.configPatches[{i}].patch.operation",
                         f"is {patch.get('operation')!r}: Istio applies EXTENSION_CONFIG patches only with ADD "
                         "(pilot/pkg/networking/core/envoyfilter/extension_configuration_patch.go)")
        if isinstance(patch.get("value"), dict):
            ecds[patch["value"].get("name")] = patch["value"]
    return ecds


def _resolve_ecds_filter(cp, vpath, ecds, problems):
    """An HTTP filter loaded by name over ECDS, replaced by the config Envoy will run."""
    hf = parse_message(cp["patch"]["value"], hcm_pb2.HttpFilter, vpath, problems)
    if hf is None:
        return
    cd = hf["config_discovery"]
    if T_WASM not in cd.get("type_urls", []):
        problems.add(f"{vpath}.config_discovery.type_urls", f"must list {T_WASM}")
    if "ads" not in cd.get("config_source", {}):
        problems.add(f"{vpath}.config_discovery.config_source", "must be ads: {} (istiod serves ECDS over ADS)")
    if hf.get("name") not in ecds:
        problems.add(f"{vpath}.name", f"no EXTENSION_CONFIG patch adds {hf.get('name')!r}")
        return
    cp["patch"]["value"] = {"name": hf["name"], "typed_config": ecds[hf["name"]].get("typed_config")}


def check_envoyfilter(doc, schemas, problems):
    """validate-envoy's EnvoyFilter check, taught Istio's ECDS form of the Wasm filter."""
    d = copy.deepcopy(doc.data)
    patches = (d.get("spec") or {}).get("configPatches")
    if isinstance(patches, list):
        ecds = _ecds_configs(patches, problems)
        for i, cp in enumerate(patches):
            if isinstance(cp, dict) and cp.get("applyTo") == "HTTP_FILTER" and isinstance(cp.get("patch"), dict) \
                    and isinstance(cp["patch"].get("value"), dict) and "config_discovery" in cp["patch"]["value"]:
                _resolve_ecds_filter(cp, f"spec.configPatches[{i}].patch.value", ecds, problems)
    validate_envoyfilter(d, "", problems)


def check_partial(value, schemas, api_version, kind, path, problems):
    """A patch of a core kind: its schema without `required`, and names on the list items a
    strategic merge matches by name."""
    if not isinstance(value, dict):
        problems.add(path, f"must be a mapping (a partial {kind})")
        return
    schema_errors(schemas.patch_validator(api_version, kind), value, path, problems, ".")
    pod = ((value.get("spec") or {}).get("template") or {}).get("spec") if kind in ("Deployment", "DaemonSet") else None
    for field in ("containers", "initContainers", "volumes"):
        for i, item in enumerate((pod or {}).get(field) or []):
            if isinstance(item, dict) and not item.get("name"):
                problems.add(f"{path}.spec.template.spec.{field}.{i}.name", "missing (the patch merges by name)")


def _adds_ferrogate(k8s):
    """Whether an EnvoyProxy's Deployment or DaemonSet patch adds the ferrogate container."""
    for field in ("envoyDeployment", "envoyDaemonSet"):
        pod = (k8s.get(field) or {}).get("patch") or {}
        for key in ("value", "spec", "template", "spec"):
            pod = pod.get(key) if isinstance(pod, dict) else None
        containers = [c for f in ("initContainers", "containers") for c in ((pod or {}).get(f) or [])]
        if any(isinstance(c, dict) and c.get("name") == NAME for c in containers):
            return True
    return False


def check_envoyproxy_bootstrap(spec, adds_ferrogate, problems):
    """spec.bootstrap: a Merge whose value, parsed as an Envoy Bootstrap, carries exactly
    envoy/stats-tags.yaml's stats_tags (Envoy Gateway reads the value leniently, unknown fields
    ignored: a typo would be dropped without a word). Required with the ferrogate sidecar."""
    bs = spec.get("bootstrap")
    if bs is None:
        if adds_ferrogate:
            problems.add("spec.bootstrap", "missing: without envoy/stats-tags.yaml's stats_tags (type: Merge) the "
                         "filter's metrics keep their labels in their names")
        return
    if not isinstance(bs, dict):
        return  # the schema reports it
    if bs.get("type") != "Merge":
        problems.add("spec.bootstrap.type", f"is {bs.get('type', 'unset (Replace)')!r}: use Merge, which adds the "
                     "stats_tags to the bootstrap Envoy Gateway generates (Replace drops its xDS and admin setup)")
        return
    try:
        value = yaml.safe_load(bs.get("value") or "")
    except yaml.YAMLError as e:
        problems.add("spec.bootstrap.value", f"not YAML: {e}")
        return
    b = parse_message(value, bootstrap_pb2.Bootstrap, "spec.bootstrap.value", problems)
    if b is not None:
        check_bootstrap_tags(b, "spec.bootstrap.value", problems, where="this Merge value")


def check_envoyproxy(doc, schemas, problems):
    """EnvoyProxy: each `patch.value` (open in the CRD) is a partial object of its kind; its
    bootstrap carries ferrogate's metric labels."""
    k8s = (doc.spec.get("provider") or {}).get("kubernetes") or {}
    for field, (api_version, kind) in ENVOYPROXY_PATCHED.items():
        patch = (k8s.get(field) or {}).get("patch")
        if isinstance(patch, dict) and "value" in patch:
            path = f"spec.provider.kubernetes.{field}.patch.value"
            check_partial(patch["value"], schemas, api_version, kind, path, problems)
    check_envoyproxy_bootstrap(doc.spec, _adds_ferrogate(k8s), problems)


# The key of an Istio custom bootstrap ConfigMap (pod annotation sidecar.istio.io/bootstrapOverride):
# the injection templates mount the ConfigMap and point ISTIO_BOOTSTRAP_OVERRIDE at this file.
ISTIO_BOOTSTRAP_KEY = "custom_bootstrap.json"


def check_istio_bootstrap(doc, problems):
    """An Istio custom bootstrap: JSON, an Envoy Bootstrap (Envoy merges it over Istio's with
    --config-yaml, and Istio starts Envoy with --allow-unknown-static-fields: a typo would be
    dropped without a word), carrying exactly envoy/stats-tags.yaml's stats_tags."""
    text = (doc.data.get("data") or {}).get(ISTIO_BOOTSTRAP_KEY)
    if text is None:
        return
    path = f"data.{ISTIO_BOOTSTRAP_KEY}"
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError as e:
        problems.add(path, f"not JSON: {e}")
        return
    b = parse_message(value, bootstrap_pb2.Bootstrap, path, problems)
    if b is not None:
        check_bootstrap_tags(b, path, problems, where="this custom bootstrap")


def check_configmap(doc, schemas, problems):
    """A ferrogate config document; an Istio custom bootstrap; an Istio Gateway options
    ConfigMap's Deployment overlay."""
    found = ferrogate_config_in(doc)
    if found:
        check_config_document(found[1], f"data.{found[0]}", problems)
    check_istio_bootstrap(doc, problems)
    text = (doc.data.get("data") or {}).get("deployment")
    if isinstance(text, str):
        try:
            overlay = yaml.safe_load(text)
        except yaml.YAMLError as e:
            problems.add("data.deployment", f"not YAML: {e}")
            return
        check_partial(overlay, schemas, "apps/v1", "Deployment", "data.deployment", problems)


DEEP_CHECKS = {
    "EnvoyExtensionPolicy": check_eep,
    "EnvoyPatchPolicy": check_epp_values,
    "EnvoyFilter": check_envoyfilter,
    "EnvoyProxy": check_envoyproxy,
    "WasmPlugin": lambda doc, schemas, problems: validate_wasmplugin(doc.data, "", problems),
    "ConfigMap": check_configmap,
}


def _not_an_object(doc, schemas, problems):
    """A document without apiVersion/kind: Envoy Gateway's Helm values, or an error."""
    config = doc.data.get("config") if isinstance(doc.data, dict) else None
    if isinstance(config, dict) and isinstance(config.get("envoyGateway"), dict):
        # config.envoyGateway becomes the controller's EnvoyGateway document.
        schema_errors(schemas.plain("EnvoyGateway"), config["envoyGateway"], "", problems, "config.envoyGateway.")
        return "Envoy Gateway Helm values"
    problems.add("", "not a Kubernetes object (no apiVersion/kind)")
    return None


def _deep_check(doc, schemas, problems):
    check = DEEP_CHECKS.get(doc.kind)
    if check:
        try:
            check(doc, schemas, problems)
        except Exception as e:  # noqa: BLE001 - a malformed object is already reported by its schema
            problems.add("", f"cannot check its contents ({type(e).__name__}: {e})")


def validate_doc(doc, schemas):
    """Returns (what it was checked against, problems)."""
    problems, d = Problems(), doc.data
    if not isinstance(d, dict) or "apiVersion" not in d or "kind" not in d:
        return _not_an_object(doc, schemas, problems), problems.items
    if not isinstance(d["apiVersion"], str) or not isinstance(d["kind"], str):
        problems.add("apiVersion", "apiVersion and kind must be strings")
        return None, problems.items
    validator, is_crd = schemas.validator(d["apiVersion"], d["kind"])
    if validator is None:
        problems.add("apiVersion", f"no schema for {d['kind']} in {d['apiVersion']} (Kubernetes {K8S_VERSION} "
                     "or testdata/k8s-schemas/)")
        return None, problems.items
    schema_errors(validator, d, "", problems)
    if is_crd and isinstance(d.get("metadata"), dict):
        schema_errors(schemas.object_meta(), d["metadata"], "", problems, "metadata.")
    if not doc.name:
        problems.add("metadata.name", "missing")
    _deep_check(doc, schemas, problems)
    source = schemas.sources.get((d["apiVersion"], d["kind"])) if is_crd else f"Kubernetes {K8S_VERSION}"
    return f"schema {source}", problems.items
