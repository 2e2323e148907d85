"""Contract checks of a rendered ferrogate chart (used by scripts/check-helm).

A render is the output of `helm template`. Each check returns a list of problems (strings); an
empty list means the render keeps the contract between the chart and the ferrogate binary:

  1. the configuration in the rendered ConfigMap passes `ferrogate check --config`, and every
     variable it names (api_key_env, store.url_env, redis.url_env) reaches the container from a
     Secret;
  2. the probes are HTTP GETs of /healthz and /readyz on the admin listener's port, and those
     paths answer on a real admin listener (a short-lived `ferrogate sidecar` on loopback);
     a container with an endpoint picker (`serve --epp-listen`) is probed by gRPC health on the
     picker's port instead: `liveness` (startup, liveness) and `readiness`;
  3. the ports agree: the --listen / --admin-listen / --sidecar-listen flags, the container
     ports, the Services' targetPorts, the NetworkPolicy, the monitors and the Envoy cluster;
  4. no secret value: no Secret object, every secret-looking variable from a secretKeyRef, no
     provider api_key in the configuration, and none of the known test secrets in the text;
  5. the securityContext: non-root, read-only root filesystem, no privilege escalation, all
     capabilities dropped, seccomp RuntimeDefault, writable paths on an emptyDir.
  6. the endpoint picker (epp): the Service port reaching --epp-listen says appProtocol
     kubernetes.io/h2c; each InferencePool's endpointPickerRef is a rendered Service whose port
     (port.number, required for a Service) leads to a --epp-listen listener of the pods it
     selects, and the InferencePool has a selector and target ports; every picker is some
     InferencePool's; each HTTPRoute has a parent and routes only to rendered InferencePools.
  7. ferrogate's metric labels: every EnvoyProxy merges (spec.bootstrap, type Merge) exactly the
     stats_tags of the repository's envoy/stats-tags.yaml, which the chart carries as a copy in
     files/stats-tags.yaml (the same list, names, regexes and order).
  8. Kubernetes API access, only for pool discovery and leader election: a pod whose
     configuration has a provider with endpoints_inference_pool gets its ServiceAccount token,
     that pool ("NAME" or "NAMESPACE/NAME", the pod's namespace by default) is a rendered
     InferencePool, and a rendered RoleBinding in its namespace binds that ServiceAccount to a
     rendered Role granting get, list and watch on pods and inferencepools
     (inference.networking.k8s.io); a picker with --epp-lease gets its token too, and a bound
     Role granting get, create and update on leases (coordination.k8s.io); any other pod of the
     chart mounts no token, no Role grants more than those, and none grants leases unless a
     picker elects a leader.
  9. leader election (--epp-lease): the Lease is the chart's "<Deployment name>-epp",
     --epp-lease-seconds is given and within 1..3600; and since only the leader
     is Ready, no PodDisruptionBudget keeps a pod of it available (the leader could never be
     evicted: every drain of its node would block) and its rolling update may take every pod
     down (maxUnavailable at least the replicas, or Recreate), or the old leader is never
     stopped and the rollout stalls.

What the render holds (pods, containers, flags, listeners, the --config file) is read by
helm/tests/render.py.
"""

import os
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from render import (config_source, config_text, dig, ferrogate_containers, label, listeners, load, loopback,
                    mount_of, parse_cmd, pods)
# From scripts/lib, which scripts/check-helm puts on sys.path: the one runner of `ferrogate check`,
# shared with scripts/validate-envoy and scripts/validate-k8s.
from validate_envoy.ferrogate_bin import ferrogate_check

# Variables that hold secrets whatever the configuration says (the binary's own tokens).
SECRET_ENV = re.compile(r"(TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|MASTER_KEY|_KEY$|_URL$|_DSN$|HEADERS)", re.I)
# Named like a secret, but the chart's schema lets no credential in (a scheme, host and port).
PLAIN_ENV = {"FERROGATE_GATEWAY_URL"}
LISTENER_OF_PORT_NAME = {"gateway": "--listen", "admin": "--admin-listen", "sidecar": "--sidecar-listen",
                         "grpc-ext-proc": "--epp-listen"}
PROBE_PATHS = {"livenessProbe": {"/healthz"}, "startupProbe": {"/healthz"},
               "readinessProbe": {"/readyz", "/readyz?strict=true"}}
# The endpoint picker's gRPC health services (docs/endpoint-picker.md) each probe may ask for.
GRPC_PROBE_SERVICES = {"livenessProbe": {"liveness"}, "startupProbe": {"liveness"}, "readinessProbe": {"readiness"}}
H2C = "kubernetes.io/h2c"
INFERENCE_GROUP = "inference.networking.k8s.io"
# ferrogate's metric labels in Envoy: the stats_tags every bootstrap the project ships carries.
STATS_TAGS = Path(__file__).resolve().parents[2] / "envoy" / "stats-tags.yaml"


