//! MIG nodes in a JSON Lines cluster, replayed through an in-process gpusched server: the
//! instances the service chooses are booked on the MIG card and released on departure (the
//! service accepts the node again after every change), and the report carries the MIG slices
//! used and the stranded slices (docs/placement-semantics.md section 11).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use gpusched_api::json::to_json;
use gpusched_api::v1;
use gpusched_sim::app::{self, Args};

mod common;

/// `(name, MiB, compute, memory, cores, max, starts)`: the H100 80GB profiles HAMi allows by
/// default (contract 11.7).
type Row = (&'static str, u64, u32, u32, u32, u32, &'static [u32]);
const H100: [Row; 4] = [
    ("1g.10gb", 9984, 1, 1, 13, 7, &[0, 1, 2, 3, 4, 5, 6]),
    ("2g.20gb", 20096, 2, 2, 25, 3, &[0, 2, 4]),
    ("3g.40gb", 40448, 3, 4, 46, 2, &[0, 4]),
    ("7g.80gb", 81152, 7, 8, 100, 1, &[0]),
];

fn nodes() -> String {
    let mig = v1::Card {
        id: "GPU-mig".into(),
        r#type: "NVIDIA H100 80GB HBM3".into(),
        slots: 7,
        total_mem_mib: 81559,
        total_cores: 100,
        health: v1::CardHealth::Healthy as i32,
        mode: v1::CardMode::Mig as i32,
        mig: Some(v1::MigLayout {
            compute_slices: 7,
            memory_slices: 8,
            profiles: H100
                .iter()
                .map(|&(name, mem, c, m, cores, max, at)| v1::MigProfile {
                    name: name.into(),
                    mem_mib: mem,
                    compute_slices: c,
                    memory_slices: m,
                    cores,
                    max_instances: max,
                    placements: at.to_vec(),
                    not_allowed: false,
                })
                .collect(),
            instances: vec![],
        }),
        ..v1::Card::default()
    };
    let core = v1::Card {
        id: "GPU-core".into(),
        r#type: "NVIDIA T4".into(),
        slots: 10,
        total_mem_mib: 16384,
        total_cores: 100,
        health: v1::CardHealth::Healthy as i32,
        mode: v1::CardMode::HamiCore as i32,
        ..v1::Card::default()
    };
    [("mig-node", mig), ("core-node", core)]
        .into_iter()
        .map(|(name, card)| {
            let n = v1::Node {
                name: name.into(),
                cards: vec![card],
                ..v1::Node::default()
            };
            to_json("gpusched.v1.Node", &n, false).unwrap() + "\n"
        })
        .collect()
}

/// `(name, arrive, leave, MIG, MiB)`: contract 11.7.1 on one H100 and a T4, with departures.
type Job = (&'static str, u32, Option<u32>, bool, Option<u32>);
const TRACE: [Job; 8] = [
    ("a", 0, Some(100), true, Some(30000)),
    ("b", 1, Some(200), true, Some(5000)),
    ("c", 2, Some(200), true, Some(5000)),
    ("d", 3, Some(200), true, Some(15000)),
    ("e", 4, None, true, Some(15000)),
    ("core", 5, Some(300), false, Some(8000)),
    ("f", 150, Some(240), true, Some(15000)),
    ("whole", 250, None, true, None),
];

fn trace() -> String {
    TRACE
        .iter()
        .map(|&(name, arrive, leave, mig, mem)| {
            let ann = if mig {
                serde_json::json!({"nvidia.com/vgpu-mode": "mig"})
            } else {
                serde_json::json!({})
            };
            let mut limits = serde_json::json!({"nvidia.com/gpu": "1"});
            if let Some(m) = mem {
                limits["nvidia.com/gpumem"] = serde_json::json!(m.to_string());
            }
            serde_json::json!({"arrive": arrive, "leave": leave, "workload": {"namespace": "ns",
                "name": name, "kubernetes": {"annotations": ann,
                "containers": [{"name": "main", "limits": limits}]}}})
            .to_string()
                + "\n"
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mig_nodes_are_replayed_and_measured() {
    let dir = tempfile::tempdir().unwrap();
    let (t, n) = (
        dir.path().join("trace.jsonl"),
        dir.path().join("nodes.jsonl"),
    );
    std::fs::write(&t, trace()).unwrap();
    std::fs::write(&n, nodes()).unwrap();
    for (all_nodes, batch) in [(false, 500), (true, 1)] {
        let out = app::run(&Args {
            setups: vec!["binpack/binpack".into()],
            batch,
            all_nodes,
            samples: 1000,
            no_png: true,
            ..common::args(&t, &n, dir.path().join(format!("out-{all_nodes}")))
        })
        .await
        .unwrap();
        let r = &out.report.setups[0];
        let placements: Vec<Option<&str>> = r.placements.iter().map(Option::as_deref).collect();
        assert_eq!(
            placements,
            vec![
                Some("mig-node/GPU-mig[3g.40gb@4]"),
                Some("mig-node/GPU-mig[1g.10gb@3]"),
                Some("mig-node/GPU-mig[1g.10gb@2]"),
                Some("mig-node/GPU-mig[2g.20gb@0]"),
                None,
                Some("core-node/GPU-core"),
                Some("mig-node/GPU-mig[2g.20gb@4]"),
                Some("mig-node/GPU-mig[7g.80gb@0]"),
            ],
            "all_nodes {all_nodes}"
        );
        assert_eq!(r.unplaced_by_reason.get("MigNoFreePlacement"), Some(&1));
        // After d (event 4) the card is full: 8 of 8 memory slices, 7 compute slices; at the
        // end the whole-card pod holds it all.
        let migs: Vec<_> = r.samples.iter().filter_map(|s| s.mig).collect();
        assert_eq!(
            migs.len(),
            r.samples.len(),
            "every sample measures the MIG card"
        );
        let full = r
            .samples
            .iter()
            .find(|s| s.event == 4)
            .unwrap()
            .mig
            .unwrap();
        assert_eq!(
            (
                full.memory_slices_used,
                full.compute_slices_used,
                full.slices_used_pct
            ),
            (8, 7, 100.0)
        );
        let after_a = r
            .samples
            .iter()
            .find(|s| s.time_s == 100.0)
            .unwrap()
            .mig
            .unwrap();
        assert_eq!((after_a.memory_slices_used, after_a.stranded_pct), (4, 0.0));
        // At 200 (b, c, d gone, f's 2g at 4 in use) slices 0-3, 6 and 7 are free; slice 7 is
        // stranded: 1g starts end at 6, 2g at 4 and 3g at 4 overlap f, 7g overlaps it.
        let at_200 = r
            .samples
            .iter()
            .rfind(|s| s.time_s == 200.0)
            .unwrap()
            .mig
            .unwrap();
        assert_eq!(
            (at_200.memory_slices_used, at_200.stranded_pct),
            (2, 16.667)
        );
        let last = r.samples.last().unwrap().mig.unwrap();
        assert_eq!((last.memory_slices_used, last.memory_slices), (8, 8));
        let md = std::fs::read_to_string(dir.path().join(format!("out-{all_nodes}/summary.md")))
            .unwrap();
        assert!(
            md.contains("| binpack/binpack | 1 | 8 / 8 (100.0%) | 100.0% | "),
            "{md}"
        );
    }
}
