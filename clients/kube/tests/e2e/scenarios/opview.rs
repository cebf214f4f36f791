//! The operator view, used as a person would: a filled cluster (pods bound by kube-scheduler
//! through the extender, and decisions bound the way the shim binds them) with pending GPU pods;
//! headless Chromium logs in with the form, reads the grid (every card), a pending pod's
//! nearest miss, follows a pod's page and asks the what-if form; a screenshot is kept; the
//! same cluster through `kubectl-gpusched`; and without the token nothing is shown.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::harness::browser::Browser;
use crate::harness::cluster::H;
use crate::harness::env::WEB_TOKEN;
use crate::harness::http::http_with;
use crate::harness::pods::{PodSpec, Shape};
use crate::harness::shim::Shim;

const SHAPE: Shape = Shape {
    cards: 4,
    mem: 16384,
};
/// The label the page is scoped with.
const VIEW_LABEL: &str = "gpusched.e2e/opview";
/// The nearest misses the service's answers must give.
const BIG_MISS: &str = "opview-node-01 GPU-opview-node-01-3: 2,048 MiB short";
const WIDE_MISS: &str = "opview-node-01 GPU-opview-node-01-4: 2,048 MiB short";

async fn label_node(h: &H, name: &str, annotations: Value) {
    Api::<Node>::all(h.client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"metadata": {"labels": {VIEW_LABEL: "yes"}, "annotations": annotations}}),
            ),
        )
        .await
        .unwrap();
}

