{{/* Object names: fixed per component, "gpusched" prefix unless fullnameOverride. */}}
{{- define "gpusched.fullname" -}}
{{- default "gpusched" .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- define "gpusched.server.name" -}}{{ include "gpusched.fullname" . }}{{- end -}}
{{- define "gpusched.kube.name" -}}{{ include "gpusched.fullname" . }}-kube{{- end -}}
{{- define "gpusched.scheduler.name" -}}{{ include "gpusched.fullname" . }}-scheduler{{- end -}}
{{- define "gpusched.agent.name" -}}{{ include "gpusched.fullname" . }}-agent{{- end -}}
{{- define "gpusched.certgen.name" -}}{{ include "gpusched.fullname" . }}-certgen{{- end -}}

{{- define "gpusched.webhook.secretName" -}}
{{- default (printf "%s-webhook-tls" (include "gpusched.kube.name" .)) .Values.webhook.certificates.secretName -}}
{{- end -}}
{{- define "gpusched.kube.webSecretName" -}}
{{- default (printf "%s-web" (include "gpusched.kube.name" .)) .Values.kube.web.tokenSecret -}}
{{- end -}}
{{- define "gpusched.mtls.serverSecretName" -}}
{{- default (printf "%s-server-tls" (include "gpusched.server.name" .)) .Values.mtls.serverSecretName -}}
{{- end -}}
{{- define "gpusched.mtls.clientSecretName" -}}
{{- default (printf "%s-client-tls" (include "gpusched.server.name" .)) .Values.mtls.clientSecretName -}}
{{- end -}}

{{/* In-cluster address of the service. */}}
{{- define "gpusched.server.address" -}}
{{- printf "%s://%s.%s.svc:%v" (ternary "https" "http" .Values.mtls.enabled) (include "gpusched.server.name" .) .Release.Namespace .Values.server.service.port -}}
{{- end -}}

{{/* Labels on every object: app.kubernetes.io/part-of, chart and manager, global labels. */}}
{{- define "gpusched.commonLabels" -}}
app.kubernetes.io/part-of: gpusched
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.global.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels per component: (list . "gpusched-kube" "component") */}}
{{- define "gpusched.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ index . 1 }}
{{- if gt (len .) 2 }}
app.kubernetes.io/component: {{ index . 2 }}
{{- end }}
{{- end -}}

{{- define "gpusched.labels" -}}
{{ include "gpusched.selectorLabels" . }}
{{ include "gpusched.commonLabels" (index . 0) }}
{{- end -}}

{{/* registry/repository:tag@digest; tag defaults to appVersion. (list . .Values.x.image) */}}
{{- define "gpusched.image" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- $registry := default $img.registry $root.Values.global.imageRegistry -}}
{{- $tag := default $root.Chart.AppVersion (toString $img.tag) -}}
{{- if $registry }}{{ $registry }}/{{ end }}{{ $img.repository }}
{{- if $img.digest }}@{{ $img.digest }}{{ else }}:{{ $tag }}{{ end }}
{{- end -}}

{{/* kube-scheduler image: tag defaults to the cluster's version without build metadata. */}}
{{- define "gpusched.scheduler.image" -}}
{{- $img := .Values.scheduler.image -}}
{{- $registry := default $img.registry .Values.global.imageRegistry -}}
{{- $tag := $img.tag | default (regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version) -}}
{{- if $registry }}{{ $registry }}/{{ end }}{{ $img.repository }}
{{- if $img.digest }}@{{ $img.digest }}{{ else }}:{{ $tag }}{{ end }}
{{- end -}}

{{/* imagePullSecrets: global + the component's. (list . .Values.x.imagePullSecrets) */}}
{{- define "gpusched.pullSecrets" -}}
{{- $root := index . 0 -}}
{{- $all := concat $root.Values.global.imagePullSecrets (index . 1) -}}
{{- if $all }}
imagePullSecrets:
{{- range $all }}
{{- if kindIs "string" . }}
- name: {{ . }}
{{- else }}
- {{ toYaml . | nindent 2 | trim }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Restricted pod and container security contexts (uid 65532, as in the images). */}}
{{- define "gpusched.podSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  seccompProfile: {type: RuntimeDefault}
{{- end -}}
{{- define "gpusched.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: ["ALL"]}
{{- end -}}

{{/* The CEL expression of the webhooks' matchConditions: any container (init included)
     with a GPU resource in its limits or requests. */}}
{{- define "gpusched.webhook.gpuExpression" -}}
{{- $names := list .Values.resourceNames.count .Values.resourceNames.memory .Values.resourceNames.memoryPercentage .Values.resourceNames.cores -}}
{{- $quoted := list -}}
{{- range $names }}{{ $quoted = append $quoted (printf "'%s'" .) }}{{ end -}}
[object.spec.containers, has(object.spec.initContainers) ? object.spec.initContainers : []].exists(cs, cs.exists(c, has(c.resources) && [has(c.resources.limits) ? c.resources.limits : {}, has(c.resources.requests) ? c.resources.requests : {}].exists(r, [{{ join ", " $quoted }}].exists(n, n in r))))
{{- end -}}

{{/* Validation of value combinations the schema cannot express. */}}
{{- define "gpusched.validate" -}}
{{- $mode := .Values.webhook.certificates.mode -}}
{{- if and .Values.webhook.enabled (eq $mode "certManager") (not .Values.certManager.enabled) -}}
{{- fail "webhook.certificates.mode=certManager needs certManager.enabled=true" -}}
{{- end -}}
{{- if and .Values.mtls.enabled (not .Values.certManager.enabled) (or (not .Values.mtls.serverSecretName) (not .Values.mtls.clientSecretName)) -}}
{{- fail "mtls.enabled needs certManager.enabled=true or both mtls.serverSecretName and mtls.clientSecretName (Secrets with tls.crt, tls.key, ca.crt)" -}}
{{- end -}}
{{- end -}}
