//! How the operator view holds up at scale: a view of N nodes x C cards (default 1,000 x 8) with
//! pods booking most cards and pending pods that fit nowhere, a real gpusched-server in process,
//! the view's router served on 127.0.0.1:0. Prints the page's and the API's size (plain and
//! gzip) and server time over repeated requests, then, with `--chromium PATH`, the time a
//! headless Chromium takes to fetch and render the page (login form, then the page; navigation
//! timing of several loads). Numbers only; nothing is asserted.
//!
//!     cargo run --release -p gpusched-kube --example web_scale -- --chromium "$(command -v chromium)"
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/e2e/harness/browser.rs"]
#[allow(dead_code)]
mod browser;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use gpusched_client::{ClientBuilder, v1};
use gpusched_kube::config::Names;
use gpusched_kube::view::ClusterView;
use gpusched_kube::web::{Auth, WebState, router};
use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;
use tower::ServiceExt as _;

const TOKEN: &str = "scale-token-0123456789";

struct Args {
    nodes: usize,
    cards: u32,
    pending: usize,
    runs: usize,
    chromium: Option<String>,
}

fn args() -> Args {
    let mut a = Args {
        nodes: 1000,
        cards: 8,
        pending: 20,
        runs: 10,
        chromium: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().unwrap_or_else(|| panic!("{k} needs a value"));
        match k.as_str() {
            "--nodes" => a.nodes = v.parse().unwrap(),
            "--cards" => a.cards = v.parse().unwrap(),
            "--pending" => a.pending = v.parse().unwrap(),
            "--runs" => a.runs = v.parse().unwrap(),
            "--chromium" => a.chromium = Some(v),
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// A small deterministic generator (the same cluster every run).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn uuid(node: usize, card: u32) -> String {
    format!(
        "GPU-{node:08x}-{card:04x}-4a5b-9c8d-{:012x}",
        node * 64 + card as usize
    )
}

fn cluster(a: &Args) -> (Vec<Node>, Vec<Pod>) {
    let mut rng = Lcg(42);
    let mut nodes = Vec::new();
    let mut pods = Vec::new();
    for n in 0..a.nodes {
        let name = format!("gpu-node-{n:04}");
        let cards: Vec<v1::Card> = (0..a.cards)
            .map(|i| v1::Card {
                id: uuid(n, i),
                index: i,
                r#type: "NVIDIA-A100-SXM4-80GB".into(),
                slots: 10,
                total_mem_mib: 81920,
                total_cores: 100,
                numa: i / 4,
                health: v1::CardHealth::Healthy as i32,
                mode: v1::CardMode::HamiCore as i32,
                ..v1::Card::default()
            })
            .collect();
        nodes.push(
            serde_json::from_value(json!({"metadata": {"name": name, "labels": {"pool": "gpu"},
                "annotations": {"hami.io/node-nvidia-register": gpusched_hami::encode_register(&cards)}}}))
            .unwrap(),
        );
        // Most cards hold one to three pods; a few are idle.
        for i in 0..a.cards {
            for k in 0..rng.next(4) {
                let mem = 8192 * (1 + rng.next(3));
                let pod = format!("train-{n:04}-{i}-{k}-{:05}", rng.next(100_000));
                pods.push(
                    serde_json::from_value(json!({
                        "metadata": {"name": pod, "namespace": format!("team-{}", rng.next(12)),
                            "uid": format!("uid-{pod}"), "resourceVersion": "1",
                            "annotations": {"hami.io/vgpu-devices-allocated": format!("{},NVIDIA,{mem},20:;", uuid(n, i)),
                                            "hami.io/vgpu-node": name}},
                        "spec": {"schedulerName": "gpusched-scheduler", "nodeName": name,
                            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": mem.to_string()}}}]},
                        "status": {"phase": "Running"}
                    }))
                    .unwrap(),
                );
            }
        }
    }
    // Pending pods that each ask something else (replicas asking the same are analysed once:
    // distinct pods are the worst case).
    for p in 0..a.pending {
        let name = format!("pending-{p:03}");
        let mem = 40960 + 1024 * p;
        pods.push(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "team-x", "uid": format!("uid-{name}"), "resourceVersion": "1"},
                "spec": {"schedulerName": "gpusched-scheduler",
                    "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "8", "nvidia.com/gpumem": mem.to_string()}}}]},
                "status": {"phase": "Pending"}
            }))
            .unwrap(),
        );
    }
    (nodes, pods)
}

