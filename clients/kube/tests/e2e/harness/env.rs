//! The environment set by `deploy/e2e/test.sh` (ports, binaries, certificates, files).

use std::path::PathBuf;

/// What `deploy/e2e/test.sh` exports.
pub struct Env {
    pub workdir: PathBuf,
    pub shim_bin: PathBuf,
    pub shim_kubeconfig: PathBuf,
    pub service_addr: String,
    pub ext_port: u16,
    pub wh_port: u16,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub webhooks_file: PathBuf,
    pub kubectl: PathBuf,
    pub kube_bin: PathBuf,
    pub scheduler_kubeconfig: PathBuf,
    pub results: PathBuf,
    pub filter: Vec<String>,
    /// gpusched-agent and the fake NVML library (built only when the MIG scenario runs).
    pub agent_bin: Option<PathBuf>,
    pub fake_nvml: Option<PathBuf>,
    /// kubectl-gpusched (set by test.sh when the opview scenario runs).
    pub ctl_bin: Option<PathBuf>,
    /// Headless Chromium, Debian's `chromium` (likewise).
    pub chromium: Option<PathBuf>,
}

/// The operator view's token in the e2e (written to a file, as a Secret's key would be).
pub const WEB_TOKEN: &str = "e2e-operator-view-token-0123456789";

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("GPUSCHED_E2E is set but {name} is not: run deploy/e2e/test.sh, which sets it")
    })
}

impl Env {
    pub fn from_env() -> Option<Env> {
        std::env::var("GPUSCHED_E2E")
            .ok()
            .filter(|v| !v.is_empty() && v != "0")?;
        var("KUBECONFIG");
        Some(Env {
            workdir: var("E2E_WORKDIR").into(),
            shim_bin: var("E2E_SHIM_BIN").into(),
            shim_kubeconfig: var("E2E_SHIM_KUBECONFIG").into(),
            service_addr: var("E2E_SERVICE_ADDR"),
            ext_port: var("E2E_EXTENDER_PROXY_PORT").parse().expect("port"),
            wh_port: var("E2E_WEBHOOK_PROXY_PORT").parse().expect("port"),
            cert: var("E2E_WEBHOOK_CERT").into(),
            key: var("E2E_WEBHOOK_KEY").into(),
            webhooks_file: var("E2E_WEBHOOKS_FILE").into(),
            kubectl: var("KUBECTL").into(),
            kube_bin: var("KUBE_BIN").into(),
            scheduler_kubeconfig: var("E2E_SCHEDULER_KUBECONFIG").into(),
            results: var("E2E_RESULTS").into(),
            filter: std::env::var("E2E_FILTER")
                .unwrap_or_default()
                .split(',')
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect(),
            agent_bin: std::env::var("E2E_AGENT_BIN")
                .ok()
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            fake_nvml: std::env::var("E2E_FAKE_NVML")
                .ok()
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            ctl_bin: std::env::var_os("E2E_CTL_BIN").map(PathBuf::from),
            chromium: std::env::var_os("E2E_CHROMIUM").map(PathBuf::from),
        })
    }

    /// Where the operator view's token is.
    pub fn web_token_file(&self) -> PathBuf {
        self.workdir.join("web-token")
    }

    /// Writes the operator view's token file (mode 0600).
    pub fn write_web_token(&self) {
        use std::os::unix::fs::PermissionsExt as _;
        let f = self.web_token_file();
        std::fs::write(&f, format!("{WEB_TOKEN}\n")).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    pub fn wants(&self, scenario: &str) -> bool {
        self.filter.is_empty() || self.filter.iter().any(|f| scenario.contains(f.as_str()))
    }
}
