{{- define "prestroid.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "prestroid.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "prestroid.commonLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The proxy's objects; the component keeps its Service off Redis' pods. */}}
{{- define "prestroid.labels" -}}
{{ include "prestroid.commonLabels" . }}
{{ include "prestroid.selectorLabels" . }}
{{- end -}}

{{- define "prestroid.selectorLabels" -}}
app.kubernetes.io/name: {{ include "prestroid.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: proxy
{{- end -}}

{{/* The Redis of redis.enabled. */}}
{{- define "prestroid.redisLabels" -}}
{{ include "prestroid.commonLabels" . }}
{{ include "prestroid.redisSelectorLabels" . }}
{{- end -}}

{{- define "prestroid.redisSelectorLabels" -}}
app.kubernetes.io/name: {{ include "prestroid.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: redis
{{- end -}}

{{/* The Secret holding route-secret, admin-token and admission-redis. */}}
{{- define "prestroid.secretName" -}}
{{- .Values.existingSecret | default (include "prestroid.fullname" .) -}}
{{- end -}}

{{- define "prestroid.tlsSecretName" -}}
{{- .Values.tls.existingSecret | default (printf "%s-tls" (include "prestroid.fullname" .)) -}}
{{- end -}}

{{- define "prestroid.redisOn" -}}
{{- if or .Values.redis.enabled .Values.redis.url -}}true{{- end -}}
{{- end -}}

{{/* The proxy's config file: .Values.config plus what the chart owns. */}}
{{- define "prestroid.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- $_ := set $cfg "listen" (printf "0.0.0.0:%d" (int .Values.ports.client)) -}}
{{- $_ := set $cfg "admin_listen" (printf "0.0.0.0:%d" (int .Values.ports.admin)) -}}
{{- if and (not (hasKey $cfg "public_url")) (not (hasKey $cfg "allowed_hosts")) -}}
{{- $svc := include "prestroid.fullname" . -}}
{{- $port := int .Values.ports.client -}}
{{- $ns := .Release.Namespace -}}
{{- $_ := set $cfg "allowed_hosts" (list (printf "%s:%d" $svc $port) (printf "%s.%s:%d" $svc $ns $port) (printf "%s.%s.svc:%d" $svc $ns $port) (printf "%s.%s.svc.cluster.local:%d" $svc $ns $port)) -}}
{{- end -}}
{{- if .Values.tls.enabled -}}
{{- $tls := dict "cert_file" "/etc/prestroid/tls/tls.crt" "key_file" "/etc/prestroid/tls/tls.key" -}}
{{- $_ := set $cfg "tls" (merge $tls (default (dict) (get $cfg "tls"))) -}}
{{- end -}}
{{- if include "prestroid.redisOn" . -}}
{{- $adm := default (dict) (get $cfg "admission") | deepCopy -}}
{{- if .Values.redis.enabled -}}
{{- $_ := set $adm "redis" (printf "redis://%s-redis:6379/0" (include "prestroid.fullname" .)) -}}
{{- end -}}
{{- if not (hasKey $adm "replicas") -}}
{{- $_ := set $adm "replicas" (int .Values.replicaCount) -}}
{{- end -}}
{{- $_ := set $cfg "admission" $adm -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
