//! The operator view's HTTP routes: pages and the JSON API, every one behind the token
//! (`auth.rs`), answered from the view and the service, one INFO log line per request.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, RawQuery, Request, State};
use axum::http::header::{
    ACCEPT_ENCODING, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_SECURITY_POLICY, CONTENT_TYPE,
    LOCATION, REFERRER_POLICY, SET_COOKIE, WWW_AUTHENTICATE, X_CONTENT_TYPE_OPTIONS,
};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Serialize;

use crate::view::ClusterView;
use crate::web::ask::Ask;
use crate::web::auth::Auth;
use crate::web::model::{ApiError, PendingList};
use crate::web::podspec::{MAX_SPEC_BYTES, SpecError};
use crate::web::selector::Selector;
use crate::web::whatif::{Question, ask_what_if};
use crate::web::{board, decision, html, pending};
use k8s_openapi::api::core::v1::Pod;

/// What the routes share.
#[derive(Clone, Debug)]
pub struct WebState {
    /// The shim's cluster view.
    pub view: Arc<ClusterView>,
    /// A service client of the view's own (its node sets never replace the extender's).
    pub service: gpusched_client::Client,
    /// The token's check.
    pub auth: Auth,
    /// Pending pods analysed per answer.
    pub max_pending: usize,
}

/// Bodies above this are gzipped when the client accepts it.
const GZIP_ABOVE: usize = 8 * 1024;

fn params(q: Option<&str>) -> Vec<(String, String)> {
    form_urlencoded::parse(q.unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

fn param<'a>(p: &'a [(String, String)], key: &str) -> &'a str {
    p.iter()
        .find(|(k, _)| k == key)
        .map_or("", |(_, v)| v.as_str())
}

/// The body, gzipped when the client accepts it and it is large.
fn respond(
    status: StatusCode,
    content_type: &'static str,
    body: String,
    req: &HeaderMap,
) -> Response {
    let gzip = body.len() > GZIP_ABOVE
        && req
            .get(ACCEPT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.split(',').any(|e| e.trim().starts_with("gzip")));
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // No script, no framing, forms only to this origin.
    headers.insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    if gzip {
        use std::io::Write as _;
        let mut enc = flate2::write::GzEncoder::new(
            Vec::with_capacity(body.len() / 6),
            flate2::Compression::fast(),
        );
        if enc.write_all(body.as_bytes()).is_ok()
            && let Ok(bytes) = enc.finish()
        {
            headers.insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            return (status, headers, bytes).into_response();
        }
    }
    (status, headers, body).into_response()
}

fn html_page(status: StatusCode, body: String, req: &HeaderMap) -> Response {
    respond(status, "text/html; charset=utf-8", body, req)
}

fn json<T: Serialize>(status: StatusCode, v: &T, req: &HeaderMap) -> Response {
    match serde_json::to_string(v) {
        Ok(s) => respond(status, "application/json", s, req),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

fn api_error(status: StatusCode, error: impl Into<String>, req: &HeaderMap) -> Response {
    json(
        status,
        &ApiError {
            error: error.into(),
        },
        req,
    )
}

fn scope(p: &[(String, String)]) -> Result<Selector, String> {
    Selector::parse(param(p, "selector")).map_err(|e| format!("selector: {e}"))
}

/// Runs the synchronous part of an answer (snapshot, board, rendering) off the async workers,
/// which the extender's calls share.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("internal error: {e}"))
}

impl WebState {
    fn ask<'a>(&'a self, scope: &'a Selector) -> Ask<'a> {
        Ask {
            view: &self.view,
            service: &self.service,
            scope,
        }
    }

    /// The board (off the async workers), with the pending pods' needs and count.
    async fn board(
        &self,
        scope: &Selector,
        needs: Vec<gpusched_client::measure::Need>,
        pending: usize,
    ) -> Result<crate::web::model::Board, String> {
        let (view, service, scope) = (self.view.clone(), self.service.clone(), scope.clone());
        blocking(move || {
            let ask = Ask {
                view: &view,
                service: &service,
                scope: &scope,
            };
            board::board(&ask, &needs, pending)
        })
        .await
    }
}

async fn cluster(State(s): State<Arc<WebState>>, RawQuery(q): RawQuery, h: HeaderMap) -> Response {
    let p = params(q.as_deref());
    let scope = match scope(&p) {
        Ok(x) => x,
        Err(e) => {
            return html_page(
                StatusCode::BAD_REQUEST,
                html::message_page("bad selector", &e, ""),
                &h,
            );
        }
    };
    // The board (its fragmentation classes need only ValidateWorkload) while the pending pods
    // are analysed: the service works on those meanwhile.
    let ask = s.ask(&scope);
    let board = async {
        let (needs, count) = pending::needs_only(&ask, s.max_pending).await;
        s.board(&scope, needs, count).await
    };
    let (list, b) = tokio::join!(pending::list(&ask, s.max_pending), board);
    let b = match b {
        Ok(b) => b,
        Err(e) => {
            return html_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                html::message_page("error", &e, ""),
                &h,
            );
        }
    };
    let headers = h.clone();
    match blocking(move || html_page(StatusCode::OK, html::cluster_page(&b, &list), &headers)).await
    {
        Ok(r) => r,
        Err(e) => html_page(
            StatusCode::INTERNAL_SERVER_ERROR,
            html::message_page("error", &e, ""),
            &h,
        ),
    }
}

