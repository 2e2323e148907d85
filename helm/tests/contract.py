"""Contract checks of a rendered ferrogate chart (used by scripts/check-helm).

A render is the output of `helm template`. Each check returns a list of problems (strings); an
empty list means the render keeps the contract between the chart and the ferrogate binary:

  1. the configuration in the rendered ConfigMap passes `ferrogate check`, and every variable it
     names (api_key_env, store.url_env, redis.url_env) reaches the container from a Secret;
  2. the probes are HTTP GETs of /healthz and /readyz on the admin listener's port, and those
     paths answer on a real admin listener (a short-lived `ferrogate sidecar` on loopback);
  3. the ports agree: the --listen / --admin-listen / --sidecar-listen flags, the container
     ports, the Services' targetPorts, the NetworkPolicy, the monitors and the Envoy cluster;
  4. no secret value: no Secret object, every secret-looking variable from a secretKeyRef, no
     provider api_key in the configuration, and none of the known test secrets in the text;
  5. the securityContext: non-root, read-only root filesystem, no privilege escalation, all
     capabilities dropped, seccomp RuntimeDefault, writable paths on an emptyDir.
"""

import os
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import yaml

# Variables that hold secrets whatever the configuration says (the binary's own tokens).
SECRET_ENV = re.compile(r"(TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|MASTER_KEY|_KEY$|_URL$|_DSN$|HEADERS)", re.I)
# Flags that take no value.
BOOL_FLAGS = {"--no-failover"}
# Defaults of the listener flags per subcommand (docs/cli.md).
DEFAULTS = {
    "serve": {"--listen": "127.0.0.1:8080", "--admin-listen": "127.0.0.1:0", "--sidecar-listen": "127.0.0.1:0"},
    "sidecar": {"--admin-listen": "127.0.0.1:9001", "--sidecar-listen": "127.0.0.1:9000"},
}
LISTENER_OF_PORT_NAME = {"gateway": "--listen", "admin": "--admin-listen", "sidecar": "--sidecar-listen"}
PROBE_PATHS = {"livenessProbe": {"/healthz"}, "startupProbe": {"/healthz"},
               "readinessProbe": {"/readyz", "/readyz?strict=true"}}


def load(text):
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def _name(doc):
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def _dig(obj, *path):
    for p in path:
        if not isinstance(obj, dict) or p not in obj:
            return None
        obj = obj[p]
    return obj


def pods(docs):
    """Every pod spec holding ferrogate: (where, pod spec, pod labels, owned by the chart)."""
    out = []
    for d in docs:
        kind = d.get("kind")
        if kind in ("Deployment", "StatefulSet", "DaemonSet"):
            out.append((_name(d), _dig(d, "spec", "template", "spec") or {},
                        _dig(d, "spec", "template", "metadata", "labels") or {}, True))
        elif kind == "EnvoyProxy":
            for w in ("envoyDeployment", "envoyDaemonSet"):
                spec = _dig(d, "spec", "provider", "kubernetes", w, "patch", "value", "spec", "template", "spec")
                if spec:
                    out.append((f"{_name(d)} {w}.patch", spec, {}, False))
        elif kind == "ConfigMap" and "deployment" in (d.get("data") or {}):
            spec = _dig(yaml.safe_load(d["data"]["deployment"]), "spec", "template", "spec")
            if spec:
                out.append((f"{_name(d)} data.deployment", spec, {}, False))
    return out


def ferrogate_containers(spec):
    return [c for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
            if c.get("name") == "ferrogate"]


def parse_cmd(c):
    """(subcommand, {flag: value}) from command + args."""
    words = [str(w) for w in (c.get("command") or []) + (c.get("args") or [])]
    sub = next((w for w in words if w in ("serve", "sidecar")), None)
    flags, rest = {}, words[words.index(sub) + 1:] if sub else []
    i = 0
    while i < len(rest):
        w = rest[i]
        if w.startswith("--") and "=" in w:
            k, v = w.split("=", 1)
            flags[k] = v
        elif w in BOOL_FLAGS:
            flags[w] = True
        elif w.startswith("--"):
            flags[w] = rest[i + 1] if i + 1 < len(rest) else None
            i += 1
        i += 1
    return sub, flags


def listeners(sub, flags):
    """{flag: (host, port)} of the listeners the subcommand opens."""
    out = {}
    for flag, default in DEFAULTS.get(sub, {}).items():
        host, _, port = str(flags.get(flag, default)).rpartition(":")
        out[flag] = (host.strip("[]"), int(port) if port.isdigit() else -1)
    return out


def loopback(host):
    return host in ("127.0.0.1", "::1", "localhost") or host.startswith("127.")


# --------------------------------------------------------------------------- the checks

