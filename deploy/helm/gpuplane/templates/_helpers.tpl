{{/* The chart's name: nameOverride, else the chart's. */}}
{{- define "gpuplane.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every object's name: fullnameOverride, else the release
name, followed by the chart's name unless the release name holds it. Cut to
40 characters, so that the longest suffix (-scheduler-metrics) keeps a
Service name within 63. */}}
{{- define "gpuplane.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "gpuplane.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The objects of a component (agent, scheduler): <fullname>-<component>. */}}
{{- define "gpuplane.agent.fullname" -}}
{{ include "gpuplane.fullname" . }}-agent
{{- end -}}
{{- define "gpuplane.scheduler.fullname" -}}
{{ include "gpuplane.fullname" . }}-scheduler
{{- end -}}

{{/* Labels on every object of a component (dict "component" "agent" "root"
$): its name <name>-<component>, as the manifests in deploy/ have it, the
release, the component, part-of and the version. */}}
{{- define "gpuplane.labels" -}}
{{ include "gpuplane.selectorLabels" . }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/part-of: gpuplane
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end -}}

{{/* A component's podLabels beside the chart's own labels, which they may
not replace (dict "component" "agent" "root" $). */}}
{{- define "gpuplane.podLabels" -}}
{{- $own := index .root.Values .component "podLabels" | default dict -}}
{{- range $key := list "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component" "app.kubernetes.io/part-of" "app.kubernetes.io/version" -}}
{{- if hasKey $own $key -}}
{{- fail (printf "%s.podLabels: %s is the chart's own label, which selects the pods; choose another key" $.component $key) -}}
{{- end -}}
{{- end -}}
{{- with $own -}}
{{ toYaml . }}
{{- end -}}
{{- end -}}

{{/* The labels a component's selectors match (dict "component" "agent"
"root" $). */}}
{{- define "gpuplane.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuplane.name" .root }}-{{ .component }}
{{- end -}}

{{/* A component's image (dict "component" "agent" "root" $):
<component image.repository, else image.registry/gpuplane-<component>>:<component
tag, else image.tag, else appVersion>. */}}
{{- define "gpuplane.image" -}}
{{- $own := index .root.Values .component "image" -}}
{{- $repo := $own.repository | default (printf "%s/gpuplane-%s" (trimSuffix "/" .root.Values.image.registry) .component) -}}
{{- $tag := $own.tag | default .root.Values.image.tag | default .root.Chart.AppVersion -}}
{{ printf "%s:%s" $repo $tag }}
{{- end -}}

{{/* A component's image pull policy (dict "component" "agent" "root" $). */}}
{{- define "gpuplane.imagePullPolicy" -}}
{{- (index .root.Values .component "image").pullPolicy | default .root.Values.image.pullPolicy -}}
{{- end -}}

{{/* A component's ServiceAccount (dict "component" "agent" "root" $): its
serviceAccount.name, else <fullname>-<component> when the chart creates it,
else default. */}}
{{- define "gpuplane.serviceAccountName" -}}
{{- $sa := index .root.Values .component "serviceAccount" -}}
{{- if $sa.name -}}
{{ $sa.name }}
{{- else if $sa.create -}}
{{ include "gpuplane.fullname" .root }}-{{ .component }}
{{- else -}}
default
{{- end -}}
{{- end -}}

{{/* The ConfigMap holding the agent's device plugin configs. */}}
{{- define "gpuplane.agentConfigMap" -}}
{{- if .Values.config.name -}}
{{ .Values.config.name }}
{{- else -}}
{{ include "gpuplane.agent.fullname" . }}-config
{{- end -}}
{{- end -}}

{{/* The agent's ServiceAccount as the API server names the user. */}}
{{- define "gpuplane.agentUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "gpuplane.serviceAccountName" (dict "component" "agent" "root" .) }}
{{- end -}}

{{/* The scheduler's ServiceAccount as the API server names the user. */}}
{{- define "gpuplane.schedulerUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "gpuplane.serviceAccountName" (dict "component" "scheduler" "root" .) }}
{{- end -}}

{{/* Namespaces the GPU access policies leave alone. */}}
{{- define "gpuplane.unrestrictedNamespaces" -}}
{{- $ns := list "kube-system" .Release.Namespace | uniq -}}
[{{ join ", " $ns }}]
{{- end -}}

{{/* The agent's value of a key NVIDIA's chart has at the top level: the
top-level value when it is set (not null or empty), else agent.<key>
(dict "key" "tolerations" "root" $). */}}
{{- define "gpuplane.agentValue" -}}
{{- $top := index .root.Values .key -}}
{{- if $top -}}
{{ toYaml $top }}
{{- else -}}
{{ toYaml (index .root.Values.agent .key) }}
{{- end -}}
{{- end -}}
