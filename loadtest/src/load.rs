//! Load over gRPC: closed loop (a fixed number of requests in flight, each worker sends the next
//! as soon as the previous answer arrives) and open loop (requests started at a fixed rate by
//! intended start time, whatever the answers do; latency counts from the intended time, so a
//! slow server cannot hide its queueing — no coordinated omission).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tonic::transport::Channel;

use crate::process::CpuTimes;
use crate::report::{Collector, RunReport, code_name, cpu};
use crate::synth::Encoded;
use crate::wire::{Rpc, call, summarize};

/// What a run sends and where.
#[derive(Clone, Debug)]
pub struct Target {
    /// HTTP/2 connections; requests go round-robin.
    pub channels: Arc<Vec<Channel>>,
    /// The requests, cycled through.
    pub pool: Arc<Vec<Encoded>>,
    /// The RPC.
    pub rpc: Rpc,
    /// Deadline sent with every call (`grpc-timeout`).
    pub timeout: Option<Duration>,
    /// A process whose CPU time is read (the server, when local).
    pub server_pid: Option<u32>,
}

/// Warm-up and measured window.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Load before measuring (answers not recorded).
    pub warmup: Duration,
    /// The measured window.
    pub duration: Duration,
}

fn read_cpu(pid: Option<u32>) -> Option<(u32, CpuTimes)> {
    let pid = pid?;
    crate::process::cpu_times(pid).ok().map(|s| (pid, s))
}

/// CPU readings of the server and of this process at the start of the window.
struct CpuMark {
    server: Option<(u32, CpuTimes)>,
    client: Option<(u32, CpuTimes)>,
    machine: Option<(f64, f64)>,
}

impl CpuMark {
    fn now(server_pid: Option<u32>) -> Self {
        CpuMark {
            server: read_cpu(server_pid),
            client: read_cpu(Some(std::process::id())),
            machine: crate::process::machine_cpu(),
        }
    }
}

fn channel(t: &Target, i: usize) -> Option<Channel> {
    t.channels.get(i % t.channels.len().max(1)).cloned()
}

fn request(t: &Target, i: usize) -> Option<Encoded> {
    t.pool.get(i % t.pool.len().max(1)).cloned()
}

/// Closed loop with `concurrency` requests in flight.
pub async fn closed(t: &Target, concurrency: usize, w: Window) -> anyhow::Result<RunReport> {
    let concurrency = concurrency.max(1);
    let start = Instant::now();
    let measure = start + w.warmup;
    let end = measure + w.duration;
    let path = t.rpc.path();
    let mut workers = Vec::with_capacity(concurrency);
    for j in 0..concurrency {
        let t = t.clone();
        let path = path.clone();
        workers.push(tokio::spawn(async move {
            let mut c = Collector::default();
            let Some(ch) = channel(&t, j) else { return c };
            let mut i = j;
            loop {
                let Some(req) = request(&t, i) else { break };
                i += concurrency;
                let kind = req.kind;
                let t0 = Instant::now();
                if t0 >= end {
                    break;
                }
                let result = call(&ch, path.clone(), req, t.timeout).await;
                let t1 = Instant::now();
                if t0 < measure {
                    continue;
                }
                match result {
                    Ok(bytes) => {
                        let s = summarize(t.rpc, &bytes);
                        c.record(kind, t1 - t0, t1 <= end, Ok(&s));
                    }
                    Err(status) => {
                        c.record(kind, t1 - t0, t1 <= end, Err(code_name(status.code())));
                    }
                }
            }
            c
        }));
    }
    tokio::time::sleep_until(measure.into()).await;
    let mark = CpuMark::now(t.server_pid);
    tokio::time::sleep_until(end.into()).await;
    // Read the CPU before the stragglers finish: the window is [measure, end].
    let end_cpu = CpuMark::now(t.server_pid);
    let mut all = Collector::default();
    for h in workers {
        all.merge(&h.await?);
    }
    let window = w.duration.as_secs_f64();
    let mut r = all.report("grpc", "closed", window);
    r.concurrency = Some(concurrency);
    r.connections = Some(t.channels.len());
    finish_cpu(&mut r, mark, end_cpu, all.ok_in_window, window);
    Ok(r)
}

fn finish_cpu(r: &mut RunReport, start: CpuMark, end: CpuMark, ok_in_window: u64, window: f64) {
    if let (Some((pid, a)), Some((_, b))) = (start.server, end.server) {
        r.server_cpu = Some(cpu(pid, a, b, ok_in_window, window));
    }
    if let (Some((pid, a)), Some((_, b))) = (start.client, end.client) {
        r.client_cpu = Some(cpu(pid, a, b, ok_in_window, window));
    }
    if let (Some((busy0, _)), Some((busy1, _))) = (start.machine, end.machine)
        && window > 0.0
    {
        r.machine_busy_cores = Some((((busy1 - busy0) / window) * 100.0).round() / 100.0);
    }
}

