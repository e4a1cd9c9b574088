{{- define "sluice.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sluice.fullname" -}}
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

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sluice.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "sluice.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: {{ .Values.mode }}
{{- end }}

{{- define "sluice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sluice.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The agent's configuration: the value config, or the mode's default. */}}
{{- define "sluice.config" -}}
{{- if .Values.config }}
{{- .Values.config }}
{{- else if eq .Values.mode "daemonset" }}
{{- tpl (.Files.Get "files/daemonset.properties") . }}
{{- else }}
{{- tpl (.Files.Get "files/collector.properties") . }}
{{- end }}
{{- end }}

{{- define "sluice.validateMode" -}}
{{- if not (has .Values.mode (list "daemonset" "deployment" "statefulset")) }}
{{- fail (printf "mode %q: use daemonset, deployment or statefulset" .Values.mode) }}
{{- end }}
{{- if not (has .Values.daemonset.kubernetesMetadata (list "kubelet" "path")) }}
{{- fail (printf "daemonset.kubernetesMetadata %q: use kubelet or path" .Values.daemonset.kubernetesMetadata) }}
{{- end }}
{{- end }}

{{/* "true" when the node agent reads its kubelet's /pods: the pod needs
the service account's token and the RBAC that lets the token read it. */}}
{{- define "sluice.kubeletMetadata" -}}
{{- if and (eq .Values.mode "daemonset") (eq .Values.daemonset.kubernetesMetadata "kubelet") }}true{{ end }}
{{- end }}