async fn api_top(State(s): State<Arc<WebState>>, RawQuery(q): RawQuery, h: HeaderMap) -> Response {
    let p = params(q.as_deref());
    let scope = match scope(&p) {
        Ok(x) => x,
        Err(e) => return api_error(StatusCode::BAD_REQUEST, e, &h),
    };
    let (needs, count) = pending::needs_only(&s.ask(&scope), s.max_pending).await;
    match s.board(&scope, needs, count).await {
        Ok(b) => json(StatusCode::OK, &b, &h),
        Err(e) => api_error(StatusCode::INTERNAL_SERVER_ERROR, e, &h),
    }
}

async fn api_pending(
    State(s): State<Arc<WebState>>,
    RawQuery(q): RawQuery,
    h: HeaderMap,
) -> Response {
    let p = params(q.as_deref());
    let scope = match scope(&p) {
        Ok(x) => x,
        Err(e) => return api_error(StatusCode::BAD_REQUEST, e, &h),
    };
    let list: PendingList = pending::list(&s.ask(&scope), s.max_pending).await;
    json(StatusCode::OK, &list, &h)
}

/// The pod of the view named in the path, or why there is none.
fn find_pod(s: &WebState, ns: &str, name: &str) -> Result<Arc<Pod>, String> {
    s.view.pod(ns, name, "").ok_or_else(|| {
        format!(
            "no pod {ns}/{name} of scheduler {} in gpusched-kube's view",
            s.view.names().scheduler_name
        )
    })
}

/// `GET /api/v1/why/{ns}/{name}` and `GET /api/v1/explain/{ns}/{name}`.
async fn api_pod(
    State(s): State<Arc<WebState>>,
    Path((what, ns, name)): Path<(String, String, String)>,
    h: HeaderMap,
) -> Response {
    let pod = match find_pod(&s, &ns, &name) {
        Ok(p) => p,
        Err(e) => return api_error(StatusCode::NOT_FOUND, e, &h),
    };
    let scope = Selector::default();
    let ask = s.ask(&scope);
    match what.as_str() {
        "why" => json(StatusCode::OK, &pending::analyse(&ask, &pod).await, &h),
        "explain" => json(StatusCode::OK, &decision::explain(&ask, &pod).await, &h),
        other => api_error(StatusCode::NOT_FOUND, format!("no API {other:?}"), &h),
    }
}

async fn pod_page(
    State(s): State<Arc<WebState>>,
    Path((ns, name)): Path<(String, String)>,
    h: HeaderMap,
) -> Response {
    let pod = match find_pod(&s, &ns, &name) {
        Ok(p) => p,
        Err(e) => {
            let page = html::message_page("no such pod", &e, "../../");
            return html_page(StatusCode::NOT_FOUND, page, &h);
        }
    };
    let scope = Selector::default();
    let e = decision::explain(&s.ask(&scope), &pod).await;
    html_page(StatusCode::OK, html::pod_page(&e), &h)
}

fn question(p: &[(String, String)], spec: String) -> Question {
    Question {
        spec,
        pod: param(p, "pod").to_owned(),
        node_policy: param(p, "node_policy").to_owned(),
        gpu_policy: param(p, "gpu_policy").to_owned(),
    }
}

async fn api_what_if(
    State(s): State<Arc<WebState>>,
    RawQuery(q): RawQuery,
    h: HeaderMap,
    body: Bytes,
) -> Response {
    let p = params(q.as_deref());
    let Ok(spec) = String::from_utf8(body.to_vec()) else {
        return api_error(StatusCode::BAD_REQUEST, "spec: not UTF-8 text", &h);
    };
    let scope = Selector::default();
    match ask_what_if(&s.ask(&scope), &question(&p, spec)).await {
        Ok(a) => json(StatusCode::OK, &a, &h),
        Err(e) => api_error(StatusCode::BAD_REQUEST, e.to_string(), &h),
    }
}