fn stats(mut ms: Vec<f64>) -> String {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    format!(
        "median {:.1} ms, p90 {:.1} ms, max {:.1} ms",
        at(0.5),
        at(0.9),
        at(1.0)
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    let server = gpusched_service::testing::start_server(&[("metrics.enabled", "false")]).await;
    let service = ClientBuilder::new(server.grpc_addr.to_string())
        .timeout(Some(Duration::from_secs(30)))
        .connect()
        .await
        .unwrap();
    let (nodes, pods) = cluster(&a);
    let bound = pods.len() - a.pending;
    let names = Names {
        scheduler_name: "gpusched-scheduler".into(),
        ..Names::default()
    };
    let view = Arc::new(ClusterView::of_objects(
        nodes,
        pods,
        names,
        Duration::from_secs(60),
    ));
    let state = WebState {
        view,
        service,
        auth: Auth::new(TOKEN),
        max_pending: a.pending.max(1),
    };
    println!(
        "{} nodes x {} cards, {bound} pods holding cards, {} pending pods, each asking something else (each analysed: ValidateWorkload, Filter with explanations over every node)",
        a.nodes, a.cards, a.pending
    );
    for (path, gzip) in [
        ("/", false),
        ("/", true),
        ("/api/v1/top", false),
        ("/api/v1/top", true),
        ("/api/v1/pending", false),
    ] {
        let mut times = Vec::new();
        let mut size = 0;
        for _ in 0..a.runs {
            let mut req = Request::builder()
                .uri(path)
                .header("authorization", format!("Bearer {TOKEN}"));
            if gzip {
                req = req.header("accept-encoding", "gzip");
            }
            let t = Instant::now();
            let resp = router(state.clone())
                .oneshot(req.body(Body::empty()).unwrap())
                .await
                .unwrap();
            assert!(resp.status().is_success(), "{path}: {}", resp.status());
            let bytes = resp.into_body().collect().await.unwrap().to_bytes();
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            size = bytes.len();
        }
        println!(
            "GET {path}{}: {:.0} KiB; server time over {} requests: {}",
            if gzip { " (gzip)" } else { "" },
            size as f64 / 1024.0,
            a.runs,
            stats(times)
        );
    }
    let Some(chromium) = a.chromium else { return };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router(state.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = std::env::temp_dir().join(format!("web-scale-{}", std::process::id()));
    let mut b = browser::Browser::start(std::path::Path::new(&chromium), &dir).await;
    b.goto(&format!("http://{addr}/login")).await;
    b.eval(&format!(
        "document.getElementById('token').value = '{TOKEN}'"
    ))
    .await;
    b.submit("document.getElementById('login').submit()").await;
    let mut fetch = Vec::new();
    let mut render = Vec::new();
    let mut load = Vec::new();
    let mut cells = 0;
    for _ in 0..a.runs.min(5) {
        b.goto(&format!("http://{addr}/")).await;
        let t = b
            .eval(
                "(() => { const n = performance.getEntriesByType('navigation')[0]; \
                 return [n.responseEnd - n.requestStart, n.domComplete - n.responseEnd, n.loadEventEnd - n.startTime, \
                 document.querySelectorAll('[data-card]').length, n.encodedBodySize]; })()",
            )
            .await;
        fetch.push(t[0].as_f64().unwrap_or(0.0));
        render.push(t[1].as_f64().unwrap_or(0.0));
        load.push(t[2].as_f64().unwrap_or(0.0));
        cells = t[3].as_u64().unwrap_or(0);
        println!("  chromium load: {t}");
    }
    b.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "Chromium ({cells} card cells): request to last byte {}; parse and layout to DOM complete {}; navigation start to load end {}",
        stats(fetch),
        stats(render),
        stats(load)
    );
}