/// `kubectl-gpusched` against the shim's view: (success, stdout, stderr).
async fn ctl(h: &H, shim: &Shim, args: &[&str], token: bool) -> (bool, String, String) {
    let bin = h
        .env
        .ctl_bin
        .as_ref()
        .expect("E2E_CTL_BIN (set by deploy/e2e/test.sh)");
    let mut c = tokio::process::Command::new(bin);
    c.arg("--server")
        .arg(format!("http://{}", shim.web))
        .args(args);
    c.env_remove("GPUSCHED_WEB_TOKEN")
        .env_remove("GPUSCHED_WEB_TOKEN_FILE");
    if token {
        c.arg("--token-file").arg(h.env.web_token_file());
    }
    let out = c.output().await.unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Waits until the view's API shows both pending pods with a nearest miss.
async fn wait_view(shim: &Shim, ns: &str) {
    let bearer = format!("Authorization: Bearer {WEB_TOKEN}");
    let t = Instant::now();
    loop {
        let r = http_with(shim.web, "GET", "/api/v1/pending", &[&bearer], "").await;
        if let Some((200, body)) = &r {
            let v: Value = serde_json::from_str(body).unwrap();
            let misses: Vec<&str> = v["pods"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| {
                    p["pod"]
                        .as_str()
                        .is_some_and(|n| n.starts_with(&format!("{ns}/")))
                })
                .filter_map(|p| p["verdict"]["nearest"]["text"].as_str())
                .collect();
            if misses.contains(&BIG_MISS) && misses.contains(&WIDE_MISS) {
                return;
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the view never showed both nearest misses: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

pub async fn run(h: &H, shim: &Shim) {
    let started = Instant::now();
    let ns = h.namespace("opview", false).await;
    // Node 01: four cards with 8,192 / 12,288 / 2,048 / 10,240 MiB booked; node 03: two cards,
    // 14,336 MiB on the first, the second cordoned; both in pool opview. Node 02 (pool
    // opview-fill) is filled by four pods kube-scheduler binds through the extender.
    let (n1, n2, n3) = ("opview-node-01", "opview-node-02", "opview-node-03");
    h.make_node(n1, "opview", SHAPE, 40).await;
    h.make_node(n2, "opview-fill", SHAPE, 40).await;
    h.make_node(
        n3,
        "opview",
        Shape {
            cards: 2,
            mem: 16384,
        },
        40,
    )
    .await;
    label_node(h, n1, json!({})).await;
    label_node(h, n2, json!({})).await;
    label_node(
        h,
        n3,
        json!({gpusched_hami::DEVICE_CORDON: format!("GPU-{n3}-2")}),
    )
    .await;
    for (i, (node, card, mib)) in [
        (n1, 1, 8192),
        (n1, 2, 12288),
        (n1, 3, 2048),
        (n1, 4, 10240),
        (n3, 1, 14336),
    ]
    .into_iter()
    .enumerate()
    {
        let devices = format!("GPU-{node}-{card},NVIDIA,{mib},10:;");
        h.holder(&ns, &format!("held-{i}"), node, &devices, 1).await;
    }
    for i in 1..=4 {
        let pod = PodSpec::new(format!("fill-{i}"), "opview-fill")
            .limit("nvidia.com/gpu", "1")
            .limit("nvidia.com/gpumem", "12288")
            .limit("nvidia.com/gpucores", "25")
            .build();
        h.create(&ns, &pod).await.unwrap();
    }
    for i in 1..=4 {
        h.wait_bound(&ns, &format!("fill-{i}")).await;
    }
    let big = PodSpec::new("big", "opview")
        .limit("nvidia.com/gpu", "1")
        .limit("nvidia.com/gpumem", "16384")
        .build();
    let wide = PodSpec::new("wide", "opview")
        .limit("nvidia.com/gpu", "3")
        .limit("nvidia.com/gpumem", "8192")
        .build();
    h.create(&ns, &big).await.unwrap();
    h.create(&ns, &wide).await.unwrap();
    h.wait_unschedulable(&ns, "big", "CardInsufficientMemory")
        .await;
    wait_view(shim, &ns).await;

    // Without the token: 401 and nothing of the cluster.
    let wrong = "Authorization: Bearer not-the-token-0123456789".to_owned();
    for (path, headers) in [
        ("/api/v1/top", vec![]),
        ("/api/v1/top", vec![wrong.as_str()]),
        ("/api/v1/why/x/y", vec![]),
        ("/", vec![]),
        ("/", vec!["Cookie: gpusched_web=forged"]),
    ] {
        let (code, body) = http_with(shim.web, "GET", path, &headers, "")
            .await
            .expect("the view answers");
        assert_eq!(code, 401, "GET {path} {headers:?}: {body}");
        assert!(
            !body.contains("GPU-opview"),
            "GET {path} shows cards: {body}"
        );
    }
    let (code, _) = http_with(shim.web, "POST", "/api/v1/what-if", &[], "spec: {}")
        .await
        .unwrap();
    assert_eq!(code, 401);

    // The browser: the login page first, then the page itself.
    let root = format!("http://{}/", shim.web);
    let chromium = h
        .env
        .chromium
        .as_ref()
        .expect("E2E_CHROMIUM (set by deploy/e2e/test.sh)");
    let mut b = Browser::start(chromium, &h.env.workdir.join("chromium")).await;
    b.goto(&format!("{root}?selector={VIEW_LABEL}%3Dyes")).await;
    let before = b
        .eval("[document.querySelectorAll('#login').length, document.querySelectorAll('[data-card]').length]")
        .await;
    assert_eq!(
        before,
        json!([1, 0]),
        "without the token: the login form, no card"
    );
    b.eval(&format!(
        "document.getElementById('token').value = '{WEB_TOKEN}'"
    ))
    .await;
    b.submit("document.getElementById('login').submit()").await;
    // The login redirects to the root: open the scoped page with the session cookie.
    b.goto(&format!("{root}?selector={VIEW_LABEL}%3Dyes")).await;
    let cards = b
        .eval("Array.from(document.querySelectorAll('#grid [data-card]')).map(c => c.dataset.card).sort()")
        .await;
    let mut want: Vec<String> = [(n1, 4), (n2, 4), (n3, 2)]
        .iter()
        .flat_map(|(n, k)| (1..=*k).map(move |i| format!("GPU-{n}-{i}")))
        .collect();
    want.sort();
    assert_eq!(
        cards,
        json!(want),
        "the grid has every card of the scope, once"
    );
    let nearest = |pod: &str| {
        format!(
            "(document.querySelector('[data-pod=\"{ns}/{pod}\"] .nearest') || {{}}).textContent"
        )
    };
    assert_eq!(b.eval(&nearest("big")).await, json!(BIG_MISS));
    assert_eq!(b.eval(&nearest("wide")).await, json!(WIDE_MISS));
    let cell = b
        .eval(&format!(
            "document.querySelector('[data-card=\"GPU-{n2}-1\"]').textContent"
        ))
        .await;
    assert!(
        cell.as_str().is_some_and(|t| t.contains("fill-")),
        "a filled card names the pod holding it: {cell}"
    );
    let cordoned = b
        .eval(&format!(
            "document.querySelector('[data-card=\"GPU-{n3}-2\"]').className"
        ))
        .await;
    assert!(
        cordoned.as_str().is_some_and(|c| c.contains("co")),
        "{cordoned}"
    );
    let timing = b
        .eval(
            "(() => { const n = performance.getEntriesByType('navigation')[0]; \
             return [n.responseEnd - n.requestStart, n.loadEventEnd - n.startTime, n.encodedBodySize, n.decodedBodySize]; })()",
        )
        .await;
    let shot = h.env.workdir.join("operator-view.png");
    let png = b.screenshot(&shot, 2400.0).await;
    // A pod's page, through its link.
    b.submit(&format!(
        "document.querySelector('[data-pod=\"{ns}/wide\"] a').click()"
    ))
    .await;
    let why = b
        .eval("(document.querySelector('#why .nearest') || {}).textContent")
        .await;
    assert_eq!(why, json!(WIDE_MISS), "the pod page says why it waits");
    // What if: a pod pasted into the form, a policy chosen.
    b.goto(&format!("{root}what-if")).await;
    let spec = "apiVersion: v1\nkind: Pod\nmetadata: {name: probe}\nspec:\n  nodeSelector: {gpusched.e2e/pool: opview}\n  containers:\n  - name: main\n    resources:\n      limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 4096}\n";
    b.eval(&format!(
        "document.getElementById('spec').value = {}; document.getElementById('node_policy').value = 'spread'",
        json!(spec)
    ))
    .await;
    b.submit("document.getElementById('whatif').submit()").await;
    let answer = b
        .eval("[(document.getElementById('whatif-result') || {dataset: {}}).dataset.node, (document.getElementById('whatif-result') || {}).textContent]")
        .await;
    assert_eq!(answer[0], json!(n1), "what-if answers: {answer}");
    assert!(
        answer[1]
            .as_str()
            .is_some_and(|t| t.contains("would go to")),
        "{answer}"
    );
    b.close().await;

    // The same cluster in the terminal.
    let sel = format!("{VIEW_LABEL}=yes");
    let (ok, top, err) = ctl(h, shim, &["top", "-l", &sel], true).await;
    assert!(ok, "{err}");
    for c in &want {
        assert!(top.contains(c.as_str()), "top lists {c}: {top}");
    }
    assert!(top.contains("10 cards"), "{top}");
    let (ok, why, err) = ctl(h, shim, &["why", "big", "-n", &ns], true).await;
    assert!(
        ok && why.contains(&format!("nearest miss: {BIG_MISS}")),
        "{why}{err}"
    );
    let (ok, ex, err) = ctl(h, shim, &["explain", &format!("{ns}/fill-1")], true).await;
    assert!(ok && ex.contains(&format!("bound to {n2}")), "{ex}{err}");
    let spec_file = h.env.workdir.join("opview-probe.yaml");
    std::fs::write(&spec_file, spec).unwrap();
    let (ok, wi, err) = ctl(
        h,
        shim,
        &[
            "what-if",
            "-f",
            &spec_file.to_string_lossy(),
            "--node-policy",
            "spread",
        ],
        true,
    )
    .await;
    assert!(ok && wi.contains(&format!("would go to {n1}")), "{wi}{err}");
    let (ok, json_top, err) = ctl(h, shim, &["-o", "json", "top", "-l", &sel], true).await;
    assert!(ok, "{err}");
    let board: Value = serde_json::from_str(&json_top).unwrap();
    assert_eq!(board["totals"]["cards"], json!(10));
    let (ok, out, err) = ctl(h, shim, &["top"], false).await;
    assert!(!ok && out.is_empty(), "without the token: {err}");

    h.result(format!(
        "operator view: Chromium logged in, grid of {} cards, nearest misses \"{BIG_MISS}\" and \
         \"{WIDE_MISS}\", pod page, what-if -> {n1}; kubectl-gpusched top/why/explain/what-if; \
         401 without the token; page {:.0} KiB ({:.0} KiB on the wire), response {:.0} ms, \
         load {:.0} ms; screenshot {} ({} KiB); {:.1}s ✓",
        want.len(),
        timing[3].as_f64().unwrap_or(0.0) / 1024.0,
        timing[2].as_f64().unwrap_or(0.0) / 1024.0,
        timing[0].as_f64().unwrap_or(0.0),
        timing[1].as_f64().unwrap_or(0.0),
        shot.display(),
        png / 1024,
        started.elapsed().as_secs_f64()
    ));
    // The pending pods would keep kube-scheduler busy for the scenarios after this one.
    let pods: Api<Pod> = Api::namespaced(h.client.clone(), &ns);
    let names: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    for n in names {
        let _ = pods
            .delete(&n, &DeleteParams::default().grace_period(0))
            .await;
    }
}
