{{/*
The ferrogate container, its volumes and its command line. One definition serves the chart's own
Deployment (standalone, sidecar) and the container patched into the ingress gateway's pods
(ingress-pod), so the flags, ports and probes cannot drift apart between the modes.
*/}}

{{/* The command line after the binary: the subcommand, then one flag and its value per item pair. */}}
{{- define "ferrogate.args" -}}
{{- $v := .Values -}}
- {{ if include "ferrogate.serves" . }}serve{{ else }}sidecar{{ end }}
- --config
- {{ include "ferrogate.configDir" . }}/{{ include "ferrogate.configKey" . }}
{{- if eq $v.mode "standalone" }}
- --listen
- 0.0.0.0:{{ int64 $v.ports.gateway }}
{{- else if eq $v.mode "epp" }}
{{- /* The HTTP listener serve always opens, kept on loopback: the gateway sends traffic to the pods itself. */}}
- --listen
- 127.0.0.1:{{ int64 $v.ports.gateway }}
- --epp-listen
- 0.0.0.0:{{ int64 $v.ports.epp }}
{{- if $v.epp.fallbacks }}
- --epp-fallbacks
- {{ int64 $v.epp.fallbacks | quote }}
{{- end }}
{{- if include "ferrogate.eppLeaderElection" . }}
- --epp-lease
- {{ include "ferrogate.eppLeaseName" . }}
- --epp-lease-seconds
- {{ int64 $v.epp.leaderElection.leaseSeconds | quote }}
{{- end }}
{{- end }}
- --admin-listen
- 0.0.0.0:{{ int64 $v.ports.admin }}
- --sidecar-listen
- {{ include "ferrogate.sidecarHost" . }}:{{ int64 $v.ports.sidecar }}
- --poll-interval-ms
- {{ int64 $v.pollIntervalMs | quote }}
{{- if $v.snapshotCache.enabled }}
- --snapshot-cache
- {{ include "ferrogate.stateDir" . }}/snapshot.json
{{- end }}
{{- if $v.usageFile }}
- --usage-file
- {{ include "ferrogate.stateDir" . }}/usage.jsonl
{{- end }}
{{- if include "ferrogate.serves" . }}
{{- with $v.serve }}
{{- if .workers }}
- --workers
- {{ int64 .workers | quote }}
{{- end }}
- --upstream-connect-timeout-ms
- {{ int64 .upstreamConnectTimeoutMs | quote }}
- --upstream-timeout-ms
- {{ int64 .upstreamTimeoutMs | quote }}
- --upstream-idle-timeout-ms
- {{ int64 .upstreamIdleTimeoutMs | quote }}
- --drain-timeout-ms
- {{ int64 .drainTimeoutMs | quote }}
- --header-timeout-ms
- {{ int64 .headerTimeoutMs | quote }}
- --body-timeout-ms
- {{ int64 .bodyTimeoutMs | quote }}
{{- if .maxConnections }}
- --max-connections
- {{ int64 .maxConnections | quote }}
{{- end }}
- --max-body-bytes
- {{ int64 .maxBodyBytes | quote }}
{{- if not .failover }}
- --no-failover
{{- end }}
{{- if .filterPath }}
- --filter
- {{ .filterPath }}
{{- end }}
{{- end }}
{{- end }}
{{- range $v.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/* One environment variable from a Secret: (dict "env" NAME "ref" {secretName, secretKey}). */}}
{{- define "ferrogate.secretEnv" -}}
- name: {{ .env }}
  valueFrom:
    secretKeyRef:
      name: {{ .ref.secretName }}
      key: {{ .ref.secretKey }}
{{- end }}

{{/* Environment: plain settings by value, everything secret by secretKeyRef only. */}}
{{- define "ferrogate.env" -}}
{{- $s := .Values.secrets -}}
- name: FERROGATE_LOG
  value: {{ .Values.logLevel | quote }}
{{- if and .Values.gatewayUrl (ne .Values.mode "standalone") }}
- name: FERROGATE_GATEWAY_URL
  value: {{ .Values.gatewayUrl | quote }}
{{- end }}
{{ include "ferrogate.secretEnv" (dict "env" "FERROGATE_ADMIN_TOKEN" "ref" $s.adminToken) }}
{{- if $s.internalToken.secretName }}
{{ include "ferrogate.secretEnv" (dict "env" "FERROGATE_INTERNAL_TOKEN" "ref" $s.internalToken) }}
{{- end }}
{{- if $s.masterKey.secretName }}
{{ include "ferrogate.secretEnv" (dict "env" "FERROGATE_MASTER_KEY" "ref" $s.masterKey) }}
{{- end }}
{{- if $s.databaseUrl.secretName }}
{{ include "ferrogate.secretEnv" (dict "env" $s.databaseUrl.env "ref" $s.databaseUrl) }}
{{- end }}
{{- if $s.redisUrl.secretName }}
{{ include "ferrogate.secretEnv" (dict "env" $s.redisUrl.env "ref" $s.redisUrl) }}
{{- end }}
{{- range $s.providerKeys }}
{{ include "ferrogate.secretEnv" (dict "env" .env "ref" .) }}
{{- end }}
{{- range .Values.extraEnv }}
- name: {{ .name }}
  value: {{ .value | quote }}
{{- end }}
{{- end }}

{{/* A gRPC health check of the endpoint picker (epp mode): (dict "service" NAME "port" N "p" settings). */}}
{{- define "ferrogate.grpcProbe" -}}
grpc:
  port: {{ int64 .port }}
  service: {{ .service }}
