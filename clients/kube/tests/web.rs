//! The operator view against a real gpusched-server (in process, on 127.0.0.1:0), with the
//! cluster view fed from reflector stores: the pages and the JSON API through the router, the
//! token refused or accepted, and `kubectl-gpusched` against the view served on 127.0.0.1:0.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use gpusched_client::ClientBuilder;
use gpusched_kube::config::Names;
use gpusched_kube::view::ClusterView;
use gpusched_kube::web::model::{Board, Explanation, PendingPod, Verdict, WhatIf};
use gpusched_kube::web::{Auth, COOKIE_NAME, WebState, router};
use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::{Node, Pod, ResourceQuota};
use serde_json::json;
use tower::ServiceExt as _;

const TOKEN: &str = "test-token-0123456789";

fn names() -> Names {
    Names {
        scheduler_name: "gpusched-scheduler".into(),
        ..Names::default()
    }
}

fn gpu_node(name: &str, cards: u32, extra: serde_json::Value) -> Node {
    let cards = gpusched_client::node(name, cards, 16384, "NVIDIA-A100").cards;
    let mut ann = json!({"hami.io/node-nvidia-register": gpusched_hami::encode_register(&cards)});
    if let (Some(a), Some(x)) = (ann.as_object_mut(), extra.as_object()) {
        a.extend(x.clone());
    }
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"pool": "p"}, "annotations": ann}}),
    )
    .unwrap()
}

/// A pod holding `devices` on `node`, as the shim's Binding leaves it.
fn holder(name: &str, node: &str, devices: &str) -> Pod {
    holder_in("ns", name, node, devices)
}

fn holder_in(ns: &str, name: &str, node: &str, devices: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"), "resourceVersion": "1",
                     "annotations": {"hami.io/vgpu-devices-allocated": devices, "hami.io/vgpu-node": node}},
        "spec": {"schedulerName": "gpusched-scheduler", "nodeName": node,
                 "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096", "nvidia.com/gpucores": "30"}}}]},
        "status": {"phase": "Running"}
    }))
    .unwrap()
}

fn pending(name: &str, ann: serde_json::Value, limits: serde_json::Value) -> Pod {
    pending_in("ns", name, ann, limits)
}

fn pending_in(ns: &str, name: &str, ann: serde_json::Value, limits: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"), "resourceVersion": "1",
                     "annotations": ann},
        "spec": {"schedulerName": "gpusched-scheduler", "nodeSelector": {"pool": "p"},
                 "containers": [{"name": "main", "resources": {"limits": limits}}]},
        "status": {"phase": "Pending"}
    }))
    .unwrap()
}

struct Fixture {
    _server: gpusched_service::Running,
    state: WebState,
}