def check_config(docs, where, c, spec, sub, flags, ferrogate_bin):
    """(1) The ConfigMap's document passes `ferrogate check`; its variables come from Secrets."""
    problems, cfg_path = [], flags.get("--config")
    if not cfg_path:
        return [f"{where}: no --config flag"]
    mount = max((m for m in c.get("volumeMounts") or [] if cfg_path.startswith(m["mountPath"].rstrip("/") + "/")),
                key=lambda m: len(m["mountPath"]), default=None)
    if not mount:
        return [f"{where}: --config {cfg_path} is on no volume mount"]
    vol = next((v for v in spec.get("volumes") or [] if v.get("name") == mount["name"]), {})
    cm_name = _dig(vol, "configMap", "name")
    if not cm_name:
        return [f"{where}: --config {cfg_path} is not on a ConfigMap volume"]
    key = cfg_path[len(mount["mountPath"].rstrip("/")) + 1:]
    cm = next((d for d in docs if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == cm_name), None)
    if cm is None:
        return []  # an existing ConfigMap, not part of the render: nothing to check here
    text = (cm.get("data") or {}).get(key)
    if text is None:
        return [f"{where}: ConfigMap {cm_name} has no key {key} (the --config file)"]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
    try:
        # A clean environment: the result must not depend on the shell running the check.
        r = subprocess.run([ferrogate_bin, "check", "--config", f.name], capture_output=True, text=True,
                           env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, timeout=60)
    finally:
        os.unlink(f.name)
    if r.returncode != 0:
        problems.append(f"{where}: ferrogate check rejects ConfigMap {cm_name}/{key}: "
                        + (r.stdout + r.stderr).strip().replace(f.name, key))
    cfg = yaml.safe_load(text) or {}
    env_names = {e["name"] for e in c.get("env") or [] if _dig(e, "valueFrom", "secretKeyRef")}
    has_env_from = any(_dig(e, "secretRef", "name") for e in c.get("envFrom") or [])
    wanted = [(f"providers[{i}].api_key_env", p.get("api_key_env")) for i, p in enumerate(cfg.get("providers") or [])]
    wanted += [("store.url_env", _dig(cfg, "store", "url_env")), ("redis.url_env", _dig(cfg, "redis", "url_env"))]
    for path, var in wanted:
        if var and var not in env_names and not has_env_from:
            problems.append(f"{where}: the configuration's {path} names {var}, which no secretKeyRef (or envFrom) gives")
    for i, p in enumerate(cfg.get("providers") or []):
        if "api_key" in p:
            problems.append(f"{where}: ConfigMap {cm_name} holds providers[{i}].api_key, a provider key in clear")
    return problems


def check_probes(where, c, sub, flags, live):
    """(2) HTTP probes of the real endpoints, on the admin listener's port."""
    problems = []
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
            if not _dig(env.get(var, {}), "valueFrom", "secretKeyRef"):
                problems.append(f"{where}: {flag} is not loopback, so ferrogate refuses to start without {var}")
    return problems


def check_secrets(where, c, docs):
    """(4) Secret-looking variables only from secretKeyRef; envFrom only from Secrets."""
    problems = []
    for e in c.get("env") or []:
        name, vf = e.get("name", ""), e.get("valueFrom")
        if SECRET_ENV.search(name) and not _dig(vf or {}, "secretKeyRef"):
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
    seccomp = _dig(sc, "seccompProfile", "type") or (owned and _dig(psc, "seccompProfile", "type"))
    if seccomp != "RuntimeDefault":
        problems.append(f"{where}: seccompProfile must be RuntimeDefault")
    if owned and spec.get("automountServiceAccountToken") is not False:
        problems.append(f"{where}: automountServiceAccountToken must be false (ferrogate never calls the API)")
    vols = {v.get("name"): v for v in spec.get("volumes") or []}
    for flag in ("--snapshot-cache", "--usage-file"):
        path = flags.get(flag)
        if not path:
            continue
        m = max((m for m in c.get("volumeMounts") or [] if path.startswith(m["mountPath"].rstrip("/") + "/")),
                key=lambda m: len(m["mountPath"]), default=None)
        if m is None or m.get("readOnly") or "emptyDir" not in vols.get(m["name"], {}):
            problems.append(f"{where}: {flag} {path} is not on a writable emptyDir (the root filesystem is read-only)")
    return problems


