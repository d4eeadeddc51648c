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

{{/*
The extenders stanza of a KubeSchedulerConfiguration, at column 0: one
entry for filter, prioritize and bind (kube-scheduler refuses two that
manage the same resources).  Argument: (list ROOT TLSCONFIG), TLSCONFIG a
dict of certFile, keyFile, caFile used when extender.tls.enabled.
*/}}
{{- define "gpufrac.extenders" -}}
{{- $root := index . 0 -}}{{- $tlsc := index . 1 -}}
{{- $c := $root.Values.schedulerConfig -}}
{{- $e := $root.Values.extender -}}
{{- $tls := $e.tls.enabled -}}
extenders:
  - urlPrefix: {{ include "gpufrac.extenderURL" $root }}
    filterVerb: filter
    prioritizeVerb: prioritize
    # the extender writes the grant annotation, then the Binding
    bindVerb: bind
    # victims chosen per GPU (docs/scheduler.md, Preemption)
    preemptVerb: preempt
    weight: {{ $c.weight }}
    enableHTTPS: {{ $tls }}
    {{- if $tls }}
    tlsConfig:
      certFile: {{ $tlsc.certFile }}
      keyFile: {{ $tlsc.keyFile }}
      caFile: {{ $tlsc.caFile }}
    {{- end }}
    nodeCacheCapable: {{ $c.nodeCacheCapable }}
    httpTimeout: {{ $c.httpTimeout }}
    ignorable: false
    managedResources:
      # GPU slots are advertised by the node agent: kube-scheduler counts them.
      - name: gpufrac.io/gpu
        ignoredByScheduler: false
      # Shares are the extender's alone: nodes do not advertise them.
      - name: gpufrac.io/gpu-memory
        ignoredByScheduler: true
      - name: gpufrac.io/gpu-compute
        ignoredByScheduler: true
      {{- if has "hami" $e.accept }}
      # HAMi's names (extender.accept: hami), read by the extender
      {{- range list "nvidia.com/gpumem" "nvidia.com/gpumem-percentage" "nvidia.com/gpucores" }}
      - name: {{ . }}
        ignoredByScheduler: true
      {{- end }}
      {{- end }}
      {{- range $e.extraManagedResources }}
      - name: {{ . }}
        ignoredByScheduler: true
      {{- end }}
{{- end -}}

{{/* The kube-scheduler image tag: scheduler.image.tag, else the cluster's
version without a vendor suffix (v1.30.4-eks-a737599 -> v1.30.4). */}}
{{- define "gpufrac.kubeSchedulerImage" -}}
{{- $i := .Values.scheduler.image -}}
{{- $tag := $i.tag | default (regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version) -}}
{{- if not $tag -}}
{{- fail (printf "scheduler.image.tag: the cluster's version %q is not vMAJOR.MINOR.PATCH; set the kube-scheduler image tag" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- printf "%s:%s" $i.repository $tag -}}
{{- end -}}

{{/* The schedulerName GPU pods are sent to: the chart's profile (mode
deployment) or schedulerConfig.schedulerName (mode controlPlane). */}}
{{- define "gpufrac.podSchedulerName" -}}
{{- if eq .Values.scheduler.mode "deployment" -}}
{{- .Values.scheduler.name -}}
{{- else -}}
{{- .Values.schedulerConfig.schedulerName -}}
{{- end -}}
{{- end -}}

{{/* The MutatingAdmissionPolicy version to render: admissionPolicy.apiVersion,
else the newest the cluster serves, else "" (none). */}}
{{- define "gpufrac.mapVersion" -}}
{{- if .Values.admissionPolicy.apiVersion -}}
{{- .Values.admissionPolicy.apiVersion -}}
{{- else if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}
v1
{{- else if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy" -}}
v1beta1
{{- end -}}
{{- end -}}

{{/* gpufrac's kube-scheduler's configuration (scheduler.mode deployment). */}}
{{- define "gpufrac.kubeSchedulerConfig" -}}
{{- $k := .Values.scheduler -}}
# gpufrac's kube-scheduler (--config), rendered by the gpufrac chart
# {{ .Chart.Version }}, release {{ .Release.Name }}.  No kubeconfig: the pod's
# ServiceAccount token (in-cluster configuration).
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceLock: leases
  resourceNamespace: {{ .Release.Namespace }}
  resourceName: {{ $k.leaseName }}
profiles:
  - schedulerName: {{ $k.name }}
{{ include "gpufrac.extenders" (list . (dict "certFile" "/etc/gpufrac/tls/tls.crt" "keyFile" "/etc/gpufrac/tls/tls.key" "caFile" "/etc/gpufrac/tls/ca.crt")) }}
{{- end -}}
