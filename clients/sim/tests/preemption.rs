//! The replay with priorities and preemption (`--preemption`) over real gRPC against an
//! in-process gpusched server: a worked example whose numbers are known, the outputs, and bad
//! priorities naming their line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use gpusched_sim::app::{self, Args, PreemptionMode};
use gpusched_sim::preempt::PriorityResult;

mod common;
use common::Files;

fn args(trace: &Path, nodes: &Path, out: PathBuf, mode: PreemptionMode) -> Args {
    Args {
        setups: vec!["binpack/spread".into()],
        samples: 20,
        preemption: mode,
        ..common::args(trace, nodes, out)
    }
}

/// One node of two T4 cards. Two best-effort pods take 60% of a card each; a latency-sensitive
/// pod asking for 50% arrives an hour later: no card has it free. With preemption the service
/// names `p1` (of the two equal victims the later started; `p0` is put back first and the pod
/// fits beside it), which had run 3,600 s at 0.6 GPU: 0.6 GPU-hours lost. A best-effort pod of
/// 30% then fits either way.
const NODES: &str = "sn,cpu_milli,memory_mib,gpu,model\nn1,64000,262144,2,T4\n";
const PODS: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p0,1000,1024,1,600,,BE,Running,0,100000,0
p1,1000,1024,1,600,,BE,Running,100,100000,100
p2,1000,1024,1,500,,LS,Running,3700,100000,3700
p3,1000,1024,1,300,,BE,Running,3800,100000,3800
";

fn class(r: &PriorityResult, p: i32) -> (usize, usize, usize, usize, f64) {
    let c = &r.classes[&p];
    (
        c.arrivals,
        c.placed,
        c.placed_by_preemption,
        c.evicted,
        c.evicted_gpu_hours,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preemption_places_the_important_pod_and_counts_what_it_cost() {
    let files = Files::new();
    let nodes = files.write("nodes.csv", NODES);
    let pods = files.write("pods.csv", PODS);
    let out = app::run(&args(
        &pods,
        &nodes,
        files.root.join("a"),
        PreemptionMode::Both,
    ))
    .await
    .unwrap();
    let p = &out.report.priorities;
    assert_eq!(p.len(), 2);
    let (off, on) = (&p[0], &p[1]);
    assert!(!off.preemption && on.preemption);
    // (arrivals, placed, placed by preemption, evicted, GPU-hours lost)
    assert_eq!(class(off, 0), (3, 3, 0, 0, 0.0));
    assert_eq!(class(off, 1000), (1, 0, 0, 0, 0.0));
    assert_eq!(class(on, 0), (3, 3, 0, 1, 0.6));
    assert_eq!(class(on, 1000), (1, 1, 1, 0, 0.0));
    assert_eq!(
        (
            on.preemptions,
            on.victims,
            on.max_victims,
            on.evicted_gpu_hours
        ),
        (1, 1, 1, 0.6)
    );
    assert_eq!(on.victims_per_preemption, 1.0);
    assert_eq!(off.classes[&1000].placed_pct, 0.0);
    assert_eq!(on.classes[&1000].placed_pct, 100.0);
    // The outputs: the summary section and the chart; the same bytes on a second run.
    for f in ["priorities.svg", "priorities.png"] {
        assert!(out.files.contains(&f.to_owned()), "{:?}", out.files);
    }
    let md = std::fs::read_to_string(files.root.join("a/summary.md")).unwrap();
    assert!(
        md.contains(
            "| binpack/spread | on | LS/Guaranteed (1000) | 1 | 1 | 1 | 100.0% | 0 | 0.0 |"
        ),
        "{md}"
    );
    assert!(
        md.contains("| binpack/spread | on | 1 | 1 | 1.00 (1) | 0.6 |"),
        "{md}"
    );
    app::run(&args(
        &pods,
        &nodes,
        files.root.join("b"),
        PreemptionMode::Both,
    ))
    .await
    .unwrap();
    for f in ["report.json", "summary.md", "priorities.svg"] {
        let a = std::fs::read(files.root.join("a").join(f)).unwrap();
        let b = std::fs::read(files.root.join("b").join(f)).unwrap();
        assert!(a == b, "{f} differs between two runs");
    }
    // Without --preemption the report has no priorities section at all.
    let plain = app::run(&args(
        &pods,
        &nodes,
        files.root.join("c"),
        PreemptionMode::None,
    ))
    .await
    .unwrap();
    assert!(plain.report.priorities.is_empty());
    let json = std::fs::read_to_string(files.root.join("c/report.json")).unwrap();
    assert!(!json.contains("\"priorities\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_priorities_name_their_line_and_fill_mode_replays_arrivals_only() {
    let files = Files::new();
    let nodes = files.write("nodes.csv", NODES);
    let w = r#""workload": {"name": "j", "typed": {"containers": [{"name": "m", "gpuCount": 1, "gpucoresPercent": 50}]}}"#;
    for (bad, needle) in [
        (
            "2147483648",
            "`priority` must be an integer in -2147483648..=2147483647",
        ),
        ("\"high\"", "`priority` must be an integer"),
    ] {
        let trace = files.write(
            "t.jsonl",
            &format!("{{\"arrive\": 0, {w}}}\n{{\"arrive\": 1, \"priority\": {bad}, {w}}}\n"),
        );
        let e = app::run(&args(
            &trace,
            &nodes,
            files.root.join("x"),
            PreemptionMode::On,
        ))
        .await
        .unwrap_err()
        .to_string();
        assert!(e.contains("t.jsonl:2") && e.contains(needle), "{e}");
    }
    let pods = files.write(
        "qos.csv",
        &PODS.replace("p3,1000,1024,1,300,,BE", "p3,1000,1024,1,300,,Gold"),
    );
    let e = app::run(&args(
        &pods,
        &nodes,
        files.root.join("y"),
        PreemptionMode::On,
    ))
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("`Gold` is not a QoS class"), "{e}");
    // Fill mode: nothing leaves; here nothing left before the end anyway: the same numbers.
    let pods = files.write("ok.csv", PODS);
    let mut a = args(&pods, &nodes, files.root.join("z"), PreemptionMode::On);
    a.fill = true;
    let out = app::run(&a).await.unwrap();
    let on = &out.report.priorities[0];
    assert_eq!(
        (on.preemptions, on.victims, on.evicted_gpu_hours),
        (1, 1, 0.6)
    );
}
