"""Broken copies of the chart and of its values, each of which scripts/check-helm must reject
(`scripts/check-helm --self-test`). A case changes the values (deep-merged over a profile) or
edits a file of a copy of the chart; the first case changes nothing and must pass, which shows
the others fail for their own reason. RAW_ENVOYPROXY_CASES edit a copy of the raw EnvoyProxy
(k8s/envoy-gateway/10-gatewayclass.yaml) instead, compared with the ingress-pod render (its
sidecar and its spec.bootstrap).
"""

import copy
import os

import yaml

# A value from tests/secrets.yaml: what a careless chart or operator could leak.
LEAK = "sk-fgtest-openai-key-7e2a9b"

C = "templates/_container.tpl"
EP = "templates/inferencepool.yaml"
HR = "templates/httproute.yaml"
RB = "templates/rbac.yaml"
DP = "templates/deployment.yaml"
PDB = "templates/pdb.yaml"
# The epp profile's provider, naming its pool another way (config.providers is a list: replaced whole).
_POOL_PROVIDER = {"name": "vllm-pool", "kind": "openai_compatible",
                  "base_url": "http://vllm-pool.llm.svc.cluster.local:8000", "kv_events_port": 5557,
                  "kv_replay_port": 5558, "kv_block_size": 16}
ST = "files/stats-tags.yaml"  # the chart's copy of envoy/stats-tags.yaml
_API = '  - tag_name: api\n    regex: "(;api=([^;]*))"\n'
_MODEL = '  - tag_name: model\n    regex: "(;model=([^;]*))"\n'


def case(name, base="standalone", values=None, edits=(), add=None, expect_fail=True):
    return {"name": name, "base": base, "values": values or {}, "edits": list(edits), "add": add or {},
            "expect_fail": expect_fail}


# The epp profile's values turning leader election on (the profile leaves it off).
ELECT = {"epp": {"leaderElection": {"enabled": True}}}

