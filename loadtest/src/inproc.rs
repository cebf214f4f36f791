//! In-process measurements on the same requests as the gRPC runs:
//!
//! - `engine`: `gpusched_engine::allocate`/`evaluate` on a snapshot and workloads converted
//!   once (the policy alone);
//! - `pipeline`: what the server does per call without the network, HTTP/2, tokio, tracing and
//!   metrics: protobuf decode, `convert` in (limits, options, workload, snapshot), the engine,
//!   `convert` out, protobuf encode, each stage timed.

use std::hint::black_box;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use bytes::BytesMut;
use gpusched_api::v1;
use gpusched_engine as engine;
use gpusched_service::Settings;
use gpusched_service::pipeline::{self, State};
use prost::Message as _;

use crate::report::{Collector, RunReport, STAGES};
use crate::synth::{Encoded, Kind, Pool};
use crate::wire::{Rpc, Summary, summarize};

/// The server's default settings (embedded configuration, no file, no environment).
pub fn default_settings() -> anyhow::Result<Settings> {
    Ok(gpusched_service::default_settings()?)
}

/// Snapshot and workloads converted once, for the engine-only measurement.
#[derive(Debug)]
pub struct Prepared {
    /// The candidate nodes.
    pub snapshot: engine::Snapshot,
    /// The pool's workloads.
    pub workloads: Vec<(Kind, engine::Workload)>,
}

/// Converts the pool's nodes and workloads the way the server does.
pub fn prepare(pool: &Pool, settings: &Settings) -> anyhow::Result<Prepared> {
    let snapshot = pipeline::snapshot(settings, pool.nodes.clone())
        .map_err(|e| anyhow!("synthetic cluster rejected: {e}"))?;
    let workloads = pool
        .workloads
        .iter()
        .map(|(k, w)| {
            pipeline::workload(settings, w.clone())
                .map(|w| (*k, w))
                .map_err(|e| anyhow!("synthetic workload rejected: {e}"))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(Prepared {
        snapshot,
        workloads,
    })
}

/// One engine decision; the summary mirrors what the answer would say.
pub fn engine_once(p: &Prepared, rpc: Rpc, i: usize) -> Option<(Kind, Summary)> {
    let (kind, w) = p.workloads.get(i % p.workloads.len().max(1))?;
    let s = match rpc {
        Rpc::Allocate => {
            let a = black_box(engine::allocate(
                &p.snapshot,
                w,
                engine::DecideOptions::default(),
            ));
            Summary {
                placed: a.placement.is_some(),
                feasible: u32::try_from(a.feasible_count).unwrap_or(u32::MAX),
                failed: u32::try_from(a.failed.len()).unwrap_or(u32::MAX),
                bytes: 0,
            }
        }
        Rpc::Preempt => return None,
        Rpc::Filter | Rpc::Score => {
            let e = black_box(engine::evaluate(
                &p.snapshot,
                w,
                engine::DecideOptions::default(),
            ));
            Summary {
                placed: !e.feasible.is_empty(),
                feasible: u32::try_from(e.feasible.len()).unwrap_or(u32::MAX),
                failed: u32::try_from(e.failed.len()).unwrap_or(u32::MAX),
                bytes: 0,
            }
        }
    };
    Some((*kind, s))
}

/// The service state an in-process run decides with (settings and node cache), built once per
/// run and passed down, as the server builds its own in `main`.
pub fn service_state(settings: &Settings) -> State {
    State::new(
        settings.clone(),
        std::sync::Arc::new(gpusched_service::Metrics::new()),
    )
}

/// One decision the way the server makes it, minus the transport; stage times in ns.
pub fn pipeline_once(
    state: &State,
    rpc: Rpc,
    req: &Encoded,
    decode_from: DecodeFrom,
) -> Result<(Summary, [u64; STAGES.len()]), String> {
    let ns = |a: Instant, b: Instant| u64::try_from((b - a).as_nanos()).unwrap_or(u64::MAX);
    let t0 = Instant::now();
    // The body is first copied out of the frames into one buffer (tonic does the same), then
    // decoded. Filter, Score and Allocate requests share fields 1-3; Allocate adds field 4.
    let decoded = match decode_from {
        DecodeFrom::BytesMut => {
            let mut buf = BytesMut::with_capacity(req.len());
            buf.extend_from_slice(&req.nodes);
            buf.extend_from_slice(&req.workload);
            v1::AllocateRequest::decode(&mut buf)
        }
        DecodeFrom::Slice => {
            let buf = req.to_vec();
            v1::AllocateRequest::decode(buf.as_slice())
        }
    };
    let v1::AllocateRequest {
        node_set,
        nodes,
        workload,
        options,
        restrict_to_node_names: _,
        node_refs,
    } = decoded.map_err(|e| format!("decode: {e}"))?;
    let t1 = Instant::now();
    // The service's own conversion of Filter/Score/Allocate inputs, and of their answers.
    let i = pipeline::inputs(state, nodes, node_refs, node_set, workload, options)
        .map_err(|e| e.to_string())?;
    let (s, w) = (i.snapshot(), i.workload());
    let t2 = Instant::now();
    let (bytes, t3, t4) = match rpc {
        Rpc::Allocate => {
            let a = engine::allocate(s, w, engine::DecideOptions::default());
            let t3 = Instant::now();
            let resp = v1::AllocateResponse {
                result: Some(i.allocation(&a)),
            };
            let t4 = Instant::now();
            (resp.encode_to_vec(), t3, t4)
        }
        Rpc::Filter => {
            let e = engine::evaluate(s, w, engine::DecideOptions::default());
            let t3 = Instant::now();
            let resp = i.filter(&e);
            let t4 = Instant::now();
            (resp.encode_to_vec(), t3, t4)
        }
        Rpc::Score => {
            let e = engine::evaluate(s, w, engine::DecideOptions::default());
            let t3 = Instant::now();
            let resp = i.score(&e);
            let t4 = Instant::now();
            (resp.encode_to_vec(), t3, t4)
        }
        Rpc::Preempt => return Err("--rpc preempt runs over gRPC only".to_owned()),
    };
    let t5 = Instant::now();
    let summary = summarize(rpc, black_box(&bytes));
    Ok((
        summary,
        [ns(t0, t1), ns(t1, t2), ns(t2, t3), ns(t3, t4), ns(t4, t5)],
    ))
}

/// What the in-process pipeline decodes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum DecodeFrom {
    /// A `BytesMut` read through the `Buf` trait, as tonic's `ProstDecoder` does today.
    #[default]
    BytesMut,
    /// A plain `&[u8]` (what a codec that hands prost one contiguous slice would do).
    Slice,
}

/// What to measure in process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum InProc {
    /// The engine alone.
    Engine,
    /// Decode, convert, engine, convert, encode.
    Pipeline,
}

