{{/*
What the cluster serves, read from .Capabilities. Against a cluster (helm
install, upgrade, template --validate) Helm lists every served kind as
group/version/Kind; `helm template` without a cluster lists only the API
versions its own client knows, and then the Kubernetes defaults of
--kube-version decide.
*/}}

{{/* "true" when .Capabilities came from a cluster's discovery: every
cluster serves v1/Pod, and the offline default set names no kinds. */}}
{{- define "gpuplane.discovered" -}}
{{- if .Capabilities.APIVersions.Has "v1/Pod" }}true{{ end -}}
{{- end -}}

{{/* The apiVersion MutatingAdmissionPolicies and their bindings are
rendered at: admissionregistration.k8s.io/v1 (Kubernetes 1.36+), else
v1beta1 where only that is served (1.34-1.35 with the
MutatingAdmissionPolicy feature gate and that API version turned on),
else empty: the policies are left out. */}}
{{- define "gpuplane.mapAPIVersion" -}}
{{- $api := .Capabilities.APIVersions -}}
{{- if $api.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}
admissionregistration.k8s.io/v1
{{- else if $api.Has "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy" -}}
admissionregistration.k8s.io/v1beta1
{{- else if and (not (include "gpuplane.discovered" .)) (semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version) -}}
admissionregistration.k8s.io/v1
{{- end -}}
{{- end -}}

{{/* "true" when the cluster serves DRA at resource.k8s.io/v1 (Kubernetes
1.34+): only then are DeviceClasses rendered. */}}
{{- define "gpuplane.draServed" -}}
{{- if .Capabilities.APIVersions.Has "resource.k8s.io/v1/DeviceClass" -}}
true
{{- else if and (not (include "gpuplane.discovered" .)) (semverCompare ">=1.34.0-0" .Capabilities.KubeVersion.Version) -}}
true
{{- end -}}
{{- end -}}

{{/* The admission values whose MutatingAdmissionPolicy this cluster
cannot serve, as a comma-separated list; empty when none is off. */}}
{{- define "gpuplane.mapValuesOff" -}}
{{- if not (include "gpuplane.mapAPIVersion" .) -}}
{{- $off := list -}}
{{- range $k := list "hideGPUs" "gpuFractionDevice" "kaiPods" "hamiPods" "schedulingGate" -}}
{{- if index $.Values.admission $k }}{{ $off = append $off (printf "admission.%s" $k) }}{{ end -}}
{{- end -}}
{{- join ", " $off -}}
{{- end -}}
{{- end -}}