def check_config(docs, where, c, spec, flags, ferrogate_bin):
    """(1) The ConfigMap's document passes `ferrogate check --config`; its variables come from
    Secrets, and it holds no provider key."""
    src = config_source(docs, c, spec, flags)
    if isinstance(src, str):
        return [f"{where}: {src}"]
    cm_name, key, cm = src
    if cm is None:
        return []  # an existing ConfigMap, not part of the render: nothing to check here
    text = (cm.get("data") or {}).get(key)
    if text is None:
        return [f"{where}: ConfigMap {cm_name} has no key {key} (the --config file)"]
    rejected = ferrogate_check(ferrogate_bin, "--config", text, key)
    problems = [f"{where}: ferrogate check rejects ConfigMap {cm_name}/{key}: " + "; ".join(rejected)] \
        if rejected else []
    cfg = yaml.safe_load(text)
    return problems + _config_variables(where, c, cfg if isinstance(cfg, dict) else {}, cm_name)


def _config_variables(where, c, cfg, cm_name):
    """Every variable the configuration names reaches the container from a Secret; no provider
    key is written in it."""
    problems = []
    env_names = {e["name"] for e in c.get("env") or [] if dig(e, "valueFrom", "secretKeyRef")}
    has_env_from = any(dig(e, "secretRef", "name") for e in c.get("envFrom") or [])
    providers = [p for p in cfg.get("providers") or [] if isinstance(p, dict)]
    wanted = [(f"providers[{i}].api_key_env", p.get("api_key_env")) for i, p in enumerate(providers)]
    wanted += [("store.url_env", dig(cfg, "store", "url_env")), ("redis.url_env", dig(cfg, "redis", "url_env"))]
    for path, var in wanted:
        if var and var not in env_names and not has_env_from:
            problems.append(f"{where}: the configuration's {path} names {var}, which no secretKeyRef (or envFrom) "
                            "gives")
    for i, p in enumerate(providers):
        if "api_key" in p:
            problems.append(f"{where}: ConfigMap {cm_name} holds providers[{i}].api_key, a provider key in clear")
    return problems


def check_grpc_probes(where, c, epp_port):
    """(2) An endpoint picker's probes: gRPC health on the --epp-listen port, asking for the
    services the picker reports."""
    problems = []
    for kind, services in GRPC_PROBE_SERVICES.items():
        probe = c.get(kind)
        if probe is None:
            if kind != "startupProbe":
                problems.append(f"{where}: no {kind}")
            continue
        grpc = probe.get("grpc")
        if not grpc:
            problems.append(f"{where}: {kind} is not a gRPC health check of the endpoint picker (--epp-listen)")
            continue
        if grpc.get("port") != epp_port:
            problems.append(f"{where}: {kind} gRPC port {grpc.get('port')} is not the --epp-listen port {epp_port}")
        if grpc.get("service") not in services:
            problems.append(f"{where}: {kind} asks for gRPC health service {grpc.get('service')!r} "
                            f"(expected {' or '.join(sorted(services))})")
    return problems


def check_probes(where, c, sub, flags, live):
    """(2) HTTP probes of the real endpoints, on the admin listener's port (an endpoint
    picker: gRPC health on its own port)."""
    problems = []
    epp = listeners(sub, flags).get("--epp-listen")
    if epp:
        return check_grpc_probes(where, c, epp[1])
    for kind in PROBE_PATHS:
        if (c.get(kind) or {}).get("grpc"):
            problems.append(f"{where}: {kind} is a gRPC probe, but no --epp-listen listener answers gRPC")
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
    admin_port = listeners(sub, flags)["--admin-listen"][1]
    for kind, allowed in PROBE_PATHS.items():
        probe = c.get(kind)
        if probe is None:
            if kind != "startupProbe":
                problems.append(f"{where}: no {kind}")
            continue
        get = probe.get("httpGet")
        if not get:
            problems.append(f"{where}: {kind} is not an httpGet of the admin listener")
            continue
        path, port = get.get("path"), get.get("port")
        if path not in allowed:
            problems.append(f"{where}: {kind} path {path} (expected {' or '.join(sorted(allowed))})")
        elif path in live and live[path] not in (200, 503):
            problems.append(f"{where}: {kind} path {path} answers {live[path]} on a real admin listener")
        number = ports.get(port) if isinstance(port, str) else port
        if isinstance(port, str) and port not in ports:
            problems.append(f"{where}: {kind} port {port} names no container port")
        elif number != admin_port:
            problems.append(f"{where}: {kind} port {port} ({number}) is not the admin listener's port {admin_port}")
    return problems


