"""Envoy's API as protobuf messages (the generated modules of the PyPI package xds-protos):
every message is parsed with json_format.ParseDict, unknown fields rejected, each `typed_config`
or `Any` resolved through its `@type`."""

import importlib
import re
from pathlib import Path

from google.protobuf import descriptor_pool, json_format
from google.protobuf import struct_pb2  # noqa: F401
from google.protobuf import wrappers_pb2  # noqa: F401  (StringValue in `configuration`)

# The messages the shipped files use, imported explicitly so their `@type`s resolve; any other
# envoy.* `@type` is resolved by importing its package on demand (see _resolve_types).
from envoy.config.bootstrap.v3 import bootstrap_pb2  # noqa: F401
from envoy.config.cluster.v3 import cluster_pb2  # noqa: F401
from envoy.config.core.v3 import extension_pb2  # noqa: F401
from envoy.config.listener.v3 import listener_components_pb2, listener_pb2  # noqa: F401
from envoy.config.route.v3 import route_components_pb2, route_pb2  # noqa: F401
from envoy.extensions.access_loggers.stream.v3 import stream_pb2  # noqa: F401
from envoy.extensions.filters.http.credential_injector.v3 import credential_injector_pb2  # noqa: F401
from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401
from envoy.extensions.filters.http.upstream_codec.v3 import upstream_codec_pb2  # noqa: F401
from envoy.extensions.filters.http.wasm.v3 import wasm_pb2 as http_wasm_pb2  # noqa: F401
from envoy.extensions.filters.network.http_connection_manager.v3 import (  # noqa: F401
    http_connection_manager_pb2 as hcm_pb2,
)
from envoy.extensions.http.injected_credentials.generic.v3 import generic_pb2  # noqa: F401
from envoy.extensions.load_balancing_policies.override_host.v3 import override_host_pb2  # noqa: F401
from envoy.extensions.load_balancing_policies.round_robin.v3 import round_robin_pb2  # noqa: F401
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2  # noqa: F401
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2  # noqa: F401

T = "type.googleapis.com/"
T_HCM = T + "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
T_WASM = T + "envoy.extensions.filters.http.wasm.v3.Wasm"
T_ROUTER = T + "envoy.extensions.filters.http.router.v3.Router"
T_STRING = T + "google.protobuf.StringValue"
T_TLS = T + "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
T_OVERRIDE_HOST = T + "envoy.extensions.load_balancing_policies.override_host.v3.OverrideHost"

ROOT = "(document)"  # the path of a whole message: its fields are named without a prefix


def _walk_types(node, out):
    if isinstance(node, dict):
        t = node.get("@type")
        if isinstance(t, str):
            out.add(t)
        for v in node.values():
            _walk_types(v, out)
    elif isinstance(node, list):
        for v in node:
            _walk_types(v, out)


def _import_package_of(full):
    """Imports every generated module of the package of a message's full name."""
    package = full.rsplit(".", 1)[0]
    try:
        pkg = importlib.import_module(package)
    except ImportError:
        return  # ParseDict reports the unknown type with its path
    for d in getattr(pkg, "__path__", []):
        for f in sorted(Path(d).glob("*_pb2.py")):
            try:
                importlib.import_module(f"{package}.{f.stem}")
            except Exception:  # pragma: no cover - a broken module only hides its own types
                pass


def _resolve_types(doc):
    """Imports the generated module of every `@type` found that is not registered yet."""
    pool = descriptor_pool.Default()
    types = set()
    _walk_types(doc, types)
    for t in sorted(types):
        full = t.rsplit("/", 1)[-1]
        try:
            pool.FindMessageTypeByName(full)
        except KeyError:
            _import_package_of(full)


def _parse_error(text):
    """Turns protobuf's chained ParseError text into (field path, message)."""
    text = text.split("\n Available Fields", 1)[0].strip().rstrip(".")
    text = re.sub(r"^(Failed to parse \w+ field: )+", "", text)
    m = re.search(r' at "?([A-Za-z0-9_]+)((?:[.\[][^" ]*)?)"?$', text)
    if not m:
        return None, text
    field = m.group(2).lstrip(".")
    return field, text[:m.start()]


def parse_message(doc, message_cls, path, problems):
    """ParseDict with unknown fields rejected; returns the canonical dict or None."""
    if not isinstance(doc, dict):
        problems.add(path, f"expected a mapping for {message_cls.DESCRIPTOR.full_name}, got {type(doc).__name__}")
        return None
    _resolve_types(doc)
    msg = message_cls()
    try:
        json_format.ParseDict(doc, msg, ignore_unknown_fields=False)
    except json_format.ParseError as e:
        field, message = _parse_error(str(e))
        where = path if not field else (field if path == ROOT else f"{path}.{field}")
        problems.add(where, f"{message} (schema {message_cls.DESCRIPTOR.full_name})")
        return None
    except Exception as e:  # noqa: BLE001 - protobuf raises TypeError/ValueError for some inputs
        problems.add(path, f"not a valid {message_cls.DESCRIPTOR.full_name}: {type(e).__name__}: {e}")
        return None
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)
