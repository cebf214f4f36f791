//! Reliability: the memory and CPU attacks of issue 13 replayed against the `gpusched-server`
//! binary, started under an address-space cap sized like `deploy/`'s Deployment memory limit
//! (`ulimit -v`, 1 GiB): every attack is answered (RESOURCE_EXHAUSTED, or DEADLINE_EXCEEDED for
//! bodies that never end), the server stays up and answers Health, its resident memory returns
//! below a bound, `Health/Check` is not stalled beyond 100 ms (the bound), no CPU is
//! burned after a call's deadline, and SIGTERM does not wait for runaway work.
//!
//! Memory (VmRSS, peak VmHWM after resetting it through `/proc/<pid>/clear_refs`) and CPU
//! (`/proc/<pid>/stat`) are read from the server process and printed. The health bound is
//! asserted on the 95th percentile of checks started every 5 ms. `BOUNDS_SERVER_BIN=path`
//! replays the attacks against another build; `measure_attacks` (ignored, run by hand: `cargo
//! test -p gpusched-service --test bounds -- --ignored --nocapture`) only prints the memory
//! table, with the binary's own defaults and no cap.
#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes};
use gpusched_api::v1;
use prost::Message;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Code, Status};

const BUILT: &str = env!("CARGO_BIN_EXE_gpusched-server");

/// The binary under test: this build, or `$BOUNDS_SERVER_BIN` (to replay the attacks against
/// another build, e.g. one from before the bounds).
fn bin() -> String {
    std::env::var("BOUNDS_SERVER_BIN").unwrap_or_else(|_| BUILT.to_owned())
}

/// The chart's `server.resources.limits.memory` (deploy/helm/gpusched/values.yaml), KiB.
const DEPLOYMENT_MEMORY_KIB: u64 = 1 << 20;

/// RSS the server must return below after each attack, over its RSS before them (with the
/// server image's allocator setting; without it, mimalloc keeps freed pages for reuse, bounded
/// by the peak).
const SETTLED_ABOVE_IDLE_KIB: u64 = 96 << 10;

/// One attack at a time: they measure one process's memory, CPU and latency.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

// --- the server process ------------------------------------------------------------------

struct Server {
    child: Child,
    addr: String,
}

impl Server {
    /// The binary under `ulimit -v` with `envs` (`GPUSCHED_SERVER_...`).
    fn spawn(bin: &str, cap_kib: Option<u64>, envs: &[(&str, &str)]) -> Server {
        let limit = cap_kib.map_or_else(|| "unlimited".to_owned(), |k| k.to_string());
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("ulimit -v {limit} && exec \"$0\" \"$@\""))
            .arg(bin)
            .args(["--listen", "127.0.0.1:0", "--no-metrics"]);
        for (k, _) in std::env::vars() {
            if k.starts_with("GPUSCHED_") || k.starts_with("OTEL_") {
                cmd.env_remove(k);
            }
        }
        if let Ok(extra) = std::env::var("BOUNDS_EXTRA_ENV") {
            for kv in extra.split(',') {
                if let Some((k, v)) = kv.split_once('=') {
                    cmd.env(k, v);
                }
            }
        }
        cmd.envs(envs.iter().copied())
            .env("GPUSCHED_SERVER_TELEMETRY__LOG_LEVEL", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().unwrap();
        let addr = common::listening_on(&common::listening_line(&mut child), "grpc");
        Server { child, addr }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A `/proc/<pid>/status` value in KiB.
    fn status_kib(&self, key: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{key} not in /proc/pid/status"))
    }

    fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS")
    }

    /// Resets the peak RSS (VmHWM) to the current RSS.
    fn reset_peak(&self) {
        std::fs::write(format!("/proc/{}/clear_refs", self.pid()), "5").unwrap();
    }

    fn peak_kib(&self) -> u64 {
        self.status_kib("VmHWM")
    }