def check_ports(where, c, sub, flags):
    """(3) Container ports, one per listener reachable from outside the pod, and nothing else."""
    problems, opened = [], listeners(sub, flags)
    declared = {p.get("containerPort"): p.get("name") for p in c.get("ports") or []}
    for flag, (host, port) in opened.items():
        if port <= 0:
            if flag == "--admin-listen":
                problems.append(f"{where}: {flag} has no fixed port: probes and scrapes cannot find it")
            continue
        if loopback(host) and port in declared:
            problems.append(f"{where}: container port {declared[port]} ({port}) is {flag} on loopback, unreachable")
        if not loopback(host) and port not in declared:
            problems.append(f"{where}: {flag} {host}:{port} has no container port")
    for number, name in declared.items():
        base = (name or "").removeprefix("fg-")
        flag = LISTENER_OF_PORT_NAME.get(base)
        if flag is None or flag not in opened:
            problems.append(f"{where}: container port {name} ({number}) is no listener of ferrogate {sub}")
        elif opened[flag][1] != number:
            problems.append(f"{where}: container port {name} is {number} but {flag} listens on {opened[flag][1]}")
    env = {e["name"]: e for e in c.get("env") or []}
    for flag, var in (("--admin-listen", "FERROGATE_ADMIN_TOKEN"), ("--sidecar-listen", "FERROGATE_INTERNAL_TOKEN")):
        if flag in opened and not loopback(opened[flag][0]) and not (sub == "serve" and flag == "--sidecar-listen"):
            if not dig(env.get(var, {}), "valueFrom", "secretKeyRef"):
                problems.append(f"{where}: {flag} is not loopback, so ferrogate refuses to start without {var}")
    return problems


def check_secrets(where, c, docs):
    """(4) Secret-looking variables only from secretKeyRef; envFrom only from Secrets."""
    problems = []
    for e in c.get("env") or []:
        name, vf = e.get("name", ""), e.get("valueFrom")
        if SECRET_ENV.search(name) and name not in PLAIN_ENV and not dig(vf or {}, "secretKeyRef"):
            problems.append(f"{where}: env {name} holds a secret but is not from a secretKeyRef")
    for e in c.get("envFrom") or []:
        if "secretRef" not in e:
            problems.append(f"{where}: envFrom {e} is not a secretRef")
    return problems


def check_security(where, c, spec, owned, flags):
    """(5) Hardened container; writable paths on emptyDir volumes."""
    problems, sc, psc = [], c.get("securityContext") or {}, spec.get("securityContext") or {}
    want = {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False}
    for k, v in want.items():
        if sc.get(k) is not v:
            problems.append(f"{where}: securityContext.{k} must be {str(v).lower()}")
    if sc.get("runAsNonRoot") is not True and not (owned and psc.get("runAsNonRoot") is True):
        problems.append(f"{where}: runAsNonRoot must be true")
    if sc.get("privileged"):
        problems.append(f"{where}: privileged")
    caps = sc.get("capabilities") or {}
    if "ALL" not in (caps.get("drop") or []) or caps.get("add"):
        problems.append(f"{where}: capabilities must drop ALL and add none")
    seccomp = dig(sc, "seccompProfile", "type") or (owned and dig(psc, "seccompProfile", "type"))
    if seccomp != "RuntimeDefault":
        problems.append(f"{where}: seccompProfile must be RuntimeDefault")
    vols = {v.get("name"): v for v in spec.get("volumes") or []}
    for flag in ("--snapshot-cache", "--usage-file"):
        path = flags.get(flag)
        if not path:
            continue
        m = mount_of(c, path)
        if m is None or m.get("readOnly") or "emptyDir" not in vols.get(m["name"], {}):
            problems.append(f"{where}: {flag} {path} is not on a writable emptyDir (the root filesystem is read-only)")
    return problems


def _matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_wiring(docs, found):
    """(3) Services, NetworkPolicies, monitors and the Envoy cluster point at real listeners."""
    owned = [(where, labels, c, listeners(*parse_cmd(c))) for where, spec, labels, own, c in found if own]
    gateway_pod = [(where, c, listeners(*parse_cmd(c))) for where, spec, labels, own, c in found if not own]
    services = [d for d in docs if d.get("kind") == "Service"]
    return (_check_services(services, owned) + _check_network_policies(docs, owned)
            + _check_monitors(docs, services, gateway_pod) + _check_envoy_clusters(docs, services, owned, gateway_pod)
            + check_inference(docs, services, owned))


def _service_listeners(svc, port, owned):
    """The (where, flag) listeners a Service port reaches in the pods it selects."""
    out = []
    target = port.get("targetPort", port.get("port"))
    for where, labels, c, ls in owned:
        if _matches(dig(svc, "spec", "selector") or {}, labels):
            cp = {x.get("name"): x.get("containerPort") for x in c.get("ports") or []}
            number = cp.get(target) if isinstance(target, str) else target
            out += [(where, flag) for flag, (_, n) in ls.items() if n == number]
    return out


