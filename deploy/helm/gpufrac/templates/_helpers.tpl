{{/*
The labels Helm's conventions add to every object's metadata (not to pod
templates or selectors: those stay as in deploy/, and selectors are
immutable).  tests/helm/test_chart.py strips exactly these four when it
compares the chart with deploy/.
*/}}
{{- define "gpufrac.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* An image reference: repository:tag, the tag defaulting to appVersion. */}}
{{- define "gpufrac.image" -}}
{{- $img := index . 0 -}}{{- $root := index . 1 -}}
{{- printf "%s:%s" $img.repository (default $root.Chart.AppVersion $img.tag) -}}
{{- end -}}

{{/* The extender's URL as kube-scheduler calls it. */}}
{{- define "gpufrac.extenderURL" -}}
{{- $e := .Values.extender -}}
{{- $host := $e.service.clusterIP | default (printf "gpufrac-scheduler.%s.svc" .Release.Namespace) -}}
{{- printf "%s://%s:%d/gpufrac" (ternary "https" "http" $e.tls.enabled) $host (int $e.port) -}}
{{- end -}}

{{/* The user name of a ServiceAccount token. */}}
{{- define "gpufrac.saUser" -}}
{{- printf "system:serviceaccount:%s:%s" .ns .name -}}
{{- end -}}