CASES = [
    case("control: an unmodified copy of the chart passes", expect_fail=False),
    case("control: the ingress-pod profile passes", base="ingress-pod", expect_fail=False),
    # Schema: misspelt keys and wrong types.
    case("typo'd top-level key (replicaCont)", values={"replicaCont": 3}),
    case("typo'd nested key (serve.drainTimoutMs)", values={"serve": {"drainTimoutMs": 1000}}),
    case("typo'd key in a secret reference (secretNmae)", values={"secrets": {"adminToken": {"secretNmae": "x"}}}),
    case("typo'd key of the configuration document (provders)", values={"config": {"provders": []}}),
    case("wrong type: replicaCount is a string", values={"replicaCount": "two"}),
    case("wrong type: ports.admin is a string", values={"ports": {"admin": "9001"}}),
    case("wrong type: mode outside its enum", values={"mode": "gateway"}),
    # The chart's own files.
    case("schema object that allows unknown keys",
         edits=[("values.schema.json", '"additionalProperties": false,\n      "properties": {\n        "workers":',
                 '"properties": {\n        "workers":')]),
    case("values.yaml key without a comment",
         edits=[("values.yaml", "counts its own otherwise).\nreplicaCount:",
                 "counts its own otherwise).\n\nreplicaCount:")]),
    # Probes.
    case("liveness probe path that does not exist (/health)",
         edits=[(C, '(dict "path" "/healthz" "port" $admin "p" $v.probes.liveness)',
                 '(dict "path" "/health" "port" $admin "p" $v.probes.liveness)')]),
    case("readiness probe path that does not exist (/ready)",
         edits=[(C, '(ternary "/readyz?strict=true" "/readyz"', '(ternary "/ready?strict=true" "/ready"')]),
    case("liveness probe on the gateway port instead of the admin port",
         edits=[(C, '(dict "path" "/healthz" "port" $admin "p" $v.probes.liveness)',
                 '(dict "path" "/healthz" "port" "gateway" "p" $v.probes.liveness)')]),
    # Ports.
    case("--admin-listen flag and container port disagree",
         edits=[(C, "- 0.0.0.0:{{ int64 $v.ports.admin }}", "- 0.0.0.0:9002")]),
    case("Service targetPort that no container port has",
         edits=[("templates/service.yaml", 'targetPort: {{ include "ferrogate.gatewayPortName" . }}',
                 "targetPort: 8081")]),
    case("container port declared for the loopback filter-facing listener",
         edits=[(C, '    {{- if eq $v.mode "sidecar" }}\n    - name: {{ include "ferrogate.sidecarPortName" $ }}',
                 '    {{- if true }}\n    - name: {{ include "ferrogate.sidecarPortName" $ }}')]),
    case("EnvoyPatchPolicy cluster on another port than the in-pod sidecar", base="ingress-pod",
         edits=[("templates/envoypatchpolicy.yaml", "port_value: {{ .Values.ports.sidecar }}", "port_value: 9999")]),
    case("NetworkPolicy opens a port the container does not listen on",
         edits=[("templates/networkpolicy.yaml", "- port: {{ .Values.ports.admin }}", "- port: 9090")]),
    # Secrets.
    case("secret value inlined through extraEnv", values={"extraEnv": [{"name": "OPENAI_API_KEY", "value": LEAK}]}),
    case("provider api_key inlined in the configuration",
         values={"config": {"providers": [{"name": "openai", "kind": "openai", "base_url": "https://api.openai.com",
                                           "api_key": LEAK}]}}),
    case("chart renders the admin token as a plain value",
         edits=[(C, '{{ include "ferrogate.secretEnv" (dict "env" "FERROGATE_ADMIN_TOKEN" "ref" $s.adminToken) }}',
                 "- name: FERROGATE_ADMIN_TOKEN\n  value: " + LEAK)]),
    case("chart renders the admin token as a plain value nobody listed",
         edits=[(C, '{{ include "ferrogate.secretEnv" (dict "env" "FERROGATE_ADMIN_TOKEN" "ref" $s.adminToken) }}',
                 "- name: FERROGATE_ADMIN_TOKEN\n  value: change-me")]),
    case("chart renders a Secret from values",
         add={"templates/secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata:\n  name: leak\n"
                                       "stringData:\n  OPENAI_API_KEY: " + LEAK + "\n"}),
    case("sidecar mode without the internal token", base="sidecar",
         values={"secrets": {"internalToken": {"secretName": ""}}}),
    # The configuration itself.
    case("configuration ferrogate check rejects (targets[0].wieght)",
         values={"config": {"models": [{"name": "chat", "targets": [{"provider": "openai", "model": "gpt-4o-mini",
                                                                     "wieght": 2}]}]}}),
    case("configuration naming a provider key variable no Secret gives",
         values={"config": {"providers": [{"name": "gemini", "kind": "gemini",
                                           "base_url": "https://generativelanguage.googleapis.com",
                                           "api_key_env": "GEMINI_API_KEY"}],
                            "models": [{"name": "chat",
                                        "targets": [{"provider": "gemini", "model": "gemini-2.5-flash"}]}],
                            "aliases": {}}},
         edits=[("templates/_validate.tpl", "(not (hasKey $envs $p.api_key_env))", "false")]),
    # securityContext.
    case("writable root filesystem", edits=[(C, "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: false")]),
    case("capabilities not dropped", edits=[(C, 'drop: ["ALL"]', "drop: []")]),
    case("privilege escalation allowed",
         edits=[(C, "allowPrivilegeEscalation: false", "allowPrivilegeEscalation: true")]),
    case("snapshot cache on the read-only root filesystem",
         edits=[(C, "mountPath: {{ include \"ferrogate.stateDir\" $ }}", "mountPath: /var/lib/elsewhere")]),
    # ferrogate's metric labels: the EnvoyProxy merges exactly envoy/stats-tags.yaml's stats_tags.
    case("chart's copy of the stats_tags missing a tag", base="ingress-pod",
         edits=[(ST, '  - tag_name: key\n    regex: "(;key=([^;]*))"\n', "")]),
    case("chart's copy of the stats_tags with a changed regex", base="ingress-pod",
         edits=[(ST, '"(;model=([^;]*))"', '"(;model=(.*))"')]),
    case("chart's copy of the stats_tags in another order", base="ingress-pod",
         edits=[(ST, _API + _MODEL, _MODEL + _API)]),
    case("EnvoyProxy bootstrap that replaces Envoy Gateway's instead of merging", base="ingress-pod",
         edits=[("templates/envoyproxy.yaml", "    type: Merge\n", "    type: Replace\n")]),
    # The endpoint picker (epp): InferencePool -> Service (h2c) -> --epp-listen, probed by gRPC health.
    case("control: the epp profile passes", base="epp", expect_fail=False),
    case("InferencePool endpointPickerRef port differing from the Service port", base="epp",
         edits=[(EP, 'number: {{ include "ferrogate.servicePort" . }}', "number: 9003")]),
    case("InferencePool endpointPickerRef without a port", base="epp",
         edits=[(EP, '    port:\n      number: {{ include "ferrogate.servicePort" . }}\n', "")]),
    case("InferencePool endpointPickerRef naming a Service the chart does not render", base="epp",
         edits=[(EP, '    name: {{ include "ferrogate.fullname" . }}\n    port:', "    name: epp\n    port:")]),
    case("endpoint picker Service port without appProtocol h2c", base="epp",
         edits=[("templates/service.yaml", "appProtocol: kubernetes.io/h2c", "appProtocol: http")]),
    case("Service port to the admin listener, where the endpointPickerRef points", base="epp",
         edits=[("templates/service.yaml", 'targetPort: {{ include "ferrogate.eppPortName" . }}',
                 'targetPort: {{ include "ferrogate.adminPortName" . }}')]),
    case("--epp-listen on loopback", base="epp",
         edits=[(C, "- 0.0.0.0:{{ int64 $v.ports.epp }}", "- 127.0.0.1:{{ int64 $v.ports.epp }}")]),
    case("--epp-listen on another port than the container port", base="epp",
         edits=[(C, "- 0.0.0.0:{{ int64 $v.ports.epp }}", "- 0.0.0.0:9003")]),
    case("readiness gRPC probe on the admin port", base="epp",
         edits=[(C, '(dict "service" "readiness" "port" $v.ports.epp', '(dict "service" "readiness" "port" $v.ports.admin')]),
    case("liveness gRPC probe asking for a service the picker does not report", base="epp",
         edits=[(C, '(dict "service" "liveness" "port" $v.ports.epp "p" $v.probes.liveness)',
                 '(dict "service" "ext-proc" "port" $v.ports.epp "p" $v.probes.liveness)')]),
    case("endpoint picker probed over HTTP /readyz instead of gRPC health", base="epp",
         edits=[(C, '{{- if eq $v.mode "epp" }}\n  # gRPC health', '{{- if false }}\n  # gRPC health')]),
    case("HTTPRoute backendRef to the Service instead of the InferencePool", base="epp",
         edits=[(HR, "- group: inference.networking.k8s.io\n          kind: InferencePool\n"
                 '          name: {{ include "ferrogate.inferencePoolName" . }}',
                 '- group: ""\n          kind: Service\n          name: {{ include "ferrogate.fullname" . }}')]),
    case("HTTPRoute backendRef naming an InferencePool the chart does not render", base="epp",
         edits=[(HR, 'name: {{ include "ferrogate.inferencePoolName" . }}', "name: vllm-pool")]),
    case("no InferencePool rendered for the picker", base="epp",
         edits=[(EP, '{{- if eq .Values.mode "epp" }}', "{{- if false }}")]),
    case("epp mode without the pool's selector", base="epp", values={"epp": {"inferencePool": {"selector": None}}}),
    case("epp mode HTTPRoute without a Gateway", base="epp", values={"gatewayRef": {"name": ""}}),
    case("typo'd epp key (epp.fallback)", base="epp", values={"epp": {"fallback": 2}}),
    case("epp.fallbacks above 8", base="epp", values={"epp": {"fallbacks": 9}}),
    case("epp.inferencePool.failureMode outside its enum", base="epp",
         values={"epp": {"inferencePool": {"failureMode": "Open"}}}),
    # Pool discovery (endpoints_inference_pool): the pod's token, the pool's name, the Role and its binding.
    case("control: epp pool discovery bound to a ServiceAccount the chart does not create", base="epp",
         values={"serviceAccount": {"create": False, "name": "picker"}}, expect_fail=False),
    case("control: epp pool discovery naming the pool as NAMESPACE/NAME", base="epp",
         values={"config": {"providers": [{**_POOL_PROVIDER, "endpoints_inference_pool": "llm/vllm-pool-epp"}]}},
         expect_fail=False),
    case("Role granting pool discovery one verb more (delete pods)", base="epp",
         edits=[(RB, 'resources: ["pods"]\n    verbs: ["get", "list", "watch"]',
                 'resources: ["pods"]\n    verbs: ["get", "list", "watch", "delete"]')]),
    case("Role granting every verb on pods (*)", base="epp",
         edits=[(RB, 'resources: ["pods"]\n    verbs: ["get", "list", "watch"]', 'resources: ["pods"]\n    verbs: ["*"]')]),
    case("Role without watch on inferencepools", base="epp",
         edits=[(RB, 'resources: ["inferencepools"]\n    verbs: ["get", "list", "watch"]',
                 'resources: ["inferencepools"]\n    verbs: ["get", "list"]')]),
    case("Role granting inferencepools in the core API group", base="epp",
         edits=[(RB, 'apiGroups: ["inference.networking.k8s.io"]', 'apiGroups: [""]')]),
    case("RoleBinding to another ServiceAccount than the pods'", base="epp",
         edits=[(RB, 'name: {{ include "ferrogate.serviceAccountName" . }}', "name: default")]),
    case("RoleBinding subject in another namespace", base="epp",
         edits=[(RB, "    namespace: {{ .Release.Namespace }}\n{{- end }}", "    namespace: kube-system\n{{- end }}")]),
    case("RoleBinding whose roleRef is a ClusterRole", base="epp",
         edits=[(RB, "  kind: Role\n  name:", "  kind: ClusterRole\n  name:")]),
    case("rbac.create false: nothing in the render lets the picker read its pool", base="epp",
         values={"rbac": {"create": False}}),
    case("epp pool discovery without the ServiceAccount token", base="epp",
         edits=[(DP, "      automountServiceAccountToken: true\n", "      automountServiceAccountToken: false\n")]),
    case("ServiceAccount token mounted where nothing calls the Kubernetes API (standalone)",
         edits=[(DP, '{{- if include "ferrogate.kubeAPI" . }}', "{{- if true }}")]),
    case("provider's endpoints_inference_pool not the rendered InferencePool's name", base="epp",
         values={"epp": {"inferencePool": {"name": "vllm-pool-renamed"}}}),
    case("provider's endpoints_inference_pool in another namespace than the InferencePool", base="epp",
         values={"config": {"providers": [{**_POOL_PROVIDER, "endpoints_inference_pool": "models/vllm-pool-epp"}]}},
         edits=[("templates/_validate.tpl", "(ne (first $parts) $.Release.Namespace)", "false")]),
    case("helm refuses endpoints_inference_pool in another namespace (the Role does not reach it)", base="epp",
         values={"config": {"providers": [{**_POOL_PROVIDER, "endpoints_inference_pool": "models/vllm-pool-epp"}]}}),
    case("helm refuses endpoints_inference_pool outside epp mode (standalone: no token, no Role)",
         values={"config": {"providers": [{"name": "local", "kind": "openai_compatible",
                                           "base_url": "http://vllm.llm.svc.cluster.local:8000",
                                           "endpoints_inference_pool": "vllm-pool"}]}}),
    case("typo'd rbac key (rbac.creat)", base="epp", values={"rbac": {"creat": True}}),
    # Leader election (--epp-lease): the Lease, the token, the leases rule, no budget or rollout
    # that waits for a second Ready pod. The epp profile with epp.leaderElection.enabled (ELECT)
    # elects with pool discovery; test-epp-lease elects without it (a Role of leases alone).
    case("control: the epp profile with leader election", base="epp", values=ELECT, expect_fail=False),
    case("control: leader election without pool discovery", base="test-epp-lease", expect_fail=False),
    case("--epp-lease naming another Lease than the chart's <fullname>-epp", base="epp", values=ELECT,
         edits=[(C, '- {{ include "ferrogate.eppLeaseName" . }}', "- ferrogate-leader")]),
    case("--epp-lease naming another Lease than <fullname>-epp (fullnameOverride)", base="test-epp-lease",
         edits=[(C, '- {{ include "ferrogate.eppLeaseName" . }}', '- {{ .Release.Name }}-epp')]),
    case("--epp-lease without --epp-lease-seconds", base="epp", values=ELECT,
         edits=[(C, "- --epp-lease-seconds\n- {{ int64 $v.epp.leaderElection.leaseSeconds | quote }}\n", "")]),
    case("--epp-lease-seconds 0 rendered", base="epp", values=ELECT,
         edits=[(C, "- {{ int64 $v.epp.leaderElection.leaseSeconds | quote }}", '- "0"')]),
    case("epp.leaderElection.leaseSeconds 0", base="epp", values={"epp": {"leaderElection": {"enabled": True, "leaseSeconds": 0}}}),
    case("epp.leaderElection.leaseSeconds above 3600", base="epp",
         values={"epp": {"leaderElection": {"enabled": True, "leaseSeconds": 3601}}}),
    case("typo'd leader election key (epp.leaderElection.enable)", base="epp",
         values={"epp": {"leaderElection": {"enable": True}}}),
    case("Role without update on leases", base="test-epp-lease",
         edits=[(RB, 'verbs: ["get", "create", "update"]', 'verbs: ["get", "create"]')]),
    case("Role granting leases one verb more (delete)", base="epp", values=ELECT,
         edits=[(RB, 'verbs: ["get", "create", "update"]', 'verbs: ["get", "create", "update", "delete"]')]),
    case("Role granting list and watch on leases", base="test-epp-lease",
         edits=[(RB, 'verbs: ["get", "create", "update"]', 'verbs: ["get", "list", "watch", "create", "update"]')]),
    case("Role granting leases in the core API group", base="epp", values=ELECT,
         edits=[(RB, 'apiGroups: ["coordination.k8s.io"]', 'apiGroups: [""]')]),
    case("Role granting leases where no picker elects a leader", base="epp",
         edits=[(RB, '{{- if include "ferrogate.eppLeaderElection" . }}', "{{- if true }}")]),
    case("leader election without the ServiceAccount token", base="test-epp-lease",
         edits=[(DP, "      automountServiceAccountToken: true\n", "      automountServiceAccountToken: false\n")]),
    case("token and Role for pool discovery only, not for leader election", base="test-epp-lease",
         edits=[("templates/_helpers.tpl",
                 '{{- if or (include "ferrogate.kubeDiscovery" .) (include "ferrogate.eppLeaderElection" .) }}',
                 '{{- if include "ferrogate.kubeDiscovery" . }}')]),
    case("rbac.create false: nothing in the render lets the picker take its Lease", base="test-epp-lease",
         values={"rbac": {"create": False}}),
    case("PodDisruptionBudget (maxUnavailable 1 of 2) with leader election: the leader's drain blocks", base="epp",
         values=ELECT, edits=[(PDB, '(not (include "ferrogate.eppLeaderElection" .))', "true")]),
    case("PodDisruptionBudget (minAvailable 1) with leader election: the leader's drain blocks",
         base="test-epp-lease", edits=[(PDB, '(not (include "ferrogate.eppLeaderElection" .))', "true")]),
    case("rolling update keeping every pod (maxUnavailable 0) with leader election: stalls", base="epp",
         values=ELECT, edits=[(DP, 'maxUnavailable: "100%"', "maxUnavailable: 0")]),
    case("rolling update keeping one pod (maxUnavailable 2 of 3) with leader election: stalls",
         base="test-epp-lease", edits=[(DP, 'maxUnavailable: "100%"', "maxUnavailable: 2")]),
    case("helm refuses --epp-lease in extraArgs (the chart sets it, with the token and the Role)", base="epp",
         values={"extraArgs": ["--epp-lease=other"]}),
    case("helm refuses autoscaling with leader election (followers take no requests)", base="epp",
         values={**ELECT, "autoscaling": {"enabled": True}}),
]


