"""The HTTP connection manager that carries the filter: the Wasm filter before the router (the
last filter), the timeouts that bound slow clients, the routes on x-ferrogate-cluster with
`timeout: 0s` that strip the host-only headers, and a listener buffer that holds the largest
body the filter accepts."""

from .common import CLUSTER_HEADER, DEFAULT_MAX_BODY_BYTES, ENVOY_DEFAULT_BUFFER, HOST_ONLY_HEADERS, NAME
from .plugin import check_wasm_filter
from .protos import T_ROUTER, T_WASM


def check_route(route, rpath, problems):
    """Returns True if the route is a ferrogate cluster_header route."""
    action = route.get("route")
    if action is None:
        return False
    if action.get("cluster_header") != CLUSTER_HEADER:
        problems.add(f"{rpath}.route", f"must use cluster_header: {CLUSTER_HEADER} (the filter picks the provider)")
        return False
    if action.get("timeout") not in ("0s",):
        problems.add(f"{rpath}.route.timeout",
                     f"is {action.get('timeout', 'unset (15s)')}; use 0s so long generations are not cut")
    missing = [h for h in HOST_ONLY_HEADERS if h not in route.get("request_headers_to_remove", [])]
    if missing:
        problems.add(f"{rpath}.request_headers_to_remove",
                     f"misses {', '.join(missing)}: a client's copies would reach the upstream")
    return True


def check_buffer_limit(limit, plugin, path, problems):
    """The listener's buffer holds a body of the filter's max_body_bytes (else Envoy answers 413)."""
    want = (plugin or {}).get("max_body_bytes", DEFAULT_MAX_BODY_BYTES)
    have = limit if limit is not None else ENVOY_DEFAULT_BUFFER
    if isinstance(want, int) and have < want:
        problems.add(path, f"per_connection_buffer_limit_bytes is {have}, below the filter's max_body_bytes "
                     f"{want} (Envoy would answer 413 first)")


def _check_routes(hcm, hpath, problems):
    """The inline route_config's ferrogate routes; returns how many there are."""
    rc = hcm.get("route_config")
    if rc is None:
        problems.add(f"{hpath}.route_config", "missing (an inline route_config is required to check routing)")
        return 0
    nroutes = 0
    for vi, vh in enumerate(rc.get("virtual_hosts", [])):
        for ri, r in enumerate(vh.get("routes", [])):
            nroutes += check_route(r, f"{hpath}.route_config.virtual_hosts[{vi}].routes[{ri}]", problems)
    if not nroutes:
        problems.add(f"{hpath}.route_config", f"no route uses cluster_header: {CLUSTER_HEADER}")
    return nroutes


def check_hcm(hcm, hpath, problems, judged=()):
    """A canonical HttpConnectionManager dict. None when it has no ferrogate filter, else
    (plugin configuration or None, its path, number of ferrogate routes). `judged` (plugin
    configuration texts checked already) is passed on to check_wasm_filter."""
    filters = hcm.get("http_filters", [])
    wasm_at = [i for i, f in enumerate(filters) if f.get("typed_config", {}).get("@type") == T_WASM
               and f.get("typed_config", {}).get("config", {}).get("root_id") == NAME]
    if not wasm_at:
        return None
    router_at = [i for i, f in enumerate(filters) if f.get("typed_config", {}).get("@type") == T_ROUTER]
    if not router_at or router_at[-1] != len(filters) - 1:
        problems.add(f"{hpath}.http_filters", "the router must be the last HTTP filter")
    elif wasm_at[0] > router_at[-1]:
        problems.add(f"{hpath}.http_filters", "the ferrogate Wasm filter must come before the router")
    for timeout in ("request_headers_timeout", "stream_idle_timeout"):
        if timeout not in hcm:
            problems.add(f"{hpath}.{timeout}", "missing: a slow or stalled client would hold its stream forever")
    wpath = f"{hpath}.http_filters[{wasm_at[0]}].typed_config"
    plugin = check_wasm_filter(filters[wasm_at[0]]["typed_config"], wpath, problems, judged)
    nroutes = _check_routes(hcm, hpath, problems)
    return plugin, f"{wpath}.config.configuration.value", nroutes