/// Open loop at `rate` requests per second, at most `max_outstanding` in flight (when the
/// limit is reached the next send waits; its latency still counts from its intended time).
pub async fn open(
    t: &Target,
    rate: f64,
    max_outstanding: usize,
    w: Window,
) -> anyhow::Result<RunReport> {
    anyhow::ensure!(rate > 0.0, "--rate must be positive");
    let max_outstanding = max_outstanding.max(1);
    let collector = Arc::new(Mutex::new(Collector::default()));
    let permits = Arc::new(Semaphore::new(max_outstanding));
    let limit_hits = Arc::new(AtomicU64::new(0));
    let handle = tokio::runtime::Handle::current();
    // The pacer starts a little later so that the first intended times are not already past.
    let start = Instant::now() + Duration::from_millis(20);
    let measure = start + w.warmup;
    let end = measure + w.duration;
    let total = ((w.warmup + w.duration).as_secs_f64() * rate).floor() as u64;
    let pacer = {
        let t = t.clone();
        let collector = Arc::clone(&collector);
        let permits = Arc::clone(&permits);
        let limit_hits = Arc::clone(&limit_hits);
        let path = t.rpc.path();
        // A plain thread paces the sends: its sleeps are precise to tens of microseconds, a
        // tokio timer only to a millisecond.
        std::thread::Builder::new()
            .name("pacer".into())
            .spawn(move || {
                for n in 0..total {
                    let intended = start + Duration::from_secs_f64(n as f64 / rate);
                    let now = Instant::now();
                    if intended > now {
                        std::thread::sleep(intended - now);
                    }
                    let permit = loop {
                        match Arc::clone(&permits).try_acquire_owned() {
                            Ok(p) => break p,
                            Err(_) => {
                                limit_hits.fetch_add(1, Ordering::Relaxed);
                                std::thread::sleep(Duration::from_micros(50));
                            }
                        }
                    };
                    let i = usize::try_from(n).unwrap_or(0);
                    let (Some(ch), Some(req)) = (channel(&t, i), request(&t, i)) else {
                        break;
                    };
                    let rpc = t.rpc;
                    let timeout = t.timeout;
                    let path = path.clone();
                    let collector = Arc::clone(&collector);
                    let sent = Instant::now();
                    handle.spawn(async move {
                        let kind = req.kind;
                        let result = call(&ch, path, req, timeout).await;
                        let done = Instant::now();
                        drop(permit);
                        if intended < measure {
                            return;
                        }
                        let summary = result.as_ref().ok().map(|b| summarize(rpc, b));
                        let Ok(mut c) = collector.lock() else { return };
                        let outcome = match (&summary, &result) {
                            (Some(s), _) => Ok(s),
                            (None, Err(status)) => Err(code_name(status.code())),
                            (None, Ok(_)) => Err("UNKNOWN"),
                        };
                        c.record(kind, done - intended, done <= end, outcome);
                        c.service.record(done - sent);
                        c.lag.record(sent.saturating_duration_since(intended));
                    });
                }
            })?
    };
    tokio::time::sleep_until(measure.into()).await;
    let mark = CpuMark::now(t.server_pid);
    tokio::time::sleep_until(end.into()).await;
    let end_cpu = CpuMark::now(t.server_pid);
    let _ = tokio::task::spawn_blocking(move || pacer.join()).await;
    // Let the calls in flight finish (each has its deadline).
    let grace =
        Instant::now() + t.timeout.unwrap_or(Duration::from_secs(10)) + Duration::from_secs(2);
    while permits.available_permits() < max_outstanding && Instant::now() < grace {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let c = collector
        .lock()
        .map_err(|_| anyhow::anyhow!("collector poisoned"))?
        .clone();
    let window = w.duration.as_secs_f64();
    let mut r = c.report("grpc", "open", window);
    r.offered_rate_per_s = Some(rate);
    r.connections = Some(t.channels.len());
    r.service_time_us = Some(c.service.summary());
    r.send_lag_us = Some(c.lag.summary());
    r.outstanding_limit_hits = Some(limit_hits.load(Ordering::Relaxed));
    let unfinished = permits.available_permits() < max_outstanding;
    if unfinished {
        *r.errors.entry("CLIENT_UNFINISHED".to_owned()).or_default() +=
            (max_outstanding - permits.available_permits()) as u64;
    }
    finish_cpu(&mut r, mark, end_cpu, c.ok_in_window, window);
    Ok(r)
}