/// n1: 4 cards with 2,048 / 14,336 / 8,192 / 14,336 MiB booked; n2: 2 cards, the second
/// cordoned, 12,288 MiB booked on the first; `bad`: an invalid inventory; `cpu`: no GPU. Pending:
/// `big` (16,384 MiB: the nearest miss is n1-gpu0, 2,048 MiB short), `small` (fits), `badann`
/// (a malformed annotation).
async fn fixture() -> Fixture {
    let dup = gpusched_hami::encode_register(&[
        gpusched_client::node("bad", 1, 16384, "A100").cards[0].clone(),
        gpusched_client::node("bad", 1, 16384, "A100").cards[0].clone(),
    ]);
    let nodes = vec![
        gpu_node("n1", 4, json!({})),
        gpu_node("n2", 2, json!({"hami.io/device-cordon": "n2-gpu1"})),
        serde_json::from_value(json!({"metadata": {"name": "bad", "labels": {"pool": "p"},
            "annotations": {"hami.io/node-nvidia-register": dup}}}))
        .unwrap(),
        serde_json::from_value(json!({"metadata": {"name": "cpu", "labels": {"pool": "p"}}}))
            .unwrap(),
    ];
    let pods = vec![
        holder("h0", "n1", "n1-gpu0,NVIDIA,2048,30:;"),
        holder("h1", "n1", "n1-gpu1,NVIDIA,14336,10:;"),
        holder("h2", "n1", "n1-gpu2,NVIDIA,8192,10:;"),
        holder("h3", "n1", "n1-gpu3,NVIDIA,14336,10:;"),
        holder("h4", "n2", "n2-gpu0,NVIDIA,12288,10:;"),
        // Namespace qa: a GPU quota of 1,000 MiB, 500 held, a pod asking 2,000 waiting on it.
        holder_in("qa", "qa-h", "n2", "n2-gpu0,NVIDIA,500,10:;"),
        pending_in(
            "qa",
            "over",
            json!({}),
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}),
        ),
        pending(
            "big",
            json!({}),
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16384"}),
        ),
        pending(
            "small",
            json!({}),
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}),
        ),
        // A replica of big: the same question, analysed once for both.
        pending(
            "big-twin",
            json!({}),
            json!({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16384"}),
        ),
        pending(
            "badann",
            json!({"hami.io/device-scoring-weights": "slot=x"}),
            json!({"nvidia.com/gpu": "1"}),
        ),
    ];
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "gpu", "namespace": "qa"},
        "spec": {"hard": {"limits.nvidia.com/gpumem": "1000"}}
    }))
    .unwrap();
    fixture_with(nodes, pods, vec![quota]).await
}

/// A view of these objects and a real service.
async fn fixture_with(nodes: Vec<Node>, pods: Vec<Pod>, quotas: Vec<ResourceQuota>) -> Fixture {
    let server = gpusched_service::testing::start_server(&[("metrics.enabled", "false")]).await;
    let service = ClientBuilder::new(server.grpc_addr.to_string())
        .timeout(Some(Duration::from_secs(5)))
        .connect()
        .await
        .unwrap();
    let view = Arc::new(
        ClusterView::of_objects(nodes, pods, names(), Duration::from_secs(60))
            .with_quota_objects(quotas),
    );
    Fixture {
        _server: server,
        state: WebState {
            view,
            service,
            auth: Auth::new(TOKEN),
            max_pending: 20,
        },
    }
}

