{{/*
ingress-pod mode: the strategic-merge patch that adds ferrogate to the gateway's Deployment.
Containers, init containers, volumes and pull secrets merge by name, so the proxy's own entries
stay as its controller made them. Envoy Gateway applies it as envoyDeployment.patch (EnvoyProxy),
Istio as the `deployment` overlay of a Gateway's options ConfigMap; both get the same document.
*/}}
{{- define "ferrogate.podPatch" -}}
spec:
  template:
    spec:
      {{- if .Values.ingressPod.nativeSidecar }}
      # A native sidecar: started before the proxy (which waits for its startup probe), stopped after it (Kubernetes 1.29+).
      initContainers:
        {{- include "ferrogate.container" (dict "root" . "native" true) | nindent 8 }}
      {{- else }}
      containers:
        {{- include "ferrogate.container" (dict "root" . "native" false) | nindent 8 }}
      {{- end }}
      volumes:
        {{- include "ferrogate.volumes" . | nindent 8 }}
      {{- with .Values.imagePullSecrets }}
      imagePullSecrets:
        {{- range . }}
        - name: {{ . }}
        {{- end }}
      {{- end }}
{{- end }}
