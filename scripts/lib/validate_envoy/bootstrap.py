"""An Envoy bootstrap file: parsed as envoy.config.bootstrap.v3.Bootstrap, then every
connection manager carrying the filter checked (hcm.py), the clusters against each filter's
providers (clusters.py), and the overload manager's bound on client connections, as
`ferrogate serve` has, and the stats_tags of envoy/stats-tags.yaml (stats_tags.py)."""

from .clusters import check_clusters
from .hcm import check_buffer_limit, check_hcm
from .protos import ROOT, T_HCM, bootstrap_pb2, parse_message
from .stats_tags import check_bootstrap_tags


def _filter_plugins(sr, problems):
    """[(plugin configuration, its path)] of every listener's ferrogate filter."""
    plugins = []
    for li, lis in enumerate(sr.get("listeners", [])):
        lpath = f"static_resources.listeners[{li}]"
        for fci, fc in enumerate(lis.get("filter_chains", [])):
            for fi, f in enumerate(fc.get("filters", [])):
                tc = f.get("typed_config", {})
                if tc.get("@type") != T_HCM:
                    continue
                found = check_hcm(tc, f"{lpath}.filter_chains[{fci}].filters[{fi}].typed_config", problems)
                if found is None:
                    continue
                plugin, ppath, _ = found
                plugins.append((plugin, ppath))
                check_buffer_limit(lis.get("per_connection_buffer_limit_bytes"), plugin,
                                   f"{lpath}.per_connection_buffer_limit_bytes", problems)
    return plugins


def validate_bootstrap(doc, problems):
    """Returns what the file was checked as ("bootstrap")."""
    b = parse_message(doc, bootstrap_pb2.Bootstrap, ROOT, problems)
    if b is None:
        return "bootstrap"
    sr = b.get("static_resources", {})
    plugins = _filter_plugins(sr, problems)
    if not plugins:
        problems.add("static_resources.listeners", "no HttpConnectionManager with the ferrogate Wasm filter")
    monitors = [m.get("name") for m in b.get("overload_manager", {}).get("resource_monitors", [])]
    if "envoy.resource_monitors.global_downstream_max_connections" not in monitors:
        problems.add("overload_manager.resource_monitors",
                     "no global_downstream_max_connections: nothing bounds the client connections")
    check_bootstrap_tags(b, ROOT, problems)
    clusters = [(c, f"static_resources.clusters[{i}]") for i, c in enumerate(sr.get("clusters", []))]
    for plugin, ppath in plugins:
        check_clusters(clusters, plugin, ppath, problems, "static_resources.clusters")
    return "bootstrap"
