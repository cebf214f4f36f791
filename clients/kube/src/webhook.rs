//! The admission webhook (HTTPS with rustls): `/validate` denies GPU pods the service's
//! `ValidateWorkload` rejects (the message names the key), `/mutate` sets `spec.schedulerName`
//! on GPU pods. Objects labelled `hami.io/webhook=ignore` are skipped (namespaces with that label
//! are excluded by the webhook configurations' namespaceSelector).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{AdmissionRequest, AdmissionReview, Operation};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde::Serialize;
use tokio::sync::watch;

use crate::config::Names;
use crate::shim::{Shim, service_error_text};
use crate::translate;

/// Webhook behaviour.
#[derive(Clone, Debug)]
pub struct WebhookOptions {
    /// Set schedulerName on GPU pods.
    pub mutate: bool,
    /// Label key whose value `ignore` skips an object.
    pub ignore_label: String,
}

/// State of the webhook handlers.
#[derive(Clone, Debug)]
pub struct WebhookState {
    /// Shared shim (service client, names, metrics).
    pub shim: Arc<Shim>,
    /// Options.
    pub options: WebhookOptions,
}

/// `AdmissionReview` answer (admission.k8s.io/v1).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ReviewOut {
    /// `admission.k8s.io/v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// `AdmissionReview`.
    pub kind: String,
    /// The response.
    pub response: ResponseOut,
}

/// `AdmissionResponse`.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResponseOut {
    /// The request's uid.
    pub uid: String,
    /// Allowed or denied.
    pub allowed: bool,
    /// Denial status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<StatusOut>,
    /// `JSONPatch` when a patch is present.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<String>,
    /// The JSON patch (base64 in JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<ByteString>,
    /// Warnings shown to the client.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Denial status.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct StatusOut {
    /// HTTP code shown to the client.
    pub code: u16,
    /// Message shown to the client.
    pub message: String,
    /// Machine-readable reason.
    pub reason: String,
}

impl ResponseOut {
    fn allow(uid: &str) -> Self {
        ResponseOut {
            uid: uid.to_owned(),
            allowed: true,
            status: None,
            patch_type: None,
            patch: None,
            warnings: Vec::new(),
        }
    }

    fn deny(uid: &str, message: String) -> Self {
        ResponseOut {
            allowed: false,
            status: Some(StatusOut {
                code: 403,
                message,
                reason: "Forbidden".into(),
            }),
            ..ResponseOut::allow(uid)
        }
    }

    fn review(self) -> ReviewOut {
        ReviewOut {
            api_version: "admission.k8s.io/v1".into(),
            kind: "AdmissionReview".into(),
            response: self,
        }
    }
}

fn ignored(pod: &Pod, label: &str) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(label))
        .is_some_and(|v| v == "ignore")
}

fn pod_of(req: &AdmissionRequest<Pod>) -> Option<&Pod> {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return None;
    }
    req.object.as_ref()
}

fn json_pointer_token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// The mutating decision, a JSON patch (None: nothing to change) for pods that request GPU
/// resources: `spec.schedulerName` set to ours when it is empty or `default-scheduler` (another
/// explicit scheduler is respected), and, like HAMi's webhook, one card (`nvidia.com/gpu: 1` in
/// limits) for a container that asks for GPU memory or cores without a card count.
pub fn mutation(pod: &Pod, names: &Names, opts: &WebhookOptions) -> Option<serde_json::Value> {
    if !opts.mutate || ignored(pod, &opts.ignore_label) || !translate::requests_gpu(pod, names) {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    let mut ops = Vec::new();
    let current = spec.scheduler_name.as_deref();
    if matches!(current, None | Some("") | Some("default-scheduler")) {
        ops.push(serde_json::json!({
            "op": if current.is_some() { "replace" } else { "add" },
            "path": "/spec/schedulerName",
            "value": names.scheduler_name,
        }));
    }
    let r = &names.resources;
    let lists = [
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or(&[]),
        ),
        ("containers", spec.containers.as_slice()),
    ];
    for (field, containers) in lists {
        for (i, c) in containers.iter().enumerate() {
            let Some(res) = &c.resources else { continue };
            let has = |name: &str| {
                res.limits.as_ref().is_some_and(|m| m.contains_key(name))
                    || res.requests.as_ref().is_some_and(|m| m.contains_key(name))
            };
            let wants_gpu = [&r.memory, &r.memory_percentage, &r.cores]
                .iter()
                .any(|n| has(n));
            if !wants_gpu || has(&r.count) {
                continue;
            }
            if res.limits.is_some() {
                ops.push(serde_json::json!({
                    "op": "add",
                    "path": format!("/spec/{field}/{i}/resources/limits/{}", json_pointer_token(&r.count)),
                    "value": "1",
                }));
            } else {
                ops.push(serde_json::json!({
                    "op": "add",
                    "path": format!("/spec/{field}/{i}/resources/limits"),
                    "value": {r.count.clone(): "1"},
                }));
            }
        }
    }
    (!ops.is_empty()).then_some(serde_json::Value::Array(ops))
}

