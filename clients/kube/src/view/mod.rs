//! The cluster view: Nodes and Pods from kube-rs reflectors, and what the shim keeps beside
//! them, one job per file:
//!
//! - `assume.rs`: the assume cache, decisions bound (or reserved) but not yet seen by the
//!   informer, and the rule that ends each ([`assumed_fate`]);
//! - `locks.rs`: per-node bind locks;
//! - `decoded.rs`: inventories and pod usages decoded once per resourceVersion;
//! - `prepared.rs`: each node's whole and prepared forms, rebuilt only when its inventory or
//!   usage changes;
//! - `holds.rs`: the cards a preemption made room for, kept for its pod.
//!
//! [`ClusterView`] here composes them: what the usage on a node is (the store's pods and the
//! assume cache) and what the service is sent ([`Snapshot`]). The files below import none of
//! each other nor this one.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use gpusched_client::{PreparedNode, v1};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::config::Names;
use crate::translate::{self, PodUsage};

mod assume;
mod decoded;
mod holds;
mod locks;
mod prepared;
#[cfg(test)]
mod tests;

pub use assume::{Assumed, Observed, assumed_fate};
pub use holds::{Fate, Hold, HoldTimes, Preemptor, hold_fate};

use assume::AssumeCache;
use decoded::Decoded;
use holds::Holds;
use locks::BindLocks;
use prepared::{PreparedEntry, PreparedForms};

/// What the candidate nodes look like to the service.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Nodes with a readable inventory, with usage.
    pub nodes: Vec<Arc<v1::Node>>,
    /// The same nodes serialized and digested for the service (kept with the view and rebuilt
    /// only when a node's inventory or usage changes).
    pub prepared: Vec<Arc<PreparedNode>>,
    /// Nodes left out: name, reason, unresolvable.
    pub unusable: Vec<(String, String, bool)>,
}

/// One node as preemption sees it: its cards with every usage that counts (as a snapshot sends
/// them), and the pods of the store whose decision is part of that usage.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeParts {
    /// The node with its cards and usage.
    pub node: v1::Node,
    /// The store's pods whose decision counts on the node, with what they hold (by uid).
    pub pods: Vec<(Arc<Pod>, Arc<PodUsage>)>,
}

/// The shared cluster view.
#[derive(Debug)]
pub struct ClusterView {
    nodes: Store<Node>,
    pods: Store<Pod>,
    names: Names,
    synced: AtomicBool,
    assumed: AssumeCache,
    locks: BindLocks,
    decoded: Decoded,
    prepared: PreparedForms,
    holds: Holds,
}

type UsageByNode = HashMap<String, Vec<Arc<PodUsage>>>;

/// A usage that counts, with the store's pod when it comes from the store.
type Counted = (Arc<PodUsage>, Option<Arc<Pod>>);

impl ClusterView {
    /// A view over these reflector stores.
    pub fn new(nodes: Store<Node>, pods: Store<Pod>, names: Names, ttl: Duration) -> Self {
        ClusterView {
            nodes,
            pods,
            names,
            synced: AtomicBool::new(false),
            assumed: AssumeCache::new(ttl),
            locks: BindLocks::default(),
            decoded: Decoded::default(),
            prepared: PreparedForms::default(),
            holds: Holds::default(),
        }
    }

    /// Sets how long preemption holds last (see [`hold_fate`]).
    pub fn with_hold_times(mut self, times: HoldTimes) -> Self {
        self.holds.set_times(times);
        self
    }

    /// Sets how long a reservation (see [`Assumed::tentative`]) lives without its bind.
    pub fn with_reservation_ttl(mut self, ttl: Duration) -> Self {
        self.assumed.set_reservation_ttl(ttl);
        self
    }

    /// Names.
    pub fn names(&self) -> &Names {
        &self.names
    }

    /// Waits until both informers have listed everything once.
    pub async fn wait_synced(&self) -> anyhow::Result<()> {
        self.nodes.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        self.synced.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Whether the initial sync is done.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    /// Marks the view synced (tests).
    pub fn mark_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }

    /// The pod in the store with this uid, if any.
    pub fn pod(&self, namespace: &str, name: &str, uid: &str) -> Option<Arc<Pod>> {
        self.pods
            .get(&ObjectRef::new(name).within(namespace))
            .filter(|p| uid.is_empty() || p.metadata.uid.as_deref() == Some(uid))
    }