def check_inference(docs, services, owned):
    """(6) The endpoint picker's Service speaks h2c; each InferencePool's endpointPickerRef
    reaches a --epp-listen listener through a rendered Service port; every picker serves some
    InferencePool; every HTTPRoute routes to rendered InferencePools."""
    problems, reached = [], set()
    for svc in services:
        for p in dig(svc, "spec", "ports") or []:
            if any(flag == "--epp-listen" for _, flag in _service_listeners(svc, p, owned)) \
                    and p.get("appProtocol") != H2C:
                problems.append(f"{label(svc)}: port {p.get('name')} reaches the endpoint picker but its appProtocol "
                                f"is {p.get('appProtocol')!r}, not {H2C} (gRPC without TLS)")
    pools = [d for d in docs if d.get("kind") == "InferencePool"]
    for pool in pools:
        ns, spec = dig(pool, "metadata", "namespace"), pool.get("spec") or {}
        if not dig(spec, "selector", "matchLabels"):
            problems.append(f"{label(pool)}: spec.selector.matchLabels is empty (it selects the model server pods)")
        if not spec.get("targetPorts") or not all(isinstance(t, dict) and t.get("number") for t in spec["targetPorts"]):
            problems.append(f"{label(pool)}: spec.targetPorts must list the model servers' port numbers")
        ref = spec.get("endpointPickerRef")
        if not isinstance(ref, dict):
            continue  # the in-proxy filter picks (k8s/inference-pool/20-inferencepool.yaml)
        if ref.get("group", "") != "" or ref.get("kind", "Service") != "Service":
            problems.append(f"{label(pool)}: endpointPickerRef is {ref.get('group')}/{ref.get('kind')}, not a Service")
            continue
        number = dig(ref, "port", "number")
        if number is None:
            problems.append(f"{label(pool)}: endpointPickerRef.port.number is required for a Service")
            continue
        svc = next((s for s in services if dig(s, "metadata", "name") == ref.get("name")
                    and dig(s, "metadata", "namespace") == ns), None)
        if svc is None:
            problems.append(f"{label(pool)}: endpointPickerRef names Service {ref.get('name')}, which is not rendered "
                            "in its namespace")
            continue
        sports = [p for p in dig(svc, "spec", "ports") or [] if p.get("port") == number]
        found = [(w, f) for p in sports for w, f in _service_listeners(svc, p, owned) if f == "--epp-listen"]
        if not found:
            problems.append(f"{label(pool)}: endpointPickerRef port {number} of {label(svc)} reaches no endpoint "
                            f"picker (--epp-listen) listener (Service ports: "
                            f"{[p.get('port') for p in dig(svc, 'spec', 'ports') or []]})")
        reached.update(w for w, _ in found)
    for where, _, _, ls in owned:
        if "--epp-listen" in ls and where not in reached:
            problems.append(f"{where}: runs an endpoint picker (--epp-listen) that no rendered InferencePool's "
                            "endpointPickerRef reaches")
    names = {(dig(p, "metadata", "namespace"), dig(p, "metadata", "name")) for p in pools}
    for route in (d for d in docs if d.get("kind") == "HTTPRoute"):
        ns = dig(route, "metadata", "namespace")
        if not dig(route, "spec", "parentRefs"):
            problems.append(f"{label(route)}: no parentRefs (no Gateway routes through it)")
        refs = [b for r in dig(route, "spec", "rules") or [] for b in r.get("backendRefs") or []]
        if not refs:
            problems.append(f"{label(route)}: no backendRefs")
        for b in refs:
            if b.get("group") != INFERENCE_GROUP or b.get("kind") != "InferencePool":
                problems.append(f"{label(route)}: backendRef {b.get('group')!r}/{b.get('kind')}/{b.get('name')} is not "
                                "an InferencePool (the gateway would not ask the endpoint picker)")
            elif (b.get("namespace", ns), b.get("name")) not in names:
                problems.append(f"{label(route)}: backendRef names InferencePool {b.get('name')}, which is not rendered")
    return problems


def _check_services(services, owned):
    """Each Service selects a ferrogate pod, and targets ports its container declares."""
    problems = []
    for svc in services:
        sel = dig(svc, "spec", "selector") or {}
        pods_ = [(w, c) for w, labels, c, _ in owned if _matches(sel, labels)]
        if not pods_:
            problems.append(f"{label(svc)}: its selector matches no ferrogate pod")
        for w, c in pods_:
            cports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
            for p in dig(svc, "spec", "ports") or []:
                t = p.get("targetPort", p.get("port"))
                if (isinstance(t, str) and t not in cports) or (isinstance(t, int) and t not in cports.values()):
                    problems.append(f"{label(svc)}: port {p.get('name')} targets {t}, no container port of {w}")
    return problems


