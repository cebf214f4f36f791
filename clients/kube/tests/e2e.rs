//! End-to-end scenarios on a real control plane (etcd + kube-apiserver + kube-scheduler, no
//! kubelet), run by `deploy/e2e/test.sh`, which builds everything, starts the cluster with the
//! scheduler configuration from deploy/, starts gpusched-server, applies deploy/'s RBAC and
//! webhook configurations and sets the variables read here.
//!
//! The test is `#[ignore]`d in `cargo test --workspace` (it needs the cluster); the script runs
//! it with `--ignored`, and then a missing variable or an unreachable cluster FAILS it.
//!
//! kube-scheduler reaches "the Service" of gpusched-kube through a small TCP proxy run here (the
//! stand-in for kube-proxy): it forwards to the replica whose `/readyz` says ready (the leader),
//! and drops connections to a replica that stops being ready.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use gpusched_client::v1;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

const SCHEDULER: &str = "gpusched-scheduler";
const POOL: &str = "gpusched.e2e/pool";
const LEASE_NS: &str = "gpusched-system";
const LEASE: &str = "gpusched-kube";
const ALLOCATED: &str = "hami.io/vgpu-devices-allocated";

// ---------------------------------------------------------------------------------------------
// Environment

struct Env {
    workdir: PathBuf,
    shim_bin: PathBuf,
    shim_kubeconfig: PathBuf,
    service_addr: String,
    ext_port: u16,
    wh_port: u16,
    cert: PathBuf,
    key: PathBuf,
    webhooks_file: PathBuf,
    kubectl: PathBuf,
    kube_bin: PathBuf,
    scheduler_kubeconfig: PathBuf,
    results: PathBuf,
    filter: Vec<String>,
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("GPUSCHED_E2E is set but {name} is not: run deploy/e2e/test.sh, which sets it")
    })
}

impl Env {
    fn from_env() -> Option<Env> {
        std::env::var("GPUSCHED_E2E")
            .ok()
            .filter(|v| !v.is_empty() && v != "0")?;
        var("KUBECONFIG");
        Some(Env {
            workdir: var("E2E_WORKDIR").into(),
            shim_bin: var("E2E_SHIM_BIN").into(),
            shim_kubeconfig: var("E2E_SHIM_KUBECONFIG").into(),
            service_addr: var("E2E_SERVICE_ADDR"),
            ext_port: var("E2E_EXTENDER_PROXY_PORT").parse().expect("port"),
            wh_port: var("E2E_WEBHOOK_PROXY_PORT").parse().expect("port"),
            cert: var("E2E_WEBHOOK_CERT").into(),
            key: var("E2E_WEBHOOK_KEY").into(),
            webhooks_file: var("E2E_WEBHOOKS_FILE").into(),
            kubectl: var("KUBECTL").into(),
            kube_bin: var("KUBE_BIN").into(),
            scheduler_kubeconfig: var("E2E_SCHEDULER_KUBECONFIG").into(),
            results: var("E2E_RESULTS").into(),
            filter: std::env::var("E2E_FILTER")
                .unwrap_or_default()
                .split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
        })
    }

    fn wants(&self, scenario: &str) -> bool {
        self.filter.is_empty() || self.filter.iter().any(|f| scenario.contains(f.as_str()))
    }
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP (the shims' plain-HTTP endpoints)

async fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let fut = async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|b| b.1.to_owned())
            .unwrap_or_default();
        Some((code, body))
    };
    tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .ok()
        .flatten()
}

async fn is_ready(ext: SocketAddr) -> bool {
    matches!(http(ext, "GET", "/readyz", "").await, Some((200, _)))
}

async fn metric(ext: SocketAddr, name: &str) -> u64 {
    let (_, body) = http(ext, "GET", "/metrics", "").await.expect("metrics");
    body.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("metric {name} missing"))
}

// ---------------------------------------------------------------------------------------------
// The Service stand-in

#[derive(Clone)]
struct Backend {
    name: String,
    ext: SocketAddr,
    webhook: SocketAddr,
    ready: Arc<AtomicBool>,
    down: watch::Sender<u64>,
}

#[derive(Clone, Default)]
struct Proxy {
    backends: Arc<Mutex<Vec<Backend>>>,
}

