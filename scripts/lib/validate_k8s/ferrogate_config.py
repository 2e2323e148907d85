"""ferrogate's own configuration wherever a manifest carries it: the config document (a
ConfigMap the sidecar reads, or a filter's inline `config`) and the filter's plugin
configuration.

`ferrogate check --config` is the judge of a config document: the binary knows every key and
rejects an unknown one with its path, so no list of keys is kept here. validate-envoy's checks
add ferrogate's contract with Envoy (no provider key in clear, a cluster per provider, ...);
their own lists of config keys lag behind the binary, so their unknown-key findings inside a
config document are left to `ferrogate check`. (The inline configs of EnvoyFilter and
WasmPlugin documents are still judged by those lists, inside validate-envoy's own checks.)
"""

import os
import subprocess
import tempfile
from pathlib import Path

import yaml

from .documents import REPO, rel
from .envoy_api import ve

FERROGATE_CANDIDATES = [REPO / "target" / "native" / "ferrogate", REPO / "target" / "debug" / "ferrogate"]


def find_ferrogate():
    """FERROGATE_BIN, else target/native/ferrogate, else target/debug/ferrogate (as check-helm
    looks); None when none is executable."""
    candidates = [Path(os.environ["FERROGATE_BIN"])] if os.environ.get("FERROGATE_BIN") else FERROGATE_CANDIDATES
    return next((c for c in candidates if os.access(c, os.X_OK)), None)


def missing_binary_message():
    looked = os.environ.get("FERROGATE_BIN") or ", ".join(rel(c) for c in FERROGATE_CANDIDATES)
    return f"no ferrogate binary to run `ferrogate check` ({looked}): build it or set FERROGATE_BIN"


def ferrogate_check(cfg, path, problems):
    """`ferrogate check --config` on the document; each line it prints on failure is a problem.
    Without a binary the document is unjudged, which is reported rather than passed."""
    binary = find_ferrogate()
    if binary is None:
        problems.add(path, missing_binary_message())
        return
    with tempfile.TemporaryDirectory(prefix="validate-k8s-") as tmp:
        f = Path(tmp) / "ferrogate.yaml"
        f.write_text(yaml.safe_dump(cfg, sort_keys=False))
        # A clean environment: the verdict must not depend on the shell running the check.
        r = subprocess.run([str(binary), "check", "--config", str(f)], capture_output=True, text=True,
                           env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, timeout=60)
    if r.returncode != 0:
        for line in (r.stdout + r.stderr).replace(str(f) + ": ", "").strip().splitlines():
            problems.add(path, f"ferrogate check: {line}")


def _unknown_key_in_document(item, document_path):
    """A validate-envoy finding about a key of the config document (not of the plugin itself)."""
    return item.startswith(document_path + ".") and ": unknown key" in item


def without_document_keys(items, problems):
    """validate-envoy's findings on a Wasm filter (as check_hcm makes them), less its unknown keys
    inside the inline config document: check_eep has put that document through `ferrogate check`."""
    for item in items:
        if not (".configuration.value.config." in item.split(": ", 1)[0] and ": unknown key" in item):
            problems.add("", item)


def check_config_document(cfg, path, problems):
    """A whole ferrogate config document, as `ferrogate sidecar --config` reads it."""
    sub = ve.Problems()
    ve.check_plugin_config({"config": cfg}, "(plugin)", sub)
    # An empty list is a valid document for the sidecar (`ferrogate check` accepts it: a chart's
    # default); validate-envoy's "missing or empty" is about a filter's inline config.
    empty = {f"(plugin).config.{k}: missing or empty" for k in ("providers", "models") if cfg.get(k) == []}
    for item in sub.items:
        if item not in empty and not _unknown_key_in_document(item, "(plugin).config"):
            problems.add("", item.replace("(plugin).config", path))
    ferrogate_check(cfg, path, problems)


def check_plugin_entry(plugin, path, problems):
    """The filter's JSON plugin configuration: its own keys by validate-envoy, an inline config
    document by `ferrogate check` as well."""
    sub = ve.Problems()
    ve.check_plugin_config(plugin, path, sub)
    for item in sub.items:
        if not _unknown_key_in_document(item, f"{path}.config"):
            problems.add("", item)
    if isinstance(plugin, dict) and isinstance(plugin.get("config"), dict):
        ferrogate_check(plugin["config"], f"{path}.config", problems)


def ferrogate_config_in(doc):
    """(key, config) of a ConfigMap entry holding a ferrogate config document, else None."""
    data = doc.data.get("data") if isinstance(doc.data, dict) else None
    for key, text in (data.items() if isinstance(data, dict) else []):
        try:
            value = yaml.safe_load(text) if isinstance(text, str) else None
        except yaml.YAMLError:
            continue
        if isinstance(value, dict) and "providers" in value and "models" in value:
            return key, value
    return None
