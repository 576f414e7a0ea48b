{{/* The chart's name, at most 63 characters. */}}
{{- define "switchyard.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: the release name when it contains the chart name. */}}
{{- define "switchyard.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "switchyard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "switchyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "switchyard.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "switchyard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: switchyard
{{- end -}}

{{- define "switchyard.serviceAccountName" -}}
{{- default (include "switchyard.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "switchyard.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The Secret that holds the serving certificate (tls.crt, tls.key, ca.crt). */}}
{{- define "switchyard.tlsSecret" -}}
{{- if eq .Values.tls.mode "Secret" -}}
{{- required "tls.existingSecret is required with tls.mode Secret: a Secret in the release namespace with tls.crt, tls.key and ca.crt (see docs/chart.md)" .Values.tls.existingSecret -}}
{{- else -}}
{{- if .Values.tls.existingSecret -}}
{{- fail (printf "tls.existingSecret is only used with tls.mode Secret (tls.mode is %s): set tls.mode=Secret, or drop tls.existingSecret" .Values.tls.mode) -}}
{{- end -}}
{{- printf "%s-tls" (include "switchyard.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The names sidecars and the API server reach the controller by: its Service's DNS names. */}}
{{- define "switchyard.dnsNames" -}}
{{- $svc := include "switchyard.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | join "," -}}
{{- end -}}

{{/* The MutatingWebhookConfiguration (cluster-scoped). */}}
{{- define "switchyard.webhookName" -}}
{{- include "switchyard.fullname" . -}}
{{- end -}}

{{- define "switchyard.sidecarImage" -}}
{{- printf "%s:%s" (default .Values.image.repository .Values.sidecar.image.repository) (default (default .Chart.AppVersion .Values.image.tag) .Values.sidecar.image.tag) -}}
{{- end -}}

{{/* What the controller's --injection-config reads (controller/injection/config.ts). */}}
{{- define "switchyard.injectionConfig" -}}
{{- $config := dict
  "controllerUrl" (printf "https://%s.%s.svc:%v" (include "switchyard.fullname" .) .Release.Namespace .Values.service.ports.stream)
  "image" (include "switchyard.sidecarImage" .)
  "imagePullPolicy" .Values.sidecar.image.pullPolicy
  "resources" .Values.sidecar.resources
  "proxyPort" .Values.sidecar.ports.proxy
  "adminPort" .Values.sidecar.ports.admin
  "logLevel" .Values.sidecar.logLevel
  "tokenExpirationSeconds" .Values.sidecar.tokenExpirationSeconds
  "setOpenaiBaseUrl" .Values.sidecar.setOpenaiBaseUrl
  "excludeNamespaces" (concat .Values.injection.excludeNamespaces (list .Release.Namespace) | uniq)
  "probes" .Values.sidecar.probes
-}}
{{- with .Values.tracing }}
{{- if .otlpEndpoint }}
{{- $tracing := dict "otlpEndpoint" .otlpEndpoint "serviceName" .serviceNames.sidecar "sampler" .sampler }}
{{- if .samplerArg }}{{- $_ := set $tracing "samplerArg" (toString .samplerArg) }}{{- end }}
{{- $_ := set $config "tracing" $tracing }}
{{- end }}
{{- end }}
{{- toPrettyJson $config -}}
{{- end -}}