def merge(base, over):
    """Deep merge: maps merge key by key, anything else replaces."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def prepare(c, chart_copy, base_values, values_out):
    """Applies a case to a fresh copy of the chart; returns None, or why the case cannot apply."""
    with open(base_values) as f:
        values = yaml.safe_load(f) or {}
    with open(values_out, "w") as f:
        yaml.safe_dump(merge(values, c["values"]), f, sort_keys=False)
    for rel, old, new in c["edits"]:
        path = os.path.join(chart_copy, rel)
        with open(path) as f:
            text = f.read()
        if old not in text:
            return f"edit of {rel} does not apply: {old!r} not found (update the self-test)"
        with open(path, "w") as f:
            f.write(text.replace(old, new))
    for rel, text in c["add"].items():
        with open(os.path.join(chart_copy, rel), "w") as f:
            f.write(text)
    return None


def _pod(ep):
    """The pod spec of an EnvoyProxy's Deployment patch (k8s/envoy-gateway)."""
    return ep["spec"]["provider"]["kubernetes"]["envoyDeployment"]["patch"]["value"]["spec"]["template"]["spec"]


def _sidecar(ep):
    return next(c for c in _pod(ep).get("initContainers") or [] if c["name"] == "ferrogate")


def _volumes(ep):
    return _pod(ep)["volumes"]


