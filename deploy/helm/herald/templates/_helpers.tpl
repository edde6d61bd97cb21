{{/* Names and labels. */}}
{{- define "herald.fullname" -}}
{{- if contains "herald" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-herald" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "herald.selectorLabels" -}}
app.kubernetes.io/name: herald
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "herald.labels" -}}
{{ include "herald.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "herald.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
{{- end -}}

{{- define "herald.gateway" -}}{{ eq .Values.mode "gateway" }}{{- end -}}

{{- define "herald.advertisedHost" -}}
{{- .Values.gateway.advertisedHost | default (printf "%s.%s.svc" (include "herald.fullname" .) .Release.Namespace) -}}
{{- end -}}

{{/*
proxy.yaml. The paths are where the Secrets below are mounted; the keys are Herald's
(README.md, proxy.yaml). In a sidecar Herald listens on loopback only, for its pod.
*/}}
{{- define "herald.proxyConfig" -}}
{{- $v := .Values -}}
{{- $gateway := eq $v.mode "gateway" -}}
{{- $up := dict "bootstrap" $v.upstream.bootstrap -}}
{{- if $v.upstream.tls.enabled -}}
{{- $tls := dict "ca_file" "/etc/herald/upstream-tls/ca.crt" "verify_hostname" $v.upstream.tls.verifyHostname -}}
{{- if $v.upstream.tls.clientCertificate -}}
{{- $_ := set $tls "cert_file" "/etc/herald/upstream-tls/tls.crt" -}}
{{- $_ := set $tls "key_file" "/etc/herald/upstream-tls/tls.key" -}}
{{- end -}}
{{- if $v.upstream.tls.serverName -}}
{{- $_ := set $tls "server_name" $v.upstream.tls.serverName -}}
{{- end -}}
{{- $_ := set $up "tls" $tls -}}
{{- end -}}
{{- if $v.upstream.sasl.enabled -}}
{{- if and $gateway (not $v.listen.tls.enabled) -}}
{{- fail "upstream.sasl in gateway mode would let any client that reaches the gateway act with Herald's credentials: enable listen.tls (mTLS) as well" -}}
{{- end -}}
{{- $_ := set $up "sasl" (dict "mechanism" $v.upstream.sasl.mechanism "username" (dict "file" "/etc/herald/sasl/username") "password" (dict "file" "/etc/herald/sasl/password")) -}}
{{- end -}}
{{- $listen := dict "bootstrap" "127.0.0.1:19092" "advertised_host" "localhost" "broker_port_base" 19100 -}}
{{- if $gateway -}}
{{- $listen = dict "bootstrap" "0.0.0.0:19092" "advertised_host" (include "herald.advertisedHost" .) "broker_port_base" 19100 -}}
{{- if $v.listen.tls.enabled -}}
{{- $_ := set $listen "tls" (dict "cert_file" "/etc/herald/tls/tls.crt" "key_file" "/etc/herald/tls/tls.key" "client_ca_file" "/etc/herald/tls/ca.crt" "client_auth" $v.listen.tls.clientAuth "min_version" $v.listen.tls.minVersion) -}}
{{- end -}}
{{- if $v.upstream.sasl.enabled -}}
{{- $_ := set $listen "allow_unauthenticated_clients" true -}}
{{- end -}}
{{- end -}}
{{- $admin := dict "bind" "0.0.0.0:9464" -}}
{{- if $v.admin.tokenSecretName -}}
{{- $_ := set $admin "token" (dict "file" "/etc/herald/admin/token") -}}
{{- end -}}
{{- $config := dict "upstream" $up "listen" $listen "admin" $admin -}}
{{- $_ := set $config "instance" (dict "id" "${POD_NAMESPACE}/${POD_NAME}@${NODE_NAME}") -}}
{{- $_ := set $config "reload" (dict "watch_s" $v.proxy.reloadWatchS) -}}
{{- $_ := set $config "shutdown" (dict "grace_s" $v.proxy.shutdownGraceS) -}}
{{- $_ := set $config "logging" (dict "level" $v.proxy.logLevel "format" $v.proxy.logFormat) -}}
{{- $_ := set $config "interceptors" $v.proxy.interceptors -}}
{{- if $v.proxy.clusters -}}
{{- $_ := set $config "clusters" $v.proxy.clusters -}}
{{- end -}}
{{- if $v.proxy.routing -}}
{{- $_ := set $config "routing" $v.proxy.routing -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}

{{- define "herald.probe" -}}
httpGet:
  path: {{ .path }}
  port: herald-admin
periodSeconds: {{ .period }}
timeoutSeconds: 2
failureThreshold: {{ .failures }}
{{- end -}}

{{/* The Herald container; the same shape `herald k8s inject` writes (proxy/k8s/sidecar.py). */}}
{{- define "herald.container" -}}
{{- $v := .Values -}}
{{- $native := and (ne $v.mode "gateway") $v.sidecar.native -}}
- name: herald
  image: {{ include "herald.image" . }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  args: [run, --config, /etc/herald/config/proxy.yaml]
  {{- if $native }}
  restartPolicy: Always
  {{- end }}
  ports:
    - name: herald-admin
      containerPort: 9464
      protocol: TCP
    {{- if eq $v.mode "gateway" }}
    - name: bootstrap
      containerPort: 19092
      protocol: TCP
    {{- range $v.gateway.brokerIds }}
    - name: {{ printf "broker-%d" (int .) }}
      containerPort: {{ add 19100 . }}
      protocol: TCP
    {{- end }}
    {{- end }}
  env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    - name: NODE_NAME
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    - name: HERALD_STATE_DIR
      value: /var/lib/herald
    {{- with $v.tracing.otlpEndpoint }}
    - name: OTEL_TRACES_EXPORTER
      value: otlp
    - name: OTEL_EXPORTER_OTLP_ENDPOINT
      value: {{ . | quote }}
    - name: OTEL_RESOURCE_ATTRIBUTES
      value: k8s.pod.name=$(POD_NAME),k8s.namespace.name=$(POD_NAMESPACE),k8s.node.name=$(NODE_NAME)
    {{- end }}
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  startupProbe:
    {{- include "herald.probe" (dict "path" "/healthz" "period" 1 "failures" 30) | nindent 4 }}
  readinessProbe:
    {{- include "herald.probe" (dict "path" "/readyz" "period" 5 "failures" 2) | nindent 4 }}
  livenessProbe:
    {{- include "herald.probe" (dict "path" "/healthz" "period" 10 "failures" 3) | nindent 4 }}
  {{- if not $native }}
  lifecycle:
    preStop:
      exec:
        command: [python3, -c, {{ printf "import time; time.sleep(%d)" (int $v.preStopSeconds) | quote }}]
  {{- end }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 10001
    runAsGroup: 10001
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: [ALL]
    seccompProfile:
      type: RuntimeDefault
  volumeMounts:
    - name: herald-config
      mountPath: /etc/herald/config
      readOnly: true
    - name: herald-state
      mountPath: /var/lib/herald
    {{- if $v.upstream.tls.enabled }}
    - name: herald-upstream-tls
      mountPath: /etc/herald/upstream-tls
      readOnly: true
    {{- end }}
    {{- if $v.upstream.sasl.enabled }}
    - name: herald-sasl
      mountPath: /etc/herald/sasl
      readOnly: true
    {{- end }}
    {{- if and (eq $v.mode "gateway") $v.listen.tls.enabled }}
    - name: herald-tls
      mountPath: /etc/herald/tls
      readOnly: true
    {{- end }}
    {{- if $v.admin.tokenSecretName }}
    - name: herald-admin-token
      mountPath: /etc/herald/admin
      readOnly: true
    {{- end }}
{{- end -}}

{{- define "herald.volumes" -}}
{{- $v := .Values -}}
- name: herald-config
  configMap:
    name: {{ include "herald.fullname" . }}
- name: herald-state
  emptyDir: {}
{{- if $v.upstream.tls.enabled }}
- name: herald-upstream-tls
  secret:
    secretName: {{ $v.upstream.tls.secretName }}
{{- end }}
{{- if $v.upstream.sasl.enabled }}
- name: herald-sasl
  secret:
    secretName: {{ $v.upstream.sasl.secretName }}
{{- end }}
{{- if and (eq $v.mode "gateway") $v.listen.tls.enabled }}
- name: herald-tls
  secret:
    secretName: {{ $v.listen.tls.secretName }}
{{- end }}
{{- if $v.admin.tokenSecretName }}
- name: herald-admin-token
  secret:
    secretName: {{ $v.admin.tokenSecretName }}
{{- end }}
{{- end -}}

{{/* Room after SIGTERM for Herald's drain (and the pre-stop wait), plus a margin. */}}
{{- define "herald.terminationGrace" -}}
{{- $native := and (ne .Values.mode "gateway") .Values.sidecar.native -}}
{{- add (int .Values.proxy.shutdownGraceS) (ternary 0 (int .Values.preStopSeconds) $native) 10 -}}
{{- end -}}

{{- define "herald.podSecurityContext" -}}
runAsNonRoot: true
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* herald pipeline stream (pipelineStream.*). */}}
{{- define "herald.streamSelectorLabels" -}}
app.kubernetes.io/name: herald-pipeline-stream
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "herald.streamLabels" -}}
{{ include "herald.streamSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The stream's pipeline.yaml: the `pipeline:` section (docs/pipeline.md), state and output
under the volume, metrics on every interface of the pod for the PodMonitor. */}}
{{- define "herald.pipelineConfig" -}}
{{- $s := .Values.pipelineStream -}}
{{- $stream := dict "checkpoint" "/var/lib/herald-pipeline/checkpoint" "trigger" "processing_time" "interval_s" $s.intervalS "watermark_s" $s.watermarkS "flow_gap_s" $s.flowGapS "metrics_bind" (printf "0.0.0.0:%d" (int $s.metricsPort)) -}}
{{- $p := dict "bootstrap" ($s.bootstrap | default .Values.upstream.bootstrap) "topics" $s.topics "output" "/var/lib/herald-pipeline/out" "driver_memory" $s.driverMemory "stream" $stream -}}
{{- if $s.terminalTopics -}}
{{- $_ := set $p "terminal_topics" $s.terminalTopics -}}
{{- end -}}
{{- if $s.fetchTopic -}}
{{- $_ := set $p "fetch_topic" $s.fetchTopic -}}
{{- end -}}
{{- toYaml (dict "pipeline" (mergeOverwrite $p (deepCopy $s.settings))) -}}
{{- end -}}
