"""ferrogate's config document in a ConfigMap (the file the sidecar reads), found by its shape.

The checks of ferrogate's configuration are validate_envoy's (see envoy_api.py), which run the
binary for them (validate_envoy.ferrogate_bin): a filter's plugin configuration, its inline
config document included, goes through `ferrogate check --plugin-config`, the filter's own
parser (validate_envoy.plugin); a ConfigMap's document through `ferrogate check --config`
(validate_envoy.config_document). No list of keys is kept in Python; what is, is Envoy's side of
the contract and the rule that no provider key is written in clear. Each plugin configuration
goes through the binary once: where the Envoy Gateway simulation meets an EnvoyExtensionPolicy's
again, unchanged by any patch, it is not judged a second time.
"""

import yaml


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
