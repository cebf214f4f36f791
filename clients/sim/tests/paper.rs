//! The flags of the paper's experiment, each on a trace small enough to know the answer:
//! `--seed` (the order is the seed's, always the same), `--tune` (the demand reaches the ratio),
//! `--host` (a pod is refused where CPU or memory is short), the bins at 100 % arrived demand,
//! `--placements` (the file's content), and pod lists with fewer columns (file order, no
//! departures).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::path::Path;

use gpusched_sim::app::{self, Args};
use gpusched_sim::order::paper_order;
use gpusched_sim::trace::{ReadOptions, read_trace};

mod common;
use common::Files;

fn args(files: &Files, trace: &Path, nodes: &Path, setups: &[&str]) -> Args {
    Args {
        setups: setups.iter().map(|s| (*s).to_owned()).collect(),
        samples: 50,
        no_png: true,
        placements: Some(files.root.join("placements.csv")),
        ..common::args(trace, nodes, files.root.join("out"))
    }
}

const HEADER: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

/// `n` pods of mixed shapes (full columns).
fn mixed_pods(n: usize) -> String {
    let mut s = String::from(HEADER);
    let shapes = [(1, 1000), (1, 500), (1, 250), (2, 1000), (1, 750), (0, 0)];
    for i in 0..n {
        let (g, m) = shapes[(i * 7 + i / 3) % shapes.len()];
        let _ = writeln!(
            s,
            "pod-{i:03},2000,4096,{g},{m},,LS,Running,{i},{},{i}",
            i + 30
        );
    }
    s
}

/// The rows of the placements file (without its header), split into fields.
fn rows(files: &Files) -> Vec<Vec<String>> {
    let csv = std::fs::read_to_string(files.root.join("placements.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some("setup,seed,event,workload,node,cards,host_cpu_milli,host_mem_mib")
    );
    lines
        .map(|l| l.split(',').map(str::to_owned).collect())
        .collect()
}

/// The same seed gives the same order and the same decisions; the order is the documented
/// one (`paper_order`: sorted by name, shuffled with the seed), whatever the file's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_gives_one_order_and_one_outcome() {
    let files = Files::new();
    let nodes = files.write(
        "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,4,T4\nn2,64000,262144,2,T4\n",
    );
    let text = mixed_pods(40);
    let pods = files.write("pods.csv", &text);
    // The same pods, rows reversed.
    let mut lines: Vec<&str> = text.lines().skip(1).collect();
    lines.reverse();
    let reversed = files.write("reversed.csv", &format!("{HEADER}{}\n", lines.join("\n")));

    let mut a = args(&files, &pods, &nodes, &["binpack/binpack", "fgd/fgd"]);
    a.seed = Some(7);
    app::run(&a).await.unwrap();
    let first = std::fs::read_to_string(files.root.join("placements.csv")).unwrap();
    a.trace = reversed;
    app::run(&a).await.unwrap();
    let again = std::fs::read_to_string(files.root.join("placements.csv")).unwrap();
    assert_eq!(
        first, again,
        "same seed, same decisions, whatever the file order"
    );

    // Arrivals in the documented order.
    let trace = read_trace(&pods, &ReadOptions::default()).unwrap();
    let (order, _) = paper_order(&trace.jobs, 7, None, 6.0);
    let want: Vec<String> = order.iter().map(|j| j.name.clone()).collect();
    let got: Vec<String> = rows(&files)
        .iter()
        .filter(|r| r[0] == "binpack/binpack")
        .map(|r| r[3].clone())
        .collect();
    assert_eq!(got, want);
    let mut sorted = want.clone();
    sorted.sort();
    assert_ne!(want, sorted, "shuffled, not sorted");
    assert!(rows(&files).iter().all(|r| r[1] == "7"));

    a.seed = Some(8);
    app::run(&a).await.unwrap();
    let other: Vec<String> = rows(&files)
        .iter()
        .filter(|r| r[0] == "binpack/binpack")
        .map(|r| r[3].clone())
        .collect();
    assert_ne!(other, want, "another seed, another order");
}

