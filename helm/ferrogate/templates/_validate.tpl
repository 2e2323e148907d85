{{/*
Refusals of values that would render a pod ferrogate cannot run in, or that would put a secret
into a manifest. values.schema.json checks shapes and types; these check what depends on several
values at once, and say why in ferrogate's terms. Included once, from validate.yaml.
*/}}
{{- define "ferrogate.validate" -}}
{{- $v := .Values -}}
{{- $s := $v.secrets -}}

{{- /* The admin listener binds 0.0.0.0 for the kubelet and Prometheus; ferrogate refuses that without a token. */}}
{{- if not $s.adminToken.secretName }}
{{- fail (printf "secrets.adminToken.secretName is required: the admin listener binds 0.0.0.0:%v so the kubelet can probe /healthz and /readyz, and ferrogate refuses a non-loopback admin listener without FERROGATE_ADMIN_TOKEN" $v.ports.admin) }}
{{- end }}
{{- if and (eq $v.mode "sidecar") (not $s.internalToken.secretName) }}
{{- fail "secrets.internalToken.secretName is required in sidecar mode: the filter-facing listener binds 0.0.0.0 for the gateway's Envoy, and ferrogate sidecar refuses that without FERROGATE_INTERNAL_TOKEN" }}
{{- end }}

{{- /* Ports: one number per listener. */}}
{{- if or (eq (int $v.ports.admin) (int $v.ports.sidecar)) (and (include "ferrogate.serves" .) (or (eq (int $v.ports.gateway) (int $v.ports.admin)) (eq (int $v.ports.gateway) (int $v.ports.sidecar)))) }}
{{- fail "ports.gateway, ports.admin and ports.sidecar must be three different numbers" }}
{{- end }}
{{- if and (eq $v.mode "epp") (has (int $v.ports.epp) (list (int $v.ports.gateway) (int $v.ports.admin) (int $v.ports.sidecar))) }}
{{- fail "ports.epp must differ from ports.gateway, ports.admin and ports.sidecar" }}
{{- end }}

{{- /* epp: the InferencePool needs its pods, the HTTPRoute its Gateway. */}}
{{- if eq $v.mode "epp" }}
{{- if not $v.epp.inferencePool.selector }}
{{- fail "epp.inferencePool.selector is required in epp mode: the labels of the model server pods (the InferencePool's spec.selector.matchLabels), e.g. app: vllm-pool" }}
{{- end }}
{{- if and $v.epp.httpRoute.enabled (not $v.gatewayRef.name) }}
{{- fail "epp.httpRoute.enabled needs gatewayRef.name (the Gateway the HTTPRoute attaches to)" }}
{{- end }}
{{- if $v.probes.readiness.strict }}
{{- fail "probes.readiness.strict is an admin /readyz option; in epp mode readiness is the picker's gRPC health" }}
{{- end }}
{{- if and $v.epp.leaderElection.enabled $v.autoscaling.enabled }}
{{- fail "epp.leaderElection with autoscaling: only the Lease holder takes requests, so more replicas add followers, not capacity; set autoscaling.enabled false (replicaCount: the leader and its standbys)" }}
{{- end }}
{{- end }}

{{- /* Configuration: from values or from an existing ConfigMap, not both. */}}
{{- $inline := false }}
{{- range $key, $val := $v.config }}{{ if $val }}{{ $inline = true }}{{ end }}{{ end }}
{{- if and $inline $v.existingConfigMap.name }}
{{- fail "set either config or existingConfigMap.name, not both" }}
{{- end }}

{{- /* No provider key in the ConfigMap: providers name a variable, the variable comes from a Secret. */}}
{{- $envs := dict }}
{{- range $s.providerKeys }}{{ $_ := set $envs .env true }}{{ end }}
{{- range $i, $p := ($v.config.providers | default list) }}
{{- if hasKey $p "api_key" }}
{{- fail (printf "config.providers[%d].api_key would put a provider key into a ConfigMap: name a variable with api_key_env and give it through secrets.providerKeys" $i) }}
{{- end }}
{{- if and $p.api_key_env (not (hasKey $envs $p.api_key_env)) (not $s.envFromSecrets) }}
{{- fail (printf "config.providers[%d].api_key_env is %s, but no secrets.providerKeys entry (or envFromSecrets) gives that variable" $i $p.api_key_env) }}
{{- end }}
{{- /* Pool discovery reads the Kubernetes API: only epp mode's pods get a token and a Role, in the release namespace. */}}
{{- if and (kindIs "map" $p) $p.endpoints_inference_pool }}
{{- if ne $v.mode "epp" }}
{{- fail (printf "config.providers[%d].endpoints_inference_pool: the chart gives the Kubernetes API token and Role for pool discovery in epp mode only; in %s mode use endpoints or endpoints_dns" $i $v.mode) }}
{{- end }}
{{- $parts := splitList "/" (toString $p.endpoints_inference_pool) }}
{{- if and (eq (len $parts) 2) (ne (first $parts) $.Release.Namespace) }}
{{- fail (printf "config.providers[%d].endpoints_inference_pool %s: the chart's Role grants the release namespace (%s) only; name a pool there (the InferencePool the chart renders is %s)" $i $p.endpoints_inference_pool $.Release.Namespace (include "ferrogate.inferencePoolName" $)) }}
{{- end }}
{{- end }}
{{- end }}
{{- with $v.config.store }}
{{- if eq (toString .kind) "postgres" }}
{{- if not $s.databaseUrl.secretName }}
{{- fail "config.store.kind is postgres: set secrets.databaseUrl (the Secret holding the database URL)" }}
{{- end }}
{{- if ne (toString .url_env) $s.databaseUrl.env }}
{{- fail (printf "config.store.url_env (%v) and secrets.databaseUrl.env (%s) must name the same variable" .url_env $s.databaseUrl.env) }}
{{- end }}
{{- end }}
{{- end }}
{{- with $v.config.redis }}
{{- if not $s.redisUrl.secretName }}
{{- fail "config.redis is set: set secrets.redisUrl (the Secret holding the Redis URL)" }}
{{- end }}
{{- if ne (toString .url_env) $s.redisUrl.env }}
{{- fail (printf "config.redis.url_env (%v) and secrets.redisUrl.env (%s) must name the same variable" .url_env $s.redisUrl.env) }}
{{- end }}
{{- end }}

