//! Shared test helpers: the fake NVML library (compiled from C with `cc`), a fake sysfs tree,
//! an in-process gpusched-server and a recording publisher.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use gpusched_agent::format::NodeInventory;
use gpusched_agent::publish::{PublishError, Publisher};
use tokio::sync::Notify;

/// The fake library's source.
pub const FAKE_NVML_C: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fake-nvml/fake_nvml.c");

fn compile(name: &str, defines: &[&str]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fake-nvml-build-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("build dir");
    let out = dir.join("libnvidia-ml.so.1");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = std::process::Command::new(&cc)
        .args(["-Wall", "-Wextra", "-Werror", "-shared", "-fPIC"])
        .args(defines)
        .arg("-o")
        .arg(&out)
        .arg(FAKE_NVML_C)
        .args(["-lpthread", "-ldl"])
        .status()
        .unwrap_or_else(|e| panic!("running {cc} to build the fake NVML library: {e}"));
    assert!(
        status.success(),
        "{cc} failed to build the fake NVML library"
    );
    out
}

/// Compiles the fake `libnvidia-ml.so.1` once per test process (`$CC` or `cc`).
pub fn fake_library() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| compile("full", &[])).clone()
}

/// The fake built with `-DFAKE_MINIMAL`: only the identity symbols (an old, partial driver).
pub fn minimal_fake_library() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| compile("minimal", &["-DFAKE_MINIMAL"]))
        .clone()
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, text).expect("write");
}

/// A sysfs tree for the fake machine: cards 0-3 on NUMA node 0 and 4-5 on node 1 by their PCI
/// `numa_node`; cards 6-7 have `numa_node` -1, so their node comes from the CPU affinity
/// (32-63 = node 1). 64 CPUs: 2 packages x 16 cores x 2 threads (cpu c and c+16 share a core).
pub fn fake_sysfs(root: &Path) {
    for i in 0..8u32 {
        let numa = match i {
            0..=3 => "0",
            4 | 5 => "1",
            _ => "-1",
        };
        write(
            root,
            &format!("bus/pci/devices/0000:{:02x}:00.0/numa_node", (i + 1) * 16),
            &format!("{numa}\n"),
        );
    }
    write(root, "devices/system/node/node0/cpulist", "0-31\n");
    write(root, "devices/system/node/node1/cpulist", "32-63\n");
    for cpu in 0..64u32 {
        write(
            root,
            &format!("devices/system/cpu/cpu{cpu}/topology/physical_package_id"),
            &format!("{}\n", cpu / 32),
        );
        write(
            root,
            &format!("devices/system/cpu/cpu{cpu}/topology/core_id"),
            &format!("{}\n", cpu % 16),
        );
    }
}

/// One fake machine: its own copy of the library (so its own state file) and sysfs tree.
#[derive(Debug)]
pub struct FakeMachine {
    pub dir: tempfile::TempDir,
    pub lib: PathBuf,
    pub sysfs: PathBuf,
    pub state: PathBuf,
}

impl FakeMachine {
    pub fn new(state: &str) -> Self {
        Self::with_library(&fake_library(), state)
    }

    pub fn with_library(library: &Path, state: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let lib = dir.path().join("libnvidia-ml.so.1");
        std::fs::copy(library, &lib).expect("copy library");
        let sysfs = dir.path().join("sys");
        fake_sysfs(&sysfs);
        let state_path = dir.path().join("fake-nvml.state");
        let m = FakeMachine {
            dir,
            lib,
            sysfs,
            state: state_path,
        };
        m.set_state(state);
        m
    }

    /// Replaces the state file (atomically).
    pub fn set_state(&self, text: &str) {
        let tmp = self.state.with_extension("tmp");
        std::fs::write(&tmp, text).expect("state");
        std::fs::rename(&tmp, &self.state).expect("state rename");
    }

    pub fn options(&self) -> gpusched_agent::discovery::nvml::NvmlOptions {
        gpusched_agent::discovery::nvml::NvmlOptions {
            library: Some(self.lib.clone()),
            sysfs_root: self.sysfs.clone(),
            ..Default::default()
        }
    }
}

/// UUID of card `i` of the fake machine.
pub fn uuid(i: u32) -> String {
    format!("GPU-5a1e0000-0000-4000-8000-00000000000{i}")
}

/// A gpusched-server on 127.0.0.1:0 with its embedded default configuration.
pub async fn start_server() -> gpusched_service::Running {
    gpusched_service::testing::start_server(&[("metrics.enabled", "false")]).await
}

/// The agent's client of `server`, with a per-call deadline.
pub fn normalizer(
    server: &gpusched_service::Running,
    timeout: Duration,
) -> gpusched_agent::inventory::ServiceNormalizer {
    gpusched_agent::inventory::ServiceNormalizer::connect_lazy(
        &server.grpc_addr.to_string(),
        None,
        timeout,
    )
    .expect("client of the test server")
}

/// Records what the agent publishes; can be told to fail.
#[derive(Debug, Clone, Default)]
pub struct Recording {
    pub published: Arc<Mutex<Vec<NodeInventory>>>,
    pub withdrawn: Arc<AtomicBool>,
    pub fail: Arc<AtomicBool>,
    pub attempts: Arc<AtomicUsize>,
    pub requests: Arc<Notify>,
}

impl Recording {
    pub fn count(&self) -> usize {
        self.published.lock().expect("lock").len()
    }

    pub fn last(&self) -> Option<NodeInventory> {
        self.published.lock().expect("lock").last().cloned()
    }

    /// Waits until the last publication satisfies `pred`.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&NodeInventory) -> bool,
    ) -> NodeInventory {
        let start = Instant::now();
        loop {
            if let Some(inv) = self.last().filter(|i| pred(i)) {
                return inv;
            }
            assert!(
                start.elapsed() < timeout,
                "timed out waiting for: {what}; last publication: {:?}",
                self.last().map(|i| i.normalized)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Publisher for Recording {
    async fn publish(&self, inv: &NodeInventory) -> Result<(), PublishError> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        if self.fail.load(Ordering::SeqCst) {
            return Err(PublishError::Other("told to fail".into()));
        }
        self.published.lock().expect("lock").push(inv.clone());
        Ok(())
    }

    async fn withdraw(&self) -> Result<(), PublishError> {
        self.withdrawn.store(true, Ordering::SeqCst);
        Ok(())
    }

    fn requests(&self) -> Option<Arc<Notify>> {
        Some(Arc::clone(&self.requests))
    }
}

/// Health of card `uuid` in a publication (None: not published).
pub fn healthy(inv: &NodeInventory, uuid: &str) -> Option<bool> {
    inv.normalized
        .cards
        .iter()
        .find(|c| c.id == uuid)
        .map(|c| c.health == gpusched_api::v1::CardHealth::Healthy as i32)
}
