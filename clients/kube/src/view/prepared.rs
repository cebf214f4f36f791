//! Prepared forms: each node's whole `v1::Node` and its serialized, digested `PreparedNode`,
//! kept until the node's inventory or the usages counted on it change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use gpusched_client::{PreparedNode, v1};
use k8s_openapi::api::core::v1::Node;

use crate::config::Names;
use crate::inventory::Inventory;
use crate::translate::{self, PodUsage};

/// Each node's prepared form by node name.
#[derive(Debug, Default)]
pub(super) struct PreparedForms {
    by_node: Mutex<HashMap<String, PreparedEntry>>,
}

/// The prepared forms, held locked for one snapshot.
pub(super) struct Forms<'a>(MutexGuard<'a, HashMap<String, PreparedEntry>>);

/// A node's whole and prepared forms, valid while its inventory and the usages counted on it
/// are the very same objects (held here, so they cannot be freed and their addresses reused).
#[derive(Debug)]
pub(super) struct PreparedEntry {
    /// The informer's object it was built from (None: read from the API).
    source: Option<Arc<Node>>,
    inventory: Arc<Inventory>,
    usages: Vec<Arc<PodUsage>>,
    /// The forms, or why the pods counted on the node contradict it
    /// ([`translate::node_with_pods`]).
    forms: Result<(Arc<v1::Node>, Arc<PreparedNode>), String>,
}

impl PreparedForms {
    /// Locks the forms for a snapshot, emptied first when they hold more than `max_entries`.
    pub(super) fn lock(&self, max_entries: usize) -> Forms<'_> {
        let mut prepared = match self.by_node.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        if prepared.len() > max_entries {
            prepared.clear();
        }
        Forms(prepared)
    }
}

impl Forms<'_> {
    /// The node's entry, if any.
    pub(super) fn get(&self, name: &str) -> Option<&PreparedEntry> {
        self.0.get(name)
    }

    /// Keeps `entry` as the node's.
    pub(super) fn insert(&mut self, name: String, entry: PreparedEntry) {
        self.0.insert(name, entry);
    }
}

impl PreparedEntry {
    /// Builds node `name`'s forms: its cards from `inventory` with `usages` added. `source` is
    /// the informer's object the inventory was decoded from (None: read from the API).
    pub(super) fn build(
        name: &str,
        source: Option<Arc<Node>>,
        inventory: Arc<Inventory>,
        usages: Vec<Arc<PodUsage>>,
        names: &Names,
    ) -> Self {
        let forms = translate::node_with_pods(name, &inventory, &usages, names).map(|node| {
            let prepared = Arc::new(PreparedNode::new(&node));
            (Arc::new(node), prepared)
        });
        PreparedEntry {
            source,
            inventory,
            usages,
            forms,
        }
    }

    /// The inventory it was built from, if `source` is the very informer object it came from.
    pub(super) fn inventory_of(&self, source: Option<&Arc<Node>>) -> Option<Arc<Inventory>> {
        let source = source?;
        self.source
            .as_ref()
            .is_some_and(|s| Arc::ptr_eq(s, source))
            .then(|| self.inventory.clone())
    }

    /// Whether it was built from this very inventory and these very usages (in this order).
    pub(super) fn built_from(&self, inventory: &Arc<Inventory>, usages: &[Arc<PodUsage>]) -> bool {
        Arc::ptr_eq(&self.inventory, inventory)
            && self.usages.len() == usages.len()
            && self
                .usages
                .iter()
                .zip(usages)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }

    /// The whole and the prepared form, or why the node cannot be sent (an `InvalidNode: ...`
    /// naming the pod whose decision contradicts it).
    pub(super) fn forms(&self) -> Result<(Arc<v1::Node>, Arc<PreparedNode>), String> {
        self.forms.clone()
    }
}