/// One request through the router: (status, headers, body).
async fn call(
    f: &Fixture,
    method: &str,
    uri: &str,
    auth: Option<&str>,
    body: &str,
) -> (StatusCode, axum::http::HeaderMap, String) {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(a) = auth {
        req = req.header(
            if a.contains('=') {
                "cookie"
            } else {
                "authorization"
            },
            a,
        );
    }
    if method == "POST" && !uri.starts_with("/api/") {
        req = req.header("content-type", "application/x-www-form-urlencoded");
    }
    let resp = router(f.state.clone())
        .oneshot(req.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

#[tokio::test]
async fn without_the_token_nothing_of_the_cluster_is_shown() {
    let f = fixture().await;
    // (method, uri, credentials)
    let wrong = "Bearer not-the-token-at-all".to_owned();
    let forged_cookie = format!("{COOKIE_NAME}={TOKEN}");
    let cases: Vec<(&str, &str, Option<&str>)> = vec![
        ("GET", "/api/v1/top", None),
        ("GET", "/api/v1/top", Some(&wrong)),
        ("GET", "/api/v1/pending", Some(&forged_cookie)),
        ("GET", "/api/v1/why/ns/big", None),
        ("GET", "/api/v1/explain/ns/h0", None),
        ("POST", "/api/v1/what-if", None),
        ("GET", "/", None),
        ("GET", "/", Some(&wrong)),
        ("GET", "/pod/ns/h0", None),
        ("GET", "/what-if", None),
        ("POST", "/what-if", None),
    ];
    for (method, uri, cred) in cases {
        let (status, headers, body) = call(&f, method, uri, cred, "").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {uri} {cred:?}");
        for secret in ["n1-gpu", "ns/h0", "big"] {
            assert!(
                !body.contains(secret),
                "{method} {uri}: {secret} shown: {body}"
            );
        }
        if uri.starts_with("/api/") {
            assert!(headers.contains_key("www-authenticate"), "{uri}");
        } else if method == "GET" {
            assert!(body.contains("id=login"), "{uri}: a login form: {body}");
        }
    }
    // The login page at a deep path posts back to the root's login.
    let (_, _, body) = call(&f, "GET", "/pod/ns/h0", None, "").await;
    assert!(body.contains("action=\"../../login\""), "{body}");
    // A wrong token at the login form: 401, no cookie.
    let (status, headers, body) = call(&f, "POST", "/login", None, "token=nope").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(!headers.contains_key("set-cookie"));
    assert!(body.contains("wrong token"));
}

#[tokio::test]
async fn the_page_shows_every_card_and_why_pods_wait() {
    let f = fixture().await;
    // A person logs in with the form, then reads the page with the cookie it sets.
    let (status, headers, _) = call(&f, "POST", "/login", None, &format!("token={TOKEN}")).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let cookie = headers["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let (status, headers, page) = call(&f, "GET", "/", Some(&cookie), "").await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && csp.contains("form-action 'self'"),
        "{csp}"
    );
    assert_eq!(headers["cache-control"], "no-store");
    assert!(!page.contains("<script"), "no script on the page");
    for card in [
        "n1-gpu0", "n1-gpu1", "n1-gpu2", "n1-gpu3", "n2-gpu0", "n2-gpu1",
    ] {
        assert_eq!(
            page.matches(&format!("data-card=\"{card}\"")).count(),
            1,
            "{card} once in the grid"
        );
    }
    assert_eq!(
        page.matches("data-card=").count(),
        6,
        "only GPU nodes' cards"
    );
    assert!(
        page.contains("data-unusable=\"bad\""),
        "the invalid node is kept back"
    );
    assert!(!page.contains("data-node=\"cpu\""));
    assert!(page.contains("<span class=tag>cordoned</span>"));
    let big = page
        .split("data-pod=\"ns/big\"")
        .nth(1)
        .expect("ns/big listed");
    let row = big.split("</tr>").next().unwrap();
    assert!(
        row.contains("<span class=nearest data-node=\"n1\">n1 n1-gpu0: 2,048 MiB short</span>"),
        "{row}"
    );
    assert!(
        row.contains("data-reason=\"CardInsufficientMemory\""),
        "{row}"
    );
    let small = page.split("data-pod=\"ns/small\"").nth(1).unwrap();
    assert!(
        small
            .split("</tr>")
            .next()
            .unwrap()
            .contains("data-verdict=fits")
    );
    let bad = page.split("data-pod=\"ns/badann\"").nth(1).unwrap();
    assert!(
        bad.split("</tr>")
            .next()
            .unwrap()
            .contains("hami.io/device-scoring-weights"),
        "the violation names the annotation"
    );
    // The pod page of a bound pod: its recorded decision and the service's tables.
    let (status, _, pod) = call(&f, "GET", "/pod/ns/h0", Some(&cookie), "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(pod.contains("<b id=bound>n1</b>"), "{pod}");
    assert!(
        pod.contains("id=ranking") && pod.contains("data-container=\"c\""),
        "{pod}"
    );
    let (status, _, _) = call(&f, "GET", "/pod/ns/nobody", Some(&cookie), "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Logging out ends the session cookie.
    let (status, headers, _) = call(&f, "POST", "/logout", Some(&cookie), "").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(
        headers["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
}

#[tokio::test]
async fn the_api_answers_in_the_services_terms() {
    let f = fixture().await;
    let b = bearer();
    let (status, _, text) = call(&f, "GET", "/api/v1/top", Some(&b), "").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let board: Board = serde_json::from_str(&text).unwrap();
    let t = &board.totals;
    assert_eq!((t.nodes, t.cards, t.cordoned_cards), (2, 6, 1));
    assert_eq!(
        (t.mem_mib.used, t.mem_mib.total),
        (2048 + 14336 + 8192 + 14336 + 12288 + 500, 6 * 16384)
    );
    assert_eq!(t.cores.used, 30 + 10 + 10 + 10 + 10 + 10);
    assert!(
        (t.allocation_pct - 80.0 / 6.0).abs() < 1e-9,
        "{}",
        t.allocation_pct
    );
    assert_eq!((t.pods_bound, t.pods_pending), (6, 5));
    assert_eq!(board.unusable.len(), 1);
    let gpu1 = &board.nodes[0].cards[1];
    assert_eq!(
        (
            gpu1.id.as_str(),
            gpu1.pods[0].pod.as_str(),
            gpu1.pods[0].mem_mib
        ),
        ("n1-gpu1", "ns/h1", 14336)
    );
    assert_eq!(board.namespaces[0].pods, 5);
    assert!(board.namespaces[0].extras.is_empty(), "no quota in ns");
    let qa = &board.namespaces[1];
    assert_eq!((qa.namespace.as_str(), qa.pods, qa.mem_mib), ("qa", 1, 500));
    assert_eq!(
        qa.extras
            .iter()
            .map(|e| (e.label.as_str(), e.value.as_str()))
            .collect::<Vec<_>>(),
        [(
            "quota memory",
            "500 / 1,000 MiB (limits.nvidia.com/gpumem, ResourceQuota gpu)"
        )]
    );
    // The fragmentation measure's classes: the bound pods' bookings and the pending pods' needs.
    let has = |mem: u64, cores: u32| {
        t.request_classes
            .iter()
            .any(|c| c.mem_mib == mem && c.cores == cores)
    };
    assert!(
        has(16384, 0) && has(1000, 0) && has(2048, 30),
        "{:?}",
        t.request_classes
    );
    // A node selector scopes the board.
    let (_, _, text) = call(&f, "GET", "/api/v1/top?selector=pool%3Dq", Some(&b), "").await;
    assert_eq!(serde_json::from_str::<Board>(&text).unwrap().nodes.len(), 0);
    let (status, _, text) = call(&f, "GET", "/api/v1/top?selector=pool", Some(&b), "").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(text.contains("selector"), "{text}");

    // Every pending pod under its own name, replicas with the same verdict.
    let (_, _, text) = call(&f, "GET", "/api/v1/pending", Some(&b), "").await;
    let list: gpusched_kube::web::model::PendingList = serde_json::from_str(&text).unwrap();
    let mut names: Vec<&str> = list.pods.iter().map(|p| p.pod.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["ns/badann", "ns/big", "ns/big-twin", "ns/small", "qa/over"]
    );
    let verdict_of = |n: &str| &list.pods.iter().find(|p| p.pod == n).unwrap().verdict;
    assert_eq!(verdict_of("ns/big"), verdict_of("ns/big-twin"));
    assert_ne!(verdict_of("ns/big"), verdict_of("ns/small"));
    let (_, _, text) = call(&f, "GET", "/api/v1/why/ns/big", Some(&b), "").await;
    let why: PendingPod = serde_json::from_str(&text).unwrap();
    let Verdict::Waits {
        candidates,
        reasons,
        nearest,
        ..
    } = why.verdict
    else {
        panic!("big waits: {text}")
    };
    assert_eq!(candidates, 3, "n1, n2 and the invalid node");
    let m = nearest.expect("a nearest miss");
    assert_eq!(m.text, "n1 n1-gpu0: 2,048 MiB short");
    assert_eq!(
        (m.short[0].mem_mib, m.short[0].reason.as_str()),
        (2048, "CARD_INSUFFICIENT_MEMORY")
    );
    let groups: Vec<(&str, usize)> = reasons
        .iter()
        .map(|g| (g.reason.as_str(), g.nodes))
        .collect();
    assert_eq!(
        groups,
        [
            ("CardInsufficientMemory", 2),
            ("CardCordoned", 1),
            ("InvalidNode", 1)
        ],
        "{text}"
    );

    // A pod waiting on its namespace's quota: the quota named, no node to free.
    let (_, _, text) = call(&f, "GET", "/api/v1/why/qa/over", Some(&b), "").await;
    let over: PendingPod = serde_json::from_str(&text).unwrap();
    let Verdict::Waits {
        quota,
        nearest,
        reasons,
        ..
    } = over.verdict
    else {
        panic!("over waits: {text}")
    };
    assert!(
        quota.starts_with("quota of namespace qa: limits.nvidia.com/gpumem 1000 (ResourceQuota gpu), 500 used, 500 left"),
        "{quota}"
    );
    assert!(nearest.is_none(), "no node's usage raises a quota: {text}");
    assert!(
        reasons.iter().any(|g| g.reason == "QuotaMemoryExceeded"),
        "{text}"
    );

    let (_, _, text) = call(&f, "GET", "/api/v1/explain/ns/h2", Some(&b), "").await;
    let e: Explanation = serde_json::from_str(&text).unwrap();
    assert_eq!(e.bound_node.as_deref(), Some("n1"));
    assert_eq!(e.recorded.len(), 1);
    assert_eq!(
        (e.recorded[0].card.as_str(), e.recorded[0].mem_mib),
        ("n1-gpu2", 8192)
    );
    assert!(e.matches_recorded.is_some());
    let d = e.decision.expect("the cards on n1");
    assert_eq!(d.node, "n1");
    assert_eq!(d.containers[0].cards.len(), 4, "every card of the node");
    assert!(e.ranking.iter().any(|r| r.node == "n1"), "{:?}", e.ranking);
    let (status, _, _) = call(&f, "GET", "/api/v1/explain/ns/ghost", Some(&b), "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _, text) = call(&f, "GET", "/api/v1/delete/ns/h2", Some(&b), "").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{text}");
}

#[tokio::test]
async fn what_if_places_nothing_and_names_bad_fields() {
    let f = fixture().await;
    let b = bearer();
    let spec = "apiVersion: v1\nkind: Pod\nmetadata: {name: try, namespace: ns}\nspec:\n  nodeSelector: {pool: p}\n  containers:\n  - name: main\n    resources:\n      limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 6000}\n";
    for (policy, node) in [("binpack", "n1"), ("spread", "n1")] {
        let uri = format!("/api/v1/what-if?node_policy={policy}");
        let (status, _, text) = call(&f, "POST", &uri, Some(&b), spec).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let w: WhatIf = serde_json::from_str(&text).unwrap();
        assert!(
            w.policy.starts_with(&format!("node {policy}")),
            "{}",
            w.policy
        );
        assert_eq!(w.node.as_deref(), Some(node), "{text}");
        assert_eq!(w.cards[0].mem_mib, 6000);
        assert_eq!((w.pod.as_str(), w.candidates), ("ns/try", 3));
    }
    // Nothing was booked: the board is unchanged.
    let (_, _, text) = call(&f, "GET", "/api/v1/top", Some(&b), "").await;
    let board: Board = serde_json::from_str(&text).unwrap();
    assert_eq!(
        board.totals.mem_mib.used,
        2048 + 14336 + 8192 + 14336 + 12288 + 500
    );
    // A pending pod picked by name, with its verdict when it fits nowhere.
    let (_, _, text) = call(&f, "POST", "/api/v1/what-if?pod=ns%2Fbig", Some(&b), "").await;
    let w: WhatIf = serde_json::from_str(&text).unwrap();
    assert!(w.node.is_none());
    assert!(
        matches!(
            w.verdict,
            Some(Verdict::Waits {
                nearest: Some(_),
                ..
            })
        ),
        "{text}"
    );
    // Bad input: 400 naming the field.
    let cases = [
        ("", "/api/v1/what-if", "spec: empty"),
        (
            "spec: {containers: [{name: a, resources: {limits: {nvidia.com/gpu: [1]}}}]}",
            "/api/v1/what-if",
            "spec.containers[0].resources.limits[\\\"nvidia.com/gpu\\\"]",
        ),
        (
            "metadata: {annotations: {hami.io/device-scoring-weights: nonsense}}\nspec: {containers: [{name: a, resources: {limits: {nvidia.com/gpu: 1}}}]}",
            "/api/v1/what-if",
            "hami.io/device-scoring-weights",
        ),
        (
            spec,
            "/api/v1/what-if?gpu_policy=sideways",
            "hami.io/gpu-scheduler-policy",
        ),
        ("", "/api/v1/what-if?pod=ns%2Fghost", "pod: no pod ns/ghost"),
    ];
    for (body, uri, needle) in cases {
        let (status, _, text) = call(&f, "POST", uri, Some(&b), body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{uri} {body}: {text}");
        assert!(text.contains(needle), "{uri}: {text} lacks {needle}");
    }
    // The form: the same answer as HTML.
    let form: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("spec", spec)
        .append_pair("node_policy", "spread")
        .finish();
    let (status, _, page) = call(&f, "POST", "/what-if", Some(&b), &form).await;
    assert_eq!(status, StatusCode::OK, "{page}");
    assert!(
        page.contains("<div id=whatif-result data-node=\"n1\">"),
        "{page}"
    );
    let (status, _, page) = call(&f, "POST", "/what-if", Some(&b), "spec=spec%3A+%5B%5D").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(page.contains("data-field=\"spec\""), "{page}");
}

/// A MIG card as the agent publishes it (its layout in `gpusched.io/node-mig-layouts`): the grid
/// shows its instances, free or held, and the memory slices they occupy.
#[tokio::test]
async fn a_mig_card_shows_its_instances() {
    let mut cards = gpusched_client::node("m1", 1, 81559, "NVIDIA H100 80GB HBM3").cards;
    cards[0].mode = gpusched_client::v1::CardMode::Mig as i32;
    cards[0].slots = 7;
    let profile = |name: &str, mem_mib: u64, slices: u32, cores: u32, at: &[u32]| {
        gpusched_client::v1::MigProfile {
            name: name.into(),
            mem_mib,
            compute_slices: slices,
            memory_slices: slices,
            cores,
            max_instances: u32::try_from(at.len()).unwrap(),
            placements: at.to_vec(),
            not_allowed: false,
        }
    };
    let layout = gpusched_client::v1::MigLayout {
        compute_slices: 7,
        memory_slices: 8,
        profiles: vec![
            profile("1g.10gb", 9984, 1, 13, &[0, 1, 2, 3, 4, 5, 6]),
            profile("3g.40gb", 40448, 4, 46, &[0, 4]),
        ],
        instances: vec![gpusched_client::v1::MigInstance {
            profile: "1g.10gb".into(),
            start: 6,
            size: 1,
            in_use_by: String::new(),
        }],
    };
    let reg: Vec<gpusched_hami::RegisteredCard> = cards
        .iter()
        .map(gpusched_hami::RegisteredCard::from_card)
        .collect();
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "m1", "annotations": {
        gpusched_hami::NODE_REGISTER: gpusched_hami::encode_registered(&reg),
        gpusched_hami::NODE_MIG_LAYOUTS: gpusched_hami::encode_node_mig_layouts(
            &[(cards[0].id.clone(), layout)].into()),
    }}}))
    .unwrap();
    let f = fixture_with(vec![node], vec![], vec![]).await;
    let (status, _, text) = call(&f, "GET", "/api/v1/top", Some(&bearer()), "").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    let board: Board = serde_json::from_str(&text).unwrap();
    let card = &board.nodes[0].cards[0];
    assert_eq!(card.mode, "mig");
    let extras: Vec<(&str, &str)> = card
        .extras
        .iter()
        .map(|e| (e.label.as_str(), e.value.as_str()))
        .collect();
    assert_eq!(
        extras,
        [("MIG slices", "1/8 memory"), ("MIG", "1g.10gb@6 free")],
        "{text}"
    );
    let (_, _, page) = call(&f, "GET", "/", Some(&bearer()), "").await;
    assert!(
        page.contains("<small>MIG: 1g.10gb@6 free</small>"),
        "{page}"
    );
}

/// `kubectl-gpusched` against the view served on 127.0.0.1:0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_reads_the_same_answers() {
    let f = fixture().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router(f.state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let spec_file = dir.path().join("pod.yaml");
    std::fs::write(
        &spec_file,
        "spec:\n  nodeSelector: {pool: p}\n  containers:\n  - name: main\n    resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 1000}}\n",
    )
    .unwrap();
    let ctl = |args: Vec<String>, token: Option<&std::path::Path>| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-gpusched"));
        c.arg("--server").arg(format!("http://{addr}")).args(args);
        c.env_remove("GPUSCHED_WEB_TOKEN");
        if let Some(t) = token {
            c.arg("--token-file").arg(t);
        }
        let out = c.output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    let run = |args: Vec<String>| {
        let tf = token_file.clone();
        let ctl = &ctl;
        async move { tokio::task::block_in_place(|| ctl(args, Some(&tf))) }
    };
    let (ok, top, err) = run(s(&["top"])).await;
    assert!(ok, "{err}");
    for card in ["n1-gpu0", "n1-gpu3", "n2-gpu1"] {
        assert!(top.contains(card), "{top}");
    }
    assert!(top.contains("6 cards") && top.contains("cordoned"), "{top}");
    assert!(top.contains("ns/h1"), "who books a card: {top}");
    let (ok, why, err) = run(s(&["why", "big", "-n", "ns"])).await;
    assert!(ok, "{err}");
    assert!(
        why.contains("nearest miss: n1 n1-gpu0: 2,048 MiB short"),
        "{why}"
    );
    assert!(why.contains("CardInsufficientMemory"), "{why}");
    let (ok, ex, err) = run(s(&["explain", "ns/h2"])).await;
    assert!(ok, "{err}");
    assert!(ex.contains("bound to n1") && ex.contains("n1-gpu2"), "{ex}");
    let spec = spec_file.to_string_lossy().into_owned();
    let (ok, wi, err) = run(s(&["what-if", "-f", &spec, "--node-policy", "spread"])).await;
    assert!(ok, "{err}");
    assert!(wi.contains("would go to"), "{wi}");
    let (ok, json, err) = run(s(&["-o", "json", "top"])).await;
    assert!(ok, "{err}");
    let board: Board = serde_json::from_str(&json).unwrap();
    assert_eq!(board.totals.cards, 6);
    let (ok, pending, err) = run(s(&["pending"])).await;
    assert!(ok, "{err}");
    assert!(
        pending.contains("ns/big") && pending.contains("2,048 MiB short"),
        "{pending}"
    );
    // Without the token, or with another: refused, nothing printed.
    let (ok, out, err) = tokio::task::block_in_place(|| ctl(s(&["top"]), None));
    assert!(!ok && out.is_empty() && err.contains("no token"), "{err}");
    let other = dir.path().join("other");
    std::fs::write(&other, "another-token-0123456789").unwrap();
    let (ok, out, err) = tokio::task::block_in_place(|| ctl(s(&["top"]), Some(&other)));
    assert!(!ok && out.is_empty() && err.contains("401"), "{err}");
    let (ok, _, err) = run(s(&["why", "ghost", "-n", "ns"])).await;
    assert!(!ok && err.contains("404"), "{err}");
}