/// `--tune 1.3`: pods drawn from the trace are appended until the next draw would pass 130 %
/// of the cluster's GPUs: the demand is within the target and less than one pod below it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tune_up_reaches_the_ratio() {
    let files = Files::new();
    // 10 cards.
    let nodes = files.write(
        "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,8,T4\nn2,64000,262144,2,T4\n",
    );
    // 10 pods (one without GPU, skipped): 7.5 GPUs of demand, below 13 (130 %).
    let pods = files.write("pods.csv", &mixed_pods(10));
    let trace = read_trace(&pods, &ReadOptions::default()).unwrap();
    let before: f64 = trace.jobs.iter().map(|j| j.demand).sum();
    assert!((before - 7.5).abs() < 1e-9, "{before}");
    let largest = trace.jobs.iter().map(|j| j.demand).fold(0.0, f64::max);
    for seed in [1u64, 2, 3, 42] {
        let (jobs, stats) = paper_order(&trace.jobs, seed, Some(1.3), 10.0);
        let total: f64 = jobs.iter().map(|j| j.demand).sum();
        assert!(total <= 13.0 + 1e-9, "seed {seed}: {total}");
        assert!(total > 13.0 - largest, "seed {seed}: {total} stops short");
        assert!(stats.tuned > 0 && stats.removed == 0);
        assert_eq!(jobs.len(), trace.jobs.len() + stats.tuned);
        assert!(
            jobs[trace.jobs.len()..]
                .iter()
                .all(|j| j.name.contains("-tuned-"))
        );
    }
    // Through the command line: the report's order and the placements file say the same.
    let mut a = args(&files, &pods, &nodes, &["binpack/binpack"]);
    a.seeds = Some("5-6".into());
    a.tune = Some(1.3);
    let o = app::run(&a).await.unwrap();
    let p = o.report.paper.as_ref().unwrap();
    assert_eq!(p.tune, Some(1.3));
    for (k, seed) in [5u64, 6].iter().enumerate() {
        let names: Vec<String> = rows(&files)
            .iter()
            .filter(|r| r[1] == seed.to_string())
            .map(|r| r[3].clone())
            .collect();
        assert_eq!(names.len(), trace.jobs.len() + p.order[k].tuned);
        let demand: f64 = names
            .iter()
            .map(|n| {
                let base = n.split("-tuned-").next().unwrap();
                trace.jobs.iter().find(|j| j.name == base).unwrap().demand
            })
            .sum();
        assert!(demand <= 13.0 + 1e-9 && demand > 13.0 - largest, "{demand}");
    }
}

/// `--host`: a pod is not placed on a node whose free CPU or memory is short, even where its
/// GPUs fit and the policy prefers the node; without the filter it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_filter_refuses_short_cpu_or_memory() {
    let files = Files::new();
    // Node binpack prefers `a-small` (2 cards: fuller after any placement than `b-big`'s 8),
    // which has 4 CPUs and 16 GiB only.
    let nodes = files.write(
        "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu,model\na-small,4000,16384,2,T4\nb-big,64000,262144,8,T4\n",
    );
    let pods = files.write(
        "pods.csv",
        &format!(
            "{HEADER}\
             cpu-hungry,8000,1024,1,250,,LS,Running,0,,0\n\
             mem-hungry,1000,32768,1,250,,LS,Running,1,,1\n\
             fits-small,2000,8192,1,1000,,LS,Running,2,,2\n\
             too-much,100000,1024,1,100,,LS,Running,3,,3\n"
        ),
    );
    let node_of = |rows: &[Vec<String>], w: &str| {
        rows.iter()
            .find(|r| r[3] == w)
            .map(|r| r[4].clone())
            .unwrap()
    };
    let mut a = args(&files, &pods, &nodes, &["binpack/binpack"]);
    a.fill = true;
    // Without the filter the GPU rules alone decide: everything on `a-small`.
    let o = app::run(&a).await.unwrap();
    assert_eq!(o.report.setups[0].unplaced, 0);
    let r = rows(&files);
    for w in ["cpu-hungry", "mem-hungry", "fits-small", "too-much"] {
        assert_eq!(node_of(&r, w), "a-small", "{w}: {r:?}");
    }

    a.host = true;
    let o = app::run(&a).await.unwrap();
    let r = rows(&files);
    assert_eq!(
        node_of(&r, "cpu-hungry"),
        "b-big",
        "CPU short on a-small: {r:?}"
    );
    assert_eq!(
        node_of(&r, "mem-hungry"),
        "b-big",
        "memory short on a-small: {r:?}"
    );
    assert_eq!(node_of(&r, "fits-small"), "a-small", "{r:?}");
    assert_eq!(node_of(&r, "too-much"), "", "no node has the CPU: {r:?}");
    let s = &o.report.setups[0];
    assert_eq!((s.placed, s.unplaced), (3, 1));
    // The host resources booked are the pod's.
    let row = r.iter().find(|r| r[3] == "mem-hungry").unwrap();
    assert_eq!((row[6].as_str(), row[7].as_str()), ("1000", "32768"));
}

