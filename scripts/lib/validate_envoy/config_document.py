"""ferrogate's config document on its own (the file the sidecar reads, e.g. a ConfigMap's).

`ferrogate check --config` is its judge (ferrogate_bin.py): the binary knows every key (it
rejects an unknown one with its path) and every rule of the document, so no copy of its schema
is kept here. Only what the binary cannot know is checked in Python: a provider key must not be
written into Envoy's or Kubernetes' configuration (no_written_keys, also applied to a filter's
inline document by plugin.py, whose document the binary judges with `--plugin-config`). What the
document means for Envoy - a cluster per provider, the sidecar a pool needs - is checked with
the clusters (clusters.py).
"""

import yaml

from .ferrogate_bin import ferrogate_check, find_ferrogate, missing_binary_message

BIN = "ferrogate check: "  # how a problem reported by the binary begins


def no_written_keys(cfg, path, problems):
    """No provider key (`api_key`) in clear in a config document (a dict)."""
    providers = cfg.get("providers")
    for i, p in enumerate(providers if isinstance(providers, list) else []):
        if isinstance(p, dict) and "api_key" in p:
            problems.add(f"{path}.providers[{i}].api_key",
                         "a provider key must not be written in Envoy or Kubernetes configuration (use an "
                         "upstream credential_injector secret, or the sidecar's api_key_env from a Secret)")


def judge(flag, text, name, path, problems):
    """`ferrogate check FLAG` on the text; each problem it prints goes under `path`. Without a
    binary the text is reported unjudged, never passed."""
    binary = find_ferrogate()
    if binary is None:
        problems.add(path, missing_binary_message())
        return
    for line in ferrogate_check(binary, flag, text, name):
        problems.add(path, BIN + line)


def check_config_document(cfg, path, problems):
    """A whole config document: `ferrogate check --config`, and no provider key in clear."""
    if not isinstance(cfg, dict):
        problems.add(path, "must be an object (the ferrogate config document)")
        return
    no_written_keys(cfg, path, problems)
    judge("--config", yaml.safe_dump(cfg, sort_keys=False), "ferrogate.yaml", path, problems)
