//! gpusched-kube processes: start (reading the addresses it prints), wait until ready, SIGKILL,
//! SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::io::AsyncBufReadExt;

use super::env::Env;
use super::http::is_ready;
use super::{LEASE, LEASE_NS};

/// A running gpusched-kube (killed on drop).
pub struct Shim {
    pub identity: String,
    child: tokio::process::Child,
    pub ext: SocketAddr,
    pub webhook: SocketAddr,
    /// The operator view (web listener; its token file is `Env::web_token_file`).
    pub web: SocketAddr,
    log: PathBuf,
}

impl Shim {
    pub async fn start(env: &Env, identity: &str) -> Shim {
        env.write_web_token();
        let log = env.workdir.join(format!("shim-{identity}.log"));
        let logf = std::fs::File::create(&log).unwrap();
        let mut child = tokio::process::Command::new(&env.shim_bin)
            .args(["--kubeconfig"])
            .arg(&env.shim_kubeconfig)
            .args(["--service-addr", &env.service_addr])
            .args([
                "--extender-listen",
                "127.0.0.1:0",
                "--webhook-listen",
                "127.0.0.1:0",
            ])
            .arg("--webhook-cert")
            .arg(&env.cert)
            .arg("--webhook-key")
            .arg(&env.key)
            .args([
                "--identity",
                identity,
                "--lease-namespace",
                LEASE_NS,
                "--lease-name",
                LEASE,
            ])
            .args([
                "--log-level",
                &std::env::var("E2E_SHIM_LOG").unwrap_or_else(|_| "info".into()),
            ])
            .env("GPUSCHED_KUBE_LEADER_ELECTION__LEASE_DURATION", "4s")
            .env("GPUSCHED_KUBE_LEADER_ELECTION__RENEW_DEADLINE", "3s")
            .env("GPUSCHED_KUBE_LEADER_ELECTION__RETRY_PERIOD", "500ms")
            // The operator view, as the chart turns it on: a token from a file.
            .env("GPUSCHED_KUBE_WEB__ENABLED", "true")
            .env("GPUSCHED_KUBE_WEB__LISTEN", "127.0.0.1:0")
            .env("GPUSCHED_KUBE_WEB__TOKEN_FILE", env.web_token_file())
            // The fgd scenario's mix: the newest 64 GPU pods (its own), derived again each second.
            .env("GPUSCHED_KUBE_FGD__WINDOW", "64")
            .env("GPUSCHED_KUBE_FGD__REFRESH", "1s")
            .env_remove("KUBECONFIG")
            .stdout(std::process::Stdio::piped())
            .stderr(logf)
            .kill_on_drop(true)
            .spawn()
            .expect("start gpusched-kube");
        let stdout = child.stdout.take().unwrap();
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "gpusched-kube {identity} printed nothing; see {}",
                    log.display()
                )
            })
            .unwrap()
            .unwrap_or_else(|| {
                panic!(
                    "gpusched-kube {identity} exited: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
        let field = |k: &str| -> SocketAddr {
            first
                .split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{k}=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {k}= in {first:?}"))
        };
        let (ext, webhook, web) = (field("extender"), field("webhook"), field("web"));
        Shim {
            identity: identity.to_owned(),
            child,
            ext,
            webhook,
            web,
            log,
        }
    }

    pub async fn wait_ready(&self, within: Duration) -> Duration {
        let t = Instant::now();
        while t.elapsed() < within {
            if is_ready(self.ext).await {
                return t.elapsed();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "gpusched-kube {} not ready after {within:?}; log:\n{}",
            self.identity,
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    pub async fn kill9(&mut self) {
        self.child.start_kill().unwrap();
        let _ = self.child.wait().await;
    }

    /// Sends a signal to the process (`STOP`: hung, `CONT`: running again).
    pub fn signal(&self, sig: &str) {
        let pid = self.child.id().expect("running");
        let ok = std::process::Command::new("kill")
            .args([&format!("-{sig}"), &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} {pid}");
    }

    pub async fn terminate(&mut self) {
        let pid = self.child.id().expect("running");
        let ok = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -TERM {pid}");
        tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("gpusched-kube did not stop after SIGTERM")
            .unwrap();
    }
}
