{{/*
Expand the name of the chart.
*/}}
{{- define "commwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name, truncated at 63 characters (DNS label limit). A release
name that already contains the chart name is used as it is.
*/}}
{{- define "commwatch.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "commwatch.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels.
*/}}
{{- define "commwatch.labels" -}}
helm.sh/chart: {{ include "commwatch.chart" . }}
{{ include "commwatch.selectorLabels" . }}
app.kubernetes.io/part-of: {{ include "commwatch.name" . }}
{{- with .Chart.AppVersion }}
app.kubernetes.io/version: {{ . | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Selector labels shared by every component (ServiceMonitor and NetworkPolicy select on these).
*/}}
{{- define "commwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "commwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels and selector labels of one component. Call with (dict "root" $ "component" "worker").
*/}}
{{- define "commwatch.componentLabels" -}}
{{ include "commwatch.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "commwatch.componentSelectorLabels" -}}
{{ include "commwatch.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
Name of the service account the pods run as.
*/}}
{{- define "commwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "commwatch.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The commwatch image; the tag defaults to the chart's appVersion, a digest pins it.
*/}}
{{- define "commwatch.image" -}}
{{- $repo := .Values.image.repository }}
{{- if .Values.image.registry }}
{{- $repo = printf "%s/%s" .Values.image.registry .Values.image.repository }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Name of the Secret holding COMMWATCH_* credentials: the operator's own, or the chart's.
*/}}
{{- define "commwatch.secretName" -}}
{{- default (include "commwatch.fullname" .) .Values.existingSecret }}
{{- end }}

{{/*
Settings that are credentials (commwatch.settings fields marked secret). They go to the
Secret only; putting one under `settings` fails the render.
*/}}
{{- define "commwatch.secretSettings" -}}
kafka_sasl_password kafka_ssl_key_password clickhouse_password notify_webhook_url notify_slack_url notify_feishu_url notify_webhook_headers notify_alertmanager_headers
{{- end }}

{{/*
Where the Kafka TLS files are mounted.
*/}}
{{- define "commwatch.kafkaTlsDir" -}}
/etc/commwatch/kafka-tls
{{- end }}

{{/*
The ClickHouse settings, as container env (the migration hook runs before the ConfigMap exists).
*/}}
{{- define "commwatch.clickhouseEnv" -}}
- name: COMMWATCH_CLICKHOUSE_DSN
  value: {{ required "clickhouse.dsn is required (http(s)://host:port of the ClickHouse HTTP interface)" .Values.clickhouse.dsn | quote }}
- name: COMMWATCH_CLICKHOUSE_USER
  value: {{ .Values.clickhouse.user | quote }}
- name: COMMWATCH_CLICKHOUSE_DATABASE
  value: {{ .Values.clickhouse.database | quote }}
- name: COMMWATCH_CLICKHOUSE_TTL_CALLS_DAYS
  value: {{ .Values.clickhouse.ttlCallsDays | toString | quote }}
- name: COMMWATCH_CLICKHOUSE_TTL_DAYS
  value: {{ .Values.clickhouse.ttlDays | toString | quote }}
{{- end }}

{{/*
Passwords read from secrets the operator already has (Strimzi KafkaUser, ClickHouse operator).
*/}}
{{- define "commwatch.passwordEnv" -}}
{{- with .Values.kafka.sasl.existingPasswordSecret.name }}
- name: COMMWATCH_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.kafka.sasl.existingPasswordSecret.key }}
{{- end }}
{{- include "commwatch.clickhousePasswordEnv" . }}
{{- end }}

{{- define "commwatch.clickhousePasswordEnv" -}}
{{- with .Values.clickhouse.existingPasswordSecret.name }}
- name: COMMWATCH_CLICKHOUSE_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ $.Values.clickhouse.existingPasswordSecret.key }}
{{- end }}
{{- end }}

{{/*
The Kafka TLS volume (CA and optional client certificate), when configured.
*/}}
{{- define "commwatch.kafkaTlsVolume" -}}
{{- $tls := .Values.kafka.tls }}
{{- if or $tls.caSecret.name $tls.clientSecret.name }}
- name: kafka-tls
  projected:
    sources:
      {{- with $tls.caSecret.name }}
      - secret:
          name: {{ . }}
          items:
            - key: {{ $tls.caSecret.key }}
              path: ca.crt
      {{- end }}
      {{- with $tls.clientSecret.name }}
      - secret:
          name: {{ . }}
          items:
            - key: {{ $tls.clientSecret.certKey }}
              path: client.crt
            - key: {{ $tls.clientSecret.keyKey }}
              path: client.key
      {{- end }}
{{- end }}
{{- end }}

{{- define "commwatch.kafkaTlsMount" -}}
{{- if or .Values.kafka.tls.caSecret.name .Values.kafka.tls.clientSecret.name }}
- name: kafka-tls
  mountPath: {{ include "commwatch.kafkaTlsDir" . }}
  readOnly: true
{{- end }}
{{- end }}

