//! `sweep`: the same workload over several cluster sizes (engine, pipeline, gRPC, and by
//! reference), written as sweep.json and charted as sweep.svg.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use super::cli::SweepArgs;
use super::output::{Machine, SweepOutput, SweepPoint, cluster_info, cpus, describe, write_json};
use super::setup::{build_pool, by_reference, connect_checked, runtime, server};
use crate::chart::{Line, write_svg};
use crate::inproc::{self, InProc};
use crate::load::{self, Target, Window};
use crate::process::SpawnedServer;
use crate::wire::Rpc;

pub(super) fn sweep(a: SweepArgs) -> anyhow::Result<()> {
    anyhow::ensure!(!a.sizes.is_empty(), "--sizes: give at least one size");
    anyhow::ensure!(
        a.workload.rpc != Rpc::Preempt,
        "sweep runs in process too: measure --rpc preempt with `run` (over gRPC)"
    );
    let w = Window {
        warmup: a.warmup.duration(),
        duration: a.duration.duration(),
    };
    anyhow::ensure!(w.duration > Duration::ZERO, "--duration must be positive");
    let settings = inproc::default_settings()?;
    let (info, spawned) = server(&a.server, true)?;
    let server_pid = spawned
        .as_ref()
        .map(SpawnedServer::pid)
        .or(a.server.server_pid);
    let rt = runtime(a.client.client_threads)?;
    let timeout = a.client.timeout.duration();
    let connections = a.client.connections.unwrap_or(a.concurrency.clamp(1, 4));
    let mut points = Vec::new();
    for &nodes in &a.sizes {
        let pool = build_pool(nodes, &a.cluster, &a.workload)?;
        let o = inproc::Options {
            what: InProc::Engine,
            rpc: a.workload.rpc,
            threads: a.inproc_threads,
            warmup: w.warmup,
            duration: w.duration,
            decode_from: a.decode_from,
        };
        let engine = inproc::run(&pool, &settings, &o)?;
        eprintln!("  {}", describe(&engine));
        let pipeline = if a.no_pipeline {
            None
        } else {
            let o = inproc::Options {
                what: InProc::Pipeline,
                ..o
            };
            let r = inproc::run(&pool, &settings, &o)?;
            eprintln!("  {}", describe(&r));
            Some(r)
        };
        let (lat, thr) = rt.block_on(async {
            let channels =
                connect_checked(&info.addr, connections, &pool, a.workload.rpc, timeout).await?;
            let first: Vec<_> = channels.iter().take(1).cloned().collect();
            let mut target = Target {
                channels: Arc::new(first),
                pool: Arc::new(pool.encoded.clone()),
                rpc: a.workload.rpc,
                timeout: Some(timeout),
                server_pid,
            };
            let lat = load::closed(&target, 1, w).await?;
            eprintln!("  {}", describe(&lat));
            target.channels = Arc::new(channels);
            let thr = load::closed(&target, a.concurrency, w).await?;
            eprintln!("  {}", describe(&thr));
            anyhow::Ok((lat, thr))
        })?;
        let byref = if a.workload.by_reference == crate::byref::ByRefMode::Off {
            None
        } else {
            let mut bpool = pool.clone();
            by_reference(&mut bpool, a.workload.by_reference);
            let (lat, thr) = rt.block_on(async {
                let channels =
                    connect_checked(&info.addr, connections, &bpool, a.workload.rpc, timeout)
                        .await?;
                let first: Vec<_> = channels.iter().take(1).cloned().collect();
                let mut target = Target {
                    channels: Arc::new(first),
                    pool: Arc::new(bpool.encoded.clone()),
                    rpc: a.workload.rpc,
                    timeout: Some(timeout),
                    server_pid,
                };
                let lat = load::closed(&target, 1, w).await?;
                eprintln!("  by reference: {}", describe(&lat));
                target.channels = Arc::new(channels);
                let thr = load::closed(&target, a.concurrency, w).await?;
                eprintln!("  by reference: {}", describe(&thr));
                anyhow::Ok((lat, thr))
            })?;
            Some((bpool.mean_request_bytes(), lat, thr))
        };
        let (byref_request_bytes, byref_latency, byref_throughput) = match byref {
            Some((b, l, t)) => (Some(b), Some(l), Some(t)),
            None => (None, None, None),
        };
        points.push(SweepPoint {
            whole_request_bytes: pool.mean_request_bytes(),
            byref_request_bytes,
            byref_latency,
            byref_throughput,
            cluster: cluster_info(&pool),
            wire_added_p50_us: ((lat.latency_us.p50 - engine.latency_us.p50) * 10.0).round() / 10.0,
            engine,
            pipeline,
            grpc_latency: lat,
            grpc_throughput: thr,
        });
    }
    drop(spawned);
    std::fs::create_dir_all(&a.out_dir)
        .with_context(|| format!("creating {}", a.out_dir.display()))?;
    let svg = a.out_dir.join("sweep.svg");
    chart_sweep(&svg, &a, &points)?;
    let out = SweepOutput {
        tool: "gpusched-loadtest",
        version: env!("CARGO_PKG_VERSION"),
        config: a.clone(),
        machine: Machine {
            cpus: cpus(),
            client_shares_cpus_with_server: info.spawned,
        },
        server: info,
        points,
    };
    write_json(Some(&a.out_dir.join("sweep.json")), &out)?;
    eprintln!("chart: {}", svg.display());
    Ok(())
}