def _check_network_policies(docs, owned):
    """A NetworkPolicy opens only ports the selected ferrogate containers declare."""
    problems = []
    for np in (d for d in docs if d.get("kind") == "NetworkPolicy"):
        sel = dig(np, "spec", "podSelector", "matchLabels") or {}
        for w, labels, c, _ in owned:
            if _matches(sel, labels):
                numbers = {p.get("containerPort") for p in c.get("ports") or []}
                for rule in dig(np, "spec", "ingress") or []:
                    for p in rule.get("ports") or []:
                        if p.get("port") not in numbers:
                            problems.append(f"{label(np)}: port {p.get('port')} is no container port of {w}")
    return problems


def _check_monitors(docs, services, gateway_pod):
    """ServiceMonitors scrape a Service's admin port, PodMonitors the gateway pod's, on /metrics."""
    problems = []
    for sm in (d for d in docs if d.get("kind") == "ServiceMonitor"):
        sel = dig(sm, "spec", "selector", "matchLabels") or {}
        names = {p.get("name") for s in services if _matches(sel, dig(s, "metadata", "labels") or {})
                 for p in dig(s, "spec", "ports") or []}
        for ep in dig(sm, "spec", "endpoints") or []:
            if ep.get("port") not in names or ep.get("path") != "/metrics":
                problems.append(f"{label(sm)}: endpoint {ep.get('port')}{ep.get('path')} is not a Service's "
                                "admin /metrics")
    for pm in (d for d in docs if d.get("kind") == "PodMonitor"):
        names = {p.get("name") for _, c, _ in gateway_pod for p in c.get("ports") or []}
        for ep in dig(pm, "spec", "podMetricsEndpoints") or []:
            if ep.get("port") not in names or ep.get("path") != "/metrics":
                problems.append(f"{label(pm)}: endpoint {ep.get('port')}{ep.get('path')} is not ferrogate's "
                                "admin /metrics")
    return problems


def _check_envoy_clusters(docs, services, owned, gateway_pod):
    """Every endpoint of a cluster an EnvoyPatchPolicy adds is a filter-facing listener."""
    problems = []
    for epp in (d for d in docs if d.get("kind") == "EnvoyPatchPolicy"):
        for jp in dig(epp, "spec", "jsonPatches") or []:
            for ep in dig(jp, "operation", "value", "load_assignment", "endpoints") or []:
                for lb in ep.get("lb_endpoints") or []:
                    sa = dig(lb, "endpoint", "address", "socket_address") or {}
                    problems += _check_cluster_target(epp, sa, services, owned, gateway_pod)
    return problems


def _check_cluster_target(epp, sa, services, owned, gateway_pod):
    addr, port = sa.get("address", ""), sa.get("port_value")
    if loopback(addr):
        ok = any(ls.get("--sidecar-listen") == (addr, port) or ls.get("--sidecar-listen", ("", 0))[1] == port
                 and loopback(ls["--sidecar-listen"][0]) for _, _, ls in gateway_pod)
        return [] if ok else [f"{label(epp)}: cluster {addr}:{port} is not the in-pod sidecar listener"]
    svc_name, _, ns_rest = addr.partition(".")
    for svc in services:
        if dig(svc, "metadata", "name") == svc_name and ns_rest.startswith(f"{svc['metadata'].get('namespace')}.svc."):
            for p in dig(svc, "spec", "ports") or []:
                if p.get("port") == port:
                    target = p.get("targetPort")
                    for _, labels, c, ls in owned:
                        if _matches(svc["spec"].get("selector") or {}, labels):
                            cp = {x.get("name"): x.get("containerPort") for x in c.get("ports") or []}
                            if cp.get(target, target) == ls.get("--sidecar-listen", ("", -1))[1]:
                                return []
    return [f"{label(epp)}: cluster {addr}:{port} reaches no filter-facing listener through a rendered Service"]


def _stats_tags(bootstrap):
    tags = dig(bootstrap, "stats_config", "stats_tags") if isinstance(bootstrap, dict) else None
    return tags if isinstance(tags, list) else []


def _tag_names(tags):
    return [t.get("tag_name") if isinstance(t, dict) else t for t in tags]


def check_metric_labels(docs):
    """(7) Every EnvoyProxy merges exactly envoy/stats-tags.yaml's stats_tags into Envoy's
    bootstrap (compared as data; validate-k8s also parses the value as an Envoy Bootstrap)."""
    want = _stats_tags(yaml.safe_load(STATS_TAGS.read_text()))
    problems = []
    for d in (d for d in docs if d.get("kind") == "EnvoyProxy"):
        bs = dig(d, "spec", "bootstrap")
        if not isinstance(bs, dict) or bs.get("type") != "Merge":
            what = f"spec.bootstrap.type is {bs.get('type')!r}" if isinstance(bs, dict) else "no spec.bootstrap"
            problems.append(f"{label(d)}: {what}, not a Merge of envoy/stats-tags.yaml's stats_config: without it "
                            "the filter's metrics keep their labels in their names (Replace drops Envoy Gateway's "
                            "own bootstrap)")
            continue
        try:
            got = _stats_tags(yaml.safe_load(bs.get("value") or ""))
        except yaml.YAMLError as e:
            problems.append(f"{label(d)}: spec.bootstrap.value is not YAML: {e}")
            continue
        if got == want:
            continue
        names, wanted = _tag_names(got), _tag_names(want)
        how = {"missing": [n for n in wanted if n not in names], "extra": [n for n in names if n not in wanted],
               "other regex": [n for n in wanted if n in names and got[names.index(n)] != want[wanted.index(n)]]}
        how = {k: v for k, v in how.items() if v} or {"another order": names}
        problems.append(f"{label(d)}: spec.bootstrap.value's stats_tags are not envoy/stats-tags.yaml's "
                        "(files/stats-tags.yaml drifted?): " + "; ".join(f"{k} {v}" for k, v in how.items()))
    return problems


