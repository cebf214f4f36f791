//! `cargo bench -p gpusched-engine`: Allocate of a 1-card and a 4-card workload over
//! 100, 1,000 and 5,000 nodes x 8 cards with random (seeded) usage; the same on 1,000 nodes
//! with a quota budget that never binds.

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use gpusched_engine::{DecideOptions, QuotaBudget, allocate, evaluate};

mod cluster;
use cluster::{cluster, fgd_workload, workload};

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("allocate");
    for nodes in [100usize, 1_000, 5_000] {
        let snapshot = cluster(nodes, 42);
        group.throughput(Throughput::Elements(nodes as u64));
        for gpus in [1u32, 4] {
            let w = workload(gpus);
            group.bench_with_input(
                BenchmarkId::new(format!("{gpus}-card"), nodes),
                &snapshot,
                |b, s| {
                    b.iter(|| {
                        black_box(allocate(
                            black_box(s),
                            black_box(&w),
                            DecideOptions::default(),
                        ))
                    })
                },
            );
        }
    }
    group.finish();
    // A quota budget that is checked on every card but never binds (section 10): the cost of
    // the running total itself.
    let mut group = c.benchmark_group("quota");
    let snapshot = cluster(1_000, 42);
    group.throughput(Throughput::Elements(1_000));
    for gpus in [1u32, 4] {
        let budget = QuotaBudget {
            mem_mib: Some(1 << 30),
            cores: Some(1 << 20),
        };
        let w = workload(gpus).with_quota(budget).expect("valid budget");
        group.bench_function(format!("{gpus}-card/1000"), |b| {
            b.iter(|| {
                black_box(allocate(
                    black_box(&snapshot),
                    black_box(&w),
                    DecideOptions::default(),
                ))
            })
        });
    }
    group.finish();
    // Node and GPU policy fgd with a 35-shape mix (section 12), against binpack on the same
    // cluster (the default GPU policy spread is the `allocate` group's).
    let mut group = c.benchmark_group("fgd");
    let snapshot = cluster(1_000, 42);
    group.throughput(Throughput::Elements(1_000));
    for gpus in [1u32, 4] {
        let w = fgd_workload(gpus);
        group.bench_function(format!("{gpus}-card/1000"), |b| {
            b.iter(|| {
                black_box(allocate(
                    black_box(&snapshot),
                    black_box(&w),
                    DecideOptions::default(),
                ))
            })
        });
    }
    group.finish();
    let mut group = c.benchmark_group("score");
    let snapshot = cluster(1_000, 42);
    let w = workload(1);
    group.bench_function("1-card/1000", |b| {
        b.iter(|| black_box(evaluate(black_box(&snapshot), &w, DecideOptions::default())))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
