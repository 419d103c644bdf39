{{/*
Chart name, truncated to the 63-character label limit.
*/}}
{{- define "floe-operator.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name. If the release name already contains the chart
name it is used as is.
*/}}
{{- define "floe-operator.fullname" -}}
{{- $name := .Chart.Name }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "floe-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels.
*/}}
{{- define "floe-operator.labels" -}}
helm.sh/chart: {{ include "floe-operator.chart" . }}
{{ include "floe-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
{{- end }}

{{/*
Selector labels (must stay stable across upgrades).
*/}}
{{- define "floe-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "floe-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Selector labels as key=value pairs separated by commas (--operator-pod-labels).
*/}}
{{- define "floe-operator.selectorLabelPairs" -}}
app.kubernetes.io/name={{ include "floe-operator.name" . }},app.kubernetes.io/instance={{ .Release.Name }}
{{- end }}

{{/*
A map of labels as key=value pairs separated by commas (--metrics-scraper-pod-labels).
*/}}
{{- define "floe-operator.labelPairs" -}}
{{- $pairs := list }}
{{- range $k, $v := . }}{{ $pairs = append $pairs (printf "%s=%s" $k $v) }}{{ end }}
{{- join "," $pairs }}
{{- end }}

{{/*
Name of the ServiceAccount the operator runs as.
*/}}
{{- define "floe-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "floe-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Operator image reference; the tag defaults to the chart's appVersion.
*/}}
{{- define "floe-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
