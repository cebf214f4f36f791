//! Reliability, CPU: the CPU attacks of issue 13 replayed against the `gpusched-server` binary
//! under the same address-space cap as `memory.rs`: `Health/Check` is not stalled beyond 100 ms
//! (the bound, asserted on the 95th percentile of checks started every 5 ms), no CPU is
//! burned after a call's deadline (`/proc/<pid>/stat`), SIGTERM does not wait for runaway work,
//! and the accept loop backs off at the open-files limit instead of spinning.
#![allow(clippy::unwrap_used)]

mod common;
mod process;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::raw::{gpu_pod, scrape};
use common::*;
use gpusched_api::v1;
use process::*;
use prost::Message;
use tonic::Code;
use tonic::transport::Channel;

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

/// Attack: connections up to the open-files limit. Before: the accept loop spun (5 CPU-s per
/// 10 s) without a word. Now: a warning, a back-off, `gpusched_accept_errors_total`, and
/// service again once connections close.
#[test]
fn accept_errors_back_off_with_a_log_line_and_recover() {
    use std::io::{BufRead as _, BufReader};

    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -n 64 && exec '{}' --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0",
            env!("CARGO_BIN_EXE_gpusched-server")
        ))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let line = listening_line(&mut child);
    let grpc: std::net::SocketAddr = listening_on(&line, "grpc").parse().unwrap();
    let metrics: std::net::SocketAddr = listening_on(&line, "metrics").parse().unwrap();
    // More connections than the server has descriptors left.
    let conns: Vec<_> = (0..100)
        .filter_map(|_| std::net::TcpStream::connect(grpc).ok())
        .collect();
    // stderr drained by a thread (a full pipe would block the server's logging).
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // A guard against a hang, not a measurement.
    let guard = std::time::Duration::from_secs(120);
    loop {
        let logged = rx.recv_timeout(guard).expect("no back-off line on stderr");
        if logged.contains("cannot accept connections") {
            break;
        }
    }
    drop(conns);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ch = Channel::from_shared(format!("http://{grpc}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let r = gpusched_api::v1::placement_service_client::PlacementServiceClient::new(ch)
            .allocate(allocate_req(vec![node("a", 1, 8000)], gpu_pod()))
            .await
            .unwrap();
        assert!(r.into_inner().result.unwrap().placed);
        let text = scrape(metrics).await;
        let errors: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("gpusched_accept_errors_total "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(errors >= 1.0, "{errors}");
    });
    let _ = child.kill();
    let _ = child.wait();
}
