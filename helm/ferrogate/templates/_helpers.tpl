{{/*
Names, labels and the values every template shares. The container itself is in _container.tpl,
the refusals of impossible values in _validate.tpl.
*/}}

{{- define "ferrogate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Release-scoped name: "<release>-ferrogate", or the release name when it already says ferrogate. */}}
{{- define "ferrogate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "ferrogate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The component label: what the pods are (the gateway, the sidecar of a gateway, or an endpoint picker). */}}
{{- define "ferrogate.component" -}}
{{- if eq .Values.mode "standalone" }}gateway{{ else if eq .Values.mode "epp" }}endpoint-picker{{ else }}sidecar{{ end }}
{{- end }}

{{/* Modes whose container runs `ferrogate serve` (the others run `ferrogate sidecar`). */}}
{{- define "ferrogate.serves" -}}
{{- if or (eq .Values.mode "standalone") (eq .Values.mode "epp") }}true{{ end }}
{{- end }}

{{/* Selector labels: stable for the life of a release (a Deployment selector is immutable). */}}
{{- define "ferrogate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ferrogate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Standard labels of every resource. */}}
{{- define "ferrogate.labels" -}}
helm.sh/chart: {{ include "ferrogate.chart" . }}
{{ include "ferrogate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ferrogate
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels of the pod template: no chart version, so upgrading the chart alone restarts no pod.
*/}}
{{- define "ferrogate.podLabels" -}}
{{ include "ferrogate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: ferrogate
app.kubernetes.io/component: {{ include "ferrogate.component" . }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- with .Values.podLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "ferrogate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "ferrogate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ferrogate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The ConfigMap holding the configuration document, and the key of the document in it. */}}
{{- define "ferrogate.configMapName" -}}
{{- default (include "ferrogate.fullname" .) .Values.existingConfigMap.name }}
{{- end }}

{{- define "ferrogate.configKey" -}}
{{- if .Values.existingConfigMap.name }}{{ .Values.existingConfigMap.key }}{{ else }}config.yaml{{ end }}
{{- end }}

{{/* Where the ConfigMap is mounted (a directory, not a subPath, so kubelet updates reach it). */}}
{{- define "ferrogate.configDir" -}}/etc/ferrogate{{- end }}
{{/* The emptyDir for the snapshot cache and the usage file. */}}
{{- define "ferrogate.stateDir" -}}/var/lib/ferrogate{{- end }}

{{/*
Container port names. In ingress-pod mode the container shares the pod with the proxy, whose
ports are named too, so ferrogate's carry a prefix there.
*/}}
{{- define "ferrogate.portPrefix" -}}
{{- if eq .Values.mode "ingress-pod" }}fg-{{ end }}
{{- end }}
{{- define "ferrogate.adminPortName" -}}{{ include "ferrogate.portPrefix" . }}admin{{- end }}
{{- define "ferrogate.sidecarPortName" -}}{{ include "ferrogate.portPrefix" . }}sidecar{{- end }}
{{- define "ferrogate.gatewayPortName" -}}gateway{{- end }}
{{/* The endpoint picker's ext_proc port: the name the Inference Extension's own charts give it. */}}
{{- define "ferrogate.eppPortName" -}}grpc-ext-proc{{- end }}

{{/*
The filter-facing listener is reached from other pods only in sidecar mode; elsewhere the filter
is in the same process (standalone) or the same pod (ingress-pod), so it stays on loopback.
*/}}
{{- define "ferrogate.sidecarHost" -}}
{{- if eq .Values.mode "sidecar" }}0.0.0.0{{ else }}127.0.0.1{{ end }}
{{- end }}

{{/* Service ports: 0 in values means "the container port's number". */}}
{{- define "ferrogate.servicePort" -}}
{{- if .Values.service.port }}{{ .Values.service.port }}
{{- else if eq .Values.mode "standalone" }}{{ .Values.ports.gateway }}
{{- else if eq .Values.mode "epp" }}{{ .Values.ports.epp }}
{{- else }}{{ .Values.ports.sidecar }}{{ end }}
{{- end }}

{{- define "ferrogate.adminServicePort" -}}
{{- default .Values.ports.admin .Values.adminService.port }}
{{- end }}

{{/* epp mode: the InferencePool's and the HTTPRoute's names. */}}
{{- define "ferrogate.inferencePoolName" -}}
{{- default (include "ferrogate.fullname" .) .Values.epp.inferencePool.name }}
{{- end }}
{{/*
epp mode: whether the picker reads the Kubernetes API (pool discovery: a provider with
endpoints_inference_pool follows an InferencePool's pods itself). True when a provider of
`config` says endpoints_inference_pool, or when the configuration is an existing ConfigMap the
chart cannot read. Then the pods get their ServiceAccount token, and rbac.create renders the Role.
*/}}
{{- define "ferrogate.kubeDiscovery" -}}
{{- if eq .Values.mode "epp" }}
{{- if .Values.existingConfigMap.name }}true
{{- else }}
{{- range (.Values.config.providers | default list) }}{{ if and (kindIs "map" .) .endpoints_inference_pool }}true{{ end }}{{ end }}
{{- end }}
{{- end }}
{{- end }}
{{/*
epp mode with epp.leaderElection.enabled: the replicas compete for a coordination.k8s.io Lease
(--epp-lease), and only its holder reports readiness.
*/}}
{{- define "ferrogate.eppLeaderElection" -}}
{{- if and (eq .Values.mode "epp") .Values.epp.leaderElection.enabled }}true{{ end }}
{{- end }}
{{/* The Lease the picker replicas compete for (--epp-lease), in the release namespace. */}}
{{- define "ferrogate.eppLeaseName" -}}
{{- include "ferrogate.fullname" . }}-epp
{{- end }}
{{/*
Whether the pods call the Kubernetes API at all: pool discovery or leader election. Then they
get their ServiceAccount token, and rbac.create renders the Role (with the rules each needs).
*/}}
{{- define "ferrogate.kubeAPI" -}}
{{- if or (include "ferrogate.kubeDiscovery" .) (include "ferrogate.eppLeaderElection" .) }}true{{ end }}
{{- end }}
{{/* A label map as a kubectl selector: k=v,k=v. */}}
{{- define "ferrogate.selectorText" -}}
{{- $out := list }}{{ range $k, $v := . }}{{ $out = append $out (printf "%s=%s" $k $v) }}{{ end }}{{ join "," $out }}
{{- end }}
{{- define "ferrogate.httpRouteName" -}}
{{- default (include "ferrogate.fullname" .) .Values.epp.httpRoute.name }}
{{- end }}

{{/* Namespace of the Gateway the filter runs in (epp: the Gateway the HTTPRoute attaches to). */}}
{{- define "ferrogate.gatewayNamespace" -}}
{{- default .Release.Namespace .Values.gatewayRef.namespace }}
{{- end }}

{{/* Name of the EnvoyProxy or of the Istio options ConfigMap (ingress-pod mode). */}}
{{- define "ferrogate.ingressPodName" -}}
{{- if .Values.ingressPod.name }}{{ .Values.ingressPod.name }}
{{- else if eq .Values.ingressPod.provider "istio" }}{{ include "ferrogate.fullname" . }}-gateway-options
{{- else }}{{ include "ferrogate.fullname" . }}{{ end }}
{{- end }}

{{/* The gateway pods of ingress-pod mode, by the labels Envoy Gateway or Istio give them. */}}
{{- define "ferrogate.ingressPodSelector" -}}
{{- if .Values.ingressPod.podSelector }}
{{- toYaml .Values.ingressPod.podSelector }}
{{- else if eq .Values.ingressPod.provider "istio" }}
gateway.networking.k8s.io/gateway-name: {{ .Values.gatewayRef.name | quote }}
{{- else }}
app.kubernetes.io/name: envoy
app.kubernetes.io/component: proxy
app.kubernetes.io/managed-by: envoy-gateway
{{- with .Values.gatewayRef.name }}
gateway.envoyproxy.io/owning-gateway-name: {{ . | quote }}
gateway.envoyproxy.io/owning-gateway-namespace: {{ include "ferrogate.gatewayNamespace" $ | quote }}
{{- end }}
{{- end }}
{{- end }}