    /// Number of assumed decisions.
    pub fn assumed_len(&self) -> usize {
        self.assumed.len()
    }

    /// Records a bind decision.
    pub fn assume(&self, a: Assumed) {
        self.assumed.assume(a);
    }

    /// Records a reservation (tentative decision), unless a real decision exists for the pod.
    pub fn reserve(&self, a: Assumed) {
        self.assumed.reserve(a);
    }

    /// Drops the pod's reservation, if it has one (its bind failed before any decision).
    pub fn forget_reservation(&self, uid: &str) {
        self.assumed.forget_reservation(uid);
    }

    /// Drops a decision (its bind failed).
    pub fn forget(&self, uid: &str) {
        self.assumed.forget(uid);
    }

    /// The bind lock of a node: binds to one node run one at a time.
    pub async fn lock_node(&self, node: &str) -> tokio::sync::OwnedMutexGuard<()> {
        self.locks.lock(node).await
    }

    /// How many entries the decode and prepared caches hold before they are emptied.
    fn cache_bound(&self) -> usize {
        4 * self.nodes.len().max(16)
    }

    /// Every usage that counts, from one consistent copy of the store: the store's decisions
    /// (with the pod), the assume cache's (an assumed decision replaces whatever older decision
    /// the store shows for the pod) and the preemption holds; each with its pod's uid, and with
    /// the store's pod object when `with_pods` (only preemption reads them).
    fn counted(&self, with_pods: bool) -> Vec<(String, Arc<PodUsage>, Option<Arc<Pod>>)> {
        // One consistent copy of the store: the assumed entries are judged against the very
        // objects counted here (the informer may update the store meanwhile). Decoded usages are
        // kept while a pod's resourceVersion is unchanged: a call allocates only for pods that
        // changed since the last one.
        let pods = self.pods.state();
        let current = self.decoded.usages(&pods, &self.names);
        let assumed_usage = self.assumed.counted(|uid| match current.get(uid) {
            None => Observed::Absent,
            Some(u) => Observed::Present(u.map(|u| (**u).clone())),
        });
        let held = if self.holds.is_empty() {
            Vec::new()
        } else {
            let nominated = |uid: &str| {
                pods.iter()
                    .find(|p| p.metadata.uid.as_deref() == Some(uid))
                    .and_then(|p| p.status.as_ref()?.nominated_node_name.clone())
                    .filter(|n| !n.is_empty())
            };
            self.holds.counted(
                |uid| match current.get(uid) {
                    _ if assumed_usage.contains_key(uid) => Preemptor::Decided,
                    None => Preemptor::Absent,
                    Some(None) => Preemptor::Pending(nominated(uid)),
                    Some(Some(_)) => Preemptor::Decided,
                },
                |uid| current.get(uid).is_some(),
            )
        };
        let by_uid: HashMap<&str, &Arc<Pod>> = if with_pods {
            pods.iter()
                .filter_map(|p| Some((p.metadata.uid.as_deref()?, p)))
                .collect()
        } else {
            HashMap::new()
        };
        let mut out = Vec::new();
        for (uid, u) in current.iter() {
            if let Some(u) = u
                && !assumed_usage.contains_key(uid)
            {
                let pod = by_uid.get(uid.as_str()).map(|p| (*p).clone());
                out.push((uid.clone(), u.clone(), pod));
            }
        }
        out.extend(assumed_usage.into_iter().map(|(uid, u)| (uid, u, None)));
        out.extend(held.into_iter().map(|(uid, u)| (uid, u, None)));
        out
    }

    /// Usage per node (only for `wanted` nodes), from the store, the assume cache and the holds,
    /// leaving out the pod `exclude_uid` (the pod being placed: a retried pod's own earlier
    /// decision, or its own hold, must not count against it).
    fn usage(&self, wanted: &dyn Fn(&str) -> bool, exclude_uid: &str) -> UsageByNode {
        let mut by_node: UsageByNode = HashMap::new();
        for (uid, u, _) in self.counted(false) {
            if uid != exclude_uid && wanted(&u.node) {
                by_node.entry(u.node.clone()).or_default().push(u);
            }
        }
        by_node
    }

