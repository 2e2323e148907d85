"""Envoy Gateway, simulated: for each Gateway with ferrogate policies, the Listener,
RouteConfiguration and Cluster resources Envoy Gateway v1.9 would generate are rebuilt from the
manifests (named as its translator names them), the EnvoyPatchPolicies applied as it applies
them (internal/xds/translator/jsonpatch.go), the result parsed with Envoy's protos and checked
with validate-envoy's contract (flag, router order, cluster_header route, clusters per
provider, ferrogate_sidecar, buffer limit, timeouts). A model of its naming, not Envoy Gateway
itself: on a cluster the EnvoyPatchPolicy's Programmed condition is the final word."""

import copy
import json
import re

from .envoy_api import (EG_RESOURCE_TYPES, NAME, T, T_CLUSTER, T_HCM, T_LISTENER, T_ROUTECFG, T_ROUTER, T_STRING,
                        T_WASM, check_buffer_limit, check_clusters, check_hcm, parse_message)
from .ferrogate_config import ferrogate_config_in
from .jsonpatch import json_patch, jsonpath_locate, jsonpath_steps, pointer

GATEWAY_API = "gateway.networking.k8s.io/"
EG_DEFAULT_BUFFER = 32768  # Envoy Gateway's listener per_connection_buffer_limit_bytes default


def _quantity(q):
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|k|M|G)?", str(q))
    units = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "k": 10**3, "M": 10**6, "G": 10**9}
    return int(m.group(1)) * units[m.group(2)] if m else None


def targets(policy, kind, ns, name):
    """Whether a policy's targetRef(s) name the object (policies target their own namespace)."""
    spec = policy.spec
    refs = spec.get("targetRefs") or ([spec["targetRef"]] if isinstance(spec.get("targetRef"), dict) else [])
    return policy.namespace == ns and any(isinstance(r, dict) and r.get("kind") == kind and r.get("name") == name
                                          for r in refs)


def _eg_match(m):
    path = (m or {}).get("path") or {"type": "PathPrefix", "value": "/"}
    kind, value = path.get("type", "PathPrefix"), path.get("value", "/")
    if kind == "Exact":
        return {"path": value}
    if kind == "RegularExpression":
        return {"safe_regex": {"regex": value}}
    return {"prefix": "/"} if value == "/" else {"path_separated_prefix": value.rstrip("/")}


def _plugin_json(w):
    """The JSON Envoy Gateway hands the filter of a wasm entry (its `config`)."""
    return json.dumps(w["config"], separators=(",", ":")) if "config" in w else ""


def _eg_wasm_filter(eep, idx, w):
    """internal/xds/translator/wasm.go: one disabled HTTP filter per policy entry."""
    ir = f"envoyextensionpolicy/{eep.namespace}/{eep.name}/wasm/{idx}"
    cfg = {"name": w.get("name") or ir,
           "vm_config": {"vm_id": ir, "runtime": "envoy.wasm.runtime.v8",
                         "code": {"remote": {"http_uri": {"uri": "https://envoy-gateway:18002/module.wasm",
                                                          "cluster": "wasm_cluster", "timeout": "10s"},
                                             "sha256": "0" * 64}}},
           "configuration": {"@type": T_STRING, "value": _plugin_json(w)}}
    if w.get("rootID"):
        cfg["root_id"] = w["rootID"]
    if w.get("failOpen"):
        cfg["fail_open"] = True
    name = "envoy.filters.http.wasm/" + ir
    return name, {"name": name, "disabled": True, "typed_config": {"@type": T_WASM, "config": cfg}}


def _apply_client_policy(hcm, ctp):
    """ClientTrafficPolicy -> the connection manager's settings; returns the buffer limit."""
    if ctp is None:
        return EG_DEFAULT_BUFFER
    conn = ctp.spec.get("connection") or {}
    http = (ctp.spec.get("timeout") or {}).get("http") or {}
    for src, dst in (("requestHeadersReceivedTimeout", "request_headers_timeout"),
                     ("streamIdleTimeout", "stream_idle_timeout")):
        if src in http:
            hcm[dst] = http[src]
    if "idleTimeout" in http:
        hcm["common_http_protocol_options"] = {"idle_timeout": http["idleTimeout"]}
    if (ctp.spec.get("headers") or {}).get("preserveXRequestID"):
        hcm["preserve_external_request_id"] = True
    return _quantity(conn["bufferLimit"]) if conn.get("bufferLimit") is not None else EG_DEFAULT_BUFFER


