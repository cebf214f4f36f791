//! Bursts of 200 GPU pods onto 20 nodes x 4 cards: with the extender (no card over-booked, every
//! pod bound with a decision or pending with a reason), and the same burst on a plain
//! kube-scheduler (GPUs as an extended resource) for the baseline throughput.

use std::time::{Duration, Instant};

use crate::harness::SCHEDULER;
use crate::harness::burst::{
    BURST_NODES, BURST_PODS, BURST_SHAPE, BurstStats, burst, burst_pods, check_no_overbooking,
};
use crate::harness::cluster::H;

pub async fn with_extender(h: &H) -> BurstStats {
    let pool = "burst";
    let ns = h.namespace(pool, false).await;
    let nodes = h
        .make_nodes("burst", pool, BURST_NODES, BURST_SHAPE, 40)
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let s = burst(
        h,
        &ns,
        burst_pods(pool, SCHEDULER, BURST_PODS, false),
        Duration::from_secs(6),
        None::<(usize, fn() -> std::future::Ready<()>)>,
    )
    .await;
    let (bound, cards) = check_no_overbooking(h, &nodes, &ns).await;
    assert_eq!(bound, s.bound);
    assert!(
        s.bound >= 150,
        "only {} of {BURST_PODS} pods bound",
        s.bound
    );
    h.result(format!(
        "burst with the extender: {BURST_PODS} pods onto {BURST_NODES} nodes ({} cards): {} bound, {} pending with a reason; \
         created in {:.1}s, last bound at {:.1}s: {:.1} pods/s; no card over-booked ({cards} cards used)",
        BURST_NODES * 4, s.bound, s.pending, s.create_s, s.last_bound_s, s.rate
    ));
    s
}

pub async fn baseline(h: &H) -> BurstStats {
    // Plain kube-scheduler, GPUs as an extended resource (12 per node: the same 3 pods per card).
    let pool = "base";
    let ns = h.namespace(pool, true).await;
    let _nodes = h
        .make_nodes("base", pool, BURST_NODES, BURST_SHAPE, 12)
        .await;
    let cfg = h.env.workdir.join("baseline-scheduler.yaml");
    std::fs::write(
        &cfg,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: \"{}\"\nleaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: default-scheduler\n",
            h.env.scheduler_kubeconfig.display()
        ),
    )
    .unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let log = std::fs::File::create(h.env.workdir.join("baseline-scheduler.log")).unwrap();
    let mut sched = tokio::process::Command::new(h.env.kube_bin.join("kube-scheduler"))
        .arg(format!("--config={}", cfg.display()))
        .args(["--leader-elect=false", "--bind-address=127.0.0.1"])
        .arg(format!("--secure-port={port}"))
        .arg(format!(
            "--cert-dir={}",
            h.env.workdir.join("baseline-certs").display()
        ))
        .arg(format!(
            "--authentication-kubeconfig={}",
            h.env.scheduler_kubeconfig.display()
        ))
        .arg(format!(
            "--authorization-kubeconfig={}",
            h.env.scheduler_kubeconfig.display()
        ))
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let t = Instant::now();
    loop {
        let out = tokio::process::Command::new("curl")
            .args([
                "-sk",
                "--max-time",
                "2",
                &format!("https://127.0.0.1:{port}/readyz"),
            ])
            .output()
            .await
            .unwrap();
        if String::from_utf8_lossy(&out.stdout) == "ok" {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "baseline kube-scheduler not ready"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let s = burst(
        h,
        &ns,
        burst_pods(pool, "default-scheduler", BURST_PODS, true),
        Duration::from_secs(6),
        None::<(usize, fn() -> std::future::Ready<()>)>,
    )
    .await;
    sched.start_kill().unwrap();
    let _ = sched.wait().await;
    h.result(format!(
        "baseline without the extender (plain kube-scheduler, nvidia.com/gpu: 12 per node): {} bound, {} pending; \
         created in {:.1}s, last bound at {:.1}s: {:.1} pods/s",
        s.bound, s.pending, s.create_s, s.last_bound_s, s.rate
    ));
    s
}