fn pending_names(s: &WebState) -> Vec<String> {
    let scope = Selector::default();
    pending::pending_pods(&s.ask(&scope))
        .iter()
        .map(|p| pending::pod_key(p))
        .collect()
}

async fn what_if_form(
    State(s): State<Arc<WebState>>,
    RawQuery(q): RawQuery,
    h: HeaderMap,
) -> Response {
    let p = params(q.as_deref());
    let names = pending_names(&s);
    let page = html::what_if_page(&html::Form {
        pod: param(&p, "pod"),
        pending: &names,
        ..html::Form::default()
    });
    html_page(StatusCode::OK, page, &h)
}

async fn what_if_post(State(s): State<Arc<WebState>>, h: HeaderMap, body: Bytes) -> Response {
    let p: Vec<(String, String)> = form_urlencoded::parse(&body).into_owned().collect();
    let q = question(&p, param(&p, "spec").to_owned());
    let names = pending_names(&s);
    let scope = Selector::default();
    let answer = ask_what_if(&s.ask(&scope), &q).await;
    let (status, page) = {
        let (a, err): (Option<_>, Option<SpecError>) = match answer {
            Ok(a) => (Some(a), None),
            Err(e) => (None, Some(e)),
        };
        let form = html::Form {
            spec: &q.spec,
            pod: &q.pod,
            node_policy: &q.node_policy,
            gpu_policy: &q.gpu_policy,
            pending: &names,
            answer: a.as_ref(),
            error: err.as_ref().map(|e| (e.field.as_str(), e.message.as_str())),
        };
        let status = if err.is_some() {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::OK
        };
        (status, html::what_if_page(&form))
    };
    html_page(status, page, &h)
}

async fn login_form(h: HeaderMap) -> Response {
    html_page(StatusCode::OK, html::login_page(false, ""), &h)
}

async fn login(State(s): State<Arc<WebState>>, h: HeaderMap, body: Bytes) -> Response {
    let p: Vec<(String, String)> = form_urlencoded::parse(&body).into_owned().collect();
    match s.auth.login(param(&p, "token")) {
        Some(cookie) => {
            let mut r = StatusCode::SEE_OTHER.into_response();
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                r.headers_mut().insert(SET_COOKIE, v);
            }
            r.headers_mut()
                .insert(LOCATION, HeaderValue::from_static("./"));
            r
        }
        None => html_page(StatusCode::UNAUTHORIZED, html::login_page(true, ""), &h),
    }
}

async fn logout() -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(&Auth::logout()) {
        r.headers_mut().insert(SET_COOKIE, v);
    }
    r.headers_mut()
        .insert(LOCATION, HeaderValue::from_static("login"));
    r
}

/// `../` per directory level of `path` below the root (the login page's links from anywhere).
fn base_of(path: &str) -> String {
    "../".repeat(path.trim_start_matches('/').matches('/').count())
}

/// Lets in requests with the token (the login page and form are open), and logs one line per
/// request.
async fn guard(State(s): State<Arc<WebState>>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let open = path == "/login";
    let allowed = open || s.auth.allows(req.headers());
    let r = if allowed {
        next.run(req).await
    } else if path.starts_with("/api/") {
        let mut r = api_error(
            StatusCode::UNAUTHORIZED,
            "unauthorised: send Authorization: Bearer <the token of web.token_file>",
            req.headers(),
        );
        r.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"gpusched-kube\""),
        );
        r
    } else if method == Method::GET || method == Method::HEAD {
        html_page(
            StatusCode::UNAUTHORIZED,
            html::login_page(false, &base_of(&path)),
            req.headers(),
        )
    } else {
        (StatusCode::UNAUTHORIZED, "unauthorised").into_response()
    };
    tracing::info!(
        method = %method, path = %path, status = r.status().as_u16(),
        ms = start.elapsed().as_millis() as u64, "web"
    );
    r
}

/// The operator view's routes.
pub fn router(state: WebState) -> Router {
    let state = Arc::new(state);
    Router::new()
        .route("/", get(cluster))
        .route("/pod/{namespace}/{name}", get(pod_page))
        .route("/what-if", get(what_if_form).post(what_if_post))
        .route("/login", get(login_form).post(login))
        .route("/logout", post(logout))
        .route("/api/v1/top", get(api_top))
        .route("/api/v1/pending", get(api_pending))
        .route("/api/v1/{what}/{namespace}/{name}", get(api_pod))
        .route("/api/v1/what-if", post(api_what_if))
        .layer(middleware::from_fn_with_state(state.clone(), guard))
        .layer(DefaultBodyLimit::max(MAX_SPEC_BYTES * 4))
        .with_state(state)
        .fallback(|| async { (StatusCode::NOT_FOUND, Body::from("not found")) })
}