{{/*
One long-running commwatch process (worker, sink, notify) as a Deployment or StatefulSet.
Call with (dict "root" $ "component" "worker" "values" .Values.worker "kind" "Deployment").
*/}}
{{- define "commwatch.workload" -}}
{{- $root := .root }}
{{- $v := .values }}
{{- $ctx := dict "root" $root "component" .component }}
{{- $metrics := ne (toString $v.metricsEndpoint) "false" }}
apiVersion: apps/v1
kind: {{ .kind }}
metadata:
  name: {{ include "commwatch.fullname" $root }}-{{ .component }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "commwatch.componentLabels" $ctx | nindent 4 }}
spec:
  replicas: {{ $v.replicas }}
  {{- if eq .kind "StatefulSet" }}
  serviceName: {{ include "commwatch.fullname" $root }}-{{ .component }}
  podManagementPolicy: Parallel
  {{- end }}
  revisionHistoryLimit: {{ $root.Values.revisionHistoryLimit }}
  {{- if and (eq .kind "Deployment") $v.strategy }}
  strategy:
    {{- toYaml $v.strategy | nindent 4 }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "commwatch.componentSelectorLabels" $ctx | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "commwatch.componentLabels" $ctx | nindent 8 }}
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        checksum/config: {{ include (print $root.Template.BasePath "/configmap.yaml") $root | sha256sum }}
        checksum/secret: {{ include (print $root.Template.BasePath "/secret.yaml") $root | sha256sum }}
        {{- with $v.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "commwatch.serviceAccountName" $root }}
      automountServiceAccountToken: {{ $root.Values.serviceAccount.automountServiceAccountToken }}
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $root.Values.priorityClassName }}
      priorityClassName: {{ . }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      containers:
        - name: {{ .component }}
          image: {{ include "commwatch.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            {{- toYaml .args | nindent 12 }}
            {{- with $v.extraArgs }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          envFrom:
            - configMapRef:
                name: {{ include "commwatch.fullname" $root }}
            - secretRef:
                name: {{ include "commwatch.secretName" $root }}
          env:
            - name: COMMWATCH_METRICS_PORT
              value: {{ $root.Values.metrics.port | toString | quote }}
            {{- with include "commwatch.passwordEnv" $root }}
{{- . | trim | nindent 12 }}
{{- end }}
            {{- with $v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          {{- if $metrics }}
          ports:
            - name: metrics
              containerPort: {{ $root.Values.metrics.port }}
              protocol: TCP
          livenessProbe:
            httpGet:
              path: {{ $root.Values.metrics.livenessPath }}
              port: metrics
            {{- toYaml $v.livenessProbe | nindent 12 }}
          readinessProbe:
            httpGet:
              path: {{ $root.Values.metrics.readinessPath }}
              port: metrics
            {{- toYaml $v.readinessProbe | nindent 12 }}
          {{- end }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            - name: data
              mountPath: {{ $root.Values.dataDir }}
            - name: tmp
              mountPath: /tmp
            {{- with include "commwatch.kafkaTlsMount" $root }}
{{- . | trim | nindent 12 }}
{{- end }}
      volumes:
        {{- if not (and (eq .kind "StatefulSet") $v.persistence.enabled) }}
        - name: data
          emptyDir:
            {{- with $v.dataSizeLimit }}
            sizeLimit: {{ . }}
            {{- end }}
        {{- end }}
        - name: tmp
          emptyDir: {}
        {{- with include "commwatch.kafkaTlsVolume" $root }}
{{- . | trim | nindent 8 }}
{{- end }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- toYaml . | nindent 8 }}
      {{- end }}
  {{- if and (eq .kind "StatefulSet") $v.persistence.enabled }}
  volumeClaimTemplates:
    - metadata:
        name: data
      spec:
        accessModes: ["ReadWriteOnce"]
        {{- with $v.persistence.storageClassName }}
        storageClassName: {{ . }}
        {{- end }}
        resources:
          requests:
            storage: {{ $v.persistence.size }}
  {{- end }}
{{- end }}

{{/*
The metrics Service of one component. Call like commwatch.workload.
*/}}
{{- define "commwatch.metricsService" -}}
{{- $root := .root }}
{{- $ctx := dict "root" $root "component" .component }}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "commwatch.fullname" $root }}-{{ .component }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "commwatch.componentLabels" $ctx | nindent 4 }}
  {{- with $root.Values.metrics.service.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- if .headless }}
  clusterIP: None
  {{- else }}
  type: {{ $root.Values.metrics.service.type }}
  {{- end }}
  # A worker that is behind is not ready, and that is when its metrics matter most:
  # Prometheus scrapes the endpoints of pods that are not ready too.
  publishNotReadyAddresses: true
  ports:
    - name: metrics
      port: {{ .port }}
      targetPort: metrics
      protocol: TCP
  selector:
    {{- include "commwatch.componentSelectorLabels" $ctx | nindent 4 }}
{{- end }}