# (8) What pool discovery reads (endpoints_inference_pool): the InferencePool by name (GET, watch)
# and the pods its selector matches (list, watch); a Role grants get, list and watch on both, as
# the Inference Extension's reference picker's Role does, and nothing more.
DISCOVERY_GRANTS = {(g, r, v) for g, r in (("", "pods"), (INFERENCE_GROUP, "inferencepools"))
                    for v in ("get", "list", "watch")}
RBAC_GROUP = "rbac.authorization.k8s.io"
# What leader election (--epp-lease) calls: GET its Lease, POST it when there is none, PUT it to
# take or renew it (resourceVersion-guarded), and nothing else (docs/endpoint-picker.md).
COORDINATION_GROUP = "coordination.k8s.io"
LEASE_GRANTS = {(COORDINATION_GROUP, "leases", v) for v in ("get", "create", "update")}
ROLE_GRANTS = DISCOVERY_GRANTS | LEASE_GRANTS


def _role_grants(role):
    """{(apiGroup, resource, verb)} a Role grants, and its problems (wildcards, resourceNames,
    nonResourceURLs)."""
    grants, problems = set(), []
    for i, rule in enumerate(role.get("rules") or []):
        if not isinstance(rule, dict):
            problems.append(f"{label(role)}: rules[{i}] is not a mapping")
            continue
        for k in ("resourceNames", "nonResourceURLs"):
            if rule.get(k):
                problems.append(f"{label(role)}: rules[{i}].{k} is set ({rule[k]}): a pool's pods are listed and "
                                "watched, not named")
        groups, resources, verbs = (rule.get(k) or [] for k in ("apiGroups", "resources", "verbs"))
        if "*" in groups or "*" in resources or "*" in verbs:
            problems.append(f"{label(role)}: rules[{i}] has a wildcard (apiGroups {groups}, resources {resources}, "
                            f"verbs {verbs})")
        grants |= {(g, r, v) for g in groups for r in resources for v in verbs}
    return grants, problems


def _grants_text(grants):
    return ", ".join(f"{v} {r}{'.' + g if g else ''}" for g, r, v in sorted(grants, key=lambda t: (t[1], t[2])))


def _discovery_pools(text):
    """The endpoints_inference_pool values of a configuration document: [(providers[i], value)]."""
    try:
        cfg = yaml.safe_load(text or "")
    except yaml.YAMLError:
        return []  # check_config says why
    providers = cfg.get("providers") if isinstance(cfg, dict) else None
    return [(f"providers[{i}]", p["endpoints_inference_pool"]) for i, p in enumerate(providers or [])
            if isinstance(p, dict) and p.get("endpoints_inference_pool")]


def _token_mounted(spec, accounts):
    """Whether the pod gets its ServiceAccount token: the pod's automountServiceAccountToken, else
    the rendered ServiceAccount's, else Kubernetes' default (true)."""
    if "automountServiceAccountToken" in spec:
        return spec["automountServiceAccountToken"] is not False
    sa = accounts.get(spec.get("serviceAccountName") or "default")
    return not (sa is not None and sa.get("automountServiceAccountToken") is False)


def _leases(docs, spec):
    """The --epp-lease values of a pod's ferrogate containers."""
    return [parse_cmd(c)[1].get("--epp-lease") for c in ferrogate_containers(spec)
            if "--epp-lease" in parse_cmd(c)[1]]


def _workloads(docs):
    return [d for d in docs if d.get("kind") in ("Deployment", "StatefulSet", "DaemonSet")]


