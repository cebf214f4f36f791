//! gpusched-agent processes registering a node from the fake NVML library (its own state file
//! per node), against the test's gpusched-server and the control plane (admin credentials: the
//! agent's own RBAC is tested by `clients/agent/e2e-test.sh`).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::Api;

use super::cluster::H;

/// A running gpusched-agent (killed on drop; its annotations stay on the Node; its log is
/// `agent-<node>.log` in the work directory).
pub struct Agent {
    _child: tokio::process::Child,
}

impl H {
    /// Starts gpusched-agent for `node` on the fake NVML machine described by `state` (the
    /// fake library's directives, e.g. `cards 2` and `mig 0`), offering the MIG profiles
    /// `allowed` (empty: every profile), and waits until the node carries its MIG layouts.
    pub async fn agent(&self, node: &str, state: &str, allowed: &[&str]) -> Agent {
        let bin = self.env.agent_bin.as_ref().expect(
            "E2E_AGENT_BIN: deploy/e2e/test.sh builds gpusched-agent when the mig scenario runs",
        );
        let nvml = self
            .env
            .fake_nvml
            .as_ref()
            .expect("E2E_FAKE_NVML: deploy/e2e/test.sh builds the fake NVML library");
        let state_file = self.env.workdir.join(format!("nvml-{node}.state"));
        std::fs::write(&state_file, state).unwrap();
        let log = self.env.workdir.join(format!("agent-{node}.log"));
        let logf = std::fs::File::create(&log).unwrap();
        let mut cmd = tokio::process::Command::new(bin);
        if !allowed.is_empty() {
            cmd.env("GPUSCHED_AGENT_MIG__ALLOWED_PROFILES", allowed.join(","));
        }
        let mut child = cmd
            .args(["run", "--service-address", &self.env.service_addr])
            .arg("--nvml-library")
            .arg(nvml)
            .args([
                "--interval",
                "60s",
                "--poll-interval",
                "300ms",
                "--health-listen",
                "127.0.0.1:0",
            ])
            .env("FAKE_NVML_STATE", &state_file)
            .env("NODE_NAME", node)
            .stdout(std::process::Stdio::null())
            .stderr(logf)
            .kill_on_drop(true)
            .spawn()
            .expect("start gpusched-agent");
        let api: Api<Node> = Api::all(self.client.clone());
        let t = Instant::now();
        loop {
            let n = api.get(node).await.unwrap();
            let ann = n.metadata.annotations.unwrap_or_default();
            if ann.contains_key(gpusched_hami::NODE_MIG_LAYOUTS) {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "gpusched-agent for {node} exited ({status}): {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "gpusched-agent did not publish {node}'s MIG layouts in 30 s: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Agent { _child: child }
    }
}
