{{/* Names. Kubernetes names are at most 63 characters. */}}
{{- define "driftgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "driftgate.fullname" -}}
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

{{- define "driftgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "driftgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "driftgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "driftgate.labels" -}}
helm.sh/chart: {{ include "driftgate.chart" . }}
{{ include "driftgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: admission-webhook
{{- end }}

{{- define "driftgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "driftgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- /* The username the API server gives driftgate's pods: the records webhook skips it, and
`serve --service-account` tells the decision who writes records. */}}
{{- define "driftgate.serviceAccountUsername" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "driftgate.serviceAccountName" .) }}
{{- end }}

{{- define "driftgate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The ConfigMap mounted at /etc/driftgate/policies. */}}
{{- define "driftgate.policyConfigMapName" -}}
{{- default (printf "%s-policy" (include "driftgate.fullname" .)) .Values.existingPolicyConfigMap }}
{{- end }}

{{/*
The serving certificate's Secret: cert-manager's (mounted at /etc/driftgate/tls), or in runtime
mode driftgate's own (read through the API, never mounted). The names differ from each other and
from the `-tls` Secret older charts rendered, so that switching modes never has helm delete a
Secret that cert-manager or driftgate has just taken over.
*/}}
{{- define "driftgate.tlsSecretName" -}}
{{- if .Values.certManager.enabled }}
{{- printf "%s-serving-cert" (include "driftgate.fullname" .) }}
{{- else }}
{{- printf "%s-certs" (include "driftgate.fullname" .) }}
{{- end }}
{{- end }}

{{/* The cert-manager Certificate for the serving pair (its CA is injected into the webhook). */}}
{{- define "driftgate.servingCertificateName" -}}
{{- printf "%s-serving-cert" (include "driftgate.fullname" .) }}
{{- end }}

{{/* The DNS names the API server uses for the Service: <svc>.<ns>.svc is the one it dials. */}}
{{- define "driftgate.serviceDNSNames" -}}
{{- $svc := include "driftgate.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson }}
{{- end }}

{{/*
The policy file's text: `policy` as a string is used as is; a map is one document; a list is one
document per element.
*/}}
{{- define "driftgate.policyText" -}}
{{- $policy := .Values.policy -}}
{{- if kindIs "string" $policy -}}
{{- $policy -}}
{{- else if kindIs "slice" $policy -}}
{{- range $i, $doc := $policy }}
{{- if $i }}
---
{{ end }}
{{- toYaml $doc }}
{{- end }}
{{- else if kindIs "map" $policy -}}
{{- toYaml $policy -}}
{{- else -}}
{{- fail "policy must be a YAML string, a map (one GatePolicy) or a list of GatePolicies; or set existingPolicyConfigMap" -}}
{{- end -}}
{{- end }}

{{/*
The gate webhook's namespaceSelector as the chart renders it: the webhook configuration's, and
the base driftgate adds its exclusion of unguarded namespaces to (`--gate-base-namespace-selector`),
from the same values so that the two never disagree.
*/}}
{{- define "driftgate.gateNamespaceSelector" -}}
{{- $webhook := .Values.webhook -}}
{{- with $webhook.namespaceSelector.matchLabels }}
matchLabels:
  {{- toYaml . | nindent 2 }}
{{- end }}
matchExpressions:
  # Always excluded: kube-system, and the webhook's own namespace. Were driftgate's own
  # namespace guarded, its replacement pods could not be created while no replica is
  # running to admit them (failurePolicy Fail): a deadlock that only deleting this
  # configuration breaks.
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values:
      {{- toYaml (uniq (concat (list "kube-system" .Release.Namespace) $webhook.excludeNamespaces)) | nindent 6 }}
  {{- with $webhook.namespaceSelector.matchExpressions }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}

{{/*
The third webhook's name (gatePolicies.enabled): the configuration lists it, and driftgate is told
to keep its caBundle (--ca-bundle-webhook); one name for both, so they cannot part.
*/}}
{{- define "driftgate.policiesWebhookName" -}}
policies.driftgate.dev
{{- end }}

{{- /* The Lease the replicas elect the one that writes the webhook configuration with. */}}
{{- define "driftgate.leaderLeaseName" -}}
{{- printf "%s-leader" (include "driftgate.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