def check_kube_access(docs):
    """(8) The token, the pool and the Role of pool discovery, the token and the Role of leader
    election; no token anywhere else."""
    problems = []
    roles = [d for d in docs if d.get("kind") == "Role"]
    electing = any(_leases(docs, dig(d, "spec", "template", "spec") or {}) for d in _workloads(docs))
    for role in roles:
        grants, why = _role_grants(role)
        problems += why
        if grants - ROLE_GRANTS:
            problems.append(f"{label(role)}: grants {_grants_text(grants - ROLE_GRANTS)}, more than pool "
                            "discovery (get, list, watch on pods and inferencepools) and leader election (get, "
                            "create, update on leases) call")
        if grants & LEASE_GRANTS and not electing:
            problems.append(f"{label(role)}: grants {_grants_text(grants & LEASE_GRANTS)}, but no picker elects a "
                            "leader (--epp-lease)")
    for d in docs:
        if d.get("kind") in ("ClusterRole", "ClusterRoleBinding"):
            problems.append(f"{label(d)}: pool discovery reads its own namespace only: no cluster-wide RBAC")
    pools = {(dig(p, "metadata", "namespace"), dig(p, "metadata", "name"))
             for p in docs if p.get("kind") == "InferencePool"}
    for d in _workloads(docs):
        ns, spec = dig(d, "metadata", "namespace"), dig(d, "spec", "template", "spec") or {}
        accounts = {dig(a, "metadata", "name"): a for a in docs if a.get("kind") == "ServiceAccount"
                    and dig(a, "metadata", "namespace") == ns}
        sa = spec.get("serviceAccountName") or "default"
        texts = [config_text(docs, c, spec, parse_cmd(c)[1]) for c in ferrogate_containers(spec)]
        wanted = [w for t in texts for w in _discovery_pools(t)]
        known = all(t is not None for t in texts)  # an existing ConfigMap: the providers are unknown
        mounted = _token_mounted(spec, accounts)
        leases = _leases(docs, spec)
        needed = (DISCOVERY_GRANTS if wanted else set()) | (LEASE_GRANTS if leases else set())
        why = " and ".join(w for w, on in (("a provider says endpoints_inference_pool", wanted),
                                           ("the picker elects a leader (--epp-lease)", leases)) if on)
        if not needed:
            if known and mounted:
                problems.append(f"{label(d)}: the pods get a ServiceAccount token, but no provider says "
                                "endpoints_inference_pool and no picker says --epp-lease (ferrogate calls the "
                                "Kubernetes API for nothing else)")
            continue
        if not mounted:
            problems.append(f"{label(d)}: {why}, but the pods get no ServiceAccount token "
                            "(automountServiceAccountToken false): ferrogate cannot authenticate to the API server")
        for where, value in wanted:
            pool_ns, _, name = str(value).rpartition("/")
            if (pool_ns or ns, name) not in pools:
                problems.append(f"{label(d)}: {where}.endpoints_inference_pool {value!r} is not the rendered "
                                f"InferencePool {sorted(f'{n}/{m}' for n, m in pools) or 'none'} (namespace {ns} "
                                "unless it says another)")
        bound = [b for b in docs if b.get("kind") == "RoleBinding" and dig(b, "metadata", "namespace") == ns
                 and any(isinstance(s, dict) and s.get("kind") == "ServiceAccount" and s.get("name") == sa
                         and s.get("namespace", ns) == ns for s in b.get("subjects") or [])]
        grants = set()
        for b in bound:
            ref = b.get("roleRef") or {}
            role = next((r for r in roles if dig(r, "metadata", "name") == ref.get("name")
                         and dig(r, "metadata", "namespace") == ns), None)
            if ref.get("kind") != "Role" or ref.get("apiGroup") != RBAC_GROUP or role is None:
                problems.append(f"{label(b)}: roleRef {ref.get('apiGroup')}/{ref.get('kind')}/{ref.get('name')} is "
                                f"not a rendered Role of namespace {ns}")
                continue
            grants |= _role_grants(role)[0]
        if needed - grants:
            problems.append(f"{label(d)}: ServiceAccount {sa} lacks {_grants_text(needed - grants)} "
                            f"(no rendered RoleBinding of namespace {ns} binds it to a Role granting them), which "
                            f"ferrogate needs: {why}")
    return problems


