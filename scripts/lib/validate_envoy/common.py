"""Where things are, the names ferrogate's filter and Envoy's configuration agree on, and the
problem list every check writes to."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

NAME = "ferrogate"  # the Wasm filter's name, root_id and vm_id
CLUSTER_HEADER = "x-ferrogate-cluster"  # the filter names the provider's cluster in it
ENDPOINT_HEADER = "x-gateway-destination-endpoint"  # the pool endpoint the filter picked
SIDECAR_CLUSTER = "ferrogate_sidecar"
ENVOY_DEFAULT_BUFFER = 1024 * 1024  # a listener's per_connection_buffer_limit_bytes default
DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024  # the filter's max_body_bytes default
# The routing header and the headers only `ferrogate serve`'s host sets: never sent upstream.
HOST_ONLY_HEADERS = ("x-ferrogate-cluster", "x-ferrogate-attempt", "x-ferrogate-tried",
                     "x-ferrogate-failover", "x-ferrogate-abandoned")


class Problems:
    """Errors of one file, each `field.path: message`."""

    def __init__(self):
        self.items = []

    def add(self, path, message):
        self.items.append(f"{path}: {message}" if path else message)


def rel(p):
    """A path relative to the repository when it is inside it."""
    try:
        return str(Path(p).resolve().relative_to(REPO))
    except ValueError:
        return str(p)
