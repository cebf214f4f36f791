//! What every command sets up: the request pool, the server (spawned or `--addr`), the client's
//! runtime and its checked connections.

use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};

use super::cli::{ClusterArgs, ServerArgs, WorkloadArgs};
use super::output::ServerInfo;
use crate::process::{SpawnedServer, default_server_bin};
use crate::synth::Pool;
use crate::wire::{self, Rpc};

pub(super) fn build_pool(
    nodes: usize,
    cluster: &ClusterArgs,
    workload: &WorkloadArgs,
) -> anyhow::Result<Pool> {
    anyhow::ensure!(workload.pool > 0, "--pool must be at least 1");
    let spec = cluster.spec(nodes)?;
    let mix = workload.mix()?;
    let mut pool = Pool::build(&spec, &mix, workload.form, workload.pool, cluster.seed);
    if let Some(o) = workload.failed_nodes.options() {
        pool.set_options(o);
    }
    if workload.rpc == Rpc::Preempt {
        anyhow::ensure!(
            workload.placed_per_node > 0,
            "--placed-per-node must be at least 1"
        );
        anyhow::ensure!(
            workload.by_reference == crate::byref::ByRefMode::Off,
            "--rpc preempt sends nodes inline (--by-reference off)"
        );
        crate::placed::apply(
            &mut pool,
            workload.placed_per_node,
            workload.preempt_priority,
            cluster.seed,
        );
        eprintln!(
            "preempt: {} placed workloads per node, pending priority {}",
            workload.placed_per_node, workload.preempt_priority
        );
    }
    eprintln!(
        "cluster: {} nodes x {} cards, {} requests of {:.1} KiB (mean), mix {mix}",
        pool.nodes.len(),
        cluster.cards_per_node,
        pool.encoded.len(),
        pool.mean_request_bytes() / 1024.0
    );
    Ok(pool)
}

/// Rewrites the pool's requests to carry nodes by reference (no-op when off).
pub(super) fn by_reference(pool: &mut Pool, mode: crate::byref::ByRefMode) {
    pool.prime = crate::byref::apply(pool, mode);
    if pool.prime.is_some() {
        eprintln!(
            "by reference ({mode:?}): {:.1} KiB per request (mean)",
            pool.mean_request_bytes() / 1024.0
        );
    }
}

pub(super) fn runtime(threads: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .context("tokio runtime")
}

/// The server to load: a spawned one (kept alive by the returned handle) or `--addr`.
pub(super) fn server(
    args: &ServerArgs,
    spawn_by_default: bool,
) -> anyhow::Result<(ServerInfo, Option<SpawnedServer>)> {
    if let Some(addr) = &args.addr {
        return Ok((
            ServerInfo {
                addr: addr.clone(),
                spawned: false,
                bin: None,
                pid: args.server_pid,
                args: vec![],
            },
            None,
        ));
    }
    if !args.spawn && !spawn_by_default {
        bail!("give --addr HOST:PORT of a running server, or --spawn to start one");
    }
    let bin = match &args.server_bin {
        Some(b) => b.clone(),
        None => default_server_bin().ok_or_else(|| {
            anyhow!(
                "no gpusched-server binary found: build it (cargo build --release -p gpusched-service) or give --server-bin"
            )
        })?,
    };
    let s = SpawnedServer::start(&bin, &args.server_arg, args.server_log.as_deref())?;
    eprintln!(
        "server: {} (pid {}) at {}",
        bin.display(),
        s.pid(),
        s.grpc_addr
    );
    Ok((
        ServerInfo {
            addr: s.grpc_addr.clone(),
            spawned: true,
            bin: Some(bin.display().to_string()),
            pid: Some(s.pid()),
            args: args.server_arg.clone(),
        },
        Some(s),
    ))
}

pub(super) async fn connect_checked(
    addr: &str,
    n: usize,
    pool: &Pool,
    rpc: Rpc,
    timeout: Duration,
) -> anyhow::Result<Vec<tonic::transport::Channel>> {
    let channels = wire::connect(addr, n).await?;
    // One call first: a wrong address or a rejected request fails here, not as a report full of
    // errors.
    if let (Some(ch), Some(req)) = (
        channels.first(),
        pool.prime.as_ref().or(pool.encoded.first()),
    ) {
        wire::call(ch, rpc.path(), req.clone(), Some(timeout))
            .await
            .map_err(|s| {
                anyhow!(
                    "first call failed: {} {}",
                    crate::report::code_name(s.code()),
                    s.message()
                )
            })?;
    }
    Ok(channels)
}