    /// User + system CPU seconds of the process so far.
    fn cpu_seconds(&self) -> f64 {
        let s = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        // Fields after the command name (which may hold spaces): state is field 3.
        let rest = &s[s.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
        ticks as f64 / clock_ticks()
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    fn terminate(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

// --- raw gRPC calls ------------------------------------------------------------------------

/// Sends pre-encoded request bytes and ignores the answer's bytes: attacks are built as bytes
/// (16 MiB of empty nodes are cheap to write, 1.5 GB as structures).
#[derive(Clone, Copy, Debug, Default)]
struct RawCodec;

#[derive(Clone, Copy, Debug, Default)]
struct RawEncoder;

#[derive(Clone, Copy, Debug, Default)]
struct RawDecoder;

impl Encoder for RawEncoder {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = ();
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<()>, Status> {
        bytes::Buf::advance(src, bytes::Buf::remaining(src));
        Ok(Some(()))
    }
}

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = ();
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

async fn raw_call(
    channel: &Channel,
    path: &'static str,
    body: Bytes,
    timeout: Option<Duration>,
) -> Result<(), Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone())
        .max_encoding_message_size(usize::MAX)
        .max_decoding_message_size(usize::MAX);
    grpc.ready()
        .await
        .map_err(|e| Status::unknown(e.to_string()))?;
    let mut req = tonic::Request::new(body);
    if let Some(t) = timeout {
        req.set_timeout(t);
    }
    grpc.unary(req, http::uri::PathAndQuery::from_static(path), RawCodec)
        .await
        .map(|_| ())
}

const FILTER: &str = "/gpusched.v1.PlacementService/Filter";
const ALLOCATE: &str = "/gpusched.v1.PlacementService/Allocate";
const NORMALIZE: &str = "/gpusched.v1.InventoryService/NormalizeInventory";

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// `count` empty entries of field `field` (2 bytes each).
fn empty_entries(field: u8, count: usize) -> Vec<u8> {
    [field << 3 | 2, 0].repeat(count)
}

/// ~`bytes` of a FilterRequest made of empty nodes.
fn empty_nodes(bytes: usize) -> Bytes {
    Bytes::from(empty_entries(1, bytes / 2))
}

/// ~`bytes` of a FilterRequest with one node made of empty cards.
fn empty_cards(bytes: usize) -> Bytes {
    let cards = empty_entries(2, (bytes - 8) / 2);
    let mut out = vec![1 << 3 | 2];
    varint(cards.len() as u64, &mut out);
    out.extend_from_slice(&cards);
    Bytes::from(out)
}

// --- raw HTTP/2 streams (prefixes that declare more than they send) ---------------------------

/// Opens `streams` calls on one connection, each sending a gRPC prefix that declares
/// `declared` bytes followed by `send` bytes of them, never ending the stream; returns the
/// grpc-status of each answer (waiting up to `wait` for all), `None` when none came.
async fn unfinished(
    addr: &str,
    streams: usize,
    declared: u32,
    send: usize,
    wait: Duration,
) -> Vec<Option<Code>> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, conn) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .handshake::<_, Bytes>(tcp)
        .await
        .unwrap();
    let conn = tokio::spawn(async move {
        let _ = conn.await;
    });
    let mut pending = Vec::new();
    let mut senders = Vec::new();
    for _ in 0..streams {
        let mut client = client.clone().ready().await.unwrap();
        let req = http::Request::post(format!("http://{addr}{FILTER}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (resp, mut tx) = client.send_request(req, false).unwrap();
        let mut data = vec![0u8];
        data.extend_from_slice(&declared.to_be_bytes());
        data.resize(5 + send, 0x55);
        tx.send_data(Bytes::from(data), false).unwrap();
        senders.push(tx);
        pending.push(resp);
    }
    let mut codes = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    for resp in pending {
        let code = match tokio::time::timeout_at(deadline, resp).await {
            Ok(Ok(r)) => r
                .headers()
                .get("grpc-status")
                .and_then(|v| v.to_str().ok()?.parse::<i32>().ok())
                .map(Code::from),
            _ => None,
        };
        codes.push(code);
    }
    drop(senders);
    conn.abort();
    codes
}

// --- health while attacked -------------------------------------------------------------------

/// Starts a `Health/Check` every 5 ms (each on its own task, whether or not the one before has
/// answered, so a stalled server shows in every check it delays), from its own thread and
/// runtime (the test's own work never delays it); keeps every latency and counts failures.
struct HealthProbe {
    stop: Arc<AtomicBool>,
    worst_us: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
    samples: Arc<std::sync::Mutex<Vec<u64>>>,
    thread: std::thread::JoinHandle<()>,
}

/// What the probe saw (printed).
#[derive(Debug)]
#[allow(dead_code)]
struct HealthSeen {
    checks: usize,
    p95: Duration,
    worst: Duration,
    failures: u64,
}

impl HealthProbe {
    fn start(url: &str) -> HealthProbe {
        let stop = Arc::new(AtomicBool::new(false));
        let worst_us = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(AtomicU64::new(0));
        let samples = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (s, w, f, v) = (
            stop.clone(),
            worst_us.clone(),
            failures.clone(),
            samples.clone(),
        );
        let url = url.to_owned();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let channel = Channel::from_shared(url).unwrap().connect().await.unwrap();
                let client = tonic_health::pb::health_client::HealthClient::new(channel);
                let _ = ready_tx.send(());
                let mut checks = Vec::new();
                while !s.load(Ordering::Relaxed) {
                    let (mut client, w, f, v) = (client.clone(), w.clone(), f.clone(), v.clone());
                    checks.push(tokio::spawn(async move {
                        let t = Instant::now();
                        let ok = client
                            .check(tonic_health::pb::HealthCheckRequest::default())
                            .await
                            .is_ok_and(|r| r.into_inner().status == 1);
                        let us = t.elapsed().as_micros() as u64;
                        w.fetch_max(us, Ordering::Relaxed);
                        v.lock().unwrap().push(us);
                        if !ok {
                            f.fetch_add(1, Ordering::Relaxed);
                        }
                    }));
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                for c in checks {
                    let _ = c.await;
                }
            });
        });
        ready_rx.recv().unwrap();
        HealthProbe {
            stop,
            worst_us,
            failures,
            samples,
            thread,
        }
    }

    /// The slowest answer since the last call (printed per phase).
    fn take_worst(&self) -> Duration {
        Duration::from_micros(self.worst_us.swap(0, Ordering::Relaxed))
    }

    fn finish(self) -> HealthSeen {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        let mut v = self.samples.lock().unwrap().clone();
        v.sort_unstable();
        let at = |q: f64| Duration::from_micros(v[((v.len() - 1) as f64 * q) as usize]);
        HealthSeen {
            checks: v.len(),
            p95: at(0.95),
            worst: at(1.0),
            failures: self.failures.load(Ordering::Relaxed),
        }
    }
}

