"""Istio's kinds. An EnvoyFilter's patch values are parsed with the Envoy message their
`applyTo` implies and checked with the same contract as a bootstrap (the Wasm filter and its
plugin configuration, the cluster_header route, a cluster per provider, the listener buffer);
a WasmPlugin gets structure checks and its pluginConfig the plugin checks (Istio's protos are
not in xds-protos); Gateway and VirtualService only their header."""

import re

from .clusters import check_clusters
from .common import CLUSTER_HEADER, NAME
from .hcm import check_buffer_limit, check_route
from .plugin import check_plugin_config, check_wasm_filter
from .protos import (T_WASM, cluster_pb2, extension_pb2, hcm_pb2, listener_components_pb2, listener_pb2,
                     parse_message, route_components_pb2, route_pb2)

ENVOYFILTER_TYPES = {
    "LISTENER": listener_pb2.Listener,
    "FILTER_CHAIN": listener_components_pb2.FilterChain,
    "NETWORK_FILTER": listener_components_pb2.Filter,
    "HTTP_FILTER": hcm_pb2.HttpFilter,
    "ROUTE_CONFIGURATION": route_pb2.RouteConfiguration,
    "VIRTUAL_HOST": route_components_pb2.VirtualHost,
    "HTTP_ROUTE": route_components_pb2.Route,
    "CLUSTER": cluster_pb2.Cluster,
    "EXTENSION_CONFIG": extension_pb2.TypedExtensionConfig,  # Istio's ECDS patches
}
ENVOYFILTER_OPS = {"MERGE", "ADD", "REMOVE", "INSERT_BEFORE", "INSERT_AFTER", "INSERT_FIRST", "REPLACE"}
ENVOYFILTER_MATCH = {"context", "proxy", "listener", "routeConfiguration", "cluster"}
ENVOYFILTER_CONTEXTS = {"ANY", "SIDECAR_INBOUND", "SIDECAR_OUTBOUND", "GATEWAY"}
WASMPLUGIN_SPEC = {"selector", "targetRef", "targetRefs", "url", "sha256", "imagePullPolicy", "imagePullSecret",
                   "verificationKey", "pluginConfig", "pluginName", "phase", "priority", "failStrategy",
                   "vmConfig", "match", "type"}
WASMPLUGIN_ENUMS = {"failStrategy": {"FAIL_CLOSE", "FAIL_OPEN", "FAIL_RELOAD"},
                    "phase": {"UNSPECIFIED_PHASE", "AUTHN", "AUTHZ", "STATS"},
                    "type": {"UNSPECIFIED_PLUGIN_TYPE", "HTTP", "NETWORK"},
                    "imagePullPolicy": {"UNSPECIFIED_POLICY", "IfNotPresent", "Always"}}


def _check_keys(node, allowed, path, problems):
    if not isinstance(node, dict):
        problems.add(path, "must be a mapping")
        return False
    for k in sorted(set(node) - allowed):
        problems.add(f"{path}.{k}", "unknown field")
    return True


def _check_k8s_header(doc, api_versions, kind, path, problems):
    if doc.get("apiVersion") not in api_versions:
        problems.add(f"{path}apiVersion", f"is {doc.get('apiVersion')!r}, expected one of {sorted(api_versions)}")
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or not meta.get("name"):
        problems.add(f"{path}metadata.name", f"missing ({kind} needs a name)")
    if not isinstance(doc.get("spec"), dict):
        problems.add(f"{path}spec", "missing")
        return False
    return True


def _patch_value(cp, cpath, problems):
    """(applyTo, operation, canonical value) of one configPatches entry; None when there is
    nothing to check further (a REMOVE, or an error already reported)."""
    if not _check_keys(cp, {"applyTo", "match", "patch"}, cpath, problems):
        return None
    apply_to = cp.get("applyTo")
    if apply_to not in ENVOYFILTER_TYPES:
        problems.add(f"{cpath}.applyTo", f"{apply_to!r} is not one of {', '.join(ENVOYFILTER_TYPES)}")
        return None
    match = cp.get("match", {})
    if _check_keys(match, ENVOYFILTER_MATCH, f"{cpath}.match", problems):
        if match.get("context", "ANY") not in ENVOYFILTER_CONTEXTS:
            problems.add(f"{cpath}.match.context",
                         f"{match.get('context')!r} is not one of {sorted(ENVOYFILTER_CONTEXTS)}")
    patch = cp.get("patch", {})
    if not _check_keys(patch, {"operation", "value", "filterClass"}, f"{cpath}.patch", problems):
        return None
    op = patch.get("operation")
    if op not in ENVOYFILTER_OPS:
        problems.add(f"{cpath}.patch.operation", f"{op!r} is not one of {sorted(ENVOYFILTER_OPS)}")
    if op == "REMOVE":
        return None
    value = parse_message(patch.get("value"), ENVOYFILTER_TYPES[apply_to], f"{cpath}.patch.value", problems)
    return None if value is None else (apply_to, op, value)


