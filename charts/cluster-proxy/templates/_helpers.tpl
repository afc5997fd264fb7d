{{/* The cluster-proxy image: <registry>/<image>:<tag or appVersion>. */}}
{{- define "cluster-proxy.image" -}}
{{- printf "%s/%s:%s" .Values.registry .Values.image (.Values.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* Labels of every object of the release. */}}
{{- define "cluster-proxy.labels" -}}
app.kubernetes.io/name: cluster-proxy
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Labels selecting the addon manager's pods. */}}
{{- define "cluster-proxy.managerSelector" -}}
app.kubernetes.io/name: cluster-proxy
app.kubernetes.io/component: addon-manager
{{- end -}}

{{/* The Placement agents are installed by: [name, namespace]. */}}
{{- define "cluster-proxy.placementName" -}}
{{- .Values.installByPlacement.placementName | default "cluster-proxy" -}}
{{- end -}}
{{- define "cluster-proxy.placementNamespace" -}}
{{- .Values.installByPlacement.placementNamespace | default .Release.Namespace -}}
{{- end -}}

{{/* Labels selecting the gateway's pods. */}}
{{- define "cluster-proxy.gatewaySelector" -}}
app.kubernetes.io/name: cluster-proxy
app.kubernetes.io/component: gateway
{{- end -}}