/// Half a second of Health/Check every 20 ms after an attack: the server answers.
async fn settle(url: &str) {
    for _ in 0..25 {
        assert!(serving(url).await, "health after an attack");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn serving(url: &str) -> bool {
    let Ok(channel) = Channel::from_shared(url.to_owned())
        .unwrap()
        .connect()
        .await
    else {
        return false;
    };
    tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .is_ok_and(|r| r.into_inner().status == 1)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

// --- the memory attacks ----------------------------------------------------------------------

/// One memory attack's measurements.
#[derive(Debug)]
struct Measured {
    name: &'static str,
    peak_kib: u64,
    after_kib: u64,
    outcome: String,
}

/// Runs the memory attacks of the issue against `server`; returns their measurements.
async fn memory_attacks(server: &mut Server, check: bool) -> Vec<Measured> {
    let url = server.url();
    let channel = Channel::from_shared(url.clone())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut out = Vec::new();
    let mut measure = |server: &mut Server, name, outcome: String| {
        let alive = server.alive();
        out.push(Measured {
            name,
            peak_kib: server.peak_kib(),
            after_kib: if alive { server.rss_kib() } else { 0 },
            outcome: if alive {
                outcome
            } else {
                format!("{outcome}; SERVER DIED")
            },
        });
        alive
    };
    let code = |r: Result<(), Status>| match r {
        Ok(()) => "OK".to_owned(),
        Err(s) => format!("{:?}", s.code()),
    };

    type Flood = fn(usize) -> Bytes;
    for (body, name) in [
        (empty_nodes as Flood, "16 MB of empty nodes"),
        (empty_cards, "16 MB of empty cards"),
    ] {
        server.reset_peak();
        let r = raw_call(&channel, FILTER, body(16_000_000), None).await;
        if check {
            assert_eq!(
                r.as_ref().map_err(Status::code),
                Err(Code::ResourceExhausted),
                "{name}: {r:?}"
            );
        }
        settle(&url).await;
        if !measure(server, name, code(r)) {
            return out;
        }
    }

    // 1,000 streams declaring 64 MiB each, sending only the prefix: 10 connections x 100.
    server.reset_peak();
    let addr = server.addr.clone();
    let codes = unfinished_on(&addr, 10, 100, 64 << 20, 0, Duration::from_secs(15)).await;
    let exhausted = codes
        .iter()
        .filter(|c| **c == Some(Code::ResourceExhausted))
        .count();
    if check {
        assert_eq!(exhausted, 1000, "{codes:?}");
    }
    settle(&url).await;
    if !measure(
        server,
        "1,000 streams declaring 64 MiB, prefix only",
        format!("{exhausted} RESOURCE_EXHAUSTED of {}", codes.len()),
    ) {
        return out;
    }

    // The same within max_message_bytes (15 MiB declared): at most what the budget holds is
    // admitted, the rest refused at once; the admitted ones end at the body timeout.
    server.reset_peak();
    let codes = unfinished_on(&addr, 10, 100, 15 << 20, 0, Duration::from_secs(15)).await;
    let count = |c| codes.iter().filter(|x| **x == Some(c)).count();
    let (exhausted, timed_out) = (
        count(Code::ResourceExhausted),
        count(Code::DeadlineExceeded),
    );
    if check {
        assert_eq!(exhausted + timed_out, 1000, "{codes:?}");
        assert!(timed_out <= 17, "{timed_out} admitted beyond the budget");
    }
    settle(&url).await;
    if !measure(
        server,
        "1,000 streams declaring 15 MiB, prefix only",
        format!("{exhausted} RESOURCE_EXHAUSTED, {timed_out} DEADLINE_EXCEEDED"),
    ) {
        return out;
    }

    // 10 connections x 20 MiB unfinished bodies (over max_message_bytes: refused at once), then
    // 10 x 15 MiB declared with 14 MiB sent (admitted, cut by the body timeout).
    for (declared, send, name) in [
        (
            20u32 << 20,
            19usize << 20,
            "10 connections x 20 MiB unfinished",
        ),
        (
            15 << 20,
            14 << 20,
            "10 connections x 15 MiB, 14 MiB sent, unfinished",
        ),
    ] {
        server.reset_peak();
        let codes = unfinished_on(&addr, 10, 1, declared, send, Duration::from_secs(20)).await;
        if check {
            let want = if declared > 16 << 20 {
                Code::ResourceExhausted
            } else {
                Code::DeadlineExceeded
            };
            assert!(codes.iter().all(|c| *c == Some(want)), "{name}: {codes:?}");
        }
        settle(&url).await;
        if !measure(server, name, format!("{codes:?}")) {
            return out;
        }
    }
    out
}

/// `conns` connections of [`unfinished`] streams at once; every answer's code.
async fn unfinished_on(
    addr: &str,
    conns: usize,
    streams: usize,
    declared: u32,
    send: usize,
    wait: Duration,
) -> Vec<Option<Code>> {
    let tasks: Vec<_> = (0..conns)
        .map(|_| {
            let addr = addr.to_owned();
            tokio::spawn(async move { unfinished(&addr, streams, declared, send, wait).await })
        })
        .collect();
    let mut codes = Vec::new();
    for t in tasks {
        codes.extend(t.await.unwrap());
    }
    codes
}

fn print(title: &str, rows: &[Measured], idle_kib: u64) {
    println!("{title} (idle RSS {} MiB)", idle_kib / 1024);
    for m in rows {
        println!(
            "  {:<50} peak RSS {:>6} MiB, after {:>5} MiB: {}",
            m.name,
            m.peak_kib / 1024,
            m.after_kib / 1024,
            m.outcome
        );
    }
}

#[test]
fn memory_attacks_are_refused_within_the_deployment_limit() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = runtime();
    let mut server = Server::spawn(
        &bin(),
        Some(DEPLOYMENT_MEMORY_KIB),
        &[
            ("GPUSCHED_SERVER_LIMITS__BODY_TIMEOUT", "2s"),
            // The server image's setting (deploy/docker/Dockerfile): mimalloc returns freed
            // pages to the system at once instead of keeping them for the thread that freed them.
            ("MIMALLOC_PURGE_DELAY", "0"),
        ],
    );
    let url = server.url();
    assert!(rt.block_on(serving(&url)));
    let idle = server.rss_kib();
    let rows = rt.block_on(memory_attacks(&mut server, true));
    print("memory attacks, 1 GiB address-space cap", &rows, idle);
    assert!(server.alive(), "the server died: {rows:?}");
    assert!(rt.block_on(serving(&url)), "health after the attacks");
    for m in &rows {
        assert!(
            m.after_kib <= idle + SETTLED_ABOVE_IDLE_KIB,
            "{}: RSS {} KiB after, idle {idle} KiB",
            m.name,
            m.after_kib
        );
    }
}

// --- the CPU attacks -------------------------------------------------------------------------

fn typed(containers: usize, gpus: u32) -> v1::Workload {
    v1::Workload {
        name: "w".into(),
        spec: Some(v1::workload::Spec::Typed(v1::TypedWorkloadSpec {
            containers: (0..containers)
                .map(|i| v1::ContainerRequest {
                    name: format!("c{i}"),
                    gpu_count: gpus,
                    gpumem_mib: 100,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn card(node: usize, j: u32) -> v1::Card {
    v1::Card {
        id: format!("GPU-{node:05}-{j}"),
        index: j,
        r#type: "NVIDIA-A100".into(),
        slots: 10,
        total_mem_mib: 40_000,
        total_cores: 100,
        health: v1::CardHealth::Healthy as i32,
        ..Default::default()
    }
}

fn nodes(n: usize, cards: u32) -> Vec<v1::Node> {
    (0..n)
        .map(|i| v1::Node {
            name: format!("node-{i:05}"),
            cards: (0..cards).map(|j| card(i, j)).collect(),
            ..Default::default()
        })
        .collect()
}

/// A Filter request over `n` nodes that takes the server about `n` ms of CPU (release build;
/// debug builds are slower) but little to decode: topology-aware choices of 4 cards among 16 on
/// every node, for 32 containers.
fn heavy_filter(n: usize) -> Bytes {
    let mut w = typed(32, 4);
    if let Some(v1::workload::Spec::Typed(t)) = &mut w.spec {
        t.gpu_policy = vec![v1::GpuPolicy::TopologyAware as i32];
    }
    v1::FilterRequest {
        nodes: nodes(n, 16),
        workload: Some(w),
        options: None,
        node_refs: vec![],
        node_set: None,
    }
    .encode_to_vec()
    .into()
}

/// NormalizeInventory of 64 cards with `overrides` empty overrides (2 bytes each), as bytes.
fn normalize_with_overrides(overrides: usize) -> Bytes {
    let mut out = v1::NormalizeInventoryRequest {
        node_name: "n".into(),
        cards: (0..64)
            .map(|j| v1::RawCard {
                uuid: format!("GPU-{j}"),
                index: j,
                model_name: "NVIDIA A100-SXM4-40GB".into(),
                total_memory_bytes: 40 << 30,
                health: v1::CardHealth::Healthy as i32,
                ..Default::default()
            })
            .collect(),
        config: None,
    }
    .encode_to_vec();
    let config = empty_entries(4, overrides);
    out.push(3 << 3 | 2);
    varint(config.len() as u64, &mut out);
    out.extend_from_slice(&config);
    Bytes::from(out)
}

#[test]
fn cpu_attacks_do_not_stall_health_or_outlive_their_deadline() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = runtime();
    let server = Server::spawn(&bin(), Some(DEPLOYMENT_MEMORY_KIB), &[]);
    let url = server.url();
    // Built before the attacks: the test's own encoding is not what is measured.
    let mut restrict = v1::AllocateRequest {
        nodes: nodes(4_000, 1),
        workload: Some(typed(1, 1)),
        ..Default::default()
    };
    // One name, repeated: every other node is compared with every entry by a list scan.
    restrict.restrict_to_node_names = vec!["node-03999".to_owned(); 300_000];
    let restrict_300k = Bytes::from(restrict.encode_to_vec());
    restrict.restrict_to_node_names.truncate(10_000);
    let restrict_10k = Bytes::from(restrict.encode_to_vec());
    let overrides_2m = normalize_with_overrides(2_000_000);
    let overrides_4k = normalize_with_overrides(4_096);
    let heavy = heavy_filter(1_000);
    let channel = rt.block_on(async {
        Channel::from_shared(url.clone())
            .unwrap()
            .connect()
            .await
            .unwrap()
    });
    let call = |path, body: &Bytes, timeout| {
        let t = Instant::now();
        let r = rt.block_on(raw_call(&channel, path, body.clone(), timeout));
        (r.map_err(|s| s.code()), t.elapsed())
    };
    // The heavy request needs more than 600 ms (the attack is meaningful only if it needs well
    // beyond 300 ms).
    let (r, t) = call(FILTER, &heavy, Some(Duration::from_millis(600)));
    println!("one heavy Filter call with a 600 ms deadline: {r:?} in {t:?}");
    assert!(
        matches!(r, Err(Code::DeadlineExceeded | Code::Cancelled)),
        "{r:?}"
    );
    std::thread::sleep(Duration::from_millis(500));

    let probe = HealthProbe::start(&url);
    // 4,000 nodes + 300,000 restrict names: over the limit, refused before decoding; 10,000
    // (the limit) are answered (a set, not a scan of the names per node).
    let (r, t) = call(ALLOCATE, &restrict_300k, None);
    println!(
        "4,000 nodes + 300k restrict names: {r:?} in {t:?}, health {:?}",
        probe.take_worst()
    );
    assert_eq!(r, Err(Code::ResourceExhausted));
    let (r, t) = call(ALLOCATE, &restrict_10k, None);
    println!(
        "4,000 nodes + 10k restrict names: {r:?} in {t:?}, health {:?}",
        probe.take_worst()
    );
    assert_eq!(r, Ok(()));
    // NormalizeInventory with 2M overrides: refused; with 4,096 (the limit): answered.
    let (r, t) = call(NORMALIZE, &overrides_2m, None);
    println!(
        "NormalizeInventory, 2M overrides: {r:?} in {t:?}, health {:?}",
        probe.take_worst()
    );
    assert_eq!(r, Err(Code::ResourceExhausted));
    let (r, t) = call(NORMALIZE, &overrides_4k, None);
    println!(
        "NormalizeInventory, 4,096 overrides: {r:?} in {t:?}, health {:?}",
        probe.take_worst()
    );
    assert_eq!(r, Ok(()));

    // 8 calls with a 300 ms deadline on requests that need seconds: answered at their
    // deadline, and the work stops there.
    let cpu_before = server.cpu_seconds();
    let t = Instant::now();
    let answers = rt.block_on(async {
        let calls: Vec<_> = (0..8)
            .map(|_| {
                let (channel, heavy) = (channel.clone(), heavy.clone());
                tokio::spawn(async move {
                    let t = Instant::now();
                    let r =
                        raw_call(&channel, FILTER, heavy, Some(Duration::from_millis(300))).await;
                    (r.map_err(|s| s.code()), t.elapsed())
                })
            })
            .collect();
        let mut answers = Vec::new();
        for c in calls {
            answers.push(c.await.unwrap());
        }
        answers
    });
    let answered = t.elapsed();
    let worst = probe.take_worst();
    let seen = probe.finish();
    // Work that outlives its deadline would show here: the server's CPU from 1 s to 3 s after
    // the answers (decoding that had begun, which cannot be interrupted, ends within the first).
    let cpu_answered = server.cpu_seconds();
    std::thread::sleep(Duration::from_secs(1));
    let cpu_at = server.cpu_seconds();
    std::thread::sleep(Duration::from_secs(2));
    let cpu_after = server.cpu_seconds() - cpu_at;
    println!(
        "8 heavy Filter calls, 300 ms deadline: {answers:?}, all answered after {answered:?}; \
         server CPU {:.2} s until then, {:.2} s in the next second, {cpu_after:.2} s in the 2 s \
         after; slowest Health/Check during them {worst:?}; Health/Check over all attacks: \
         {seen:?}",
        cpu_answered - cpu_before,
        cpu_at - cpu_answered,
    );
    for (r, _) in &answers {
        // The client's own timer may answer first (CANCELLED); the server's answer is
        // DEADLINE_EXCEEDED.
        assert!(
            matches!(r, Err(Code::DeadlineExceeded | Code::Cancelled)),
            "{answers:?}"
        );
    }
    assert!(
        cpu_after < 0.1,
        "{cpu_after:.2} CPU-s burned after the deadline"
    );
    // The bound, on the 95th percentile: a server stalled by a call delays every
    // check started meanwhile; other processes of a shared test machine delay a few.
    assert_eq!(seen.failures, 0);
    assert!(
        seen.p95 <= Duration::from_millis(100),
        "Health/Check stalled: {seen:?}"
    );
    let mut server = server;
    assert!(server.alive());
}

#[test]
fn sigterm_does_not_wait_for_runaway_calls() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = runtime();
    let mut server = Server::spawn(
        &bin(),
        Some(DEPLOYMENT_MEMORY_KIB),
        &[("GPUSCHED_SERVER_LIMITS__REQUEST_TIMEOUT", "2s")],
    );
    let url = server.url();
    let started = rt.block_on(async {
        let channel = Channel::from_shared(url.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let heavy = heavy_filter(5_000);
        for _ in 0..4 {
            let (channel, heavy) = (channel.clone(), heavy.clone());
            tokio::spawn(async move {
                let _ = raw_call(&channel, FILTER, heavy, None).await;
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        Instant::now()
    });
    server.terminate();
    let exited = loop {
        if !server.alive() {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "still running 30 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    println!("exit {exited:?} after SIGTERM, with 4 calls running (request_timeout 2s)");
    // The calls end at their 2 s deadline (1.5 s after SIGTERM), then the server exits.
    assert!(exited < Duration::from_secs(4), "{exited:?}");
}

/// Prints peak RSS of each memory attack for `$BOUNDS_SERVER_BIN` (default: this build), with
/// its own defaults and no address-space cap: the numbers of the table.
#[test]
#[ignore = "a measurement, run by hand"]
fn measure_attacks() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let bin = bin();
    let rt = runtime();
    let mut server = Server::spawn(&bin, None, &[]);
    assert!(rt.block_on(serving(&server.url())));
    let idle = server.rss_kib();
    let rows = rt.block_on(memory_attacks(&mut server, false));
    print(&format!("memory attacks on {bin}, no cap"), &rows, idle);
    // Requests within the limits: peak RSS over the idle RSS per request byte (the worst of
    // which `prescan::WIRE_FACTOR` and the per-entry costs must cover).
    let long = |n: usize| "x".repeat(n);
    let cases: Vec<(&str, v1::FilterRequest)> = vec![
        (
            "200,000 cards (10,000 nodes x 20)",
            v1::FilterRequest {
                nodes: nodes(10_000, 20),
                workload: Some(typed(1, 1)),
                ..Default::default()
            },
        ),
        (
            "10,000 nodes, one 1.5 KB annotation each",
            v1::FilterRequest {
                nodes: (0..10_000)
                    .map(|i| v1::Node {
                        name: format!("node-{i:05}"),
                        cards: vec![card(i, 0)],
                        annotations: [("note".to_owned(), long(1_500))].into(),
                        ..Default::default()
                    })
                    .collect(),
                workload: Some(typed(1, 1)),
                ..Default::default()
            },
        ),
        (
            "10,000 nodes named with 1.5 KB",
            v1::FilterRequest {
                nodes: (0..10_000)
                    .map(|i| v1::Node {
                        name: format!("{}-{i:05}", long(1_500)),
                        cards: vec![card(i, 0)],
                        ..Default::default()
                    })
                    .collect(),
                workload: Some(typed(1, 1)),
                ..Default::default()
            },
        ),
    ];
    let channel = rt.block_on(async {
        Channel::from_shared(server.url())
            .unwrap()
            .connect()
            .await
            .unwrap()
    });
    for (name, req) in cases {
        let wire = Bytes::from(req.encode_to_vec());
        std::thread::sleep(Duration::from_millis(300));
        let before = server.rss_kib();
        server.reset_peak();
        let r = rt.block_on(raw_call(&channel, FILTER, wire.clone(), None));
        let grew = (server.peak_kib().saturating_sub(before) * 1024) as f64;
        println!(
            "  {name:<50} {:>5.1} MB: {:?}, peak RSS +{:.0} MiB, {:.2} bytes of RSS per request byte",
            wire.len() as f64 / 1e6,
            r.map_err(|s| s.code()),
            grew / (1 << 20) as f64,
            grew / wire.len() as f64
        );
    }
}
