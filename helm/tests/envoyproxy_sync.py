"""The raw EnvoyProxy of k8s/envoy-gateway/10-gatewayclass.yaml against the chart's ingress-pod
render (used by scripts/check-helm): both add the same ferrogate sidecar to the Envoy pods and
merge the same stats_tags into Envoy's bootstrap, and nothing else keeps the two in step.

Compared: the Deployment patch's type, the list the container joins (initContainers for a
native sidecar, or containers), every field of the ferrogate container - command and args,
ports, probes, securityContext, resources, volumeMounts, restartPolicy, ... - the pod's
ferrogate volumes, and spec.bootstrap: its type and its value as data (the YAML parsed, so the
chart's key order and quoting do not count; that the tags are envoy/stats-tags.yaml's is
contract.py's check of the render, and validate-k8s's of both). Ignored, as an installation's
own choices: the image, the environment (env, envFrom: which Secrets give which variables), and
the names of the ConfigMaps and Secrets the volumes mount. Ports, volume mounts and volumes are
compared by name, not by position.
"""

import yaml

RAW = "k8s/envoy-gateway/10-gatewayclass.yaml"
IGNORED_CONTAINER_KEYS = ("image", "env", "envFrom")
CONTAINER = "ferrogate"


def _dig(obj, *path):
    for p in path:
        if not isinstance(obj, dict) or p not in obj:
            return None
        obj = obj[p]
    return obj


def _envoyproxy(docs, where):
    """The one EnvoyProxy of a document list, or a problem."""
    found = [d for d in docs if isinstance(d, dict) and d.get("kind") == "EnvoyProxy"]
    if len(found) != 1:
        return None, f"{where}: {len(found)} EnvoyProxy documents, expected one"
    return found[0], None


def _by_name(items):
    return {i.get("name"): i for i in items or [] if isinstance(i, dict)}


def _keyed(items):
    """A list merged by name, as a mapping whose keys read as `[name]` in a path."""
    return {f"[{name}]": i for name, i in _by_name(items).items()}


def _volume(v):
    """A volume without the names of the ConfigMap or Secret it mounts."""
    v = yaml.safe_load(yaml.safe_dump(v))  # a copy
    for source, key in (("configMap", "name"), ("secret", "secretName")):
        if isinstance(v.get(source), dict):
            v[source].pop(key, None)
    return v


def sidecar_shape(ep):
    """What must agree, as {field: value}: the patch type, the container's list and fields, the
    ferrogate volumes (the ones its container mounts)."""
    patch = _dig(ep, "spec", "provider", "kubernetes", "envoyDeployment", "patch") or {}
    pod = _dig(patch, "value", "spec", "template", "spec") or {}
    shape = {"patch.type": patch.get("type")}
    for field in ("initContainers", "containers"):
        c = _by_name(pod.get(field)).get(CONTAINER)
        if c is None:
            continue
        shape["container list"] = field
        for k, v in c.items():
            if k not in IGNORED_CONTAINER_KEYS:
                shape[f"{field}[{CONTAINER}].{k}"] = _keyed(v) if k in ("ports", "volumeMounts") else v
        mounted = {m.get("name") for m in c.get("volumeMounts") or [] if isinstance(m, dict)}
        for name, v in _by_name(pod.get("volumes")).items():
            if name in mounted:
                shape[f"volumes[{name}]"] = _volume(v)
    return shape


def bootstrap_shape(ep):
    """spec.bootstrap as {field: value}: its type, and its value parsed (the text if it is not YAML)."""
    bs = _dig(ep, "spec", "bootstrap")
    if not isinstance(bs, dict):
        return {"bootstrap": bs}
    shape = {f"bootstrap.{k}": v for k, v in bs.items() if k != "value"}
    if "value" in bs:
        try:
            shape["bootstrap.value"] = yaml.safe_load(bs["value"]) if isinstance(bs["value"], str) else bs["value"]
        except yaml.YAMLError:
            shape["bootstrap.value"] = bs["value"]
    tags = _dig(shape.get("bootstrap.value"), "stats_config", "stats_tags")
    if isinstance(tags, list):  # compact and in order: `tag_name=…, regex=…` per tag
        shape["bootstrap.value"] = dict(shape["bootstrap.value"], stats_config=dict(
            shape["bootstrap.value"]["stats_config"],
            stats_tags=[", ".join(f"{k}={t[k]}" for k in sorted(t, key=lambda k: (k != "tag_name", k)))
                        if isinstance(t, dict) else t for t in tags]))
    return shape


MISSING = object()


def show(value):
    return "nothing" if value is MISSING else repr(value)


def differences(a, b, path):
    """[(path, a's value, b's value)] down to the first level that differs (a mapping's keys are
    followed; a list or a scalar differs as a whole)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            sub = f"{path}{k}" if str(k).startswith("[") else f"{path}.{k}" if path else str(k)
            out += differences(a.get(k, MISSING), b.get(k, MISSING), sub)
        return out
    return [] if a == b else [(path, a, b)]


def compare(raw_text, render_text, raw_label=RAW, render_label="the ingress-pod render"):
    """Problems (strings): each field where the raw EnvoyProxy and the render differ."""
    raw, why = _envoyproxy(list(yaml.safe_load_all(raw_text)), raw_label)
    if why:
        return [why]
    rendered, why = _envoyproxy(list(yaml.safe_load_all(render_text)), render_label)
    if why:
        return [why]
    a, b = sidecar_shape(raw), sidecar_shape(rendered)
    if "container list" not in a or "container list" not in b:
        return [f"no {CONTAINER} container in the EnvoyProxy's envoyDeployment patch of "
                + (raw_label if "container list" not in a else render_label)]
    a.update(bootstrap_shape(raw))
    b.update(bootstrap_shape(rendered))
    return [f"{k}: {raw_label} has {show(x)}, {render_label} has {show(y)}" for k, x, y in differences(a, b, "")]
