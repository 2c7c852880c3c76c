{{/* The chart's name, at most 63 characters (a label value). */}}
{{- define "lockd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: the release's, unless it already contains the chart's. */}}
{{- define "lockd.fullname" -}}
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

{{/* What selects the pods: never changes between upgrades. */}}
{{- define "lockd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "lockd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "lockd.labels" -}}
{{ include "lockd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/* repository:tag, or repository@digest when a digest is given. */}}
{{- define "lockd.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "lockd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "lockd.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret and key that hold the backend URL. */}}
{{- define "lockd.backendSecret" -}}
{{- default (printf "%s-backend" (include "lockd.fullname" .)) .Values.backend.existingSecret }}
{{- end }}

{{- define "lockd.backendSecretKey" -}}
{{- if .Values.backend.existingSecret }}{{ .Values.backend.existingSecretKey }}{{ else }}url{{ end }}
{{- end }}

{{/* A Prometheus label matcher for this release's series. */}}
{{- define "lockd.promSelector" -}}
namespace="{{ .Release.Namespace }}",job="{{ include "lockd.fullname" . }}"
{{- end }}

{{/* The container port's name: https when lockd serves TLS. */}}
{{- define "lockd.portName" -}}
{{- if .Values.tls.existingSecret }}https{{ else }}http{{ end }}
{{- end }}

{{/* Where the store password file is mounted. */}}
{{- define "lockd.passwordFile" -}}
/etc/lockd/store/{{ .Values.backend.passwordKey }}
{{- end }}
