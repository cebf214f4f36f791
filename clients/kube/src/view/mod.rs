//! The cluster view: Nodes and Pods from kube-rs reflectors, and what the shim keeps beside
//! them, one job per file:
//!
//! - `assume.rs`: the assume cache, decisions bound (or reserved) but not yet seen by the
//!   informer, and the rule that ends each ([`assumed_fate`]);
//! - `locks.rs`: per-node bind locks;
//! - `decoded.rs`: inventories and pod usages decoded once per resourceVersion;
//! - `prepared.rs`: each node's whole and prepared forms, rebuilt only when its inventory or
//!   usage changes.
//!
//! [`ClusterView`] here composes them: what the usage on a node is (the store's pods and the
//! assume cache) and what the service is sent ([`Snapshot`]). The files below import none of
//! each other nor this one.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use gpusched_client::{PreparedNode, v1};
use k8s_openapi::api::core::v1::{Node, Pod, ResourceQuota};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::config::Names;
use crate::quota;
use crate::translate::PodUsage;

mod assume;
mod decoded;
mod locks;
mod prepared;
#[cfg(test)]
mod quota_tests;
#[cfg(test)]
mod tests;

pub use assume::{Assumed, Observed, assumed_fate};

use assume::AssumeCache;
use decoded::Decoded;
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

/// A pod whose decision counts as GPU usage (see [`ClusterView::holders`]).
#[derive(Clone, Debug)]
pub struct Holder {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod uid.
    pub uid: String,
    /// What it holds, on which node.
    pub usage: Arc<PodUsage>,
}

/// The shared cluster view.
#[derive(Debug)]
pub struct ClusterView {
    nodes: Store<Node>,
    pods: Store<Pod>,
    /// ResourceQuota objects (None: quotas are off).
    quotas: Option<Store<ResourceQuota>>,
    names: Names,
    synced: AtomicBool,
    assumed: AssumeCache,
    locks: BindLocks,
    namespace_locks: BindLocks,
    decoded: Decoded,
    prepared: PreparedForms,
}

type UsageByNode = HashMap<String, Vec<Arc<PodUsage>>>;

impl ClusterView {
    /// A view over these reflector stores.
    pub fn new(nodes: Store<Node>, pods: Store<Pod>, names: Names, ttl: Duration) -> Self {
        ClusterView {
            nodes,
            pods,
            quotas: None,
            names,
            synced: AtomicBool::new(false),
            assumed: AssumeCache::new(ttl),
            locks: BindLocks::default(),
            namespace_locks: BindLocks::default(),
            decoded: Decoded::default(),
            prepared: PreparedForms::default(),
        }
    }

