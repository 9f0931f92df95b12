{{/* Labels on every object of a component: name and part-of, as the
manifests in deploy/ have them, and the version. */}}
{{- define "gpuplane.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: gpuplane
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end -}}

{{/* An image reference: <registry>/<name>:<tag or appVersion>. */}}
{{- define "gpuplane.image" -}}
{{- $tag := .root.Values.image.tag | default .root.Chart.AppVersion -}}
{{ printf "%s/%s:%s" (trimSuffix "/" .root.Values.image.registry) .name $tag }}
{{- end -}}

{{/* The ConfigMap holding the agent's device plugin configs. */}}
{{- define "gpuplane.agentConfigMap" -}}
{{- if .Values.config.name -}}
{{ .Values.config.name }}
{{- else -}}
gpuplane-agent-config
{{- end -}}
{{- end -}}

{{/* The agent's ServiceAccount as the API server names the user. */}}
{{- define "gpuplane.agentUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:gpuplane-agent
{{- end -}}

{{/* Namespaces the GPU access policies leave alone. */}}
{{- define "gpuplane.unrestrictedNamespaces" -}}
{{- $ns := list "kube-system" .Release.Namespace | uniq -}}
[{{ join ", " $ns }}]
{{- end -}}
