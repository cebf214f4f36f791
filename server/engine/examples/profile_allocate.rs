//! Runs Allocate K times over N nodes x 8 cards, for instruction-level profiling:
//! `valgrind --tool=callgrind target/release/examples/profile_allocate N K GPUS [quota]`
//! (`quota`: with a quota budget that is checked on every card but never binds; `fgd`: node
//! and GPU policy fgd with the 35-shape mix).

use std::hint::black_box;

use gpusched_engine::{DecideOptions, QuotaBudget, allocate};

#[path = "../benches/cluster.rs"]
mod cluster;
use cluster::{cluster, fgd_workload, workload};

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (nodes, runs, gpus) = (
        args.first().copied().unwrap_or(1000),
        args.get(1).copied().unwrap_or(100),
        args.get(2).copied().unwrap_or(1),
    );
    let s = cluster(nodes, 42);
    let gpus = u32::try_from(gpus).unwrap_or(1);
    let mut w = if std::env::args().any(|a| a == "fgd") {
        fgd_workload(gpus)
    } else {
        workload(gpus)
    };
    if std::env::args().any(|a| a == "quota") {
        let budget = QuotaBudget {
            mem_mib: Some(1 << 30),
            cores: Some(1 << 20),
        };
        w = w.with_quota(budget).unwrap_or_else(|e| panic!("{e}"));
    }
    for _ in 0..runs {
        black_box(allocate(
            black_box(&s),
            black_box(&w),
            DecideOptions::default(),
        ));
    }
}
