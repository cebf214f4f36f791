//! `run`: one cluster size, over gRPC (closed or open loop) or in process.

use std::sync::Arc;
use std::time::Duration;

use super::cli::{RunArgs, RunTarget};
use super::output::{Machine, RunOutput, cluster_info, cpus, describe, peak, write_json};
use super::setup::{build_pool, by_reference, connect_checked, runtime, server};
use crate::inproc::{self, InProc};
use crate::load::{self, Target, Window};
use crate::process::SpawnedServer;

pub(super) fn run(a: RunArgs) -> anyhow::Result<()> {
    let mut pool = build_pool(a.nodes, &a.cluster, &a.workload)?;
    if a.target != RunTarget::Engine {
        by_reference(&mut pool, a.workload.by_reference);
    }
    let w = Window {
        warmup: a.warmup.duration(),
        duration: a.duration.duration(),
    };
    anyhow::ensure!(w.duration > Duration::ZERO, "--duration must be positive");
    let mut runs = Vec::new();
    let mut server_info = None;
    match a.target {
        RunTarget::Engine | RunTarget::Pipeline => {
            anyhow::ensure!(a.rate.is_empty(), "--rate is for --target grpc");
            anyhow::ensure!(
                a.workload.rpc != crate::wire::Rpc::Preempt,
                "--rpc preempt runs over gRPC (the engine's preemption has its criterion bench)"
            );
            let what = if a.target == RunTarget::Engine {
                InProc::Engine
            } else {
                InProc::Pipeline
            };
            let settings = inproc::default_settings()?;
            let threads = if a.concurrency.is_empty() {
                vec![1]
            } else {
                a.concurrency.clone()
            };
            for t in threads {
                let o = inproc::Options {
                    what,
                    rpc: a.workload.rpc,
                    threads: t,
                    warmup: w.warmup,
                    duration: w.duration,
                    decode_from: a.decode_from,
                };
                let r = inproc::run(&pool, &settings, &o)?;
                eprintln!("{}", describe(&r));
                runs.push(r);
            }
        }
        RunTarget::Grpc => {
            let (info, spawned) = server(&a.server, false)?;
            let rt = runtime(a.client.client_threads)?;
            let concurrency = if a.concurrency.is_empty() && a.rate.is_empty() {
                vec![16]
            } else {
                a.concurrency.clone()
            };
            let max_c = concurrency.iter().copied().max().unwrap_or(1);
            let connections = a.client.connections.unwrap_or(if a.rate.is_empty() {
                max_c.clamp(1, 4)
            } else {
                4
            });
            let timeout = a.client.timeout.duration();
            let server_pid = spawned
                .as_ref()
                .map(SpawnedServer::pid)
                .or(a.server.server_pid);
            let result: anyhow::Result<()> = rt.block_on(async {
                let channels =
                    connect_checked(&info.addr, connections, &pool, a.workload.rpc, timeout)
                        .await?;
                let target = Target {
                    channels: Arc::new(channels),
                    pool: Arc::new(pool.encoded.clone()),
                    rpc: a.workload.rpc,
                    timeout: Some(timeout),
                    server_pid,
                };
                for &c in &concurrency {
                    let r = load::closed(&target, c, w).await?;
                    eprintln!("{}", describe(&r));
                    runs.push(r);
                }
                for &rate in &a.rate {
                    let r = load::open(&target, rate, a.max_outstanding, w).await?;
                    eprintln!("{}", describe(&r));
                    runs.push(r);
                }
                Ok(())
            });
            result?;
            drop(spawned);
            server_info = Some(info);
        }
    }
    let shares = server_info
        .as_ref()
        .is_some_and(|s| s.spawned || s.addr.starts_with("127.") || s.addr.contains("localhost"));
    let out = RunOutput {
        tool: "gpusched-loadtest",
        version: env!("CARGO_PKG_VERSION"),
        machine: Machine {
            cpus: cpus(),
            client_shares_cpus_with_server: shares,
        },
        cluster: cluster_info(&pool),
        server: server_info,
        peak: peak(&runs),
        runs,
        config: a.clone(),
    };
    write_json(a.out.as_deref(), &out)
}
