//! The admission webhook's HTTPS side (rustls): `/validate` and `/mutate` read kube's
//! `AdmissionReview`, answer with the decisions of [`crate::admission`] and count them; the
//! certificate is re-read when its files change.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant, SystemTime};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use k8s_openapi::api::core::v1::Pod;
use kube::core::admission::{
    AdmissionRequest, AdmissionResponse, AdmissionReview, ConvertAdmissionReviewError,
};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::sync::watch;

use crate::admission::{self, WebhookOptions};
use crate::metrics::{AdmissionResult, Webhook};
use crate::shim::Shim;

/// State of the webhook handlers.
#[derive(Clone, Debug)]
pub struct WebhookState {
    /// Shared shim (service client, names, metrics).
    pub shim: Arc<Shim>,
    /// Options.
    pub options: WebhookOptions,
}

fn read_review(body: &[u8]) -> Result<AdmissionRequest<Pod>, String> {
    let review: AdmissionReview<Pod> =
        serde_json::from_slice(body).map_err(|e| format!("cannot read AdmissionReview: {e}"))?;
    review
        .try_into()
        .map_err(|e: ConvertAdmissionReviewError| e.to_string())
}

fn answer(r: AdmissionResponse) -> Response {
    match serde_json::to_string(&r.into_review()) {
        Ok(s) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            s,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn invalid(state: &WebhookState, webhook: Webhook, start: Instant, e: String) -> Response {
    state.shim.metrics.admission(
        webhook,
        AdmissionResult::Invalid,
        start.elapsed().as_secs_f64(),
    );
    (StatusCode::BAD_REQUEST, e).into_response()
}

async fn validate(State(state): State<WebhookState>, body: Bytes) -> Response {
    let start = Instant::now();
    let req = match read_review(&body) {
        Ok(req) => req,
        Err(e) => return invalid(&state, Webhook::Validate, start, e),
    };
    let r = admission::validate(&state.shim, &state.options, &req).await;
    let result = if r.allowed {
        AdmissionResult::Allowed
    } else {
        tracing::info!(
            namespace = ?req.namespace, name = %req.name,
            reason = %r.result.message, "admission denied"
        );
        AdmissionResult::Denied
    };
    state
        .shim
        .metrics
        .admission(Webhook::Validate, result, start.elapsed().as_secs_f64());
    answer(r)
}

async fn mutate(State(state): State<WebhookState>, body: Bytes) -> Response {
    let start = Instant::now();
    let req = match read_review(&body) {
        Ok(req) => req,
        Err(e) => return invalid(&state, Webhook::Mutate, start, e),
    };
    let r = admission::mutate(state.shim.view.names(), &state.options, &req);
    let result = if r.patch.is_some() {
        AdmissionResult::Patched
    } else {
        AdmissionResult::Allowed
    };
    state
        .shim
        .metrics
        .admission(Webhook::Mutate, result, start.elapsed().as_secs_f64());
    answer(r)
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

/// The certificate and key from their PEM files (one loader for every binary: the runtime's).
fn load_key(cert: &Path, key: &Path) -> anyhow::Result<Arc<CertifiedKey>> {
    Ok(gpusched_runtime::tls::certified_key(cert, key)?)
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
        assert!(req.object.is_some());
        assert!(read_review(b"{}").is_err());
    }
}