    /// The candidate nodes as preemption sees them (nodes the informer has not shown, or
    /// without a readable inventory, are left out), leaving out the pod `exclude_uid` and the
    /// usage of the pods in `gone` (kube-scheduler's victims, see `src/preempt/`).
    pub fn preemption_parts(
        &self,
        node_names: &[String],
        exclude_uid: &str,
        gone: &std::collections::HashSet<String>,
    ) -> Vec<NodeParts> {
        let set: std::collections::HashSet<&str> = node_names.iter().map(String::as_str).collect();
        let mut usage: HashMap<String, Vec<Counted>> = HashMap::new();
        for (uid, u, pod) in self.counted(true) {
            if uid != exclude_uid && !gone.contains(&uid) && set.contains(u.node.as_str()) {
                usage.entry(u.node.clone()).or_default().push((u, pod));
            }
        }
        let mut out = Vec::new();
        for name in node_names {
            let Some(node) = self.nodes.get(&ObjectRef::new(name)) else {
                continue;
            };
            let inv = self
                .decoded
                .inventory(&node, &self.names, self.cache_bound());
            if inv.problem.is_some() {
                continue;
            }
            let here = usage.remove(name).unwrap_or_default();
            out.push(NodeParts {
                node: translate::node_with_usage(
                    name,
                    &inv,
                    here.iter().map(|(u, _)| u.bookings.as_slice()),
                    &self.names,
                ),
                pods: here
                    .into_iter()
                    .filter_map(|(u, pod)| Some((pod?, u)))
                    .collect(),
            });
        }
        out
    }

    /// Keeps `h`'s placement for its pod, or offers it (see [`Hold`]).
    pub fn hold(&self, h: Hold) {
        self.holds.insert(h);
    }

    /// The pod's holds and offers, as the last snapshot judged them.
    pub fn holds_of(&self, uid: &str) -> Vec<Hold> {
        self.holds.of(uid)
    }

    /// Drops the pod's holds and offers (its preemption failed).
    pub fn release_hold(&self, uid: &str) {
        self.holds.remove(uid);
    }

    /// Number of holds.
    pub fn holds_len(&self) -> usize {
        self.holds.len()
    }

    /// The candidate nodes with their cards and current usage.
    pub fn snapshot(&self, node_names: &[String], exclude_uid: &str) -> Snapshot {
        self.snapshot_with(node_names, exclude_uid, &HashMap::new())
    }

    /// Like [`ClusterView::snapshot`], with nodes read from the API for those the informer has
    /// not shown yet.
    pub fn snapshot_with(
        &self,
        node_names: &[String],
        exclude_uid: &str,
        fetched: &HashMap<String, Node>,
    ) -> Snapshot {
        let set: std::collections::HashSet<&str> = node_names.iter().map(String::as_str).collect();
        let usage = self.usage(&|n| set.contains(n), exclude_uid);
        let mut snap = Snapshot::default();
        let mut prepared = self.prepared.lock(self.cache_bound());
        for name in node_names {
            let cached = self.nodes.get(&ObjectRef::new(name));
            let entry = prepared.get(name.as_str());
            // The very object the entry was built from: its inventory is the same.
            let kept_inventory = entry.and_then(|e| e.inventory_of(cached.as_ref()));
            let Some(node) = cached.as_deref().or_else(|| fetched.get(name)) else {
                snap.unusable.push((
                    name.clone(),
                    "node not in gpusched-kube's cache yet".to_owned(),
                    false,
                ));
                continue;
            };
            let inv = kept_inventory.unwrap_or_else(|| {
                self.decoded
                    .inventory(node, &self.names, self.cache_bound())
            });
            if let Some(problem) = &inv.problem {
                snap.unusable.push((name.clone(), problem.clone(), true));
                continue;
            }
            let mut pods: Vec<Arc<PodUsage>> = usage.get(name).cloned().unwrap_or_default();
            pods.sort_by_key(|u| Arc::as_ptr(u) as usize);
            if let Some(e) = entry
                && e.built_from(&inv, &pods)
            {
                let (node, p) = e.forms();
                snap.nodes.push(node);
                snap.prepared.push(p);
                continue;
            }
            let e = PreparedEntry::build(name, cached, inv, pods, &self.names);
            let (node, p) = e.forms();
            snap.nodes.push(node);
            snap.prepared.push(p);
            prepared.insert(name.clone(), e);
        }
        snap
    }
}