impl Proxy {
    async fn start(ext_port: u16, wh_port: u16) -> Proxy {
        let p = Proxy::default();
        for (port, webhook) in [(ext_port, false), (wh_port, true)] {
            let l = TcpListener::bind(("127.0.0.1", port))
                .await
                .unwrap_or_else(|e| panic!("proxy cannot bind 127.0.0.1:{port}: {e}"));
            let p2 = p.clone();
            tokio::spawn(async move {
                while let Ok((conn, _)) = l.accept().await {
                    let p3 = p2.clone();
                    tokio::spawn(async move { p3.forward(conn, webhook).await });
                }
            });
        }
        let p2 = p.clone();
        tokio::spawn(async move {
            loop {
                let list: Vec<Backend> = p2.backends.lock().unwrap().clone();
                for b in list {
                    let ready = is_ready(b.ext).await;
                    let was = b.ready.swap(ready, Ordering::SeqCst);
                    if was && !ready {
                        b.down.send_modify(|v| *v += 1);
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        p
    }

    fn add(&self, s: &Shim) {
        let (down, _) = watch::channel(0);
        self.backends.lock().unwrap().push(Backend {
            name: s.identity.clone(),
            ext: s.ext,
            webhook: s.webhook,
            ready: Arc::new(AtomicBool::new(false)),
            down,
        });
    }

    fn remove(&self, identity: &str) {
        let mut l = self.backends.lock().unwrap();
        for b in l.iter().filter(|b| b.name == identity) {
            b.down.send_modify(|v| *v += 1);
        }
        l.retain(|b| b.name != identity);
    }

    async fn forward(&self, mut conn: TcpStream, webhook: bool) {
        let deadline = Instant::now() + Duration::from_secs(3);
        let backend = loop {
            let b = self
                .backends
                .lock()
                .unwrap()
                .iter()
                .find(|b| b.ready.load(Ordering::SeqCst))
                .cloned();
            match b {
                Some(b) => break b,
                None if Instant::now() > deadline => return,
                None => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let target = if webhook {
            backend.webhook
        } else {
            backend.ext
        };
        let Ok(mut up) = TcpStream::connect(target).await else {
            return;
        };
        let _ = conn.set_nodelay(true);
        let _ = up.set_nodelay(true);
        let mut down = backend.down.subscribe();
        tokio::select! {
            _ = tokio::io::copy_bidirectional(&mut conn, &mut up) => {}
            _ = down.changed() => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// gpusched-kube processes

struct Shim {
    identity: String,
    child: tokio::process::Child,
    ext: SocketAddr,
    webhook: SocketAddr,
    log: PathBuf,
}

impl Shim {
    async fn start(env: &Env, identity: &str) -> Shim {
        let log = env.workdir.join(format!("shim-{identity}.log"));
        let logf = std::fs::File::create(&log).unwrap();
        let mut child = tokio::process::Command::new(&env.shim_bin)
            .args(["--kubeconfig"])
            .arg(&env.shim_kubeconfig)
            .args(["--service-addr", &env.service_addr])
            .args([
                "--extender-listen",
                "127.0.0.1:0",
                "--webhook-listen",
                "127.0.0.1:0",
            ])
            .arg("--webhook-cert")
            .arg(&env.cert)
            .arg("--webhook-key")
            .arg(&env.key)
            .args([
                "--identity",
                identity,
                "--lease-namespace",
                LEASE_NS,
                "--lease-name",
                LEASE,
            ])
            .args([
                "--log-level",
                &std::env::var("E2E_SHIM_LOG").unwrap_or_else(|_| "info".into()),
            ])
            .env("GPUSCHED_KUBE_LEADER_ELECTION__LEASE_DURATION", "4s")
            .env("GPUSCHED_KUBE_LEADER_ELECTION__RENEW_DEADLINE", "3s")
            .env("GPUSCHED_KUBE_LEADER_ELECTION__RETRY_PERIOD", "500ms")
            .env_remove("KUBECONFIG")
            .stdout(std::process::Stdio::piped())
            .stderr(logf)
            .kill_on_drop(true)
            .spawn()
            .expect("start gpusched-kube");
        let stdout = child.stdout.take().unwrap();
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "gpusched-kube {identity} printed nothing; see {}",
                    log.display()
                )
            })
            .unwrap()
            .unwrap_or_else(|| {
                panic!(
                    "gpusched-kube {identity} exited: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
        let field = |k: &str| -> SocketAddr {
            first
                .split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{k}=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {k}= in {first:?}"))
        };
        let (ext, webhook) = (field("extender"), field("webhook"));
        Shim {
            identity: identity.to_owned(),
            child,
            ext,
            webhook,
            log,
        }
    }

    async fn wait_ready(&self, within: Duration) -> Duration {
        let t = Instant::now();
        while t.elapsed() < within {
            if is_ready(self.ext).await {
                return t.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "gpusched-kube {} not ready after {within:?}; log:\n{}",
            self.identity,
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    async fn kill9(&mut self) {
        self.child.start_kill().unwrap();
        let _ = self.child.wait().await;
    }

    async fn terminate(&mut self) {
        let pid = self.child.id().expect("running");
        let ok = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -TERM {pid}");
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("gpusched-kube did not stop after SIGTERM")
            .unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// Cluster helpers

struct H {
    env: Env,
    client: Client,
    proxy: Proxy,
    results: Mutex<Vec<String>>,
    run_id: String,
}

#[derive(Clone, Copy)]
struct Shape {
    cards: u32,
    mem: u64,
}

fn cards_of(node: &str, shape: Shape) -> Vec<v1::Card> {
    (0..shape.cards)
        .map(|i| v1::Card {
            id: format!("GPU-{node}-{}", i + 1),
            index: i,
            r#type: "NVIDIA-A100-SXM4-40GB".into(),
            slots: 10,
            total_mem_mib: shape.mem,
            total_cores: 100,
            numa: 0,
            health: v1::CardHealth::Healthy as i32,
            mode: v1::CardMode::HamiCore as i32,
            usage: None,
        })
        .collect()
}

fn allocated(p: &Pod) -> Option<Vec<Vec<gpusched_hami::Booking>>> {
    let a = p.metadata.annotations.as_ref()?.get(ALLOCATED)?;
    Some(gpusched_hami::decode_pod_devices(a).expect("readable -allocated annotation"))
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref().and_then(|s| s.node_name.clone())
}

fn first_card(p: &Pod) -> String {
    allocated(p)
        .and_then(|c| c.into_iter().flatten().next())
        .map(|b| b.uuid)
        .unwrap_or_else(|| panic!("pod {:?} has no card", p.metadata.name))
}

fn unschedulable_message(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .and_then(|c| c.message.clone())
        .filter(|m| !m.is_empty())
}

struct PodSpec<'a> {
    name: String,
    pool: &'a str,
    annotations: Vec<(&'a str, String)>,
    limits: Vec<(&'a str, String)>,
    scheduler: Option<&'a str>,
    labels: Vec<(&'a str, &'a str)>,
}

impl<'a> PodSpec<'a> {
    fn new(name: impl Into<String>, pool: &'a str) -> Self {
        PodSpec {
            name: name.into(),
            pool,
            annotations: vec![],
            limits: vec![],
            scheduler: None,
            labels: vec![],
        }
    }
    fn ann(mut self, k: &'a str, v: impl Into<String>) -> Self {
        self.annotations.push((k, v.into()));
        self
    }
    fn limit(mut self, k: &'a str, v: impl Into<String>) -> Self {
        self.limits.push((k, v.into()));
        self
    }
    fn scheduler(mut self, s: &'a str) -> Self {
        self.scheduler = Some(s);
        self
    }
    fn build(&self) -> Pod {
        let ann: BTreeMap<&str, &str> = self
            .annotations
            .iter()
            .map(|(k, v)| (*k, v.as_str()))
            .collect();
        let lim: BTreeMap<&str, &str> = self.limits.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let labels: BTreeMap<&str, &str> = self.labels.iter().copied().collect();
        let mut spec = json!({
            "nodeSelector": {POOL: self.pool},
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": lim}}]
        });
        if let Some(s) = self.scheduler {
            spec["schedulerName"] = json!(s);
        }
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.name, "annotations": ann, "labels": labels},
            "spec": spec
        }))
        .unwrap()
    }
}

impl H {
    fn say(&self, line: impl Into<String>) {
        let line = line.into();
        eprintln!("[e2e] {line}");
    }

    fn result(&self, line: impl Into<String>) {
        let line = line.into();
        eprintln!("[e2e] RESULT {line}");
        self.results.lock().unwrap().push(line);
    }

    async fn namespace(&self, name: &str, ignore_webhook: bool) -> String {
        let ns = format!("{name}-{}", self.run_id);
        let mut labels = BTreeMap::new();
        if ignore_webhook {
            labels.insert("hami.io/webhook", "ignore");
        }
        let obj: Namespace =
            serde_json::from_value(json!({"metadata": {"name": ns, "labels": labels}})).unwrap();
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
        ns
    }

    async fn make_node(
        &self,
        name: &str,
        pool: &str,
        shape: Shape,
        gpu_allocatable: u32,
    ) -> Vec<v1::Card> {
        let cards = cards_of(name, shape);
        let api: Api<Node> = Api::all(self.client.clone());
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name,
                "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", POOL: pool,
                           "gpusched.e2e/fake-node": "true"},
                // As our node agent writes it (gpusched-hami's encoder, HAMi's JSON form).
                "annotations": {gpusched_hami::NODE_REGISTER: gpusched_hami::encode_register(&cards)}},
            "spec": {}
        }))
        .unwrap();
        api.create(&PostParams::default(), &node).await.unwrap();
        let res = json!({"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": gpu_allocatable.to_string()});
        let status = json!({"status": {"capacity": res, "allocatable": res,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake node (gpusched e2e)"}]}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .unwrap();
        // TaintNodesByCondition added node.kubernetes.io/not-ready at create; no controller removes it.
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"taints": null}})),
        )
        .await
        .unwrap();
        cards
    }

    async fn make_nodes(
        &self,
        prefix: &str,
        pool: &str,
        n: usize,
        shape: Shape,
        gpu_alloc: u32,
    ) -> HashMap<String, Vec<v1::Card>> {
        let names: Vec<String> = (1..=n).map(|i| format!("{prefix}-{i:02}")).collect();
        let made: Vec<(String, Vec<v1::Card>)> = futures::stream::iter(names)
            .map(|name| async move {
                let cards = self.make_node(&name, pool, shape, gpu_alloc).await;
                (name, cards)
            })
            .buffer_unordered(8)
            .collect()
            .await;
        made.into_iter().collect()
    }

    async fn create(&self, ns: &str, pod: &Pod) -> Result<Pod, kube::Error> {
        Api::<Pod>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), pod)
            .await
    }

    /// A pod already bound to `node` and holding `devices` (as if scheduled earlier).
    async fn holder(&self, ns: &str, name: &str, node: &str, devices: &str, containers: usize) {
        let cs: Vec<serde_json::Value> = (0..containers)
            .map(|i| {
                json!({"name": format!("c{i}"), "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}})
            })
            .collect();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {ALLOCATED: devices, gpusched_hami::VGPU_NODE: node}},
            "spec": {"schedulerName": SCHEDULER, "nodeName": node, "containers": cs,
                     "terminationGracePeriodSeconds": 0}
        }))
        .unwrap();
        self.create(ns, &pod).await.unwrap();
    }

    async fn pod(&self, ns: &str, name: &str) -> Pod {
        Api::<Pod>::namespaced(self.client.clone(), ns)
            .get(name)
            .await
            .unwrap()
    }

    async fn events(&self, ns: &str, name: &str) -> Vec<String> {
        let lp = ListParams::default().fields(&format!("involvedObject.name={name}"));
        Api::<Event>::namespaced(self.client.clone(), ns)
            .list(&lp)
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .map(|e| {
                        format!(
                            "{}: {}",
                            e.reason.unwrap_or_default(),
                            e.message.unwrap_or_default()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    async fn wait_bound(&self, ns: &str, name: &str) -> Pod {
        let t = Instant::now();
        loop {
            let p = self.pod(ns, name).await;
            if node_of(&p).is_some() {
                return p;
            }
            if t.elapsed() > Duration::from_secs(60) {
                panic!(
                    "pod {ns}/{name} not bound after 60s: {:?}; events: {:?}",
                    unschedulable_message(&p),
                    self.events(ns, name).await
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_unschedulable(&self, ns: &str, name: &str, needle: &str) -> String {
        let t = Instant::now();
        loop {
            let p = self.pod(ns, name).await;
            assert!(
                node_of(&p).is_none(),
                "pod {ns}/{name} was bound to {:?}",
                node_of(&p)
            );
            if let Some(m) = unschedulable_message(&p).filter(|m| m.contains(needle)) {
                return m;
            }
            if t.elapsed() > Duration::from_secs(60) {
                panic!(
                    "pod {ns}/{name}: no PodScheduled=False condition naming {needle:?} after 60s: {:?}; events {:?}",
                    unschedulable_message(&p),
                    self.events(ns, name).await
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> (bool, String) {
        let mut cmd = tokio::process::Command::new(&self.env.kubectl);
        cmd.args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        if let Some(s) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(s.as_bytes())
                .await
                .unwrap();
        } else {
            drop(child.stdin.take());
        }
        let out = child.wait_with_output().await.unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }

    async fn lease_holder(&self) -> String {
        Api::<Lease>::namespaced(self.client.clone(), LEASE_NS)
            .get(LEASE)
            .await
            .ok()
            .and_then(|l| l.spec?.holder_identity)
            .unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------------------------
// Checks shared by the bursts

/// Sums the written `-allocated` annotations of every pod bound to these nodes and checks that no
/// card is booked beyond its slots, memory or cores; every GPU booking names a card of its node;
/// no pod carries a decision without being bound. Returns (pods bound, cards used).
async fn check_no_overbooking(
    h: &H,
    nodes: &HashMap<String, Vec<v1::Card>>,
    gpu_pods_ns: &str,
) -> (usize, usize) {
    let all = Api::<Pod>::all(h.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    let mut used: HashMap<(String, String), (u32, u64, u32)> = HashMap::new();
    let mut bound = 0;
    for p in &all.items {
        let node = node_of(p);
        let ann = allocated(p);
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        if ns == gpu_pods_ns {
            match (&node, &ann) {
                (Some(_), None) => panic!("pod {:?} bound without a GPU decision", p.metadata.name),
                (None, Some(_)) => panic!(
                    "pod {:?} carries a decision but is not bound",
                    p.metadata.name
                ),
                _ => {}
            }
        }
        let (Some(node), Some(ann)) = (node, ann) else {
            continue;
        };
        if !nodes.contains_key(&node) {
            continue;
        }
        if ns == gpu_pods_ns {
            bound += 1;
            assert_eq!(
                p.metadata
                    .annotations
                    .as_ref()
                    .unwrap()
                    .get(gpusched_hami::VGPU_NODE),
                Some(&node),
                "hami.io/vgpu-node"
            );
        }
        for b in ann.into_iter().flatten() {
            assert!(
                nodes[&node].iter().any(|c| c.id == b.uuid),
                "pod {:?} booked card {} which is not on node {node}",
                p.metadata.name,
                b.uuid
            );
            let e = used.entry((node.clone(), b.uuid)).or_default();
            e.0 += 1;
            e.1 += b.mem_mib;
            e.2 += b.cores;
        }
    }
    for ((node, card), (slots, mem, cores)) in &used {
        let c = nodes[node].iter().find(|c| &c.id == card).unwrap();
        assert!(
            *slots <= c.slots && *mem <= c.total_mem_mib && *cores <= c.total_cores,
            "OVER-BOOKED {node}/{card}: slots {slots}/{}, mem {mem}/{}, cores {cores}/{}",
            c.slots,
            c.total_mem_mib,
            c.total_cores
        );
    }
    (bound, used.len())
}

struct BurstStats {
    bound: usize,
    pending: usize,
    create_s: f64,
    last_bound_s: f64,
    rate: f64,
}

/// Creates `pods` at once (32 in flight) and watches until every pod is bound or pending with a
/// reason and nothing changed for `settle`. `at_bound` runs once when that many pods are bound.
async fn burst<'a, F, Fut>(
    h: &'a H,
    ns: &str,
    pods: Vec<Pod>,
    settle: Duration,
    at_bound: Option<(usize, F)>,
) -> BurstStats
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()> + 'a,
{
    let n = pods.len();
    let api: Api<Pod> = Api::namespaced(h.client.clone(), ns);
    let t0 = Instant::now();
    let created: Vec<Result<Pod, kube::Error>> = futures::stream::iter(pods)
        .map(|p| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &p).await }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    for r in &created {
        if let Err(e) = r {
            panic!("creating a burst pod failed: {e}");
        }
    }
    let create_s = t0.elapsed().as_secs_f64();
    let mut bound_at: HashMap<String, f64> = HashMap::new();
    let mut hook = at_bound;
    let mut last_change = Instant::now();
    let mut last_state = (0usize, 0usize);
    loop {
        let list = api.list(&ListParams::default()).await.unwrap();
        let now = t0.elapsed().as_secs_f64();
        let mut pending_with_reason = 0;
        for p in &list.items {
            let name = p.metadata.name.clone().unwrap_or_default();
            if node_of(p).is_some() {
                bound_at.entry(name).or_insert(now);
            } else if unschedulable_message(p).is_some() {
                pending_with_reason += 1;
            }
        }
        let bound = bound_at.len();
        if let Some((threshold, _)) = &hook
            && bound >= *threshold
        {
            let (_, f) = hook.take().unwrap();
            f().await;
            last_change = Instant::now();
        }
        if (bound, pending_with_reason) != last_state {
            last_state = (bound, pending_with_reason);
            last_change = Instant::now();
        }
        if bound + pending_with_reason == n && last_change.elapsed() >= settle {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(240),
            "burst in {ns} did not settle: {bound} bound, {pending_with_reason} pending with a reason, of {n}"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let last_bound_s = bound_at.values().copied().fold(0.0, f64::max);
    let bound = bound_at.len();
    BurstStats {
        bound,
        pending: n - bound,
        create_s,
        last_bound_s,
        rate: if last_bound_s > 0.0 {
            bound as f64 / last_bound_s
        } else {
            0.0
        },
    }
}

/// The burst's pods: 70% one card, 30% two cards; 4096 MiB and 30% cores per card.
fn burst_pods(pool: &str, scheduler: &str, n: usize, extended_only: bool) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let gpus = if i % 10 < 7 { "1" } else { "2" };
            let mut s = PodSpec::new(format!("b{i:03}"), pool)
                .scheduler(scheduler)
                .limit("nvidia.com/gpu", gpus);
            if !extended_only {
                s = s
                    .limit("nvidia.com/gpumem", "4096")
                    .limit("nvidia.com/gpucores", "30");
            }
            s.build()
        })
        .collect()
}

const BURST_NODES: usize = 20;
const BURST_PODS: usize = 200;
const BURST_SHAPE: Shape = Shape {
    cards: 4,
    mem: 16384,
};

// ---------------------------------------------------------------------------------------------
// Scenarios

async fn seed_node_policies(h: &H) {
    for (story, policy) in [(1, "binpack"), (2, "spread")] {
        let pool = format!("seed{story}");
        let ns = h.namespace(&pool, false).await;
        h.make_node(
            &format!("{pool}-node1"),
            &pool,
            Shape {
                cards: 4,
                mem: 16384,
            },
            4,
        )
        .await;
        h.make_node(
            &format!("{pool}-node2"),
            &pool,
            Shape {
                cards: 4,
                mem: 16384,
            },
            4,
        )
        .await;
        let mut got = vec![];
        for i in 1..=2 {
            // No schedulerName: the mutating webhook sets it.
            let pod = PodSpec::new(format!("pod{i}"), &pool)
                .ann("hami.io/node-scheduler-policy", policy)
                .limit("nvidia.com/gpu", "1")
                .build();
            h.create(&ns, &pod).await.unwrap();
            let p = h.wait_bound(&ns, &format!("pod{i}")).await;
            assert_eq!(
                p.spec.as_ref().unwrap().scheduler_name.as_deref(),
                Some(SCHEDULER),
                "mutating webhook sets schedulerName"
            );
            got.push(node_of(&p).unwrap());
        }
        let want = if policy == "binpack" {
            vec![format!("{pool}-node1"), format!("{pool}-node1")]
        } else {
            vec![format!("{pool}-node1"), format!("{pool}-node2")]
        };
        assert_eq!(got, want, "story {story} (node {policy})");
        h.result(format!(
            "seed story {story} (node {policy}): pod1 -> {}, pod2 -> {} ✓",
            got[0], got[1]
        ));
    }
}

async fn seed_gpu_policies(h: &H) {
    for (story, policy) in [(3, "binpack"), (4, "spread")] {
        let pool = format!("seed{story}");
        let ns = h.namespace(&pool, false).await;
        let node = format!("{pool}-node1");
        h.make_node(
            &node,
            &pool,
            Shape {
                cards: 4,
                mem: 16384,
            },
            4,
        )
        .await;
        let mut got = vec![];
        for i in 1..=2 {
            let pod = PodSpec::new(format!("pod{i}"), &pool)
                .ann("hami.io/gpu-scheduler-policy", policy)
                .limit("nvidia.com/gpu", "1")
                .limit("nvidia.com/gpucores", "20")
                .limit("nvidia.com/gpumem-percentage", "20")
                .build();
            h.create(&ns, &pod).await.unwrap();
            let p = h.wait_bound(&ns, &format!("pod{i}")).await;
            assert_eq!(node_of(&p).unwrap(), node);
            let ann = p.metadata.annotations.clone().unwrap();
            assert_eq!(
                ann.get("hami.io/bind-phase").map(String::as_str),
                Some("allocating")
            );
            assert_eq!(
                ann.get(gpusched_hami::DEVICES_TO_ALLOCATE),
                ann.get(ALLOCATED)
            );
            assert!(ann.contains_key("hami.io/vgpu-time") && ann.contains_key("hami.io/bind-time"));
            assert_eq!(
                p.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(gpusched_hami::VGPU_NODE)),
                Some(&node),
                "hami.io/vgpu-node label"
            );
            // 20% of 16384 MiB, 20 cores, as HAMi writes it.
            let card = first_card(&p);
            assert_eq!(ann[ALLOCATED], format!("{card},NVIDIA,3276,20:;"));
            got.push(card);
        }
        let want = if policy == "binpack" {
            vec![format!("GPU-{node}-1"), format!("GPU-{node}-1")]
        } else {
            vec![format!("GPU-{node}-1"), format!("GPU-{node}-2")]
        };
        assert_eq!(got, want, "story {story} (GPU {policy})");
        h.result(format!(
            "seed story {story} (GPU {policy}): pod1 -> {}, pod2 -> {} ✓",
            got[0], got[1]
        ));
    }
}

async fn weights(h: &H) {
    // The seed's example: after the request (1 card, 40% memory), GPU A is at slot 0.2 / core 0.9
    // / memory 0.5 and GPU B at 0.8 / 0.1 / 0.6. Default weights: A 16 > B 15; slot=1,core=1,memory=3:
    // A 26 < B 27. Under binpack the higher score wins.
    for (case, weights, want) in [
        ("default", None, 1),
        ("memory3", Some("slot=1,core=1,memory=3"), 2),
    ] {
        let pool = format!("weights-{case}");
        let ns = h.namespace(&pool, false).await;
        let node = format!("{pool}-node1");
        h.make_node(
            &node,
            &pool,
            Shape {
                cards: 2,
                mem: 10000,
            },
            2,
        )
        .await;
        let (a, b) = (format!("GPU-{node}-1"), format!("GPU-{node}-2"));
        h.holder(&ns, "uses-a", &node, &format!("{a},NVIDIA,1000,90:;"), 1)
            .await;
        let mut b_dev = format!("{b},NVIDIA,2000,10:;");
        for _ in 1..7 {
            b_dev.push_str(&format!("{b},NVIDIA,0,0:;"));
        }
        h.holder(&ns, "uses-b", &node, &b_dev, 7).await;
        tokio::time::sleep(Duration::from_millis(1500)).await; // informer catches up
        let mut spec = PodSpec::new("weighted", &pool)
            .ann("hami.io/gpu-scheduler-policy", "binpack")
            .limit("nvidia.com/gpu", "1")
            .limit("nvidia.com/gpumem-percentage", "40");
        if let Some(w) = weights {
            spec = spec.ann("hami.io/device-scoring-weights", w);
        }
        h.create(&ns, &spec.build()).await.unwrap();
        let p = h.wait_bound(&ns, "weighted").await;
        let card = first_card(&p);
        let expected = if want == 1 { &a } else { &b };
        assert_eq!(&card, expected, "weights {weights:?}");
        h.result(format!(
            "device-scoring-weights {}: binpack chose {} ✓",
            weights.unwrap_or("absent (1,1,1)"),
            if want == 1 {
                "GPU A (16 vs 15)"
            } else {
                "GPU B (27 vs 26)"
            }
        ));
    }
}

async fn mutex(h: &H) {
    let pool = "mutex";
    let ns = h.namespace(pool, false).await;
    let node = "mutex-node1";
    h.make_node(
        node,
        pool,
        Shape {
            cards: 2,
            mem: 16384,
        },
        2,
    )
    .await;
    h.holder(
        &ns,
        "busy",
        node,
        &format!("GPU-{node}-1,NVIDIA,1000,10:;"),
        1,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let spec = |n: &str| {
        PodSpec::new(n, pool)
            .ann("hami.io/gpu-scheduler-policy", "mutex")
            .limit("nvidia.com/gpu", "1")
            .limit("nvidia.com/gpumem", "1000")
            .build()
    };
    h.create(&ns, &spec("m1")).await.unwrap();
    let p = h.wait_bound(&ns, "m1").await;
    assert_eq!(
        first_card(&p),
        format!("GPU-{node}-2"),
        "mutex takes the idle card"
    );
    h.create(&ns, &spec("m2")).await.unwrap();
    let msg = h
        .wait_unschedulable(&ns, "m2", "ExclusiveDeviceAllocateConflict")
        .await;
    h.result(format!(
        "mutex: m1 -> GPU-{node}-2 (idle card); m2 pending: {msg} ✓"
    ));
}

async fn admission(h: &H) {
    let pool = "admission";
    let ns = h.namespace(pool, false).await;
    h.make_node(
        "admission-node1",
        pool,
        Shape {
            cards: 2,
            mem: 16384,
        },
        2,
    )
    .await;
    let bad_weights = |name: &str| {
        PodSpec::new(name, pool)
            .ann("hami.io/device-scoring-weights", "slot=1,core=1")
            .limit("nvidia.com/gpu", "1")
            .build()
    };
    // kubectl shows the webhook's denial naming the key.
    let yaml = serde_json::to_string(&bad_weights("bad-weights")).unwrap();
    let (ok, out) = h
        .kubectl(&["-n", &ns, "create", "-f", "-"], Some(&yaml))
        .await;
    assert!(!ok, "kubectl create of an invalid pod succeeded: {out}");
    assert!(
        out.contains("denied the request") && out.contains("hami.io/device-scoring-weights"),
        "kubectl error does not name the key: {out}"
    );
    h.result(format!(
        "admission: kubectl create (bad weights) -> {}",
        out.trim()
    ));
    // Other keys and resource values.
    for (name, key, pod) in [
        (
            "bad-numa",
            "nvidia.com/numa-bind",
            PodSpec::new("bad-numa", pool)
                .ann("nvidia.com/numa-bind", "maybe")
                .limit("nvidia.com/gpu", "1")
                .build(),
        ),
        (
            "bad-policy",
            "hami.io/gpu-scheduler-policy",
            PodSpec::new("bad-policy", pool)
                .ann("hami.io/gpu-scheduler-policy", "Spread")
                .limit("nvidia.com/gpu", "1")
                .build(),
        ),
        (
            "bad-pct",
            "nvidia.com/gpumem-percentage",
            PodSpec::new("bad-pct", pool)
                .limit("nvidia.com/gpu", "1")
                .limit("nvidia.com/gpumem-percentage", "150")
                .build(),
        ),
    ] {
        match h.create(&ns, &pod).await {
            Err(kube::Error::Api(e)) => {
                assert!(
                    e.message.contains(key),
                    "{name}: denial does not name {key}: {}",
                    e.message
                );
            }
            other => panic!("{name}: expected a denial, got {other:?}"),
        }
    }
    h.result("admission: invalid numa-bind, gpu policy and gpumem-percentage denied, each naming its key ✓");
    // Labelled namespaces are skipped: no validation, no schedulerName.
    let ign = h.namespace("admission-ignored", true).await;
    let p = h
        .create(&ign, &bad_weights("skipped"))
        .await
        .expect("ignored namespace is not validated");
    assert_eq!(
        p.spec.unwrap().scheduler_name.as_deref(),
        Some("default-scheduler")
    );
    Api::<Pod>::namespaced(h.client.clone(), &ign)
        .delete(
            "skipped",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();

    // Without the validating webhook, the extender rejects the pod with the same message.
    Api::<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration>::all(
        h.client.clone(),
    )
    .delete("gpusched-kube", &DeleteParams::default())
    .await
    .unwrap();
    let t = Instant::now();
    loop {
        match h.create(&ns, &bad_weights("unvalidated")).await {
            Ok(_) => break,
            Err(_) if t.elapsed() < Duration::from_secs(20) => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            Err(e) => {
                panic!("pod still denied 20s after the webhook configuration was removed: {e}")
            }
        }
    }
    let msg = h
        .wait_unschedulable(&ns, "unvalidated", "hami.io/device-scoring-weights")
        .await;
    let t = Instant::now();
    let events = loop {
        let ev = h.events(&ns, "unvalidated").await;
        if ev
            .iter()
            .any(|e| e.contains("hami.io/device-scoring-weights"))
            || t.elapsed() > Duration::from_secs(20)
        {
            break ev;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let ev = events
        .iter()
        .find(|e| e.contains("hami.io/device-scoring-weights"))
        .unwrap_or_else(|| panic!("no event names the key: {events:?}"));
    h.result(format!("webhook removed: pod pending, condition: {msg}"));
    h.result(format!("webhook removed: event {ev}"));
    // Restore the webhook (as deploy/ has it) and wait until it denies again.
    let (ok, out) = h
        .kubectl(
            &["apply", "-f", h.env.webhooks_file.to_str().unwrap()],
            None,
        )
        .await;
    assert!(ok, "re-applying the webhook configuration: {out}");
    let t = Instant::now();
    while h
        .create(
            &ns,
            &bad_weights(&format!("again-{}", t.elapsed().as_millis())),
        )
        .await
        .is_ok()
    {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "webhook not active again"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

async fn clean_burst(h: &H) -> BurstStats {
    let pool = "burst";
    let ns = h.namespace(pool, false).await;
    let nodes = h
        .make_nodes("burst", pool, BURST_NODES, BURST_SHAPE, 40)
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let s = burst(
        h,
        &ns,
        burst_pods(pool, SCHEDULER, BURST_PODS, false),
        Duration::from_secs(6),
        None::<(usize, fn() -> std::future::Ready<()>)>,
    )
    .await;
    let (bound, cards) = check_no_overbooking(h, &nodes, &ns).await;
    assert_eq!(bound, s.bound);
    assert!(
        s.bound >= 150,
        "only {} of {BURST_PODS} pods bound",
        s.bound
    );
    h.result(format!(
        "burst with the extender: {BURST_PODS} pods onto {BURST_NODES} nodes ({} cards): {} bound, {} pending with a reason; \
         created in {:.1}s, last bound at {:.1}s: {:.1} pods/s; no card over-booked ({cards} cards used)",
        BURST_NODES * 4, s.bound, s.pending, s.create_s, s.last_bound_s, s.rate
    ));
    s
}

async fn baseline_burst(h: &H) -> BurstStats {
    // Plain kube-scheduler, GPUs as an extended resource (12 per node: the same 3 pods per card).
    let pool = "base";
    let ns = h.namespace(pool, true).await;
    let _nodes = h
        .make_nodes("base", pool, BURST_NODES, BURST_SHAPE, 12)
        .await;
    let cfg = h.env.workdir.join("baseline-scheduler.yaml");
    std::fs::write(
        &cfg,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: \"{}\"\nleaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: default-scheduler\n",
            h.env.scheduler_kubeconfig.display()
        ),
    )
    .unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let log = std::fs::File::create(h.env.workdir.join("baseline-scheduler.log")).unwrap();
    let mut sched = tokio::process::Command::new(h.env.kube_bin.join("kube-scheduler"))
        .arg(format!("--config={}", cfg.display()))
        .args(["--leader-elect=false", "--bind-address=127.0.0.1"])
        .arg(format!("--secure-port={port}"))
        .arg(format!(
            "--cert-dir={}",
            h.env.workdir.join("baseline-certs").display()
        ))
        .arg(format!(
            "--authentication-kubeconfig={}",
            h.env.scheduler_kubeconfig.display()
        ))
        .arg(format!(
            "--authorization-kubeconfig={}",
            h.env.scheduler_kubeconfig.display()
        ))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let t = Instant::now();
    loop {
        let out = tokio::process::Command::new("curl")
            .args([
                "-sk",
                "--max-time",
                "2",
                &format!("https://127.0.0.1:{port}/readyz"),
            ])
            .output()
            .await
            .unwrap();
        if String::from_utf8_lossy(&out.stdout) == "ok" {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "baseline kube-scheduler not ready"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let s = burst(
        h,
        &ns,
        burst_pods(pool, "default-scheduler", BURST_PODS, true),
        Duration::from_secs(6),
        None::<(usize, fn() -> std::future::Ready<()>)>,
    )
    .await;
    sched.start_kill().unwrap();
    let _ = sched.wait().await;
    h.result(format!(
        "baseline without the extender (plain kube-scheduler, nvidia.com/gpu: 12 per node): {} bound, {} pending; \
         created in {:.1}s, last bound at {:.1}s: {:.1} pods/s",
        s.bound, s.pending, s.create_s, s.last_bound_s, s.rate
    ));
    s
}

async fn restart_burst(h: &H, shim: &mut Shim, identity: &str) {
    let pool = "restart";
    let ns = h.namespace(pool, false).await;
    let nodes = h
        .make_nodes("restart", pool, BURST_NODES, BURST_SHAPE, 40)
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let killed_at = Arc::new(Mutex::new(None::<(Instant, Duration)>));
    let k2 = killed_at.clone();
    let old_identity = shim.identity.clone();
    let new_shim: Arc<tokio::sync::Mutex<Option<Shim>>> = Arc::new(tokio::sync::Mutex::new(None));
    let ns2 = new_shim.clone();
    let old = &mut *shim;
    let hook = move || async move {
        let t = Instant::now();
        old.kill9().await;
        h.proxy.remove(&old_identity);
        h.say(format!(
            "killed gpusched-kube {old_identity} (SIGKILL) in the middle of the burst"
        ));
        let fresh = Shim::start(&h.env, identity).await;
        h.proxy.add(&fresh);
        let ready_after = fresh.wait_ready(Duration::from_secs(60)).await;
        *k2.lock().unwrap() = Some((t, t.elapsed()));
        h.say(format!(
            "restarted as {identity}: ready {:.1}s after the kill (lease expiry + informer sync)",
            t.elapsed().as_secs_f64()
        ));
        let _ = ready_after;
        *ns2.lock().await = Some(fresh);
    };
    let s = burst(
        h,
        &ns,
        burst_pods(pool, SCHEDULER, BURST_PODS, false),
        Duration::from_secs(8),
        Some((60, hook)),
    )
    .await;
    let (bound, cards) = check_no_overbooking(h, &nodes, &ns).await;
    assert_eq!(bound, s.bound);
    let fresh = new_shim
        .lock()
        .await
        .take()
        .expect("the shim was restarted");
    let (_, down) = killed_at.lock().unwrap().expect("kill happened");
    assert!(s.bound >= 150, "only {} bound after the restart", s.bound);
    let total = Api::<Pod>::namespaced(h.client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(total, BURST_PODS, "pods lost");
    h.result(format!(
        "burst with SIGKILL + restart of gpusched-kube after 60 binds: {} bound, {} pending with a reason, {total} pods present; \
         new instance ready {:.1}s after the kill; no card over-booked ({cards} cards used); last bound at {:.1}s",
        s.bound, s.pending, down.as_secs_f64(), s.last_bound_s
    ));
    *shim = fresh;
}

async fn two_replicas(h: &H, a: &mut Shim) {
    let pool = "ha";
    let ns = h.namespace(pool, false).await;
    h.make_node(
        "ha-node1",
        pool,
        Shape {
            cards: 4,
            mem: 16384,
        },
        4,
    )
    .await;
    h.make_node(
        "ha-node2",
        pool,
        Shape {
            cards: 4,
            mem: 16384,
        },
        4,
    )
    .await;
    let mut b = Shim::start(&h.env, "replica-b").await;
    h.proxy.add(&b);
    // B syncs but stays standby while A holds the Lease.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(is_ready(a.ext).await, "leader A not ready");
    assert!(!is_ready(b.ext).await, "standby B reports ready");
    assert_eq!(h.lease_holder().await, a.identity);
    let args = json!({"Pod": PodSpec::new("probe", pool).scheduler(SCHEDULER).limit("nvidia.com/gpu", "1").build(),
                      "NodeNames": ["ha-node1", "ha-node2"]});
    let (_, body) = http(b.ext, "POST", "/filter", &args.to_string())
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["Error"].as_str().unwrap().contains("not the leader"),
        "standby /filter: {body}"
    );
    let bind = json!({"PodName": "probe", "PodNamespace": ns, "PodUID": "x", "Node": "ha-node1"});
    let (_, body) = http(b.ext, "POST", "/bind", &bind.to_string())
        .await
        .unwrap();
    assert!(body.contains("not the leader"), "standby /bind: {body}");
    // A bind the service refuses: the error goes back to kube-scheduler and an Event (written
    // with the shim's ServiceAccount) is recorded on the pod.
    let too_big = PodSpec::new("too-big", "nowhere")
        .scheduler(SCHEDULER)
        .limit("nvidia.com/gpu", "8")
        .build();
    let created = h.create(&ns, &too_big).await.unwrap();
    let bind = json!({"PodName": "too-big", "PodNamespace": ns, "PodUID": created.metadata.uid, "Node": "ha-node1"});
    let (_, body) = http(a.ext, "POST", "/bind", &bind.to_string())
        .await
        .unwrap();
    assert!(
        body.contains("NodeInsufficientDevice"),
        "leader /bind of an oversized pod: {body}"
    );
    let t = Instant::now();
    let ev = loop {
        let ev = h.events(&ns, "too-big").await;
        if let Some(e) = ev.iter().find(|e| e.starts_with("GpuschedBindFailed")) {
            break e.clone();
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no GpuschedBindFailed event: {ev:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    h.result(format!(
        "refused bind: error returned to kube-scheduler, event {ev}"
    ));
    let (a0, b0) = (
        metric(a.ext, "gpusched_kube_bind_gpu_total").await,
        metric(b.ext, "gpusched_kube_bind_gpu_total").await,
    );
    let create_some = |prefix: &'static str| {
        let ns = ns.clone();
        async move {
            for i in 0..6 {
                let p = PodSpec::new(format!("{prefix}{i}"), pool)
                    .scheduler(SCHEDULER)
                    .limit("nvidia.com/gpu", "1")
                    .limit("nvidia.com/gpumem", "2000")
                    .build();
                h.create(&ns, &p).await.unwrap();
            }
            for i in 0..6 {
                h.wait_bound(&ns, &format!("{prefix}{i}")).await;
            }
        }
    };
    create_some("first").await;
    let (a1, b1) = (
        metric(a.ext, "gpusched_kube_bind_gpu_total").await,
        metric(b.ext, "gpusched_kube_bind_gpu_total").await,
    );
    assert_eq!((a1 - a0, b1 - b0), (6, 0), "only the leader binds");
    // The leader dies: the standby takes over once the lease expires.
    let t = Instant::now();
    a.kill9().await;
    h.proxy.remove(&a.identity);
    let took = b.wait_ready(Duration::from_secs(30)).await;
    assert_eq!(h.lease_holder().await, b.identity);
    create_some("second").await;
    let b2 = metric(b.ext, "gpusched_kube_bind_gpu_total").await;
    assert_eq!(b2 - b1, 6, "the new leader binds");
    h.result(format!(
        "two replicas: only the leader ({}) was ready and bound 6/6 pods, the standby answered \"not the leader\"; \
         after SIGKILL of the leader the standby took over in {:.1}s (lease 4s) and bound 6/6 ✓",
        a.identity,
        took.max(t.elapsed()).as_secs_f64()
    ));
    // Clean shutdown releases the Lease at once.
    b.terminate().await;
    let holder = h.lease_holder().await;
    assert!(
        holder.is_empty(),
        "lease still held by {holder:?} after SIGTERM"
    );
    h.result("SIGTERM: the leader released its Lease (holderIdentity cleared) ✓");
    h.proxy.remove(&b.identity);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a real control plane: deploy/e2e/test.sh runs it with --ignored"]
async fn e2e_on_a_real_control_plane() {
    let env = Env::from_env().expect("GPUSCHED_E2E=1 and the variables set by deploy/e2e/test.sh");
    let client = Client::try_default()
        .await
        .expect("admin client from KUBECONFIG");
    client
        .apiserver_version()
        .await
        .expect("the apiserver answers");
    let proxy = Proxy::start(env.ext_port, env.wh_port).await;
    let run_id = format!("{}", std::process::id());
    let h = H {
        env,
        client,
        proxy,
        results: Mutex::new(vec![]),
        run_id,
    };
    let mut shim = Shim::start(&h.env, "replica-a").await;
    h.proxy.add(&shim);
    let ready = shim.wait_ready(Duration::from_secs(60)).await;
    h.say(format!(
        "gpusched-kube replica-a ready after {:.1}s (extender {}, webhook {})",
        ready.as_secs_f64(),
        shim.ext,
        shim.webhook
    ));

    if h.env.wants("admission") {
        admission(&h).await;
    }
    if h.env.wants("seed") {
        seed_node_policies(&h).await;
        seed_gpu_policies(&h).await;
    }
    if h.env.wants("weights") {
        weights(&h).await;
    }
    if h.env.wants("mutex") {
        mutex(&h).await;
    }
    let mut ours = None;
    if h.env.wants("burst") {
        ours = Some(clean_burst(&h).await);
    }
    if h.env.wants("baseline") {
        let base = baseline_burst(&h).await;
        if let Some(o) = &ours {
            h.result(format!(
                "throughput ratio (extender / plain kube-scheduler): {:.1} / {:.1} pods/s = {:.2}",
                o.rate,
                base.rate,
                o.rate / base.rate
            ));
        }
    }
    if h.env.wants("restart") {
        restart_burst(&h, &mut shim, "replica-a2").await;
    }
    if h.env.wants("replicas") {
        two_replicas(&h, &mut shim).await;
    }
    let results = h.results.lock().unwrap().clone();
    let text: String = results.iter().map(|l| format!("- {l}\n")).collect();
    std::fs::write(&h.env.results, text).unwrap();
}