def _scaled(value, total, round_up):
    """An int-or-percent of Kubernetes (maxUnavailable, minAvailable) against `total`, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"(\d+)%", str(value))
    if not m:
        return None
    return -(-total * int(m.group(1)) // 100) if round_up else total * int(m.group(1)) // 100


def check_leader_election(docs):
    """(9) A picker with --epp-lease: the chart's Lease name and duration, no budget that blocks
    drains, a rollout that can stop the old leader."""
    problems = []
    for d in _workloads(docs):
        name, ns = dig(d, "metadata", "name"), dig(d, "metadata", "namespace")
        spec = dig(d, "spec", "template", "spec") or {}
        flags = [parse_cmd(c)[1] for c in ferrogate_containers(spec)]
        flags = [f for f in flags if "--epp-lease" in f]
        if not flags:
            continue
        for f in flags:
            lease, seconds = f.get("--epp-lease"), f.get("--epp-lease-seconds")
            if lease != f"{name}-epp":
                problems.append(f"{label(d)}: --epp-lease {lease!r} is not the chart's Lease {name}-epp")
            if seconds is None:
                problems.append(f"{label(d)}: --epp-lease without --epp-lease-seconds (epp.leaderElection.leaseSeconds)")
            elif not (str(seconds).isdigit() and 1 <= int(seconds) <= 3600):
                problems.append(f"{label(d)}: --epp-lease-seconds {seconds!r} is not a number of seconds in 1..3600")
        if d.get("kind") != "Deployment":
            continue
        replicas = dig(d, "spec", "replicas")
        replicas = replicas if isinstance(replicas, int) else 1
        labels = dig(d, "spec", "template", "metadata", "labels") or {}
        for pdb in (p for p in docs if p.get("kind") == "PodDisruptionBudget"
                    and dig(p, "metadata", "namespace") == ns):
            if not _matches(dig(pdb, "spec", "selector", "matchLabels") or {}, labels):
                continue
            ps = pdb.get("spec") or {}
            if "minAvailable" in ps:
                healthy = _scaled(ps["minAvailable"], replicas, True)
            else:
                unavailable = _scaled(ps.get("maxUnavailable", 1), replicas, True)
                healthy = None if unavailable is None else replicas - unavailable
            if healthy is None or healthy >= 1:
                problems.append(f"{label(pdb)}: keeps {healthy if healthy is not None else 'some'} of the "
                                f"{replicas} pods of {label(d)} available, but with --epp-lease only the leader is "
                                "Ready: the leader can never be evicted, and every drain of its node blocks")
        strategy = dig(d, "spec", "strategy") or {}
        if strategy.get("type", "RollingUpdate") == "RollingUpdate":
            raw = (strategy.get("rollingUpdate") or {}).get("maxUnavailable", "25%")  # Kubernetes' default
            mu = _scaled(raw, replicas, False)  # a Deployment rounds maxUnavailable down
            if mu is None or mu < replicas:
                problems.append(f"{label(d)}: rolling update with maxUnavailable {raw!r} of {replicas} replicas, but "
                                "with --epp-lease only the leader is Ready and a new pod cannot lead while the old "
                                "leader holds the Lease: the old leader is never stopped and the rollout stalls "
                                "(maxUnavailable 100%, or Recreate)")
    return problems


def probe_live(ferrogate_bin, config, paths):
    """Status of each path on a real admin listener: `ferrogate sidecar` on loopback ports, with
    the configuration text `config`."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "config.yaml")
        with open(cfg, "w") as f:
            f.write(config)
        proc = subprocess.Popen([ferrogate_bin, "sidecar", "--config", cfg, "--admin-listen", "127.0.0.1:0",
                                 "--sidecar-listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True, env={"PATH": os.environ.get("PATH", "")})
        try:
            admin, deadline = None, time.time() + 15
            while admin is None and time.time() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
                m = re.search(r"admin\s+(http://\S+)", line)
                admin = m.group(1) if m else None
            if admin is None:
                raise RuntimeError("ferrogate sidecar printed no admin address")
            out = {}
            for path in paths:
                for _ in range(50):  # the first snapshot may take a moment
                    try:
                        with urllib.request.urlopen(admin + path, timeout=5) as r:
                            out[path] = r.status
                    except urllib.error.HTTPError as e:
                        out[path] = e.code
                    if out[path] != 503:  # only "no snapshot yet" is worth waiting for
                        break
                    time.sleep(0.1)
            return out
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def check_render(text, ferrogate_bin, sentinels):
    """All checks of one render; returns the problems."""
    docs, problems = load(text), []
    for d in docs:
        if d.get("kind") == "Secret":
            problems.append(f"{label(d)}: the chart must not render a Secret")
    for s in sentinels:
        if s in text:
            problems.append(f"a test secret value ({s[:12]}...) appears in the render")
    found = [(w, spec, labels, own, c) for w, spec, labels, own in pods(docs) for c in ferrogate_containers(spec)]
    if not found:
        return problems + ["no ferrogate container in the render"]
    for where, spec, labels, own, c in found:
        where = f"{where} container ferrogate"
        sub, flags = parse_cmd(c)
        if sub is None:
            problems.append(f"{where}: runs neither `serve` nor `sidecar`")
            continue
        problems += check_config(docs, where, c, spec, flags, ferrogate_bin)
        paths = {dig(c, k, "httpGet", "path") for k in PROBE_PATHS} - {None}
        live = probe_live(ferrogate_bin, config_text(docs, c, spec, flags) or "", sorted(paths)) if paths else {}
        problems += check_probes(where, c, sub, flags, live)
        problems += check_ports(where, c, sub, flags)
        problems += check_secrets(where, c, docs)
        problems += check_security(where, c, spec, own, flags)
    return (problems + check_wiring(docs, found) + check_metric_labels(docs) + check_kube_access(docs)
            + check_leader_election(docs))

