"""Envoy's clusters against the plugin configuration: the sidecar's cluster, a cluster per
provider named as the provider (TLS with SNI for an https base_url, the base_url's address for
a fixed upstream, override_host or ORIGINAL_DST on x-gateway-destination-endpoint for a pool,
whose listed endpoints the cluster must hold), and the sidecar wherever the config needs it."""

import re

from .common import ENDPOINT_HEADER, SIDECAR_CLUSTER
from .protos import T_OVERRIDE_HOST, T_TLS


def parse_base_url(url):
    """(scheme, host, port) of a base_url, None when it is not one (`ferrogate check` says why)."""
    m = re.match(r"^(https?)://(\[[^\]]+\]|[^/:?#@\[\]]+)(?::(\d+))?(/.*)?$", url if isinstance(url, str) else "")
    if not m:
        return None
    scheme, host, port = m.group(1), m.group(2).strip("[]").lower(), m.group(3)
    return scheme, host, int(port) if port else (443 if scheme == "https" else 80)


def _document(plugin):
    cfg = (plugin or {}).get("config")
    return cfg if isinstance(cfg, dict) else {}


def _dicts(cfg, key):
    """The objects of a list of the config document (malformed entries are `ferrogate check`'s)."""
    items = cfg.get(key)
    return [(i, x) for i, x in enumerate(items) if isinstance(x, dict)] if isinstance(items, list) else []


def _cluster_addresses(cluster):
    out = set()
    for loc in cluster.get("load_assignment", {}).get("endpoints", []):
        for lb in loc.get("lb_endpoints", []):
            sa = lb.get("endpoint", {}).get("address", {}).get("socket_address", {})
            if "address" in sa:
                out.add((sa["address"].lower(), int(sa.get("port_value", 0))))
    return out


def _override_host_sources(cluster):
    for pol in cluster.get("load_balancing_policy", {}).get("policies", []):
        tc = pol.get("typed_extension_config", {}).get("typed_config", {})
        if tc.get("@type") == T_OVERRIDE_HOST:
            return tc.get("override_host_sources", [])
    return None


def _host_port(text):
    """`host:port` (an endpoint or an endpoints_dns name) as a cluster address tuple, or None."""
    if not isinstance(text, str):
        return None
    host, _, port = text.rpartition(":")
    return (host.strip("[]").lower(), int(port)) if port.isdigit() and host else None


def _endpoint_address(e):
    return e.get("address") if isinstance(e, dict) else e


def _index(clusters, problems, where):
    """{name: (cluster, path)}; duplicate names, mismatched load_assignment, no sidecar cluster."""
    by_name = {}
    for c, cpath in clusters:
        name = c.get("name")
        if name in by_name:
            problems.add(f"{cpath}.name", f"duplicate cluster {name!r}")
        by_name[name] = (c, cpath)
        la = c.get("load_assignment")
        if la and la.get("cluster_name") != name:
            problems.add(f"{cpath}.load_assignment.cluster_name", f"is {la.get('cluster_name')!r}, expected {name!r}")
    if SIDECAR_CLUSTER not in by_name:
        problems.add(where, f"no cluster {SIDECAR_CLUSTER!r} (the sidecar, 127.0.0.1:9000)")
    return by_name


def _check_sidecar_needs(plugin, by_name, path, problems):
    """The sidecar_cluster exists; kv_events, endpoints_dns and flow_control need a sidecar."""
    sc = plugin.get("sidecar_cluster")
    if isinstance(sc, str) and sc not in by_name:  # not a string: `ferrogate check` says so
        problems.add(f"{path}.sidecar_cluster", f"no cluster named {sc!r}")
    if sc is not None:
        return
    cfg = _document(plugin)
    providers = [p for _, p in _dicts(cfg, "providers")]
    if any(isinstance(e, dict) and "kv_events" in e for p in providers for e in p.get("endpoints") or []):
        problems.add(f"{path}.sidecar_cluster", "a pool with kv_events needs the sidecar (it holds the KV index): "
                     "set sidecar_cluster")
    if any(p.get("endpoints_dns") for p in providers):
        problems.add(f"{path}.sidecar_cluster", "a pool with endpoints_dns needs the sidecar (it resolves the "
                     "name and serves the endpoints): set sidecar_cluster")
    if any(m.get("flow_control") is not None for _, m in _dicts(cfg, "models")):
        problems.add(f"{path}.sidecar_cluster", "a model with flow_control needs the sidecar (a queued request's "
                     "timer is a sidecar call): set sidecar_cluster")