fn chart_sweep(path: &Path, a: &SweepArgs, points: &[SweepPoint]) -> anyhow::Result<()> {
    let x = |p: &SweepPoint| p.cluster.nodes as f64;
    let line =
        |label: &str, color: usize, dashed: bool, f: &dyn Fn(&SweepPoint) -> Option<f64>| Line {
            label: label.to_owned(),
            points: points
                .iter()
                .filter_map(|p| f(p).map(|y| (x(p), y)))
                .collect(),
            color,
            dashed,
        };
    let mut latency = vec![
        line("engine p50", 0, false, &|p| Some(p.engine.latency_us.p50)),
        line("engine p99", 0, true, &|p| Some(p.engine.latency_us.p99)),
    ];
    let mut throughput = vec![line(
        &format!("engine ({} thread)", a.inproc_threads),
        0,
        false,
        &|p| Some(p.engine.throughput_per_s),
    )];
    if !a.no_pipeline {
        latency.push(line("pipeline p50", 1, false, &|p| {
            p.pipeline.as_ref().map(|r| r.latency_us.p50)
        }));
        latency.push(line("pipeline p99", 1, true, &|p| {
            p.pipeline.as_ref().map(|r| r.latency_us.p99)
        }));
        throughput.push(line(
            &format!("pipeline ({} thread)", a.inproc_threads),
            1,
            false,
            &|p| p.pipeline.as_ref().map(|r| r.throughput_per_s),
        ));
    }
    latency.push(line("gRPC p50 (1 in flight)", 3, false, &|p| {
        Some(p.grpc_latency.latency_us.p50)
    }));
    latency.push(line("gRPC p99 (1 in flight)", 3, true, &|p| {
        Some(p.grpc_latency.latency_us.p99)
    }));
    throughput.push(line(
        &format!("gRPC ({} in flight)", a.concurrency),
        3,
        false,
        &|p| Some(p.grpc_throughput.throughput_per_s),
    ));
    if points.iter().any(|p| p.byref_latency.is_some()) {
        latency.push(line(
            "gRPC by reference p50 (1 in flight)",
            2,
            false,
            &|p| p.byref_latency.as_ref().map(|r| r.latency_us.p50),
        ));
        latency.push(line("gRPC by reference p99 (1 in flight)", 2, true, &|p| {
            p.byref_latency.as_ref().map(|r| r.latency_us.p99)
        }));
        throughput.push(line(
            &format!("gRPC by reference ({} in flight)", a.concurrency),
            2,
            false,
            &|p| p.byref_throughput.as_ref().map(|r| r.throughput_per_s),
        ));
    }
    let bytes: Vec<String> = points
        .iter()
        .map(|p| match p.byref_request_bytes {
            Some(b) => format!(
                "{}: {:.0}/{:.1} KiB",
                p.cluster.nodes,
                p.whole_request_bytes / 1024.0,
                b / 1024.0
            ),
            None => format!(
                "{}: {:.0} KiB",
                p.cluster.nodes,
                p.whole_request_bytes / 1024.0
            ),
        })
        .collect();
    let title = format!(
        "gpusched {} over cluster size: in process vs gRPC ({} CPUs shared by client and server); request bytes whole/by-ref {}",
        match a.workload.rpc {
            Rpc::Allocate => "Allocate",
            Rpc::Filter => "Filter",
            Rpc::Score => "Score",
            Rpc::Preempt => "Preempt",
        },
        cpus(),
        bytes.join(", ")
    );
    write_svg(path, &title, &latency, &throughput)
}