/// Answers a validating review.
pub async fn validate_review(state: &WebhookState, req: &AdmissionRequest<Pod>) -> ResponseOut {
    let Some(pod) = pod_of(req) else {
        return ResponseOut::allow(&req.uid);
    };
    let names = state.shim.view.names();
    if ignored(pod, &state.options.ignore_label) || !translate::requests_gpu(pod, names) {
        return ResponseOut::allow(&req.uid);
    }
    let mut w = translate::workload(pod, names);
    // At CREATE the name may be generated later.
    if w.name.is_empty() {
        w.name = pod.metadata.generate_name.clone().unwrap_or_default();
    }
    if w.namespace.is_empty() {
        w.namespace = req.namespace.clone().unwrap_or_default();
    }
    match state.shim.service.validate_workload(w).await {
        Ok(r) if r.valid || !r.requests_gpu => ResponseOut::allow(&req.uid),
        Ok(r) => {
            let v: Vec<(String, String)> = r
                .violations
                .iter()
                .map(|v| (v.field.clone(), v.description.clone()))
                .collect();
            ResponseOut::deny(&req.uid, translate::violations_text(&v))
        }
        Err(e) if e.api().is_some_and(|a| a.is_invalid_argument()) => {
            ResponseOut::deny(&req.uid, service_error_text(&e))
        }
        Err(e) => {
            // Like failurePolicy: Ignore: admit, warn; the extender still rejects a bad pod.
            tracing::warn!(error = %e, "could not validate pod; admitting it");
            let mut r = ResponseOut::allow(&req.uid);
            r.warnings.push(format!(
                "gpusched: pod not validated ({e}); the scheduler will check it"
            ));
            r
        }
    }
}

/// Answers a mutating review.
pub fn mutate_review(state: &WebhookState, req: &AdmissionRequest<Pod>) -> ResponseOut {
    let Some(pod) = pod_of(req) else {
        return ResponseOut::allow(&req.uid);
    };
    let mut r = ResponseOut::allow(&req.uid);
    if let Some(patch) = mutation(pod, state.shim.view.names(), &state.options)
        && let Ok(bytes) = serde_json::to_vec(&patch)
    {
        r.patch_type = Some("JSONPatch".into());
        r.patch = Some(ByteString(bytes));
    }
    r
}

fn read_review(body: &[u8]) -> Result<AdmissionRequest<Pod>, String> {
    let review: AdmissionReview<Pod> =
        serde_json::from_slice(body).map_err(|e| format!("cannot read AdmissionReview: {e}"))?;
    review
        .try_into()
        .map_err(|e: kube::core::admission::ConvertAdmissionReviewError| e.to_string())
}

