//! Runs Allocate K times over N nodes x 8 cards, for instruction-level profiling:
//! `valgrind --tool=callgrind target/release/examples/profile_allocate N K GPUS`.

use std::hint::black_box;

use gpusched_engine::{DecideOptions, allocate};

#[path = "../benches/cluster.rs"]
mod cluster;
use cluster::{cluster, workload};

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
    let w = workload(u32::try_from(gpus).unwrap_or(1));
    for _ in 0..runs {
        black_box(allocate(
            black_box(&s),
            black_box(&w),
            DecideOptions::default(),
        ));
    }
}
