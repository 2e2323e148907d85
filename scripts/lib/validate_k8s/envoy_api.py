"""scripts/validate-envoy imported as a module (`ve`): its proto parsing and its checks of
ferrogate's contract with Envoy are reused as they are, not copied. Also the Envoy types the
Envoy Gateway simulation patches and parses."""

import importlib.machinery
import importlib.util

from .documents import REPO


def _import_validate_envoy():
    path = REPO / "scripts" / "validate-envoy"
    # The file has no .py suffix, so it needs an explicit source loader.
    loader = importlib.machinery.SourceFileLoader("validate_envoy", str(path))
    spec = importlib.util.spec_from_loader("validate_envoy", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


ve = _import_validate_envoy()

# Imported after validate-envoy, which set up the protobuf descriptor pool first.
from envoy.config.core.v3 import extension_pb2  # noqa: E402
from envoy.config.endpoint.v3 import endpoint_pb2  # noqa: E402
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2  # noqa: E402

# Istio's ECDS patches carry a TypedExtensionConfig (validate-envoy predates them).
ve.ENVOYFILTER_TYPES.setdefault("EXTENSION_CONFIG", extension_pb2.TypedExtensionConfig)

T = ve.T
T_WASM = ve.T_WASM
T_HCM = ve.T_HCM
T_LISTENER = T + "envoy.config.listener.v3.Listener"
T_ROUTECFG = T + "envoy.config.route.v3.RouteConfiguration"
T_CLUSTER = T + "envoy.config.cluster.v3.Cluster"
EG_RESOURCE_TYPES = {  # the types an EnvoyPatchPolicy may patch (its CRD's enum)
    T_LISTENER: ve.listener_pb2.Listener,
    T_ROUTECFG: ve.route_pb2.RouteConfiguration,
    T_CLUSTER: ve.cluster_pb2.Cluster,
    T + "envoy.config.endpoint.v3.ClusterLoadAssignment": endpoint_pb2.ClusterLoadAssignment,
    T + "envoy.extensions.transport_sockets.tls.v3.Secret": secret_pb2.Secret,
}
