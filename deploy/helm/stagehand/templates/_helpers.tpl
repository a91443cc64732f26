{{/* The release's name, unless it already says stagehand ("stagehand" for the default). */}}
{{- define "stagehand.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 58 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 58 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "stagehand.driverName" -}}
{{- .Values.driverName | default "iscsi.stagehand.dev" -}}
{{- end -}}

{{/* What selects the node pods (fixed for the release's life: a DaemonSet's selector cannot
     change). */}}
{{- define "stagehand.selectorLabels" -}}
app.kubernetes.io/name: stagehand
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: node
{{- end -}}

{{/* Every object's. */}}
{{- define "stagehand.labels" -}}
app.kubernetes.io/name: stagehand
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
