//! The operator view's JSON API over HTTP, with the bearer token.

use anyhow::{Context as _, bail};
use axum::body::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::de::DeserializeOwned;

use gpusched_kube::web::model::ApiError;

/// Where the view is and how to get in.
#[derive(Debug)]
pub struct Api {
    /// `http://host:port` (a path prefix is kept: `http://host/prefix`).
    pub base: String,
    /// The bearer token.
    pub token: String,
}

impl Api {
    /// GET `path` (with `query`), read as `T`.
    pub async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
    ) -> anyhow::Result<(T, String)> {
        self.call(hyper::Method::GET, path, query, Bytes::new())
            .await
    }

    /// POST `body` to `path` (with `query`), read as `T`.
    pub async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &[(&str, &str)],
        body: String,
    ) -> anyhow::Result<(T, String)> {
        self.call(hyper::Method::POST, path, query, Bytes::from(body))
            .await
    }

    /// The answer as `T` and as the JSON text it came in.
    async fn call<T: DeserializeOwned>(
        &self,
        method: hyper::Method,
        path: &str,
        query: &[(&str, &str)],
        body: Bytes,
    ) -> anyhow::Result<(T, String)> {
        if !self.base.starts_with("http://") {
            bail!(
                "--server {}: only http:// URLs (reach the shim with `kubectl port-forward`)",
                self.base
            );
        }
        let mut url = format!("{}{path}", self.base.trim_end_matches('/'));
        let q: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(query.iter().filter(|(_, v)| !v.is_empty()))
            .finish();
        if !q.is_empty() {
            url.push('?');
            url.push_str(&q);
        }
        let req = hyper::Request::builder()
            .method(method)
            .uri(&url)
            .header("authorization", format!("Bearer {}", self.token))
            .header("accept", "application/json")
            .body(Full::new(body))
            .with_context(|| format!("request {url}"))?;
        let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
        let resp = tokio::time::timeout(std::time::Duration::from_secs(60), client.request(req))
            .await
            .with_context(|| format!("{url}: no answer within 60 s"))?
            .with_context(|| format!("{url}: cannot connect"))?;
        let status = resp.status();
        let bytes = resp
            .into_body()
            .collect()
            .await
            .with_context(|| format!("{url}: reading the answer"))?
            .to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if !status.is_success() {
            let why = serde_json::from_str::<ApiError>(&text)
                .map(|e| e.error)
                .unwrap_or(text);
            bail!("{url}: {status}: {why}");
        }
        let v = serde_json::from_str(&text)
            .with_context(|| format!("{url}: not the answer expected"))?;
        Ok((v, text))
    }
}