/// Allocation and fragmentation at 100 % arrived demand: 10 cards, 25 pods of 40 % of a card
/// (4 % of the cluster each): two fit a card, so the 21st to 25th are not placed; at 100 %
/// arrived (the 25th pod) 80 % is allocated and the free 20 % is all fragmented (no 40 % pod
/// fits 20 free cores).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bins_at_100_percent_arrived() {
    let files = Files::new();
    let nodes = files.write(
        "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,4,T4\nn2,64000,262144,4,T4\nn3,64000,262144,2,T4\n",
    );
    let mut text = String::from(HEADER);
    for i in 0..25 {
        let _ = writeln!(text, "p{i:02},1000,1024,1,400,,LS,Running,{i},,{i}");
    }
    let pods = files.write("pods.csv", &text);
    let mut a = args(&files, &pods, &nodes, &["binpack/binpack", "fgd/fgd"]);
    a.seeds = Some("1-3".into());
    let o = app::run(&a).await.unwrap();
    let p = o.report.paper.as_ref().unwrap();
    for s in &p.setups {
        for run in &s.per_seed {
            assert_eq!(run.allocation_at_100, Some(80.0), "{}", s.name);
            assert_eq!(run.fragmentation_at_100, Some(20.0), "{}", s.name);
            assert_eq!(run.fragmentation_ratio_at_100, Some(100.0), "{}", s.name);
            assert_eq!((run.placed, run.unplaced), (20, 5));
        }
        let alloc = s.allocation_at_100.unwrap();
        assert_eq!(
            (alloc.median, alloc.min, alloc.max, alloc.runs),
            (80.0, 80.0, 80.0, 3)
        );
        // Before the cluster is full, allocation follows the arrived demand.
        assert_eq!(s.allocation_by_demand[40], Some(40.0));
        assert_eq!(s.allocation_by_demand[76], Some(76.0));
        assert_eq!(s.allocation_by_demand[92], Some(80.0));
        // Arrivals every 4 %: a bin two percent from any arrival is empty.
        assert_eq!(s.allocation_by_demand[74], None);
        assert_eq!(s.allocation_by_demand[78], None);
        assert_eq!(s.allocation_by_demand[77], Some(76.0), "within one percent");
        assert_eq!(s.allocation_by_demand[110], None, "no arrival near 110 %");
    }
}

/// `--placements`: one row per arrival in event order, with the node and each card as
/// `id:MiB:cores`, and the host resources of the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_placements_file_lists_every_decision() {
    let files = Files::new();
    // T4: 16,384 MiB per card.
    let nodes = files.write(
        "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,2,T4\n",
    );
    let pods = files.write(
        "pods.csv",
        &format!(
            "{HEADER}\
             half,4000,8192,1,500,,LS,Running,0,,0\n\
             two,8000,16384,2,1000,,LS,Running,1,,1\n\
             quarter,1000,2048,1,250,,LS,Running,2,10,2\n\
             whole,2000,4096,1,1000,,LS,Running,3,,3\n"
        ),
    );
    let mut a = args(&files, &pods, &nodes, &["binpack/binpack"]);
    a.fill = true;
    app::run(&a).await.unwrap();
    let csv = std::fs::read_to_string(files.root.join("placements.csv")).unwrap();
    assert_eq!(
        csv,
        "setup,seed,event,workload,node,cards,host_cpu_milli,host_mem_mib\n\
         binpack/binpack,,0,half,n1,gpu0:8192:50,4000,8192\n\
         binpack/binpack,,1,two,,,0,0\n\
         binpack/binpack,,2,quarter,n1,gpu0:4096:25,1000,2048\n\
         binpack/binpack,,3,whole,n1,gpu1:16384:100,2000,4096\n"
    );
}

/// A pod list of the same release with fewer columns (no `gpu_spec`, no times): read in file
/// order, nothing departs, even in replay mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_list_without_spec_or_times_replays_in_file_order() {
    let files = Files::new();
    let nodes = files.write(
        "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,2,T4\nn2,64000,262144,2,T4\n",
    );
    let pods = files.write(
        "pods.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n\
         zz,1000,1024,1,1000\n\
         aa,1000,1024,1,1000\n\
         cpu,1000,1024,0,0\n\
         mm,1000,1024,2,1000\n\
         bb,1000,1024,1,500\n",
    );
    let a = args(&files, &pods, &nodes, &["binpack/binpack"]);
    let o = app::run(&a).await.unwrap();
    let s = &o.report.setups[0];
    assert_eq!(s.departures, 0, "no times: nothing leaves");
    assert_eq!((s.placed, s.unplaced), (3, 1));
    let r = rows(&files);
    let names: Vec<&str> = r.iter().map(|r| r[3].as_str()).collect();
    assert_eq!(
        names,
        ["zz", "aa", "mm", "bb"],
        "file order, the pod without GPU skipped"
    );
    // zz and aa take the cards of n1 (node binpack), mm both of n2; bb finds no card.
    assert_eq!(r[0][4], "n1");
    assert_eq!(r[1][4], "n1");
    assert_eq!(r[2][4], "n2");
    assert_eq!(r[3][4], "");
}