def _check_tls(name, url, c, cpath, problems):
    """An https provider's cluster speaks TLS with the provider's host as SNI; plain http does not."""
    ts = c.get("transport_socket", {}).get("typed_config", {})
    if url and url[0] == "https":
        if ts.get("@type") != T_TLS:
            problems.add(f"{cpath}.transport_socket", f"provider {name!r} is https: needs an UpstreamTlsContext")
        elif ts.get("sni") != url[1]:
            problems.add(f"{cpath}.transport_socket.typed_config.sni",
                         f"is {ts.get('sni')!r}, expected {url[1]!r} (the provider's host)")
    elif url and ts.get("@type") == T_TLS:
        problems.add(f"{cpath}.transport_socket", f"provider {name!r} is plain http but the cluster uses TLS")


def _check_override_host(p, ppath, c, cpath, sources, problems):
    """A pool on the override_host policy: the header, STRICT_DNS for endpoints_dns, and every
    listed endpoint among a STATIC cluster's hosts."""
    name, addrs, dns = p["name"], _cluster_addresses(c), p.get("endpoints_dns")
    if not any(s.get("header") == ENDPOINT_HEADER for s in sources):
        problems.add(f"{cpath}.load_balancing_policy", f"override_host must read the header {ENDPOINT_HEADER!r}")
    if isinstance(dns, str) and (c.get("type") != "STRICT_DNS" or _host_port(dns) not in addrs):
        problems.add(f"{cpath}.type", f"provider {name!r} takes its endpoints from {dns}: the cluster must be "
                     "STRICT_DNS on that name, so Envoy's hosts are the addresses the sidecar resolves")
    if c.get("type", "STATIC") != "STATIC":
        return
    eps = p.get("endpoints") if isinstance(p.get("endpoints"), list) else []
    for j, e in enumerate(eps):
        ep = _host_port(_endpoint_address(e))
        if ep is not None and ep not in addrs:
            problems.add(f"{ppath}.endpoints[{j}]", f"{_endpoint_address(e)} is not an endpoint of cluster "
                         f"{name!r}: override_host would skip it")


def _check_pool(p, ppath, c, cpath, problems):
    """A provider with endpoints or endpoints_dns: Envoy sends to the endpoint the filter picked."""
    sources = _override_host_sources(c)
    if sources is not None:
        _check_override_host(p, ppath, c, cpath, sources, problems)
    elif c.get("type") == "ORIGINAL_DST":
        od = c.get("original_dst_lb_config", {})
        if not od.get("use_http_header") or od.get("http_header_name") != ENDPOINT_HEADER:
            problems.add(f"{cpath}.original_dst_lb_config",
                         f"needs use_http_header: true and http_header_name: {ENDPOINT_HEADER}")
    else:
        problems.add(f"{cpath}.load_balancing_policy",
                     f"provider {p['name']!r} has an endpoints pool: the cluster needs the override_host "
                     f"policy (or ORIGINAL_DST) on {ENDPOINT_HEADER}")


def _check_provider(p, ppath, by_name, problems, where):
    name = p["name"]
    if name not in by_name:
        problems.add(ppath, f"provider {name!r} has no cluster named {name!r} in {where}")
        return
    c, cpath = by_name[name]
    url = parse_base_url(p.get("base_url"))
    _check_tls(name, url, c, cpath, problems)
    if p.get("endpoints") or p.get("endpoints_dns"):
        _check_pool(p, ppath, c, cpath, problems)
        return
    addrs = _cluster_addresses(c)
    if url and addrs and c.get("type", "STATIC") in ("STATIC", "STRICT_DNS", "LOGICAL_DNS") \
            and (url[1], url[2]) not in addrs:
        problems.add(f"{cpath}.load_assignment",
                     f"has no endpoint {url[1]}:{url[2]} (provider {name!r} base_url {p.get('base_url')})")


def check_clusters(clusters, plugin, path, problems, where):
    """Cluster list (canonical dicts, with their paths) against the plugin's providers; `path` is
    the plugin configuration's, `where` names the cluster list in messages."""
    by_name = _index(clusters, problems, where)
    if not isinstance(plugin, dict):
        return
    _check_sidecar_needs(plugin, by_name, path, problems)
    for i, p in _dicts(_document(plugin), "providers"):
        if isinstance(p.get("name"), str):
            _check_provider(p, f"{path}.config.providers[{i}]", by_name, problems, where)
