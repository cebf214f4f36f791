//! What the simulator's test files share: a temporary folder for their inputs and outputs, and
//! the command line's arguments with clap's own defaults (so a new flag needs no test edits).
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use clap::Parser;
use gpusched_sim::app::Args;

/// A temporary folder, removed when dropped.
pub struct Files {
    _dir: tempfile::TempDir,
    pub root: PathBuf,
}

impl Files {
    pub fn new() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_owned();
        Files { _dir: dir, root }
    }

    /// Writes `text` to `name` in the folder; its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.root.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

/// `gpusched-sim --trace TRACE --nodes NODES --out OUT --no-progress`, every other flag at its
/// default.
pub fn args(trace: &Path, nodes: &Path, out: PathBuf) -> Args {
    let os = |p: &Path| p.as_os_str().to_owned();
    Args::parse_from([
        "gpusched-sim".into(),
        "--trace".into(),
        os(trace),
        "--nodes".into(),
        os(nodes),
        "--out".into(),
        out.into_os_string(),
        "--no-progress".into(),
    ])
}