def _bootstrap_tags(ep, fn):
    """A mutation of the stats_tags in the EnvoyProxy's spec.bootstrap value (YAML text)."""
    value = yaml.safe_load(ep["spec"]["bootstrap"]["value"])
    fn(value["stats_config"]["stats_tags"])
    ep["spec"]["bootstrap"]["value"] = yaml.safe_dump(value, sort_keys=False)


# Edited copies of the raw EnvoyProxy (k8s/envoy-gateway/10-gatewayclass.yaml), compared with the
# ingress-pod render: (name, mutation of the EnvoyProxy document, must it be rejected).
RAW_ENVOYPROXY_CASES = [
    ("control: the raw EnvoyProxy as it is", lambda ep: None, False),
    ("an image, env, ConfigMap name of its own (ignored)",
     lambda ep: (_sidecar(ep).update(image="registry.example.com/other:9.9", env=[]),
                 _volumes(ep)[0]["configMap"].update(name="my-config")), False),
    ("raw startup probe path that drifted (/health)",
     lambda ep: _sidecar(ep)["startupProbe"]["httpGet"].update(path="/health"), True),
    ("raw readiness probe threshold that drifted",
     lambda ep: _sidecar(ep)["readinessProbe"].update(failureThreshold=5), True),
    ("raw args that drifted (--poll-interval-ms 5000)",
     lambda ep: _sidecar(ep).update(args=[a if a != "1000" else "5000" for a in _sidecar(ep)["args"]]), True),
    ("raw securityContext that drifted (writable root filesystem)",
     lambda ep: _sidecar(ep)["securityContext"].update(readOnlyRootFilesystem=False), True),
    ("raw resources that drifted", lambda ep: _sidecar(ep)["resources"]["limits"].update(memory="512Mi"), True),
    ("raw volume mount the chart does not have",
     lambda ep: _sidecar(ep)["volumeMounts"].append({"name": "ferrogate-cache", "mountPath": "/scratch"}), True),
    ("raw emptyDir size that drifted", lambda ep: _volumes(ep)[1]["emptyDir"].update(sizeLimit="1Gi"), True),
    ("raw sidecar as a regular container (no restartPolicy)", lambda ep: _sidecar(ep).pop("restartPolicy"), True),
    ("raw bootstrap value with its keys sorted and requoted (ignored: compared as data)",
     lambda ep: ep["spec"]["bootstrap"].update(value=yaml.safe_dump(yaml.safe_load(ep["spec"]["bootstrap"]["value"]),
                                                                    sort_keys=True, default_style='"')), False),
    ("raw bootstrap missing a tag", lambda ep: _bootstrap_tags(ep, lambda tags: tags.pop(3)), True),
    ("raw bootstrap with a changed regex",
     lambda ep: _bootstrap_tags(ep, lambda tags: tags[0].update(regex="(;api=(.*))")), True),
    ("raw bootstrap of type Replace", lambda ep: ep["spec"]["bootstrap"].update(type="Replace"), True),
    ("raw EnvoyProxy without a bootstrap", lambda ep: ep["spec"].pop("bootstrap"), True),
]