def _matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_wiring(docs, found):
    """(3) Services, NetworkPolicies, monitors and the Envoy cluster point at real listeners."""
    problems = []
    owned = [(where, labels, c, listeners(*parse_cmd(c))) for where, spec, labels, own, c in found if own]
    gateway_pod = [(where, c, listeners(*parse_cmd(c))) for where, spec, labels, own, c in found if not own]
    services = [d for d in docs if d.get("kind") == "Service"]
    for svc in services:
        sel = _dig(svc, "spec", "selector") or {}
        pods_ = [(w, c) for w, labels, c, _ in owned if _matches(sel, labels)]
        if not pods_:
            problems.append(f"{_name(svc)}: its selector matches no ferrogate pod")
        for w, c in pods_:
            cports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
            for p in _dig(svc, "spec", "ports") or []:
                t = p.get("targetPort", p.get("port"))
                if (isinstance(t, str) and t not in cports) or (isinstance(t, int) and t not in cports.values()):
                    problems.append(f"{_name(svc)}: port {p.get('name')} targets {t}, no container port of {w}")
    for np in (d for d in docs if d.get("kind") == "NetworkPolicy"):
        sel = _dig(np, "spec", "podSelector", "matchLabels") or {}
        for w, labels, c, _ in owned:
            if _matches(sel, labels):
                numbers = {p.get("containerPort") for p in c.get("ports") or []}
                for rule in _dig(np, "spec", "ingress") or []:
                    for p in rule.get("ports") or []:
                        if p.get("port") not in numbers:
                            problems.append(f"{_name(np)}: port {p.get('port')} is no container port of {w}")
    for sm in (d for d in docs if d.get("kind") == "ServiceMonitor"):
        sel = _dig(sm, "spec", "selector", "matchLabels") or {}
        names = {p.get("name") for s in services if _matches(sel, _dig(s, "metadata", "labels") or {})
                 for p in _dig(s, "spec", "ports") or []}
        for ep in _dig(sm, "spec", "endpoints") or []:
            if ep.get("port") not in names or ep.get("path") != "/metrics":
                problems.append(f"{_name(sm)}: endpoint {ep.get('port')}{ep.get('path')} is not a Service's admin /metrics")
    for pm in (d for d in docs if d.get("kind") == "PodMonitor"):
        names = {p.get("name") for _, c, _ in gateway_pod for p in c.get("ports") or []}
        for ep in _dig(pm, "spec", "podMetricsEndpoints") or []:
            if ep.get("port") not in names or ep.get("path") != "/metrics":
                problems.append(f"{_name(pm)}: endpoint {ep.get('port')}{ep.get('path')} is not ferrogate's admin /metrics")
    for epp in (d for d in docs if d.get("kind") == "EnvoyPatchPolicy"):
        for jp in _dig(epp, "spec", "jsonPatches") or []:
            for ep in _dig(jp, "operation", "value", "load_assignment", "endpoints") or []:
                for lb in ep.get("lb_endpoints") or []:
                    sa = _dig(lb, "endpoint", "address", "socket_address") or {}
                    problems += _check_cluster_target(epp, sa, services, owned, gateway_pod)
    return problems


def _check_cluster_target(epp, sa, services, owned, gateway_pod):
    addr, port = sa.get("address", ""), sa.get("port_value")
    if loopback(addr):
        ok = any(ls.get("--sidecar-listen") == (addr, port) or ls.get("--sidecar-listen", ("", 0))[1] == port
                 and loopback(ls["--sidecar-listen"][0]) for _, _, ls in gateway_pod)
        return [] if ok else [f"{_name(epp)}: cluster {addr}:{port} is not the in-pod sidecar listener"]
    svc_name, _, ns_rest = addr.partition(".")
    for svc in services:
        if _dig(svc, "metadata", "name") == svc_name and ns_rest.startswith(f"{svc['metadata'].get('namespace')}.svc."):
            for p in _dig(svc, "spec", "ports") or []:
                if p.get("port") == port:
                    target = p.get("targetPort")
                    for _, labels, c, ls in owned:
                        if _matches(svc["spec"].get("selector") or {}, labels):
                            cp = {x.get("name"): x.get("containerPort") for x in c.get("ports") or []}
                            if cp.get(target, target) == ls.get("--sidecar-listen", ("", -1))[1]:
                                return []
    return [f"{_name(epp)}: cluster {addr}:{port} reaches no filter-facing listener through a rendered Service"]


def probe_live(ferrogate_bin, config_text, paths):
    """Status of each path on a real admin listener: `ferrogate sidecar` on loopback ports."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "config.yaml")
        with open(cfg, "w") as f:
            f.write(config_text)
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
            problems.append(f"{_name(d)}: the chart must not render a Secret")
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
        problems += check_config(docs, where, c, spec, sub, flags, ferrogate_bin)
        paths = {_dig(c, k, "httpGet", "path") for k in PROBE_PATHS} - {None}
        live = probe_live(ferrogate_bin, _config_text(docs, c, spec, flags) or "", sorted(paths)) if paths else {}
        problems += check_probes(where, c, sub, flags, live)
        problems += check_ports(where, c, sub, flags)
        problems += check_secrets(where, c, docs)
        problems += check_security(where, c, spec, own, flags)
    return problems + check_wiring(docs, found)


def _config_text(docs, c, spec, flags):
    """The configuration document the container reads, when it is in the render."""
    path = flags.get("--config") or ""
    for m in c.get("volumeMounts") or []:
        if path.startswith(m["mountPath"].rstrip("/") + "/"):
            vol = next((v for v in spec.get("volumes") or [] if v.get("name") == m["name"]), {})
            cm = next((d for d in docs if d.get("kind") == "ConfigMap"
                       and d["metadata"]["name"] == _dig(vol, "configMap", "name")), None)
            if cm:
                return (cm.get("data") or {}).get(path[len(m["mountPath"].rstrip("/")) + 1:])
    return None
