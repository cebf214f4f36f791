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
use k8s_openapi::api::core::v1::{Node, Pod, ResourceQuota};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::config::{Names, PolicySettings};
use crate::fgd::Fgd;
use crate::quota;
use crate::translate::{self, PodUsage};

mod assume;
mod decoded;
mod holds;
mod locks;
mod prepared;
#[cfg(test)]
mod quota_tests;
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
    /// ResourceQuota objects (None: quotas are off).
    quotas: Option<Store<ResourceQuota>>,
    names: Names,
    synced: AtomicBool,
    assumed: AssumeCache,
    locks: BindLocks,
    namespace_locks: BindLocks,
    decoded: Decoded,
    prepared: PreparedForms,
    holds: Holds,
    fgd: Fgd,
}

type UsageByNode = HashMap<String, Vec<Arc<PodUsage>>>;

/// A usage that counts, with the store's pod when it comes from the store.
type Counted = (Arc<PodUsage>, Option<Arc<Pod>>);

/// What [`ClusterView::each_counted_with`] calls: pod uid, usage, the store's pod.
type CountedFn<'a> = dyn FnMut(&str, &Arc<PodUsage>, Option<&Arc<Pod>>) + 'a;

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
            holds: Holds::default(),
            fgd: Fgd::default(),
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

    /// Sets the default policies and the fgd mix the requests carry (see [`crate::fgd`]).
    pub fn with_policy(mut self, settings: PolicySettings) -> Self {
        self.fgd = Fgd::new(settings);
        self
    }

    /// The options of a request for `w` over `nodes`: `base` with the shim's default policies
    /// and, when `w` runs under fgd, the workload mix (see [`crate::fgd`]). None: the
    /// service's defaults.
    pub fn options<'a>(
        &self,
        w: &v1::Workload,
        nodes: impl IntoIterator<Item = &'a v1::Node>,
        base: Option<v1::PlacementOptions>,
    ) -> Option<v1::PlacementOptions> {
        self.fgd
            .options(w, nodes, || self.pods(), &self.names, base)
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

    /// Usage per node (only for `wanted` nodes), from the store, the assume cache and the
    /// preemption holds, leaving out the pod `exclude_uid` (the pod being placed: a retried pod's
    /// own earlier decision, or its own hold, must not count against it).
    fn usage(&self, wanted: &dyn Fn(&str) -> bool, exclude_uid: &str) -> UsageByNode {
        let mut by_node: UsageByNode = HashMap::new();
        self.each_counted_with(true, false, &mut |uid, u, _| {
            if uid != exclude_uid && wanted(&u.node) {
                by_node.entry(u.node.clone()).or_default().push(u.clone());
            }
        });
        by_node
    }

    /// Calls `f` with every decision that counts now, by pod uid: the store's, and the assume
    /// cache's in place of whatever older decision the store shows for the same pod.
    fn each_counted(&self, f: &mut dyn FnMut(&str, &Arc<PodUsage>)) {
        self.each_counted_with(false, false, &mut |uid, u, _| f(uid, u));
    }

    /// [`ClusterView::each_counted`], and the preemption holds when `holds` (usage of nodes,
    /// not of namespaces: a hold is charged to its pod's quota when it binds); with the store's
    /// pod object when `with_pods` (only preemption reads them).
    fn each_counted_with(&self, holds: bool, with_pods: bool, f: &mut CountedFn<'_>) {
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
        let by_uid: HashMap<&str, &Arc<Pod>> = if with_pods {
            pods.iter()
                .filter_map(|p| Some((p.metadata.uid.as_deref()?, p)))
                .collect()
        } else {
            HashMap::new()
        };
        for (uid, u) in current.iter() {
            if let Some(u) = u
                && !assumed_usage.contains_key(uid)
            {
                f(uid, u, by_uid.get(uid.as_str()).copied());
            }
        }
        for (uid, u) in &assumed_usage {
            f(uid, u, None);
        }
        if holds && !self.holds.is_empty() {
            let nominated = |uid: &str| {
                pods.iter()
                    .find(|p| p.metadata.uid.as_deref() == Some(uid))
                    .and_then(|p| p.status.as_ref()?.nominated_node_name.clone())
                    .filter(|n| !n.is_empty())
            };
            let held = self.holds.counted(
                |uid| match current.get(uid) {
                    _ if assumed_usage.contains_key(uid) => Preemptor::Decided,
                    None => Preemptor::Absent,
                    Some(None) => Preemptor::Pending(nominated(uid)),
                    Some(Some(_)) => Preemptor::Decided,
                },
                |uid| current.get(uid).is_some(),
            );
            for (uid, u) in &held {
                f(uid, u, None);
            }
        }
    }

    /// The candidate nodes as preemption sees them (nodes the informer has not shown, without a
    /// readable inventory, or whose pods' decisions contradict it are left out), leaving out the
    /// pod `exclude_uid` and the usage of the pods in `gone` (kube-scheduler's victims, see
    /// `src/preempt/`).
    pub fn preemption_parts(
        &self,
        node_names: &[String],
        exclude_uid: &str,
        gone: &std::collections::HashSet<String>,
    ) -> Vec<NodeParts> {
        let set: std::collections::HashSet<&str> = node_names.iter().map(String::as_str).collect();
        let mut usage: HashMap<String, Vec<Counted>> = HashMap::new();
        self.each_counted_with(true, true, &mut |uid, u, pod| {
            if uid != exclude_uid && !gone.contains(uid) && set.contains(u.node.as_str()) {
                usage
                    .entry(u.node.clone())
                    .or_default()
                    .push((u.clone(), pod.cloned()));
            }
        });
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
            let usages: Vec<Arc<PodUsage>> = here.iter().map(|(u, _)| u.clone()).collect();
            let Ok(node) = translate::node_with_pods(name, &inv, &usages, &self.names) else {
                continue;
            };
            out.push(NodeParts {
                node,
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