class _Found:
    """What an EnvoyFilter's patches add up to: filters, clusters, routes, listener buffers."""

    def __init__(self):
        self.plugins, self.clusters, self.routes, self.limits = [], [], 0, []

    def take(self, apply_to, op, value, vpath, problems):
        tc = value.get("typed_config", {})
        if apply_to == "HTTP_FILTER" and tc.get("@type") == T_WASM and tc.get("config", {}).get("root_id") == NAME:
            wpath = f"{vpath}.typed_config"
            self.plugins.append((check_wasm_filter(tc, wpath, problems), f"{wpath}.config.configuration.value"))
        elif apply_to == "CLUSTER" and op == "ADD":
            self.clusters.append((value, vpath))
        elif apply_to == "HTTP_ROUTE":
            self.routes += check_route(value, vpath, problems)
        elif apply_to == "LISTENER" and "per_connection_buffer_limit_bytes" in value:
            self.limits.append(int(value["per_connection_buffer_limit_bytes"]))


def validate_envoyfilter(doc, path, problems):
    """An EnvoyFilter; `path` prefixes every field path (e.g. "EnvoyFilter/name.", or "")."""
    if not _check_k8s_header(doc, {"networking.istio.io/v1alpha3"}, "EnvoyFilter", path, problems):
        return
    spec = doc["spec"]
    _check_keys(spec, {"workloadSelector", "targetRefs", "configPatches", "priority"}, f"{path}spec", problems)
    patches = spec.get("configPatches")
    if not isinstance(patches, list) or not patches:
        problems.add(f"{path}spec.configPatches", "missing or empty")
        return
    found = _Found()
    for i, cp in enumerate(patches):
        cpath = f"{path}spec.configPatches[{i}]"
        entry = _patch_value(cp, cpath, problems)
        if entry is not None:
            found.take(*entry, f"{cpath}.patch.value", problems)
    if not found.plugins:
        problems.add(f"{path}spec.configPatches", "no HTTP_FILTER patch with the ferrogate Wasm filter")
    if not found.routes:
        problems.add(f"{path}spec.configPatches", f"no HTTP_ROUTE patch setting cluster_header: {CLUSTER_HEADER}")
    for plugin, ppath in found.plugins:
        check_buffer_limit(max(found.limits) if found.limits else None, plugin,
                           f"{path}spec.configPatches (LISTENER MERGE)", problems)
        check_clusters(found.clusters, plugin, ppath, problems, f"{path}spec.configPatches (CLUSTER ADD)")


def validate_wasmplugin(doc, path, problems):
    """A WasmPlugin: its spec's fields and enums, and the plugin configuration it carries."""
    if not _check_k8s_header(doc, {"extensions.istio.io/v1alpha1"}, "WasmPlugin", path, problems):
        return
    spec = doc["spec"]
    sp = f"{path}spec"
    _check_keys(spec, WASMPLUGIN_SPEC, sp, problems)
    url = spec.get("url")
    if not isinstance(url, str) or not re.match(r"^(oci|file|https?)://.+", url):
        problems.add(f"{sp}.url", f"{url!r} must be oci://, file://, http:// or https://")
    if "sha256" in spec and not re.fullmatch(r"[0-9a-f]{64}", str(spec["sha256"])):
        problems.add(f"{sp}.sha256", "must be 64 lower-case hex digits")
    if spec.get("pluginName") != NAME:
        problems.add(f"{sp}.pluginName", f"is {spec.get('pluginName')!r}, expected {NAME!r} (becomes root_id)")
    for k, allowed in WASMPLUGIN_ENUMS.items():
        if k in spec and spec[k] not in allowed:
            problems.add(f"{sp}.{k}", f"{spec[k]!r} is not one of {sorted(allowed)}")
    if spec.get("failStrategy") == "FAIL_OPEN":
        problems.add(f"{sp}.failStrategy", "FAIL_OPEN would bypass authentication when the filter fails")
    if spec.get("type", "HTTP") != "HTTP":
        problems.add(f"{sp}.type", "ferrogate is an HTTP filter")
    selector = spec.get("selector")
    if "selector" in spec and not (isinstance(selector, dict) and isinstance(selector.get("matchLabels"), dict)):
        problems.add(f"{sp}.selector.matchLabels", "missing")
    check_plugin_config(spec.get("pluginConfig"), f"{sp}.pluginConfig", problems)


def validate_other_istio(doc, path, problems):
    """Gateway, VirtualService: the Kubernetes header only."""
    kind = doc.get("kind")
    _check_k8s_header(doc, {"networking.istio.io/v1alpha3", "networking.istio.io/v1beta1",
                            "networking.istio.io/v1"}, kind, path, problems)