fn json<T: Serialize>(body: &T) -> Response {
    match serde_json::to_string(body) {
        Ok(s) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            s,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn validate(State(state): State<WebhookState>, body: Bytes) -> Response {
    match read_review(&body) {
        Ok(req) => {
            let r = validate_review(&state, &req).await;
            state.shim.metrics.admission(!r.allowed, false);
            if !r.allowed {
                tracing::info!(
                    namespace = ?req.namespace, name = %req.name,
                    reason = r.status.as_ref().map_or("", |s| s.message.as_str()), "admission denied"
                );
            }
            json(&r.review())
        }
        Err(e) => (StatusCode::BAD_REQUEST, e).into_response(),
    }
}

async fn mutate(State(state): State<WebhookState>, body: Bytes) -> Response {
    match read_review(&body) {
        Ok(req) => {
            let r = mutate_review(&state, &req);
            state.shim.metrics.admission(false, r.patch.is_some());
            json(&r.review())
        }
        Err(e) => (StatusCode::BAD_REQUEST, e).into_response(),
    }
}

/// The webhook's routes.
pub fn router(state: WebhookState) -> Router {
    Router::new()
        .route("/validate", post(validate))
        .route("/mutate", post(mutate))
        .route("/healthz", get(|| async { "ok" }))
        .layer(DefaultBodyLimit::max(16 << 20))
        .with_state(state)
}

/// Serves the certificate from files, re-reading them when they change (cert-manager rotation).
#[derive(Debug)]
pub struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<(Arc<CertifiedKey>, Option<SystemTime>)>,
}

fn mtime(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn load_key(cert: &Path, key: &Path) -> anyhow::Result<Arc<CertifiedKey>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| anyhow::anyhow!("{}: {e}", cert.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("{}: {e}", cert.display()))?;
    if certs.is_empty() {
        anyhow::bail!("{}: no certificate", cert.display());
    }
    let key_der =
        PrivateKeyDer::from_pem_file(key).map_err(|e| anyhow::anyhow!("{}: {e}", key.display()))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key_der)
        .map_err(|e| anyhow::anyhow!("{}: {e}", key.display()))?;
    Ok(Arc::new(CertifiedKey::new(certs, signing)))
}

impl ReloadingCert {
    /// Loads the files now (an error stops start-up).
    pub fn new(cert: &Path, key: &Path) -> anyhow::Result<Self> {
        let ck = load_key(cert, key)?;
        Ok(ReloadingCert {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
            current: RwLock::new((ck, mtime(cert))),
        })
    }

    /// Re-reads the files if the certificate changed; keeps the old pair on error.
    pub fn refresh(&self) {
        let m = mtime(&self.cert);
        let changed = self.current.read().map(|c| c.1 != m).unwrap_or(false);
        if !changed {
            return;
        }
        match load_key(&self.cert, &self.key) {
            Ok(ck) => {
                if let Ok(mut c) = self.current.write() {
                    *c = (ck, m);
                }
                tracing::info!(cert = %self.cert.display(), "webhook certificate reloaded");
            }
            Err(e) => tracing::warn!(error = %e, "webhook certificate not reloaded"),
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().map(|c| c.0.clone())
    }
}

/// A bound HTTPS listener for the webhook.
pub struct TlsListener {
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    certs: Arc<ReloadingCert>,
}

impl std::fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsListener")
            .field("listener", &self.listener)
            .field("certs", &self.certs)
            .finish_non_exhaustive()
    }
}

