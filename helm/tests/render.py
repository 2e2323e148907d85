"""What a rendered ferrogate chart holds, read for the contract checks (helm/tests/contract.py):
its documents, the pod specs that run ferrogate and their ferrogate containers, a container's
subcommand, flags and listeners, and the ConfigMap its --config file comes from."""

import yaml

# Flags that take no value.
BOOL_FLAGS = {"--no-failover"}
# Defaults of the listener flags per subcommand (docs/cli.md).
DEFAULTS = {
    "serve": {"--listen": "127.0.0.1:8080", "--admin-listen": "127.0.0.1:0", "--sidecar-listen": "127.0.0.1:0"},
    "sidecar": {"--admin-listen": "127.0.0.1:9001", "--sidecar-listen": "127.0.0.1:9000"},
}

def load(text):
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def label(doc):
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def dig(obj, *path):
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
            out.append((label(d), dig(d, "spec", "template", "spec") or {},
                        dig(d, "spec", "template", "metadata", "labels") or {}, True))
        elif kind == "EnvoyProxy":
            for w in ("envoyDeployment", "envoyDaemonSet"):
                spec = dig(d, "spec", "provider", "kubernetes", w, "patch", "value", "spec", "template", "spec")
                if spec:
                    out.append((f"{label(d)} {w}.patch", spec, {}, False))
        elif kind == "ConfigMap" and "deployment" in (d.get("data") or {}):
            spec = dig(yaml.safe_load(d["data"]["deployment"]), "spec", "template", "spec")
            if spec:
                out.append((f"{label(d)} data.deployment", spec, {}, False))
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


# Listeners opened only when their flag is given: serve's endpoint picker (--epp-listen).
OPTIONAL = {"serve": ("--epp-listen",)}


def listeners(sub, flags):
    """{flag: (host, port)} of the listeners the subcommand opens."""
    out = {}
    opened = dict(DEFAULTS.get(sub, {}))
    opened.update({f: flags[f] for f in OPTIONAL.get(sub, ()) if flags.get(f)})
    for flag, default in opened.items():
        host, _, port = str(flags.get(flag, default)).rpartition(":")
        out[flag] = (host.strip("[]"), int(port) if port.isdigit() else -1)
    return out


def loopback(host):
    return host in ("127.0.0.1", "::1", "localhost") or host.startswith("127.")


def mount_of(c, path):
    """The container's volume mount a file path is on (the deepest), or None."""
    return max((m for m in c.get("volumeMounts") or [] if path.startswith(m["mountPath"].rstrip("/") + "/")),
               key=lambda m: len(m["mountPath"]), default=None)


def config_source(docs, c, spec, flags):
    """Where the container's --config file comes from: (ConfigMap name, key, the ConfigMap or
    None when it is not part of the render), or a problem (a string)."""
    path = flags.get("--config")
    if not path:
        return "no --config flag"
    mount = mount_of(c, path)
    if not mount:
        return f"--config {path} is on no volume mount"
    vol = next((v for v in spec.get("volumes") or [] if v.get("name") == mount["name"]), {})
    cm_name = dig(vol, "configMap", "name")
    if not cm_name:
        return f"--config {path} is not on a ConfigMap volume"
    cm = next((d for d in docs if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == cm_name), None)
    return cm_name, path[len(mount["mountPath"].rstrip("/")) + 1:], cm


def config_text(docs, c, spec, flags):
    """The configuration document the container reads, when it is in the render."""
    src = config_source(docs, c, spec, flags)
    if isinstance(src, str) or src[2] is None:
        return None
    return (src[2].get("data") or {}).get(src[1])
