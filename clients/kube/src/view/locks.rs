//! Bind locks by name: per node, the snapshot, `Allocate` and the assume-cache insert of binds to
//! one node run one at a time, so the same capacity is never given twice; per namespace (with a
//! quota), the same for the namespace's budget.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// One async lock per name (node or namespace), made on first use.
#[derive(Debug, Default)]
pub(super) struct BindLocks {
    by_node: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl BindLocks {
    /// Waits for the lock of `node` (or namespace).
    pub(super) async fn lock(&self, node: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = match self.by_node.lock() {
            Ok(mut m) => m.entry(node.to_owned()).or_default().clone(),
            Err(_) => Arc::new(tokio::sync::Mutex::new(())),
        };
        lock.lock_owned().await
    }
}
