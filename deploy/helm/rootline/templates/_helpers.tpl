{{- define "rootline.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "rootline.labels" -}}
app.kubernetes.io/name: rootline
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "rootline.selector" -}}
app.kubernetes.io/name: rootline
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "rootline.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "rootline.tokenSecret" -}}
{{- .Values.auth.existingSecret | default (printf "%s-token" (include "rootline.fullname" .)) -}}
{{- end -}}

{{- define "rootline.serverHost" -}}
{{ include "rootline.fullname" . }}-server.{{ .Release.Namespace }}.svc
{{- end -}}

{{/* The restricted Pod Security Standard's container settings. */}}
{{- define "rootline.restricted" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}