    /// A synced view of exactly these objects (tests, benchmarks, examples: no API server).
    pub fn of_objects(nodes: Vec<Node>, pods: Vec<Pod>, names: Names, ttl: Duration) -> Self {
        let (node_store, mut node_writer) = kube::runtime::reflector::store::<Node>();
        let (pod_store, mut pod_writer) = kube::runtime::reflector::store::<Pod>();
        for n in nodes {
            node_writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(n));
        }
        for p in pods {
            pod_writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(p));
        }
        let view = ClusterView::new(node_store, pod_store, names, ttl);
        view.mark_synced();
        view
    }

    /// Reads GPU quotas from exactly these objects (tests, examples; see [`Self::of_objects`]).
    pub fn with_quota_objects(self, quotas: Vec<ResourceQuota>) -> Self {
        let (store, mut writer) = kube::runtime::reflector::store::<ResourceQuota>();
        for q in quotas {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(q));
        }
        self.with_quotas(store)
    }

    /// Sets how long a reservation (see [`Assumed::tentative`]) lives without its bind.
    pub fn with_reservation_ttl(mut self, ttl: Duration) -> Self {
        self.assumed.set_reservation_ttl(ttl);
        self
    }

    /// Reads GPU quotas from this ResourceQuota store (see [`crate::quota`]).
    pub fn with_quotas(mut self, quotas: Store<ResourceQuota>) -> Self {
        self.quotas = Some(quotas);
        self
    }

    /// Names.
    pub fn names(&self) -> &Names {
        &self.names
    }

    /// Waits until the informers (nodes, pods, quotas) have listed everything once.
    pub async fn wait_synced(&self) -> anyhow::Result<()> {
        self.nodes.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        if let Some(q) = &self.quotas {
            q.wait_until_ready().await?;
        }
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

    /// Usage per node (only for `wanted` nodes), from the store and the assume cache, leaving
    /// out the pod `exclude_uid` (the pod being placed: a retried pod's own earlier decision must
    /// not count against it).
    fn usage(&self, wanted: &dyn Fn(&str) -> bool, exclude_uid: &str) -> UsageByNode {
        let mut by_node: UsageByNode = HashMap::new();
        self.each_counted(&mut |uid, u| {
            if uid != exclude_uid && wanted(&u.node) {
                by_node.entry(u.node.clone()).or_default().push(u.clone());
            }
        });
        by_node
    }

    /// Calls `f` with every decision that counts now, by pod uid: the store's, and the assume
    /// cache's in place of whatever older decision the store shows for the same pod.
    fn each_counted(&self, f: &mut dyn FnMut(&str, &Arc<PodUsage>)) {
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
        let store_usages = current.iter().filter_map(|(uid, u)| {
            if assumed_usage.contains_key(uid) {
                return None;
            }
            Some((uid, u?))
        });
        for (uid, u) in store_usages.chain(assumed_usage.iter()) {
            f(uid, u);
        }
    }

    /// Every pod whose decision counts as GPU usage (the same decisions the snapshots count: the
    /// store's bound decisions and the assume cache's), by node, namespace and name.
    pub fn holders(&self) -> Vec<Holder> {
        let mut out: Vec<Holder> = Vec::new();
        self.each_counted(&mut |uid, u| {
            let (namespace, name) = u.owner.split_once('/').unwrap_or(("", u.owner.as_str()));
            out.push(Holder {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                uid: uid.to_owned(),
                usage: u.clone(),
            });
        });
        out.sort_by(|a, b| {
            (&a.usage.node, &a.namespace, &a.name).cmp(&(&b.usage.node, &b.namespace, &b.name))
        });
        out
    }

    /// Every node the informer shows.
    pub fn nodes(&self) -> Vec<Arc<Node>> {
        self.nodes.state()
    }

    /// Every pod the informer shows (those naming our scheduler).
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        self.pods.state()
    }

    /// What the namespace's pods hold against its quota (contract 10.2), the pod `exclude_uid`
    /// left out: the decisions counted as node usage (bound by our decision, assumed, reserved).
    pub fn namespace_use(&self, namespace: &str, exclude_uid: &str) -> quota::Use {
        let mut total = quota::Use::default();
        self.each_counted(&mut |uid, u| {
            if uid != exclude_uid && u.namespace == namespace {
                total = total.plus(quota::consumed(&u.bookings, u.init));
                // MIG instances consume their devices' bookings, held for the pod's life (no
                // init peak: contract 10.2, 11.4).
                for r in &u.mig {
                    total = total.plus(quota::Use {
                        mem_mib: r.mem_mib,
                        cores: u64::from(r.cores),
                    });
                }
            }
        });
        total
    }

    /// The namespace's GPU limits (None: quotas are off, or none of its quotas sets a GPU key).
    pub fn quota_limits(&self, namespace: &str) -> Option<quota::Limits> {
        let store = self.quotas.as_ref()?;
        let quotas = store.state();
        let keys = quota::Keys::of(&self.names);
        let l = quota::limits(
            quotas
                .iter()
                .filter(|q| q.metadata.namespace.as_deref() == Some(namespace))
                .map(|q| &**q),
            &keys,
        );
        l.any().then_some(l)
    }

    /// The namespace's quota now: its limits and what it holds without the pod `exclude_uid`
    /// (None: no GPU limit applies).
    pub fn quota(&self, namespace: &str, exclude_uid: &str) -> Option<quota::NamespaceQuota> {
        let limits = self.quota_limits(namespace)?;
        Some(quota::NamespaceQuota {
            namespace: namespace.to_owned(),
            limits,
            used: self.namespace_use(namespace, exclude_uid),
        })
    }

    /// How many ResourceQuota objects have a GPU key whose value cannot be read (each blocks
    /// its namespace's GPU pods for that resource).
    pub fn invalid_quotas(&self) -> usize {
        let Some(store) = &self.quotas else { return 0 };
        let keys = quota::Keys::of(&self.names);
        store
            .state()
            .iter()
            .filter(|q| quota::read(q, &keys).1.iter().any(|f| f.blocking))
            .count()
    }

    /// The namespace's bind lock: with a quota, the budget, `Allocate` and the assume-cache
    /// insert of binds in one namespace run one at a time (taken after the node's lock), so
    /// the same budget is never given twice.
    pub async fn lock_namespace(&self, namespace: &str) -> tokio::sync::OwnedMutexGuard<()> {
        self.namespace_locks.lock(namespace).await
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
            let forms = match entry {
                Some(e) if e.built_from(&inv, &pods) => e.forms(),
                _ => {
                    let e = PreparedEntry::build(name, cached, inv, pods, &self.names);
                    let forms = e.forms();
                    prepared.insert(name.clone(), e);
                    forms
                }
            };
            match forms {
                Ok((node, p)) => {
                    snap.nodes.push(node);
                    snap.prepared.push(p);
                }
                Err(problem) => snap.unusable.push((name.clone(), problem, true)),
            }
        }
        snap
    }
}
