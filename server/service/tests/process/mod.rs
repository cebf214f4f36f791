//! The `gpusched-server` binary as a process under attack, for `memory.rs` and `cpu.rs`: started
//! under an address-space cap sized like `deploy/`'s Deployment memory limit (`ulimit -v`, 1 GiB),
//! its resident memory and CPU read from `/proc/<pid>`, raw gRPC calls of pre-encoded bytes,
//! `Health/Check` probes while attacked, and the request builders both use.
#![allow(dead_code, clippy::unwrap_used)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes};
use gpusched_api::v1;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;

use crate::common;

pub const BUILT: &str = env!("CARGO_BIN_EXE_gpusched-server");

/// The binary under test: this build, or `$BOUNDS_SERVER_BIN` (to replay the attacks against
/// another build, e.g. one from before the bounds).
pub fn bin() -> String {
    std::env::var("BOUNDS_SERVER_BIN").unwrap_or_else(|_| BUILT.to_owned())
}

/// The chart's `server.resources.limits.memory` (deploy/helm/gpusched/values.yaml), KiB.
pub const DEPLOYMENT_MEMORY_KIB: u64 = 1 << 20;

/// One attack at a time: they measure one process's memory, CPU and latency.
pub static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

// --- the server process ------------------------------------------------------------------

pub struct Server {
    child: Child,
    /// `host:port` of its gRPC listener.
    pub addr: String,
}

impl Server {
    /// The binary under `ulimit -v` with `envs` (`GPUSCHED_SERVER_...`).
    pub fn spawn(bin: &str, cap_kib: Option<u64>, envs: &[(&str, &str)]) -> Server {
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

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A `/proc/<pid>/status` value in KiB.
    pub fn status_kib(&self, key: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("{key} not in /proc/pid/status"))
    }

    pub fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS")
    }

    /// Resets the peak RSS (VmHWM) to the current RSS.
    pub fn reset_peak(&self) {
        std::fs::write(format!("/proc/{}/clear_refs", self.pid()), "5").unwrap();
    }

    pub fn peak_kib(&self) -> u64 {
        self.status_kib("VmHWM")
    }

    /// User + system CPU seconds of the process so far.
    pub fn cpu_seconds(&self) -> f64 {
        let s = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        // Fields after the command name (which may hold spaces): state is field 3.
        let rest = &s[s.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
        ticks as f64 / clock_ticks()
    }

    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub fn terminate(&mut self) {
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
pub struct RawCodec;

#[derive(Clone, Copy, Debug, Default)]
pub struct RawEncoder;

#[derive(Clone, Copy, Debug, Default)]
pub struct RawDecoder;

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

pub async fn raw_call(
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

pub const FILTER: &str = "/gpusched.v1.PlacementService/Filter";
pub const ALLOCATE: &str = "/gpusched.v1.PlacementService/Allocate";
pub const NORMALIZE: &str = "/gpusched.v1.InventoryService/NormalizeInventory";

pub fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// `count` empty entries of field `field` (2 bytes each).
pub fn empty_entries(field: u8, count: usize) -> Vec<u8> {
    [field << 3 | 2, 0].repeat(count)
}

// --- health while attacked -------------------------------------------------------------------

/// Starts a `Health/Check` every 5 ms (each on its own task, whether or not the one before has
/// answered, so a stalled server shows in every check it delays), from its own thread and
/// runtime (the test's own work never delays it); keeps every latency and counts failures.
pub struct HealthProbe {
    stop: Arc<AtomicBool>,
    worst_us: Arc<AtomicU64>,
    failures: Arc<AtomicU64>,
    samples: Arc<std::sync::Mutex<Vec<u64>>>,
    thread: std::thread::JoinHandle<()>,
}

/// What the probe saw (printed).
#[derive(Debug)]
#[allow(dead_code)]
pub struct HealthSeen {
    pub checks: usize,
    pub p95: Duration,
    pub worst: Duration,
    pub failures: u64,
}

impl HealthProbe {
    pub fn start(url: &str) -> HealthProbe {
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
    pub fn take_worst(&self) -> Duration {
        Duration::from_micros(self.worst_us.swap(0, Ordering::Relaxed))
    }

    pub fn finish(self) -> HealthSeen {
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
pub async fn settle(url: &str) {
    for _ in 0..25 {
        assert!(serving(url).await, "health after an attack");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn serving(url: &str) -> bool {
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

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

// --- requests ------------------------------------------------------------------------------

pub fn typed(containers: usize, gpus: u32) -> v1::Workload {
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

pub fn card(node: usize, j: u32) -> v1::Card {
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

pub fn nodes(n: usize, cards: u32) -> Vec<v1::Node> {
    (0..n)
        .map(|i| v1::Node {
            name: format!("node-{i:05}"),
            cards: (0..cards).map(|j| card(i, j)).collect(),
            ..Default::default()
        })
        .collect()
}