impl TlsListener {
    /// Binds `addr` with the certificate files.
    pub async fn bind(addr: SocketAddr, cert: &Path, key: &Path) -> anyhow::Result<Self> {
        let certs = Arc::new(ReloadingCert::new(cert, key)?);
        let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(certs.clone());
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let listener = tokio::net::TcpListener::bind(addr).await?;
        Ok(TlsListener {
            listener,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(cfg)),
            certs,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves `router` until `shutdown` turns true, then waits (up to `drain`) for open
    /// connections.
    pub async fn serve(self, router: Router, mut shutdown: watch::Receiver<bool>, drain: Duration) {
        let mut conns = tokio::task::JoinSet::new();
        let mut reload = tokio::time::interval(Duration::from_secs(30));
        loop {
            tokio::select! {
                _ = shutdown.changed() => {
                    if *shutdown.borrow() { break; }
                }
                _ = reload.tick() => self.certs.refresh(),
                accepted = self.listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::warn!(error = %e, "webhook accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let acceptor = self.acceptor.clone();
                    let svc = hyper_util::service::TowerToHyperService::new(router.clone());
                    conns.spawn(async move {
                        let tls = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
                            Ok(Ok(t)) => t,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => return,
                        };
                        let builder = hyper_util::server::conn::auto::Builder::new(
                            hyper_util::rt::TokioExecutor::new(),
                        );
                        if let Err(e) = builder
                            .serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                            .await
                        {
                            tracing::debug!(%peer, error = %e, "webhook connection ended");
                        }
                    });
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
        let _ =
            tokio::time::timeout(drain, async { while conns.join_next().await.is_some() {} }).await;
        conns.abort_all();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn names() -> Names {
        Names {
            scheduler_name: "gpusched-scheduler".into(),
            ..Names::default()
        }
    }

    fn opts() -> WebhookOptions {
        WebhookOptions {
            mutate: true,
            ignore_label: "hami.io/webhook".into(),
        }
    }

    fn pod(scheduler: Option<&str>, gpu: bool, labels: serde_json::Value) -> Pod {
        let res = if gpu {
            json!({"limits": {"nvidia.com/gpu": "1"}})
        } else {
            json!({"limits": {"cpu": "1"}})
        };
        let mut spec = json!({"containers": [{"name": "c", "resources": res}]});
        if let Some(s) = scheduler {
            spec["schedulerName"] = json!(s);
        }
        serde_json::from_value(json!({"metadata": {"name": "p", "labels": labels}, "spec": spec}))
            .unwrap()
    }

    #[test]
    fn mutation_sets_scheduler_name_on_gpu_pods_only() {
        let n = names();
        let o = opts();
        assert_eq!(
            mutation(&pod(Some("default-scheduler"), true, json!({})), &n, &o).unwrap(),
            json!([{"op": "replace", "path": "/spec/schedulerName", "value": "gpusched-scheduler"}])
        );
        assert_eq!(
            mutation(&pod(None, true, json!({})), &n, &o).unwrap()[0]["op"],
            "add"
        );
        assert!(mutation(&pod(None, false, json!({})), &n, &o).is_none());
        assert!(mutation(&pod(Some("volcano"), true, json!({})), &n, &o).is_none());
        // Memory or cores without a card count: one card, like HAMi.
        let mem_only: Pod = serde_json::from_value(json!({"spec": {"schedulerName": "gpusched-scheduler",
            "initContainers": [{"name": "i", "resources": {"requests": {"nvidia.com/gpucores": "10"}}}],
            "containers": [
                {"name": "a", "resources": {"limits": {"nvidia.com/gpumem": "1000"}}},
                {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"}}}
            ]}}))
        .unwrap();
        assert_eq!(
            mutation(&mem_only, &n, &o).unwrap(),
            json!([
                {"op": "add", "path": "/spec/initContainers/0/resources/limits", "value": {"nvidia.com/gpu": "1"}},
                {"op": "add", "path": "/spec/containers/0/resources/limits/nvidia.com~1gpu", "value": "1"}
            ])
        );
        assert!(
            mutation(
                &pod(None, true, json!({"hami.io/webhook": "ignore"})),
                &n,
                &o
            )
            .is_none()
        );
        let off = WebhookOptions { mutate: false, ..o };
        assert!(mutation(&pod(None, true, json!({})), &n, &off).is_none());
    }

    #[test]
    fn review_answers_have_the_admission_v1_shape() {
        let deny = ResponseOut::deny(
            "u1",
            "workload.kubernetes.annotations[\"hami.io/device-scoring-weights\"]: bad".into(),
        );
        let v = serde_json::to_value(deny.review()).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                   "response": {"uid": "u1", "allowed": false, "status": {"code": 403,
                   "message": "workload.kubernetes.annotations[\"hami.io/device-scoring-weights\"]: bad",
                   "reason": "Forbidden"}}})
        );
        let mut allow = ResponseOut::allow("u2");
        allow.patch_type = Some("JSONPatch".into());
        allow.patch = Some(ByteString(b"[]".to_vec()));
        let v = serde_json::to_value(allow.review()).unwrap();
        assert_eq!(
            v["response"],
            json!({"uid": "u2", "allowed": true, "patchType": "JSONPatch", "patch": "W10="})
        );
    }

    #[test]
    fn reads_an_admission_review() {
        let body = json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "abc", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "name": "", "namespace": "ns", "operation": "CREATE", "userInfo": {"username": "u"},
                "object": {"metadata": {"generateName": "p-", "namespace": "ns"},
                           "spec": {"containers": [{"name": "c"}]}},
                "dryRun": false}
        });
        let req = read_review(&serde_json::to_vec(&body).unwrap()).unwrap();
        assert_eq!(req.uid, "abc");
        assert!(pod_of(&req).is_some());
        assert!(read_review(b"{}").is_err());
    }
}
