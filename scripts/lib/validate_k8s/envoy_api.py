"""What validate-k8s takes from scripts/lib/validate_envoy (the package behind
scripts/validate-envoy): its proto parsing and its checks of ferrogate's contract with Envoy,
reused as they are, not copied; and the Envoy types the Envoy Gateway simulation patches and
parses."""

from validate_envoy.clusters import check_clusters  # noqa: F401
from validate_envoy.common import NAME, Problems  # noqa: F401
from validate_envoy.config_document import check_config_document  # noqa: F401
from validate_envoy.hcm import check_buffer_limit, check_hcm  # noqa: F401
from validate_envoy.istio import validate_envoyfilter, validate_wasmplugin  # noqa: F401
from validate_envoy.plugin import check_plugin_config  # noqa: F401
from validate_envoy.protos import (T, T_HCM, T_ROUTER, T_STRING, T_WASM, bootstrap_pb2, cluster_pb2,  # noqa: F401
                                   hcm_pb2, listener_pb2, parse_message, route_pb2)
from validate_envoy.stats_tags import check_bootstrap_tags  # noqa: F401

# Imported after validate_envoy.protos, which set up the protobuf descriptor pool first.
from envoy.config.endpoint.v3 import endpoint_pb2  # noqa: E402
from envoy.extensions.transport_sockets.tls.v3 import secret_pb2  # noqa: E402

T_LISTENER = T + "envoy.config.listener.v3.Listener"
T_ROUTECFG = T + "envoy.config.route.v3.RouteConfiguration"
T_CLUSTER = T + "envoy.config.cluster.v3.Cluster"
EG_RESOURCE_TYPES = {  # the types an EnvoyPatchPolicy may patch (its CRD's enum)
    T_LISTENER: listener_pb2.Listener,
    T_ROUTECFG: route_pb2.RouteConfiguration,
    T_CLUSTER: cluster_pb2.Cluster,
    T + "envoy.config.endpoint.v3.ClusterLoadAssignment": endpoint_pb2.ClusterLoadAssignment,
    T + "envoy.extensions.transport_sockets.tls.v3.Secret": secret_pb2.Secret,
}
