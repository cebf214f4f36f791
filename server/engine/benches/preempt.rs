//! `cargo bench -p gpusched-engine --bench preempt`: preemption over 1,000 nodes x 8 cards x
//! 10 placed workloads per node (`occupied.rs`); every node runs the full victim search.
//! Pending priority 150: about three quarters of the workloads are eligible.

use std::hint::black_box;

use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use gpusched_engine::{Occupancy, PreemptLimits, PreemptOptions, preempt};

mod occupied;
use occupied::{occupied_cluster, pending};

fn bench(c: &mut Criterion) {
    let nodes = 1_000;
    let (snapshot, placed) = occupied_cluster(nodes, 7);
    let limits = PreemptLimits::default();
    let occupancy = Occupancy::new(&snapshot, placed.clone(), &limits).expect("valid");
    let mut group = c.benchmark_group("preempt");
    group.throughput(Throughput::Elements(nodes as u64));
    group.bench_function(BenchmarkId::new("validate", nodes), |b| {
        b.iter_batched(
            || placed.clone(),
            |p| black_box(Occupancy::new(&snapshot, p, &limits).map(|o| o.snapshot().len())),
            BatchSize::LargeInput,
        )
    });
    for (label, containers) in [
        ("1-card", &[1u32][..]),
        ("4-card", &[4]),
        ("2x1-card", &[1, 1]),
    ] {
        let w = pending(containers);
        for (options, suffix) in [
            (PreemptOptions::default(), ""),
            (PreemptOptions::explained(), "+explain"),
        ] {
            group.bench_function(BenchmarkId::new(format!("{label}{suffix}"), nodes), |b| {
                b.iter(|| black_box(preempt(black_box(&occupancy), &w, 150, options)))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
