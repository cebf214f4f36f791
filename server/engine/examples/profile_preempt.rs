//! Runs a preemption K times over N nodes x 8 cards x 10 placed workloads, for
//! instruction-level profiling, and prints what the answer holds:
//! `valgrind --tool=callgrind target/release/examples/profile_preempt N K GPUS CONTAINERS`.

use std::hint::black_box;

use gpusched_engine::{
    Occupancy, PreemptChoice, PreemptLimits, PreemptOptions, PreemptVerdict, preempt,
};

#[path = "../benches/occupied.rs"]
mod occupied;
use occupied::{occupied_cluster, pending};

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (nodes, runs, gpus, containers) = (
        args.first().copied().unwrap_or(1000),
        args.get(1).copied().unwrap_or(10),
        args.get(2).copied().unwrap_or(1),
        args.get(3).copied().unwrap_or(1),
    );
    let (s, placed) = occupied_cluster(nodes, 7);
    let o = Occupancy::new(&s, placed, &PreemptLimits::default()).expect("valid");
    let w = pending(&vec![u32::try_from(gpus).unwrap_or(1); containers.max(1)]);
    let mut last = None;
    for _ in 0..runs {
        last = Some(black_box(preempt(
            black_box(&o),
            black_box(&w),
            150,
            PreemptOptions::default(),
        )));
    }
    let Some(p) = last else { return };
    let (mut needed, mut candidates, mut not, mut victims) = (0, 0, 0, 0usize);
    for n in &p.nodes {
        match &n.verdict {
            PreemptVerdict::NotNeeded(_) => needed += 1,
            PreemptVerdict::Victims(v) => {
                candidates += 1;
                victims += v.ids.len();
            }
            PreemptVerdict::NotCandidate(_) => not += 1,
        }
    }
    let chosen = match p.choice {
        PreemptChoice::Evict(id) => format!(
            "evict on {}: {:?}",
            s[id].name(),
            p.chosen().map(|v| &v.ids)
        ),
        other => format!("{other:?}"),
    };
    println!(
        "{nodes} nodes: {needed} not needed, {candidates} candidates ({victims} victims), {not} not candidates; {chosen}"
    );
}