{{- /* Plain environment variables must not carry secrets; the chart owns its own variables. */}}
{{- range $v.extraEnv }}
{{- if regexMatch "(?i)(TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|MASTER_KEY|_KEY$|_URL$|_DSN$|HEADERS)" .name }}
{{- fail (printf "extraEnv %s looks like a secret: give it through secrets (a Secret reference), never as a value" .name) }}
{{- end }}
{{- if eq .name "FERROGATE_LOG" }}
{{- fail "extraEnv FERROGATE_LOG: use logLevel" }}
{{- end }}
{{- end }}
{{- range $v.extraArgs }}
{{- if regexMatch "^--(config|listen|admin-listen|sidecar-listen|epp-listen|epp-fallbacks|epp-lease|epp-lease-seconds|snapshot-cache|usage-file|poll-interval-ms)(=|$)" . }}
{{- fail (printf "extraArgs %s: the chart sets this flag itself (ports, epp.fallbacks, epp.leaderElection, configuration, snapshotCache, usageFile, pollIntervalMs)" .) }}
{{- end }}
{{- end }}

{{- /* Kubernetes must wait longer than ferrogate serve drains. */}}
{{- if and (include "ferrogate.serves" .) (le (mul (int $v.terminationGracePeriodSeconds) 1000) (int $v.serve.drainTimeoutMs)) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed serve.drainTimeoutMs (%v ms), or the kubelet kills in-flight requests" $v.terminationGracePeriodSeconds $v.serve.drainTimeoutMs) }}
{{- end }}

{{- with $v.podDisruptionBudget }}
{{- if and .enabled (eq (kindIs "invalid" .maxUnavailable) (kindIs "invalid" .minAvailable)) }}
{{- fail "podDisruptionBudget: set exactly one of maxUnavailable and minAvailable (the other null)" }}
{{- end }}
{{- end }}
{{- with $v.autoscaling }}
{{- if and .enabled (gt (int .minReplicas) (int .maxReplicas)) }}
{{- fail "autoscaling.minReplicas must not exceed autoscaling.maxReplicas" }}
{{- end }}
{{- if and .enabled (not .targetCPUUtilizationPercentage) (not .targetMemoryUtilizationPercentage) }}
{{- fail "autoscaling needs targetCPUUtilizationPercentage or targetMemoryUtilizationPercentage" }}
{{- end }}
{{- end }}

{{- if and (eq $v.mode "ingress-pod") $v.networkPolicy.enabled }}
{{- fail "networkPolicy is not rendered in ingress-pod mode: a policy selecting the gateway's pods would also cut the gateway's own traffic; set networkPolicy.enabled false and use the gateway's policies" }}
{{- end }}
{{- if and (eq $v.mode "ingress-pod") $v.autoscaling.enabled }}
{{- fail "autoscaling is the gateway's in ingress-pod mode (EnvoyProxy envoyHpa, or the Istio Gateway's options): set autoscaling.enabled false" }}
{{- end }}
{{- if and $v.envoyPatchPolicy.enabled (include "ferrogate.serves" .) }}
{{- fail (printf "envoyPatchPolicy is for sidecar and ingress-pod modes: in %s mode no Envoy calls a sidecar" $v.mode) }}
{{- end }}
{{- if and $v.envoyPatchPolicy.enabled (not $v.gatewayRef.name) }}
{{- fail "envoyPatchPolicy.enabled needs gatewayRef.name (the Gateway the policy attaches to)" }}
{{- end }}
{{- if and $v.envoyPatchPolicy.enabled (eq $v.mode "ingress-pod") (eq $v.ingressPod.provider "istio") }}
{{- fail "envoyPatchPolicy is an Envoy Gateway resource: with ingressPod.provider istio, add the cluster with an EnvoyFilter (envoy/istio/envoyfilter.yaml)" }}
{{- end }}
{{- if and (eq $v.mode "ingress-pod") $v.metrics.serviceMonitor.enabled (eq $v.ingressPod.provider "istio") (not $v.gatewayRef.name) (not $v.ingressPod.podSelector) }}
{{- fail "the PodMonitor of ingress-pod mode with istio needs gatewayRef.name or ingressPod.podSelector to find the gateway pods" }}
{{- end }}
{{- end }}
