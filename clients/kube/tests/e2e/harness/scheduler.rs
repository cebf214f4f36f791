//! A plain kube-scheduler (profile `default-scheduler`, no extender) next to the cluster's: the
//! baseline burst's scheduler, and the default scheduler a real cluster has for pods without
//! GPU resources. Killed on drop.

use std::time::{Duration, Instant};

use super::cluster::H;

pub struct PlainScheduler {
    child: tokio::process::Child,
}

impl PlainScheduler {
    /// Starts it (log: `WORK/<name>.log`) and waits until `/readyz` answers `ok`.
    pub async fn start(h: &H, name: &str) -> PlainScheduler {
        Self::start_profile(h, name, "default-scheduler").await
    }

    /// Starts it with this profile name, and the client rate limit of the cluster's
    /// kube-scheduler (`E2E_SCHEDULER_QPS`, burst twice that; unset: kube-scheduler's default).
    pub async fn start_profile(h: &H, name: &str, profile: &str) -> PlainScheduler {
        let cfg = h.env.workdir.join(format!("{name}.yaml"));
        let qps = match std::env::var("E2E_SCHEDULER_QPS") {
            Ok(q) if !q.is_empty() => {
                let q: u32 = q.parse().expect("E2E_SCHEDULER_QPS: a number");
                format!("  qps: {q}\n  burst: {}\n", 2 * q)
            }
            _ => String::new(),
        };
        std::fs::write(
            &cfg,
            format!(
                "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nclientConnection:\n  kubeconfig: \"{}\"\n{qps}leaderElection:\n  leaderElect: false\nprofiles:\n- schedulerName: {profile}\n",
                h.env.scheduler_kubeconfig.display()
            ),
        )
        .unwrap();
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let log = std::fs::File::create(h.env.workdir.join(format!("{name}.log"))).unwrap();
        let child = tokio::process::Command::new(h.env.kube_bin.join("kube-scheduler"))
            .arg(format!("--config={}", cfg.display()))
            .args(["--leader-elect=false", "--bind-address=127.0.0.1"])
            .arg(format!("--secure-port={port}"))
            .arg(format!(
                "--cert-dir={}",
                h.env.workdir.join(format!("{name}-certs")).display()
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
                "plain kube-scheduler {name} not ready"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        PlainScheduler { child }
    }

    /// The process id (CPU readings).
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    pub async fn stop(mut self) {
        self.child.start_kill().unwrap();
        let _ = self.child.wait().await;
    }
}
