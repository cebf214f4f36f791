//! Smoke run of the `gpusched-loadtest` binary against a server it starts: a small cluster for
//! a second or two, closed loop, open loop and a two-size sweep. Checks that each report is
//! well-formed and has zero errors; asserts nothing about speed.
//!
//! The server binary: `$GPUSCHED_SERVER_BIN` (required to exist when set; `loadtest/smoke.sh`
//! sets it after building), else `gpusched-server` beside this package's binary (built by
//! `cargo test --workspace`); when neither exists the test says so and passes.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn server_bin() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("GPUSCHED_SERVER_BIN") {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "GPUSCHED_SERVER_BIN={} does not exist",
            p.display()
        );
        return Some(p);
    }
    let exe = Path::new(env!("CARGO_BIN_EXE_gpusched-loadtest"));
    let p = exe.parent()?.join("gpusched-server");
    p.is_file().then_some(p)
}

fn tool(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_gpusched-loadtest"))
        .args(args)
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    out
}

fn read(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Checks one run: answers, no errors, ordered percentiles.
fn check_run(r: &Value) {
    let requests = r["requests"].as_u64().unwrap();
    assert!(requests > 0, "no requests: {r}");
    assert_eq!(r["ok"].as_u64().unwrap(), requests, "{r}");
    assert_eq!(
        r["errors"].as_object().unwrap().len(),
        0,
        "errors: {}",
        r["errors"]
    );
    assert!(f(&r["throughput_per_s"]) > 0.0);
    let l = &r["latency_us"];
    assert_eq!(l["count"].as_u64().unwrap(), requests);
    let p = |k: &str| f(&l[k]);
    assert!(p("min") > 0.0);
    assert!(p("min") <= p("p50") && p("p50") <= p("p90") && p("p90") <= p("p99"));
    assert!(p("p99") <= p("p99.9") && p("p99.9") <= p("max"));
    let o = &r["outcomes"];
    assert_eq!(
        o["placed"].as_u64().unwrap() + o["unschedulable"].as_u64().unwrap(),
        requests
    );
    let kinds: u64 = r["by_kind"]
        .as_object()
        .unwrap()
        .values()
        .map(|k| k["count"].as_u64().unwrap())
        .sum();
    assert_eq!(kinds, requests);
}

#[test]
fn smoke() {
    let Some(server) = server_bin() else {
        eprintln!("skipped: no gpusched-server binary (build it, or run loadtest/smoke.sh)");
        return;
    };
    let server = server.to_str().unwrap().to_owned();
    let dir = std::env::temp_dir().join(format!("gpusched-loadtest-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    let small = [
        "--nodes",
        "20",
        "--cards-per-node",
        "4",
        "--pool",
        "16",
        "--warmup",
        "0.3",
        "--duration",
        "1.5",
    ];

    // Closed loop.
    let closed = out("closed.json");
    let mut args = vec![
        "run",
        "--spawn",
        "--server-bin",
        &server,
        "--concurrency",
        "1,4",
    ];
    args.extend(small);
    args.extend(["--out", &closed]);
    assert!(tool(&args).status.success());
    let v = read(Path::new(&closed));
    assert_eq!(v["tool"], "gpusched-loadtest");
    assert_eq!(v["cluster"]["nodes"], 20);
    assert_eq!(v["cluster"]["cards"], 80);
    assert_eq!(v["server"]["spawned"], true);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        assert_eq!(r["mode"], "closed");
        check_run(r);
        let cpu = &r["server_cpu"];
        assert!(
            f(&cpu["cpu_seconds"]) >= 0.0,
            "server CPU read from /proc: {r}"
        );
        assert!(f(&cpu["cpu_s_per_1k_decisions"]) >= 0.0);
    }
    assert!(f(&v["peak"]["throughput_per_s"]) > 0.0);

    // Open loop, Filter.
    let open = out("open.json");
    let mut args = vec![
        "run",
        "--spawn",
        "--server-bin",
        &server,
        "--rate",
        "40",
        "--rpc",
        "filter",
    ];
    args.extend(small);
    args.extend(["--out", &open]);
    assert!(tool(&args).status.success());
    let v = read(Path::new(&open));
    let r = &v["runs"][0];
    assert_eq!(r["mode"], "open");
    assert_eq!(f(&r["offered_rate_per_s"]), 40.0);
    check_run(r);
    assert!(
        r["requests"].as_u64().unwrap() >= 30,
        "about 60 intended: {r}"
    );
    assert!(r["send_lag_us"]["count"].as_u64().unwrap() > 0);

    // Preempt, closed loop: 10 placed workloads per node; every answer well-formed.
    let preempt = out("preempt.json");
    let mut args = vec![
        "run",
        "--spawn",
        "--server-bin",
        &server,
        "--concurrency",
        "2",
        "--rpc",
        "preempt",
        "--placed-per-node",
        "10",
    ];
    args.extend(small);
    args.extend(["--out", &preempt]);
    assert!(tool(&args).status.success());
    let v = read(Path::new(&preempt));
    assert_eq!(v["config"]["workload"]["rpc"], "preempt", "{v}");
    let r = &v["runs"][0];
    check_run(r);
    assert!(
        f(&r["outcomes"]["feasible_nodes_mean"]) > 0.0,
        "nodes fit or have victims: {r}"
    );
    // In process it is refused with the reason.
    let refused = tool(&[
        "run", "--target", "engine", "--rpc", "preempt", "--nodes", "5",
    ]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--rpc preempt runs over gRPC"));

    // Sweep over two small sizes: JSON and SVG.
    let sweep_dir = out("sweep");
    let args = [
        "sweep",
        "--server-bin",
        &server,
        "--sizes",
        "5,20",
        "--cards-per-node",
        "4",
        "--pool",
        "8",
        "--concurrency",
        "4",
        "--warmup",
        "0.1",
        "--duration",
        "0.4",
        "--out-dir",
        &sweep_dir,
    ];
    assert!(tool(&args).status.success());
    let v = read(&Path::new(&sweep_dir).join("sweep.json"));
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    for (p, nodes) in points.iter().zip([5, 20]) {
        assert_eq!(p["cluster"]["nodes"], nodes);
        for k in ["engine", "pipeline", "grpc_latency", "grpc_throughput"] {
            check_run(&p[k]);
        }
    }
    let svg = std::fs::read_to_string(Path::new(&sweep_dir).join("sweep.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));

    // A bad option fails with a message, before any load.
    let bad = tool(&[
        "run",
        "--target",
        "engine",
        "--mix",
        "frac=0",
        "--duration",
        "1",
    ]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--mix"));

    std::fs::remove_dir_all(&dir).unwrap();
}
