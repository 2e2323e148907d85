"""The ferrogate Wasm filter in Envoy: its identity and flags, and its plugin configuration (the
JSON in `configuration`). The plugin configuration, its inline config document included, is
judged by the filter's own parser (PluginConfig::from_json_slice, filter/core/src/plugin.rs)
through `ferrogate check --plugin-config`: no copy of its keys or rules is kept here. Only
Envoy's side of the contract, which the binary cannot know, is checked in Python: the routes
match the filter's cluster_header, host_failover stays off, no provider key is written in
clear; the clusters the plugin configuration names are clusters.py's."""

import json

from .common import CLUSTER_HEADER, NAME
from .config_document import judge, no_written_keys
from .protos import T_STRING


def _check_envoy_side(pc, path, problems):
    """What Envoy's configuration around the filter requires of its plugin configuration."""
    header = pc.get("cluster_header", CLUSTER_HEADER)
    if header != CLUSTER_HEADER:
        problems.add(f"{path}.cluster_header", f"is {header!r}; the shipped routes match {CLUSTER_HEADER!r}")
    if pc.get("host_failover") is True:
        problems.add(f"{path}.host_failover", "must not be true in Envoy: only `ferrogate serve`'s host sets the "
                     "failover headers; here they would come from the client")
    if isinstance(pc.get("config"), dict):
        no_written_keys(pc["config"], f"{path}.config", problems)


def check_plugin_config(pc, path, problems, text=None, judged=False):
    """Checks the filter's plugin configuration (a parsed JSON value); returns it (a dict) or
    None. It goes through `ferrogate check --plugin-config` as `text`, the JSON the filter is
    handed when the caller has it (an Envoy StringValue's), else as `pc` serialized; each problem
    is reported under `path`. Unless `judged`: checked already where it is written (the Envoy
    Gateway simulation meets an EnvoyExtensionPolicy's configuration again), when only the dict
    is returned."""
    if not isinstance(pc, dict):
        # Envoy hands the filter a JSON object (the filter's parser would also take an array).
        problems.add(path, "plugin configuration must be a JSON object")
        return None
    if not judged:
        _check_envoy_side(pc, path, problems)
        text = json.dumps(pc, default=str) if text is None else text
        judge("--plugin-config", text, "plugin-config.json", path, problems)
    return pc


def _check_identity(cfg, cpath, problems):
    """Names, VM, code and the flags the filter needs (a canonical PluginConfig dict)."""
    if cfg.get("name") != NAME:
        problems.add(f"{cpath}.name", f"is {cfg.get('name')!r}, expected {NAME!r}")
    if cfg.get("root_id") != NAME:
        problems.add(f"{cpath}.root_id", f"is {cfg.get('root_id')!r}, expected {NAME!r} (the filter's root context)")
    vm = cfg.get("vm_config", {})
    if vm.get("vm_id") != NAME:
        problems.add(f"{cpath}.vm_config.vm_id", f"is {vm.get('vm_id')!r}, expected {NAME!r} (shared-data namespace)")
    if not vm.get("code"):
        problems.add(f"{cpath}.vm_config.code", "missing (local.filename of ferrogate_filter.wasm)")
    if cfg.get("allow_on_headers_stop_iteration") is not True:
        problems.add(f"{cpath}.allow_on_headers_stop_iteration",
                     "must be true (Envoy >= 1.35): the filter routes on the request body")
    if cfg.get("fail_open"):
        problems.add(f"{cpath}.fail_open", "must not be set: a failed filter would bypass authentication")


def check_wasm_filter(wasm, path, problems, judged=()):
    """`wasm` is a canonical Wasm dict; returns the plugin configuration dict or None. `judged`:
    plugin configuration texts checked already where they are written (not judged again)."""
    cfg = wasm.get("config", {})
    cpath = f"{path}.config"
    _check_identity(cfg, cpath, problems)
    conf = cfg.get("configuration")
    if not isinstance(conf, dict):
        problems.add(f"{cpath}.configuration", "missing (StringValue with the plugin JSON)")
        return None
    if conf.get("@type") != T_STRING:
        problems.add(f"{cpath}.configuration.@type", f"is {conf.get('@type')!r}, expected {T_STRING}")
        return None
    value = conf.get("value", "")
    try:
        pc = json.loads(value)
    except json.JSONDecodeError as e:
        problems.add(f"{cpath}.configuration.value", f"not JSON: {e}")
        return None
    return check_plugin_config(pc, f"{cpath}.configuration.value", problems, value, value in judged)