periodSeconds: {{ .p.periodSeconds }}
timeoutSeconds: {{ .p.timeoutSeconds }}
failureThreshold: {{ .p.failureThreshold }}
{{- end }}

{{/* An HTTP probe on the admin port. */}}
{{- define "ferrogate.probe" -}}
httpGet:
  path: {{ .path }}
  port: {{ .port }}
  scheme: HTTP
periodSeconds: {{ .p.periodSeconds }}
timeoutSeconds: {{ .p.timeoutSeconds }}
failureThreshold: {{ .p.failureThreshold }}
{{- end }}

{{/*
The container. Called with (dict "root" $ "native" BOOL); native adds restartPolicy Always, which
makes an init container a native sidecar (started before, stopped after, the proxy).
*/}}
{{- define "ferrogate.container" -}}
{{- $ := .root -}}
{{- $v := $.Values -}}
{{- $admin := include "ferrogate.adminPortName" $ -}}
- name: ferrogate
  image: {{ include "ferrogate.image" $ }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  {{- if .native }}
  restartPolicy: Always
  {{- end }}
  command: {{ toJson $v.command }}
  args:
    {{- include "ferrogate.args" $ | nindent 4 }}
  ports:
    {{- if eq $v.mode "standalone" }}
    - name: {{ include "ferrogate.gatewayPortName" $ }}
      containerPort: {{ int64 $v.ports.gateway }}
      protocol: TCP
    {{- end }}
    {{- if eq $v.mode "sidecar" }}
    - name: {{ include "ferrogate.sidecarPortName" $ }}
      containerPort: {{ int64 $v.ports.sidecar }}
      protocol: TCP
    {{- end }}
    {{- if eq $v.mode "epp" }}
    - name: {{ include "ferrogate.eppPortName" $ }}
      containerPort: {{ int64 $v.ports.epp }}
      protocol: TCP
    {{- end }}
    - name: {{ $admin }}
      containerPort: {{ int64 $v.ports.admin }}
      protocol: TCP
  env:
    {{- include "ferrogate.env" $ | nindent 4 }}
  {{- with $v.secrets.envFromSecrets }}
  envFrom:
    {{- range . }}
    - secretRef:
        name: {{ . }}
    {{- end }}
  {{- end }}
  {{- if eq $v.mode "epp" }}
  # gRPC health of the endpoint picker (kubelet gRPC probes, plaintext): its listener opens, and
  # reports liveness and readiness SERVING, once the filter holds a configuration.
  startupProbe:
    {{- include "ferrogate.grpcProbe" (dict "service" "liveness" "port" $v.ports.epp "p" $v.probes.startup) | nindent 4 }}
  livenessProbe:
    {{- include "ferrogate.grpcProbe" (dict "service" "liveness" "port" $v.ports.epp "p" $v.probes.liveness) | nindent 4 }}
  readinessProbe:
    {{- include "ferrogate.grpcProbe" (dict "service" "readiness" "port" $v.ports.epp "p" $v.probes.readiness) | nindent 4 }}
  {{- else }}
  # /healthz answers while the process runs; /readyz once a configuration snapshot exists.
  startupProbe:
    {{- include "ferrogate.probe" (dict "path" "/healthz" "port" $admin "p" $v.probes.startup) | nindent 4 }}
  livenessProbe:
    {{- include "ferrogate.probe" (dict "path" "/healthz" "port" $admin "p" $v.probes.liveness) | nindent 4 }}
  readinessProbe:
    {{- include "ferrogate.probe" (dict "path" (ternary "/readyz?strict=true" "/readyz" $v.probes.readiness.strict) "port" $admin "p" $v.probes.readiness) | nindent 4 }}
  {{- end }}
  {{- if $v.preStopSleepSeconds }}
  lifecycle:
    preStop:
      sleep:
        seconds: {{ $v.preStopSleepSeconds }}
  {{- end }}
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  securityContext:
    runAsNonRoot: true
    {{- if not (kindIs "invalid" $v.securityContext.runAsUser) }}
    runAsUser: {{ $v.securityContext.runAsUser }}
    {{- end }}
    {{- if not (kindIs "invalid" $v.securityContext.runAsGroup) }}
    runAsGroup: {{ $v.securityContext.runAsGroup }}
    {{- end }}
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    privileged: false
    capabilities:
      drop: ["ALL"]
    seccompProfile:
      type: RuntimeDefault
  terminationMessagePolicy: FallbackToLogsOnError
  volumeMounts:
    - name: ferrogate-config
      mountPath: {{ include "ferrogate.configDir" $ }}
      readOnly: true
    - name: ferrogate-state
      mountPath: {{ include "ferrogate.stateDir" $ }}
    - name: ferrogate-tmp
      mountPath: /tmp
{{- end }}

{{/* The volumes the container mounts; names carry the ferrogate- prefix to stay clear of the proxy's. */}}
{{- define "ferrogate.volumes" -}}
- name: ferrogate-config
  configMap:
    name: {{ include "ferrogate.configMapName" . }}
- name: ferrogate-state
  emptyDir:
    sizeLimit: {{ .Values.snapshotCache.sizeLimit }}
# Scratch space for libraries that expect a writable /tmp on a read-only root filesystem.
- name: ferrogate-tmp
  emptyDir:
    sizeLimit: 16Mi
{{- end }}