impl InProc {
    /// Name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            InProc::Engine => "engine",
            InProc::Pipeline => "pipeline",
        }
    }
}

/// An in-process run.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Engine or pipeline.
    pub what: InProc,
    /// The RPC.
    pub rpc: Rpc,
    /// OS threads, each calling back to back.
    pub threads: usize,
    /// Not recorded.
    pub warmup: Duration,
    /// Measured.
    pub duration: Duration,
    /// Pipeline: what protobuf decodes from.
    pub decode_from: DecodeFrom,
}

/// Closed loop on `threads` OS threads, each calling back to back, for `warmup + duration`.
pub fn run(pool: &Pool, settings: &Settings, o: &Options) -> anyhow::Result<RunReport> {
    let Options {
        what,
        rpc,
        threads,
        warmup,
        duration,
        decode_from,
    } = *o;
    anyhow::ensure!(rpc != Rpc::Preempt, "--rpc preempt runs over gRPC only");
    let prepared = match what {
        InProc::Engine => Some(prepare(pool, settings)?),
        InProc::Pipeline => None,
    };
    let state = &service_state(settings);
    // Nodes by reference: the prime request warms the node cache first.
    if what == InProc::Pipeline
        && let Some(prime) = &pool.prime
    {
        pipeline_once(state, rpc, prime, decode_from).map_err(|e| anyhow!(e))?;
    }
    let threads = threads.max(1);
    let start = Instant::now();
    let measure = start + warmup;
    let end = measure + duration;
    let collectors: Vec<Collector> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let prepared = prepared.as_ref();
                scope.spawn(move || {
                    let mut c = Collector::default();
                    let mut i = t;
                    loop {
                        let t0 = Instant::now();
                        // Every worker finishes at least one measured call: on a starved
                        // machine a thread may first run after the window, and a run that
                        // measured nothing would report no latency at all (throughput still
                        // counts only the calls inside the window).
                        if t0 >= end && c.requests > 0 {
                            break;
                        }
                        let entry = pool.encoded.get(i % pool.encoded.len().max(1));
                        let out = match (prepared, entry) {
                            (Some(p), _) => engine_once(p, rpc, i)
                                .map(|(k, s)| (k, Ok((s, None))))
                                .ok_or("empty pool"),
                            (None, Some(e)) => Ok((
                                e.kind,
                                pipeline_once(state, rpc, e, decode_from)
                                    .map(|(s, st)| (s, Some(st))),
                            )),
                            (None, None) => Err("empty pool"),
                        };
                        let t1 = Instant::now();
                        i += threads;
                        let Ok((kind, result)) = out else { break };
                        if t0 < measure {
                            continue;
                        }
                        match result {
                            Ok((s, stages)) => {
                                c.record(kind, t1 - t0, t1 <= end, Ok(&s));
                                if let Some(st) = stages {
                                    for (a, b) in c.stage_ns.iter_mut().zip(st) {
                                        *a += b;
                                    }
                                    c.stage_samples += 1;
                                }
                            }
                            Err(_) => c.record(kind, t1 - t0, t1 <= end, Err("INVALID_ARGUMENT")),
                        }
                    }
                    c
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let mut all = Collector::default();
    for c in &collectors {
        all.merge(c);
    }
    let mut r = all.report(what.as_str(), "closed", duration.as_secs_f64());
    r.concurrency = Some(threads);
    Ok(r)
}

/// Runs `iterations` decisions back to back (for `valgrind --tool=callgrind`); returns the
/// mean time per decision.
pub fn profile(
    what: InProc,
    pool: &Pool,
    settings: &Settings,
    rpc: Rpc,
    iterations: usize,
    decode_from: DecodeFrom,
) -> anyhow::Result<Duration> {
    let prepared = match what {
        InProc::Engine => Some(prepare(pool, settings)?),
        InProc::Pipeline => None,
    };
    let state = service_state(settings);
    let start = Instant::now();
    for i in 0..iterations {
        match &prepared {
            Some(p) => {
                black_box(engine_once(p, rpc, i));
            }
            None => {
                let e = pool
                    .encoded
                    .get(i % pool.encoded.len().max(1))
                    .ok_or_else(|| anyhow!("empty pool"))?;
                pipeline_once(&state, rpc, e, decode_from).map_err(|e| anyhow!(e))?;
            }
        }
    }
    Ok(start.elapsed() / u32::try_from(iterations.max(1)).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::synth::{ClusterSpec, Form, Mix};

    #[test]
    fn pipeline_and_engine_agree() {
        let settings = default_settings().unwrap();
        let pool = Pool::build(
            &ClusterSpec::new(20, 4),
            &Mix::default(),
            Form::Kubernetes,
            8,
            3,
        );
        let prepared = prepare(&pool, &settings).unwrap();
        for rpc in [Rpc::Allocate, Rpc::Filter, Rpc::Score] {
            for (i, e) in pool.encoded.iter().enumerate() {
                let state = service_state(&settings);
                let (s, stages) = pipeline_once(&state, rpc, e, DecodeFrom::BytesMut).unwrap();
                let (s2, _) = pipeline_once(&state, rpc, e, DecodeFrom::Slice).unwrap();
                assert_eq!(s, s2);
                let (_, direct) = engine_once(&prepared, rpc, i).unwrap();
                assert_eq!(
                    (s.placed, s.feasible, s.failed),
                    (direct.placed, direct.feasible, direct.failed)
                );
                assert!(s.bytes > 0);
                assert!(stages.iter().all(|&ns| ns < 10_000_000_000));
            }
        }
    }

    #[test]
    fn short_runs_report_no_errors() {
        let settings = default_settings().unwrap();
        let pool = Pool::build(&ClusterSpec::new(10, 8), &Mix::default(), Form::Typed, 4, 1);
        for what in [InProc::Engine, InProc::Pipeline] {
            let o = Options {
                what,
                rpc: Rpc::Allocate,
                threads: 1,
                warmup: Duration::from_millis(10),
                duration: Duration::from_millis(50),
                decode_from: DecodeFrom::default(),
            };
            let r = run(&pool, &settings, &o).unwrap();
            assert!(r.ok > 0, "{r:?}");
            assert_eq!(r.error_count(), 0);
            assert_eq!(r.stages_us.is_some(), what == InProc::Pipeline);
        }
    }
}
