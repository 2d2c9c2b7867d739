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

{{/* The scheme of the server's query/agent API port. */}}
{{- define "rootline.queryScheme" -}}
{{- if .Values.server.tls.existingSecret }}https{{ else }}http{{ end -}}
{{- end -}}

{{/* The scheme of the server's OTLP/HTTP receiver. */}}
{{- define "rootline.receiverScheme" -}}
{{- if and .Values.server.tls.existingSecret .Values.server.tls.receivers }}https{{ else }}http{{ end -}}
{{- end -}}

{{/*
The key of server.tls.existingSecret the agents trust as the server's CA:
server.tls.caKey, else ca.crt when the Secret has one (or cannot be read at
render time), else tls.crt (a self-signed certificate is its own CA).
*/}}
{{- define "rootline.serverCAKey" -}}
{{- if .Values.server.tls.caKey -}}
{{- .Values.server.tls.caKey -}}
{{- else -}}
{{- $s := lookup "v1" "Secret" .Release.Namespace .Values.server.tls.existingSecret -}}
{{- if and $s (not (hasKey ($s.data | default dict) "ca.crt")) -}}
tls.crt
{{- else -}}
ca.crt
{{- end -}}
{{- end -}}
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