def _listener(ir, lis, ctp):
    """The Listener of an HTTP Gateway listener, and its connection manager (filled later)."""
    hcm = {"@type": T_HCM, "http_filters": [],
           "rds": {"route_config_name": ir, "config_source": {"ads": {}, "resource_api_version": "V3"}}}
    limit = _apply_client_policy(hcm, ctp)
    port = lis["port"] + 10000 if lis["port"] < 1024 else lis["port"]  # EG maps privileged ports
    hcm["stat_prefix"] = f"http-{port}"
    listener = {"name": ir, "address": {"socket_address": {"address": "0.0.0.0", "port_value": port}},
                "per_connection_buffer_limit_bytes": limit,
                "default_filter_chain": {"filters": [
                    {"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]}}
    return listener, hcm


def _attached(route, gw, lis):
    return any(isinstance(p, dict) and p.get("name") == gw.name and p.get("namespace", route.namespace) == gw.namespace
               and p.get("sectionName") in (None, lis.get("name")) for p in route.spec.get("parentRefs") or [])


def _route_entries(r, ri, rule, under, hcm, eeps):
    """The routes of one HTTPRoute rule on one host; its Wasm filters join the connection manager."""
    cluster = f"httproute/{r.namespace}/{r.name}/rule/{ri}"
    routes = []
    for mi, m in enumerate(rule.get("matches") or [{}]):
        route = {"name": f"{cluster}/match/{mi}/{under}", "match": _eg_match(m),
                 "route": {"cluster": cluster, "upgrade_configs": [{"upgrade_type": "websocket"}]}}
        for e in eeps:
            for idx, w in enumerate(e.spec.get("wasm") or []):
                fname, filt = _eg_wasm_filter(e, idx, w)
                if all(f["name"] != fname for f in hcm["http_filters"]):
                    hcm["http_filters"].append(filt)
                route.setdefault("typed_per_filter_config", {})[fname] = {
                    "@type": T + "envoy.config.route.v3.FilterConfig", "config": {}}
        routes.append(route)
    return routes


def _add_http_route(r, ir, lis, rc, hcm, clusters, eeps):
    """One attached HTTPRoute: a virtual host per hostname, an EDS cluster per rule."""
    for host in r.spec.get("hostnames") or [lis.get("hostname") or "*"]:
        under = host.replace(".", "_")
        vh = next((v for v in rc["virtual_hosts"] if v["domains"] == [host]), None)
        if vh is None:
            vh = {"name": f"{ir}/{under}", "domains": [host], "routes": []}
            rc["virtual_hosts"].append(vh)
        for ri, rule in enumerate(r.spec.get("rules") or [{}]):
            cluster = f"httproute/{r.namespace}/{r.name}/rule/{ri}"
            clusters[cluster] = {"name": cluster, "type": "EDS", "connect_timeout": "10s",
                                 "eds_cluster_config": {"service_name": cluster, "eds_config": {
                                     "ads": {}, "resource_api_version": "V3"}}}
            vh["routes"] += _route_entries(r, ri, rule, under, hcm, eeps)


def eg_translate(gw, docs):
    """The Listener, RouteConfiguration and Cluster resources Envoy Gateway v1.9 generates for an
    HTTP Gateway, reduced to what ferrogate's contract reads, named as its translator names them."""
    of = lambda kind: [d for d in docs if d.kind == kind]  # noqa: E731
    ctp = next((c for c in of("ClientTrafficPolicy") if targets(c, "Gateway", gw.namespace, gw.name)), None)
    listeners, route_configs, clusters = {}, {}, {}
    for lis in gw.spec.get("listeners") or []:
        if not isinstance(lis, dict) or lis.get("protocol") != "HTTP" or not isinstance(lis.get("port"), int):
            continue
        ir = f"{gw.namespace}/{gw.name}/{lis.get('name')}"  # irListenerName; XDSNameSchemeV2 is off by default
        listeners[ir], hcm = _listener(ir, lis, ctp)
        rc = route_configs[ir] = {"name": ir, "ignore_port_in_host_matching": True, "virtual_hosts": []}
        for r in (r for r in of("HTTPRoute") if _attached(r, gw, lis)):
            eeps = [e for e in of("EnvoyExtensionPolicy")
                    if targets(e, "HTTPRoute", r.namespace, r.name) or targets(e, "Gateway", gw.namespace, gw.name)]
            _add_http_route(r, ir, lis, rc, hcm, clusters, eeps)
        hcm["http_filters"].append({"name": "envoy.filters.http.router", "typed_config": {"@type": T_ROUTER}})
    return {T_LISTENER: listeners, T_ROUTECFG: route_configs, T_CLUSTER: clusters}


def _apply_patch(table, p, where, problems):
    """One jsonPatches entry on the resource it names; the table keeps the result."""
    op = p.get("operation") or {}
    if op.get("op") == "add" and not op.get("path") and not op.get("jsonPath"):
        table[p.get("name")] = copy.deepcopy(op.get("value"))  # a whole new resource
        return
    if p.get("name") not in table:
        problems.add(where, f"no {p['type'].rsplit('.', 1)[-1]} named {p.get('name')!r} is generated "
                     f"(Envoy Gateway reports ResourceNotFound); generated: {sorted(table)}")
        return
    doc = copy.deepcopy(table[p["name"]])
    try:
        if op.get("jsonPath"):
            found = jsonpath_locate(doc, jsonpath_steps(op["jsonPath"]))
            if not found:
                problems.add(f"{where}.operation.jsonPath", f"matches nothing in {p['name']} "
                             "(Envoy Gateway rejects the patch)")
                return
            paths = [list(ptr) + pointer(op.get("path")) for ptr in found]
        else:
            paths = [pointer(op.get("path"))]
        for tokens in paths:
            source = pointer(op["from"]) if op.get("from") else None
            doc = json_patch(doc, op.get("op"), tokens, op.get("value"), source)
    except (KeyError, IndexError, ValueError, TypeError) as e:
        problems.add(f"{where}.operation", f"cannot be applied to {p['name']}: {type(e).__name__}: {e}")
        return
    table[p["name"]] = doc


def eg_apply(resources, epps, problems):
    """internal/xds/translator/jsonpatch.go: policies by priority, each patch on one named resource."""
    def priority(e):
        return e.spec.get("priority") if isinstance(e.spec.get("priority"), int) else 0
    for epp in sorted(epps, key=lambda e: (priority(e), str(e.name))):
        for i, p in enumerate(epp.spec.get("jsonPatches") or []):
            table = resources.get((p or {}).get("type"))
            if table is not None:  # endpoints and secrets are not rebuilt here
                _apply_patch(table, p, f"EnvoyPatchPolicy {epp.namespace}/{epp.name} jsonPatches[{i}]", problems)


def _dig(node, *keys):
    for k in keys:
        node = node.get(k) if isinstance(node, dict) else None
    return node


def _mounted_configmaps(ep):
    """(namespace, name) of the ConfigMap volumes an EnvoyProxy adds to the Envoy pods, whether
    through envoyDeployment.pod or a patch of the Deployment (the Helm chart's form)."""
    dep = _dig(ep.spec, "provider", "kubernetes", "envoyDeployment")
    volumes = [v for v in (_dig(dep, "pod", "volumes"), _dig(dep, "patch", "value", "spec", "template", "spec",
                                                               "volumes")) if isinstance(v, list)]
    return {(ep.namespace, _dig(v, "configMap", "name")) for vs in volumes for v in vs}


def sidecar_config(gw, docs):
    """The ferrogate config the gateway's sidecars read: the ConfigMap mounted by the EnvoyProxy of
    the Gateway's class (the last one applied), else the last ferrogate ConfigMap of the set."""
    gc = next((d for d in docs if d.kind == "GatewayClass" and d.name == gw.spec.get("gatewayClassName")), None)
    ref = (gc.spec.get("parametersRef") or {}) if gc else {}
    ep = next((d for d in docs if d.kind == "EnvoyProxy" and d.name == ref.get("name")
               and d.namespace == ref.get("namespace", "default")), None)
    names = _mounted_configmaps(ep) if ep else set()
    found = [(d, f) for d in docs if d.kind == "ConfigMap" for f in [ferrogate_config_in(d)] if f]
    chosen = [(d, f) for d, f in found if (d.namespace, d.name) in names] or found
    if not chosen:
        return None
    d, (key, cfg) = chosen[-1]
    return f"{d.label()} data.{key}", cfg


def _parse_all(resources, problems):
    """{(type, name): canonical dict or None} of every rebuilt and patched resource."""
    return {(type_url, name): parse_message(r, EG_RESOURCE_TYPES[type_url],
                                            f"{type_url.rsplit('.', 1)[-1]} {name}", problems)
            for type_url, table in resources.items() for name, r in table.items()}


def _judged(docs):
    """The plugin configurations kinds.check_eep has put through `ferrogate check` already: the
    simulation judges one only when a patch has changed it."""
    return {_plugin_json(w) for d in docs if d.kind == "EnvoyExtensionPolicy" for w in d.spec.get("wasm") or []
            if isinstance(w, dict) and "config" in w and NAME in (w.get("rootID"), w.get("name"))}


def _check_listener(name, lis, parsed, clusters, sidecar, judged, problems):
    """The contract on one Listener's connection managers; True when one carries the filter."""
    carried = False
    for fi, f in enumerate(lis.get("default_filter_chain", {}).get("filters", [])):
        hcm = copy.deepcopy(f.get("typed_config", {}))
        if hcm.get("@type") != T_HCM:
            continue
        hcm["route_config"] = parsed.get((T_ROUTECFG, hcm.pop("rds", {}).get("route_config_name"))) or {}
        found = check_hcm(hcm, f"Listener {name}.default_filter_chain.filters[{fi}].typed_config", problems, judged)
        if found is None:
            continue
        carried = True
        plugin, ppath, _ = found
        check_buffer_limit(lis.get("per_connection_buffer_limit_bytes"), plugin,
                           f"Listener {name}.per_connection_buffer_limit_bytes", problems)
        if plugin is not None and "config" not in plugin and sidecar:
            # Fed by the sidecar: its ConfigMap's providers are the ones needing clusters.
            plugin, ppath = dict(plugin, config=sidecar[1]), sidecar[0]
        check_clusters(clusters, plugin, ppath, problems, "the generated and patched clusters")
    return carried


def eg_check(gw, docs, problems):
    """Rebuilds, patches and checks the xDS of one Gateway."""
    epps = [d for d in docs if d.kind == "EnvoyPatchPolicy" and targets(d, "Gateway", gw.namespace, gw.name)]
    resources = eg_translate(gw, docs)
    eg_apply(resources, epps, problems)
    parsed = _parse_all(resources, problems)
    clusters = [(c, f"Cluster {n}") for (t, n), c in parsed.items() if t == T_CLUSTER and c]
    sidecar = sidecar_config(gw, docs)
    judged = _judged(docs)
    carried = [_check_listener(name, lis, parsed, clusters, sidecar, judged, problems)
               for (t, name), lis in parsed.items() if t == T_LISTENER and lis]
    if not any(carried):
        problems.add(f"Gateway {gw.namespace}/{gw.name}", "no HTTP listener carries the ferrogate Wasm filter "
                     "(an EnvoyExtensionPolicy on the Gateway or on an attached HTTPRoute)")


def gateways_to_simulate(docs):
    """({(ns, name): Gateway} of the Gateways some ferrogate policy reaches, [notes]). A policy
    aimed at a Gateway outside the files is noted: only its whole added resources are parsed."""
    gateways = {(d.namespace, d.name): d for d in docs
                if d.kind == "Gateway" and str(d.data.get("apiVersion", "")).startswith(GATEWAY_API)}
    wanted, notes = set(), []
    for d in (d for d in docs if d.kind in ("EnvoyPatchPolicy", "EnvoyExtensionPolicy")):
        wanted |= {k for k in gateways if targets(d, "Gateway", *k)}
        routes = [r for r in docs if r.kind == "HTTPRoute" and targets(d, "HTTPRoute", r.namespace, r.name)]
        wanted |= {(p.get("namespace", r.namespace), p.get("name")) for r in routes
                   for p in r.spec.get("parentRefs") or [] if isinstance(p, dict)} & set(gateways)
        for ref in d.spec.get("targetRefs") or [d.spec.get("targetRef")]:
            if isinstance(ref, dict) and ref.get("kind") == "Gateway" \
                    and (d.namespace, ref.get("name")) not in gateways:
                notes.append(f"note {d.label()}: Gateway {d.namespace}/{ref.get('name')} is not among the "
                             "files: its xDS is not simulated, only whole added resources are parsed")
    return {k: gateways[k] for k in sorted(wanted)}, notes
