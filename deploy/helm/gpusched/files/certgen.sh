#!/bin/sh
# Webhook certificate of gpusched-kube, run by the chart's hook Jobs (webhook.certificates.mode
# hook) and by deploy/helm/test.sh against a real API server.
#
#   certgen.sh create   pre-install/pre-upgrade: make a CA and a serving certificate for the
#                       Service and store tls.crt, tls.key, ca.crt in the Secret (kept when it
#                       exists and stays valid for more than 30 days)
#   certgen.sh patch    post-install/post-upgrade: set caBundle (the Secret's ca.crt) on every
#                       webhook of the Validating/MutatingWebhookConfiguration WEBHOOK_NAME
#
# Env: NAMESPACE, SECRET_NAME, SERVICE_NAME, WEBHOOK_NAME, VALIDITY_DAYS (3650), KUBECTL (kubectl).
# Needs sh, openssl (1.1.1 or later) and kubectl.
set -eu

: "${NAMESPACE:?}" "${SECRET_NAME:?}" "${SERVICE_NAME:?}" "${WEBHOOK_NAME:?}"
DAYS="${VALIDITY_DAYS:-3650}"
K="${KUBECTL:-kubectl}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
log() { echo "[certgen] $*" >&2; }

secret_field() { # key -> decoded value on stdout (empty when absent)
  "$K" -n "$NAMESPACE" get secret "$SECRET_NAME" -o "jsonpath={.data.$1}" 2>/dev/null | base64 -d 2>/dev/null || true
}

create() {
  secret_field 'tls\.crt' >"$WORK/old.crt"
  secret_field 'ca\.crt' >"$WORK/old-ca.crt"
  if [ -s "$WORK/old.crt" ] && [ -s "$WORK/old-ca.crt" ] &&
    openssl x509 -in "$WORK/old.crt" -noout -checkend 2592000 >/dev/null 2>&1 &&
    openssl verify -CAfile "$WORK/old-ca.crt" "$WORK/old.crt" >/dev/null 2>&1; then
    log "secret $NAMESPACE/$SECRET_NAME is valid for 30 more days: kept"
    return 0
  fi
  host="$SERVICE_NAME.$NAMESPACE.svc"
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days "$DAYS" \
    -keyout "$WORK/ca.key" -out "$WORK/ca.crt" -subj "/CN=$SERVICE_NAME-webhook-ca" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -sha256 -keyout "$WORK/tls.key" -out "$WORK/tls.csr" \
    -subj "/CN=$host" 2>/dev/null
  printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth" \
    "subjectAltName=DNS:$SERVICE_NAME,DNS:$SERVICE_NAME.$NAMESPACE,DNS:$host,DNS:$host.cluster.local" \
    >"$WORK/tls.ext"
  openssl x509 -req -in "$WORK/tls.csr" -CA "$WORK/ca.crt" -CAkey "$WORK/ca.key" -CAcreateserial \
    -days "$DAYS" -sha256 -extfile "$WORK/tls.ext" -out "$WORK/tls.crt" 2>/dev/null
  "$K" -n "$NAMESPACE" create secret generic "$SECRET_NAME" --type=kubernetes.io/tls \
    --from-file=tls.crt="$WORK/tls.crt" --from-file=tls.key="$WORK/tls.key" \
    --from-file=ca.crt="$WORK/ca.crt" --dry-run=client -o yaml >"$WORK/secret.yaml"
  if "$K" -n "$NAMESPACE" get secret "$SECRET_NAME" >/dev/null 2>&1; then
    "$K" -n "$NAMESPACE" replace -f "$WORK/secret.yaml" >/dev/null
  else
    "$K" -n "$NAMESPACE" create -f "$WORK/secret.yaml" >/dev/null
  fi
  log "secret $NAMESPACE/$SECRET_NAME written (CN $host, $DAYS days)"
}

patch() {
  ca="$("$K" -n "$NAMESPACE" get secret "$SECRET_NAME" -o 'jsonpath={.data.ca\.crt}')"
  [ -n "$ca" ] || { log "secret $NAMESPACE/$SECRET_NAME has no ca.crt"; exit 1; }
  for kind in validatingwebhookconfiguration mutatingwebhookconfiguration; do
    n="$("$K" get "$kind" "$WEBHOOK_NAME" -o 'jsonpath={range .webhooks[*]}x{end}' 2>/dev/null || true)"
    if [ -z "$n" ]; then log "no $kind/$WEBHOOK_NAME: skipped"; continue; fi
    ops="" i=0
    while [ "$i" -lt "${#n}" ]; do
      ops="$ops${ops:+,}{\"op\":\"add\",\"path\":\"/webhooks/$i/clientConfig/caBundle\",\"value\":\"$ca\"}"
      i=$((i + 1))
    done
    "$K" patch "$kind" "$WEBHOOK_NAME" --type=json -p "[$ops]" >/dev/null
    log "$kind/$WEBHOOK_NAME: caBundle set on ${#n} webhook(s)"
  done
}

case "${1:-}" in
  create) create ;;
  patch) patch ;;
  *) echo "usage: certgen.sh create|patch" >&2; exit 2 ;;
esac
