//! Per-namespace GPU quotas in a JSON Lines trace, replayed through an in-process gpusched
//! server: each workload is sent what its namespace has left, an AllocateBatch shares it among
//! the batch's workloads of one namespace exactly as one-by-one calls do, departures give the
//! share back, other namespaces are untouched, and the report says what the quota cost.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;

use clap::Parser as _;
use gpusched_api::json::to_json;
use gpusched_sim::app::{self, Args};

/// `ml` may hold 16384 MiB / 200 cores: 4 of its 8 first workloads of 4096 MiB fit; `web` has
/// no quota; everything leaves at 100+; one more `ml` workload at 150 fits again.
fn trace() -> String {
    let mut t = String::from(
        "# quotas first, then workloads\n{\"quota\": {\"namespace\": \"ml\", \"memMib\": 16384, \"cores\": 200}}\n",
    );
    let mut line = |ns: &str, name: &str, arrive: u32, leave: Option<u32>| {
        let leave = leave.map_or_else(|| "null".to_owned(), |l| l.to_string());
        let _ = writeln!(
            t,
            r#"{{"arrive": {arrive}, "leave": {leave}, "workload": {{"namespace": "{ns}", "name": "{name}", "typed": {{"containers": [{{"name": "main", "gpuCount": 1, "gpumemMib": "4096", "gpucoresPercent": 20}}]}}}}}}"#
        );
    };
    for i in 0..8 {
        line("ml", &format!("ml-{i}"), i, Some(100 + i));
    }
    for i in 0..4 {
        line("web", &format!("web-{i}"), 8 + i, Some(100 + i));
    }
    line("ml", "ml-late", 150, None);
    t
}

fn nodes() -> String {
    ["n1", "n2"]
        .iter()
        .map(|n| {
            let node = gpusched_client::node(n, 2, 16384, "NVIDIA-T4");
            format!("{}\n", to_json("gpusched.v1.Node", &node, false).unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_never_places_past_its_quota_and_the_report_says_what_it_cost() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let (t, n) = (
        write("trace.jsonl", &trace()),
        write("nodes.jsonl", &nodes()),
    );
    let mut reports = vec![];
    for batch in ["500", "1"] {
        let out = dir
            .path()
            .join(format!("out-{batch}"))
            .display()
            .to_string();
        let args = Args::parse_from([
            "gpusched-sim",
            "--trace",
            &t,
            "--nodes",
            &n,
            "--setup",
            "binpack/binpack",
            "--batch",
            batch,
            "--out",
            &out,
            "--no-png",
            "--no-progress",
        ]);
        let outcome = app::run(&args).await.unwrap();
        let r = &outcome.report.setups[0];
        let q = &r.quota.as_ref().expect("a quota report")["ml"];
        assert_eq!(
            (q.placed, q.refused_by_quota, q.peak_mem_mib, q.peak_cores),
            (5, 4, 16384, 80),
            "batch {batch}"
        );
        assert_eq!(
            (r.placed, r.unplaced),
            (9, 4),
            "batch {batch}: web is untouched"
        );
        assert_eq!(r.unplaced_by_reason.get("QuotaMemoryExceeded"), Some(&4));
        let md =
            std::fs::read_to_string(dir.path().join(format!("out-{batch}/summary.md"))).unwrap();
        assert!(
            md.contains("| binpack/binpack | ml | 16384 | 200 | 5 | 4 | 16384 | 80 |"),
            "{md}"
        );
        reports.push(r.placements.clone());
    }
    assert_eq!(
        reports[0], reports[1],
        "a batch shares the namespace's budget exactly as one call per workload"
    );
    // Without quota lines the report has no quota section and ml places all 9.
    let plain = write(
        "plain.jsonl",
        &trace()
            .lines()
            .filter(|l| !l.contains("\"quota\""))
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    );
    let out = dir.path().join("out-plain").display().to_string();
    let args = Args::parse_from([
        "gpusched-sim",
        "--trace",
        &plain,
        "--nodes",
        &n,
        "--setup",
        "binpack/binpack",
        "--out",
        &out,
        "--no-png",
        "--no-progress",
    ]);
    let outcome = app::run(&args).await.unwrap();
    assert!(outcome.report.setups[0].quota.is_none());
    assert_eq!(outcome.report.setups[0].placed, 13);
    let json = std::fs::read_to_string(dir.path().join("out-plain/report.json")).unwrap();
    assert!(!json.contains("\"quota\""), "{json}");
}

#[test]
fn a_bad_quota_line_names_its_line() {
    let err = gpusched_sim::trace::parse_jsonl_jobs(
        "t.jsonl",
        "{\"quota\": {\"namespace\": \"ml\", \"memMib\": \"16Gi\"}}\n",
        &gpusched_sim::trace::ReadOptions::default(),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("t.jsonl:1")
            && err
                .to_string()
                .contains("`quota.memMib` must be a whole number"),
        "{err}"
    );
}
