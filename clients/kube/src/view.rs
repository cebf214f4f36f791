//! The cluster view: Nodes and Pods from kube-rs reflectors, plus an assume cache of decisions
//! already bound but not yet seen by the informer, plus per-node bind locks.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use gpusched_client::{PreparedNode, v1};
use gpusched_hami::Booking;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::reflector::{ObjectRef, Store};

use crate::config::Names;
use crate::inventory::Inventory;
use crate::translate::{self, PodUsage};

/// A bind decision written by this instance and not yet confirmed by the informer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assumed {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod uid.
    pub uid: String,
    /// Chosen node.
    pub node: String,
    /// Per container bookings.
    pub bookings: Vec<Vec<Booking>>,
    /// The `-allocated` annotation written.
    pub annotation: String,
    /// When it was assumed.
    pub at: Instant,
    /// Whether the informer has shown the pod since.
    pub seen: bool,
    /// A reservation made when kube-scheduler was told the preferred node (prioritize), before
    /// its bind: it makes the next pods' filter see the capacity kube-scheduler has already
    /// assumed taken. Replaced by the real decision at bind; expires after the reservation TTL.
    pub tentative: bool,
}

/// How the informer currently shows an assumed pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    /// Not in the store (not seen yet, or deleted).
    Absent,
    /// In the store; with the usage it counts for (None: counts nothing, e.g. finished or its
    /// annotation is not written yet).
    Present(Option<PodUsage>),
}

/// Decides what happens to an assumed entry given what the informer shows:
/// `Some(true)` = keep counting the assumed bookings, `Some(false)` = the store already counts
/// the same decision (drop the entry), `None` = the decision is void (pod gone/finished/expired;
/// drop the entry).
pub fn assumed_fate(
    a: &mut Assumed,
    observed: &Observed,
    now: Instant,
    ttl: Duration,
) -> Option<bool> {
    match observed {
        Observed::Present(Some(u)) if u.annotation == a.annotation && u.node == a.node => {
            Some(false)
        }
        // A reservation is void once the store shows a real decision for the pod.
        Observed::Present(Some(_)) if a.tentative => None,
        Observed::Present(_) => {
            a.seen = true;
            if now.duration_since(a.at) > ttl {
                None
            } else {
                Some(true)
            }
        }
        Observed::Absent if a.seen => None,
        Observed::Absent => {
            if now.duration_since(a.at) > ttl {
                None
            } else {
                Some(true)
            }
        }
    }
}

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

/// The shared cluster view.
#[derive(Debug)]
pub struct ClusterView {
    nodes: Store<Node>,
    pods: Store<Pod>,
    names: Names,
    ttl: Duration,
    reservation_ttl: Duration,
    assumed: std::sync::Mutex<HashMap<String, Assumed>>,
    locks: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    synced: AtomicBool,
    /// Decoded inventories by node name, valid for one resourceVersion.
    inventories: std::sync::Mutex<HashMap<String, (String, Arc<Inventory>)>>,
    /// Decoded pod usage by uid, valid for one resourceVersion.
    usages: std::sync::Mutex<UsageCache>,
    /// The usage of each assumed decision by uid, kept while the decision is unchanged (so that
    /// a node's prepared form is reused while nothing on it changes).
    assumed_usages: std::sync::Mutex<HashMap<String, Arc<PodUsage>>>,
    /// Each node's prepared form, and what it was built from.
    prepared: std::sync::Mutex<HashMap<String, PreparedEntry>>,
}

/// A node's whole and prepared forms, valid while its inventory and the usages counted on it
/// are the very same objects (held here, so they cannot be freed and their addresses reused).
#[derive(Debug)]
struct PreparedEntry {
    /// The informer's object it was built from (None: read from the API).
    source: Option<Arc<Node>>,
    inventory: Arc<Inventory>,
    usages: Vec<Arc<PodUsage>>,
    node: Arc<v1::Node>,
    prepared: Arc<PreparedNode>,
}

impl PreparedEntry {
    fn built_from(&self, inventory: &Arc<Inventory>, usages: &[Arc<PodUsage>]) -> bool {
        Arc::ptr_eq(&self.inventory, inventory)
            && self.usages.len() == usages.len()
            && self
                .usages
                .iter()
                .zip(usages)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

/// A pod's decoded usage and the resourceVersion it was decoded from.
#[derive(Debug)]
struct CachedUsage {
    rv: String,
    usage: Option<Arc<PodUsage>>,
    /// The last [`UsageCache::generation`] that saw the pod in the store.
    generation: u64,
}

/// Decoded pod usages by uid, and a counter of the calls that refreshed them (entries of pods
/// gone from the store are dropped by it).
#[derive(Debug, Default)]
struct UsageCache {
    generation: u64,
    by_uid: HashMap<String, CachedUsage>,
}

type UsageByNode = HashMap<String, Vec<Arc<PodUsage>>>;

impl ClusterView {
    /// A view over these reflector stores.
    pub fn new(nodes: Store<Node>, pods: Store<Pod>, names: Names, ttl: Duration) -> Self {
        ClusterView {
            nodes,
            pods,
            names,
            ttl,
            reservation_ttl: Duration::from_secs(10),
            assumed: std::sync::Mutex::new(HashMap::new()),
            locks: std::sync::Mutex::new(HashMap::new()),
            synced: AtomicBool::new(false),
            inventories: std::sync::Mutex::new(HashMap::new()),
            usages: std::sync::Mutex::new(UsageCache::default()),
            assumed_usages: std::sync::Mutex::new(HashMap::new()),
            prepared: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Sets how long a reservation (see [`Assumed::tentative`]) lives without its bind.
    pub fn with_reservation_ttl(mut self, ttl: Duration) -> Self {
        self.reservation_ttl = ttl;
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
        self.assumed.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Records a bind decision.
    pub fn assume(&self, a: Assumed) {
        if let Ok(mut m) = self.assumed.lock() {
            m.insert(a.uid.clone(), a);
        }
    }

    /// Records a reservation (tentative decision), unless a real decision exists for the pod.
    pub fn reserve(&self, a: Assumed) {
        if let Ok(mut m) = self.assumed.lock() {
            if m.get(&a.uid).is_some_and(|old| !old.tentative) {
                return;
            }
            m.insert(
                a.uid.clone(),
                Assumed {
                    tentative: true,
                    ..a
                },
            );
        }
    }

    /// Drops the pod's reservation, if it has one (its bind failed before any decision).
    pub fn forget_reservation(&self, uid: &str) {
        if let Ok(mut m) = self.assumed.lock()
            && m.get(uid).is_some_and(|a| a.tentative)
        {
            m.remove(uid);
        }
    }

    /// Drops a decision (its bind failed).
    pub fn forget(&self, uid: &str) {
        if let Ok(mut m) = self.assumed.lock() {
            m.remove(uid);
        }
    }

    /// The bind lock of a node: binds to one node run one at a time.
    pub async fn lock_node(&self, node: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = match self.locks.lock() {
            Ok(mut m) => m.entry(node.to_owned()).or_default().clone(),
            Err(_) => Arc::new(tokio::sync::Mutex::new(())),
        };
        lock.lock_owned().await
    }

    /// Usage per node (only for `wanted` nodes), from the store and the assume cache, leaving
    /// out the pod `exclude_uid` (the pod being placed: a retried pod's own earlier decision must
    /// not count against it).
    fn usage(&self, wanted: &dyn Fn(&str) -> bool, exclude_uid: &str) -> UsageByNode {
        // One consistent copy of the store: the assumed entries are judged against the very
        // objects counted here (the informer may update the store meanwhile). Decoded usages are
        // kept while a pod's resourceVersion is unchanged: a call allocates only for pods that
        // changed since the last one.
        let pods = self.pods.state();
        let mut cache = match self.usages.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        let cache = &mut *cache;
        cache.generation = cache.generation.wrapping_add(1);
        let generation = cache.generation;
        for p in &pods {
            let uid = p.metadata.uid.as_deref().unwrap_or("");
            let rv = p.metadata.resource_version.as_deref().unwrap_or("");
            match cache.by_uid.get_mut(uid) {
                Some(e) if e.rv == rv && !rv.is_empty() => e.generation = generation,
                _ => {
                    cache.by_uid.insert(
                        uid.to_owned(),
                        CachedUsage {
                            rv: rv.to_owned(),
                            usage: translate::pod_usage(p, &self.names).map(Arc::new),
                            generation,
                        },
                    );
                }
            }
        }
        cache.by_uid.retain(|_, e| e.generation == generation);
        let current = &cache.by_uid;
        let now = Instant::now();
        let mut assumed_usage: HashMap<String, Arc<PodUsage>> = HashMap::new();
        let mut old_arcs = match self.assumed_usages.lock() {
            Ok(mut m) => std::mem::take(&mut *m),
            Err(p) => std::mem::take(&mut *p.into_inner()),
        };
        if let Ok(mut assumed) = self.assumed.lock() {
            assumed.retain(|uid, a| {
                let observed = match current.get(uid) {
                    None => Observed::Absent,
                    Some(e) => Observed::Present(e.usage.as_deref().cloned()),
                };
                let ttl = if a.tentative {
                    self.reservation_ttl
                } else {
                    self.ttl
                };
                match assumed_fate(a, &observed, now, ttl) {
                    Some(true) => {
                        let u = match old_arcs.remove(uid) {
                            Some(u)
                                if u.node == a.node
                                    && u.annotation == a.annotation
                                    && u.bookings == a.bookings =>
                            {
                                u
                            }
                            _ => Arc::new(PodUsage {
                                node: a.node.clone(),
                                bookings: a.bookings.clone(),
                                annotation: a.annotation.clone(),
                            }),
                        };
                        assumed_usage.insert(uid.clone(), u);
                        true
                    }
                    Some(false) | None => false,
                }
            });
        }
        if let Ok(mut m) = self.assumed_usages.lock() {
            m.clone_from(&assumed_usage);
        }
        // An assumed decision replaces whatever older decision the store shows for the pod.
        let mut by_node: UsageByNode = HashMap::new();
        let store_usages = current.iter().filter_map(|(uid, e)| {
            if assumed_usage.contains_key(uid) {
                return None;
            }
            Some((uid, e.usage.as_ref()?))
        });
        for (uid, u) in store_usages.chain(assumed_usage.iter()) {
            if uid != exclude_uid && wanted(&u.node) {
                by_node.entry(u.node.clone()).or_default().push(u.clone());
            }
        }
        by_node
    }

    fn inventory(&self, node: &Node) -> Arc<Inventory> {
        let name = node.metadata.name.as_deref().unwrap_or("");
        let rv = node.metadata.resource_version.as_deref().unwrap_or("");
        let mut cache = match self.inventories.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        if let Some((old_rv, inv)) = cache.get(name)
            && old_rv == rv
            && !rv.is_empty()
        {
            return inv.clone();
        }
        let (name, rv) = (name.to_owned(), rv.to_owned());
        let inv = Arc::new(translate::inventory(node, &self.names));
        if cache.len() > 4 * self.nodes.len().max(16) {
            cache.clear();
        }
        cache.insert(name, (rv, inv.clone()));
        inv
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
        let mut prepared = match self.prepared.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        if prepared.len() > 4 * self.nodes.len().max(16) {
            prepared.clear();
        }
        for name in node_names {
            let cached = self.nodes.get(&ObjectRef::new(name));
            let entry = prepared.get(name.as_str());
            // The very object the entry was built from: its inventory is the same.
            let kept_inventory = match (&cached, entry) {
                (Some(c), Some(e)) if e.source.as_ref().is_some_and(|s| Arc::ptr_eq(s, c)) => {
                    Some(e.inventory.clone())
                }
                _ => None,
            };
            let Some(node) = cached.as_deref().or_else(|| fetched.get(name)) else {
                snap.unusable.push((
                    name.clone(),
                    "node not in gpusched-kube's cache yet".to_owned(),
                    false,
                ));
                continue;
            };
            let inv = kept_inventory.unwrap_or_else(|| self.inventory(node));
            if let Some(problem) = &inv.problem {
                snap.unusable.push((name.clone(), problem.clone(), true));
                continue;
            }
            let mut pods: Vec<Arc<PodUsage>> = usage.get(name).cloned().unwrap_or_default();
            pods.sort_by_key(|u| Arc::as_ptr(u) as usize);
            if let Some(e) = entry
                && e.built_from(&inv, &pods)
            {
                snap.nodes.push(e.node.clone());
                snap.prepared.push(e.prepared.clone());
                continue;
            }
            let node = Arc::new(translate::node_with_usage(
                name,
                &inv,
                pods.iter().map(|u| u.bookings.as_slice()),
                &self.names,
            ));
            let p = Arc::new(PreparedNode::new(&node));
            snap.nodes.push(node.clone());
            snap.prepared.push(p.clone());
            prepared.insert(
                name.clone(),
                PreparedEntry {
                    source: cached,
                    inventory: inv,
                    usages: pods,
                    node,
                    prepared: p,
                },
            );
        }
        snap
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn names() -> Names {
        Names {
            scheduler_name: "gpusched-scheduler".into(),
            ..Names::default()
        }
    }

    fn gpu_node(name: &str, cards: u32) -> Node {
        let cards = gpusched_client::node(name, cards, 10000, "NVIDIA-T4").cards;
        serde_json::from_value(json!({"metadata": {"name": name, "annotations": {
            "hami.io/node-nvidia-register": gpusched_hami::encode_register(&cards)
        }}}))
        .unwrap()
    }

    /// A GPU pod; bound to `node` with `devices` as the shim writes a decision (the Binding
    /// sets spec.nodeName and hami.io/vgpu-node together).
    fn pod(name: &str, uid: &str, scheduler: &str, node: Option<&str>, devices: &str) -> Pod {
        let mut ann = serde_json::Map::new();
        if !devices.is_empty() {
            ann.insert("hami.io/vgpu-devices-allocated".into(), json!(devices));
            if let Some(n) = node {
                ann.insert("hami.io/vgpu-node".into(), json!(n));
            }
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "annotations": ann},
            "spec": {"schedulerName": scheduler, "nodeName": node, "containers": [{"name": "c",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Pending"}
        }))
        .unwrap()
    }

    fn view(nodes: Vec<Node>, pods: Vec<Pod>) -> (ClusterView, reflector::store::Writer<Pod>) {
        let (nr, mut nw) = reflector::store::<Node>();
        let (pr, mut pw) = reflector::store::<Pod>();
        for n in nodes {
            nw.apply_watcher_event(&Event::Apply(n));
        }
        for p in pods {
            pw.apply_watcher_event(&Event::Apply(p));
        }
        drop(nw);
        (
            ClusterView::new(nr, pr, names(), Duration::from_secs(60)),
            pw,
        )
    }

    fn used(snap: &Snapshot, node: &str, card: usize) -> (u32, u64, u32) {
        let n = snap.nodes.iter().find(|n| n.name == node).unwrap();
        let u = n.cards[card].usage.unwrap_or_default();
        (u.used_slots, u.used_mem_mib, u.used_cores)
    }

    #[test]
    fn snapshot_sums_usage_of_our_pods_only() {
        let (v, _w) = view(
            vec![
                gpu_node("n1", 2),
                gpu_node("n2", 2),
                serde_json::from_value(json!({"metadata": {"name": "cpu"}})).unwrap(),
            ],
            vec![
                pod(
                    "a",
                    "ua",
                    "gpusched-scheduler",
                    Some("n1"),
                    "n1-gpu0,NVIDIA,1000,10:;",
                ),
                pod(
                    "b",
                    "ub",
                    "gpusched-scheduler",
                    Some("n1"),
                    "n1-gpu0,NVIDIA,2000,20:;",
                ),
                pod(
                    "forged",
                    "uf",
                    "default-scheduler",
                    Some("n1"),
                    "n1-gpu1,NVIDIA,9000,90:;",
                ),
                pod(
                    "other-node",
                    "uo",
                    "gpusched-scheduler",
                    Some("n2"),
                    "n2-gpu1,NVIDIA,500,0:;",
                ),
            ],
        );
        let s = v.snapshot(
            &["n1".into(), "n2".into(), "cpu".into(), "ghost".into()],
            "",
        );
        assert_eq!(used(&s, "n1", 0), (2, 3000, 30));
        assert_eq!(
            used(&s, "n1", 1),
            (0, 0, 0),
            "the default-scheduler pod's annotation is ignored"
        );
        assert_eq!(used(&s, "n2", 1), (1, 500, 0));
        assert_eq!(s.unusable.len(), 2);
        assert!(
            s.unusable
                .iter()
                .any(|(n, m, unres)| n == "cpu" && m.contains("missing") && *unres)
        );
        assert!(
            s.unusable
                .iter()
                .any(|(n, _, unres)| n == "ghost" && !*unres)
        );
        // The pod being placed does not count against itself.
        let s = v.snapshot(&["n1".into()], "ua");
        assert_eq!(used(&s, "n1", 0), (1, 2000, 20));
    }

    #[test]
    fn forged_decisions_hold_nothing() {
        // Created bound with a forged -allocated (no vgpu-node: the shim's Binding did not
        // write it), and never bound with a forged vgpu-node + -allocated.
        let mut created_bound = pod(
            "created-bound",
            "u1",
            "gpusched-scheduler",
            Some("n1"),
            "n1-gpu0,NVIDIA,10000,100:;",
        );
        created_bound
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .remove("hami.io/vgpu-node");
        let mut never_bound = pod(
            "never-bound",
            "u2",
            "gpusched-scheduler",
            None,
            "n1-gpu1,NVIDIA,10000,100:;",
        );
        never_bound
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("hami.io/vgpu-node".into(), "n1".into());
        let (v, _w) = view(vec![gpu_node("n1", 2)], vec![created_bound, never_bound]);
        let s = v.snapshot(&["n1".into()], "");
        assert_eq!(used(&s, "n1", 0), (0, 0, 0));
        assert_eq!(used(&s, "n1", 1), (0, 0, 0));
    }

    fn assumed(uid: &str, name: &str, node: &str, annotation: &str) -> Assumed {
        Assumed {
            namespace: "ns".into(),
            name: name.into(),
            uid: uid.into(),
            node: node.into(),
            bookings: gpusched_hami::decode_pod_devices(annotation).unwrap(),
            annotation: annotation.into(),
            at: Instant::now(),
            seen: false,
            tentative: false,
        }
    }

    #[test]
    fn prepared_nodes_are_kept_until_their_inventory_or_usage_changes() {
        let with_rv = |mut n: Node| {
            n.metadata.resource_version = Some("1".into());
            n
        };
        let mut a = pod(
            "a",
            "ua",
            "gpusched-scheduler",
            Some("n1"),
            "n1-gpu0,NVIDIA,1000,10:;",
        );
        a.metadata.resource_version = Some("5".into());
        let (v, mut w) = view(
            vec![with_rv(gpu_node("n1", 2)), with_rv(gpu_node("n2", 2))],
            vec![a.clone()],
        );
        let names = ["n1".to_owned(), "n2".to_owned()];
        let same =
            |x: &Snapshot, y: &Snapshot, i: usize| Arc::ptr_eq(&x.prepared[i], &y.prepared[i]);
        let s1 = v.snapshot(&names, "");
        let s2 = v.snapshot(&names, "");
        assert!(same(&s1, &s2, 0) && same(&s1, &s2, 1), "nothing changed");
        for (n, p) in s1.nodes.iter().zip(&s1.prepared) {
            assert_eq!(p.to_node(), **n, "the prepared form is the node");
        }
        // A decision on n2 rebuilds n2 only; the same decision again keeps it.
        v.assume(assumed("ub", "b", "n2", "n2-gpu1,NVIDIA,4000,0:;"));
        let s3 = v.snapshot(&names, "");
        assert!(same(&s1, &s3, 0));
        assert!(!same(&s1, &s3, 1));
        assert_eq!(used(&s3, "n2", 1), (1, 4000, 0));
        assert_eq!(s3.prepared[1].to_node(), *s3.nodes[1]);
        let s4 = v.snapshot(&names, "");
        assert!(same(&s3, &s4, 0) && same(&s3, &s4, 1));
        // Leaving out the pod being placed changes n1's usage.
        let s5 = v.snapshot(&names, "ua");
        assert!(!same(&s4, &s5, 0));
        assert_eq!(used(&s5, "n1", 0), (0, 0, 0));
        assert_eq!(s5.prepared[0].to_node(), *s5.nodes[0]);
        // The pod's decision changes (new resourceVersion): n1 is rebuilt with it.
        let s6 = v.snapshot(&names, "");
        a.metadata.resource_version = Some("6".into());
        a.metadata.annotations.as_mut().unwrap().insert(
            "hami.io/vgpu-devices-allocated".into(),
            "n1-gpu1,NVIDIA,3000,0:;".into(),
        );
        w.apply_watcher_event(&Event::Apply(a));
        let s7 = v.snapshot(&names, "");
        assert!(!same(&s6, &s7, 0) && same(&s6, &s7, 1));
        assert_eq!(used(&s7, "n1", 0), (0, 0, 0));
        assert_eq!(used(&s7, "n1", 1), (1, 3000, 0));
    }

    #[test]
    fn assumed_decisions_count_until_the_informer_shows_them() {
        let ann = "n1-gpu1,NVIDIA,4000,0:;";
        let (v, mut w) = view(
            vec![gpu_node("n1", 2)],
            vec![pod("p", "up", "gpusched-scheduler", None, "")],
        );
        v.assume(assumed("up", "p", "n1", ann));
        // The store shows the pod without the annotation: the assumed decision counts.
        let s = v.snapshot(&["n1".into()], "");
        assert_eq!(used(&s, "n1", 1), (1, 4000, 0));
        assert_eq!(v.assumed_len(), 1);
        // The informer catches up: counted once, from the store; the entry expires.
        w.apply_watcher_event(&Event::Apply(pod(
            "p",
            "up",
            "gpusched-scheduler",
            Some("n1"),
            ann,
        )));
        let s = v.snapshot(&["n1".into()], "");
        assert_eq!(used(&s, "n1", 1), (1, 4000, 0));
        assert_eq!(v.assumed_len(), 0);
    }

    #[test]
    fn assumed_decision_replaces_a_stale_annotation_and_expires_when_pod_is_gone() {
        let old = "n1-gpu0,NVIDIA,1000,0:;";
        let new = "n1-gpu1,NVIDIA,2000,0:;";
        // A pod carrying an older, unbound decision (never counted: no spec.nodeName) is
        // re-bound: only the new one counts.
        let mut stale = pod("p", "up", "gpusched-scheduler", None, old);
        stale
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("hami.io/vgpu-node".into(), "n1".into());
        let (v, mut w) = view(vec![gpu_node("n1", 2)], vec![stale.clone()]);
        v.assume(assumed("up", "p", "n1", new));
        let s = v.snapshot(&["n1".into()], "");
        assert_eq!(used(&s, "n1", 0), (0, 0, 0));
        assert_eq!(used(&s, "n1", 1), (1, 2000, 0));
        // The pod is deleted after it was seen: the decision is void.
        w.apply_watcher_event(&Event::Delete(stale));
        let s = v.snapshot(&["n1".into()], "");
        assert_eq!(used(&s, "n1", 1), (0, 0, 0));
        assert_eq!(v.assumed_len(), 0);
    }

    #[test]
    fn assumed_fate_rules() {
        let ttl = Duration::from_secs(10);
        let now = Instant::now();
        let ann = "g,NVIDIA,1,0:;";
        let mut a = assumed("u", "p", "n1", ann);
        // Never seen, young: keep.
        assert_eq!(
            assumed_fate(&mut a, &Observed::Absent, now, ttl),
            Some(true)
        );
        // Seen without the annotation: keep, and remember it was seen.
        assert_eq!(
            assumed_fate(&mut a, &Observed::Present(None), now, ttl),
            Some(true)
        );
        assert!(a.seen);
        // Gone after being seen: void.
        assert_eq!(assumed_fate(&mut a, &Observed::Absent, now, ttl), None);
        // Confirmed: the store counts it.
        let confirmed = PodUsage {
            node: "n1".into(),
            bookings: vec![],
            annotation: ann.into(),
        };
        assert_eq!(
            assumed_fate(
                &mut assumed("u", "p", "n1", ann),
                &Observed::Present(Some(confirmed.clone())),
                now,
                ttl
            ),
            Some(false)
        );
        // Same annotation on another node is not a confirmation.
        let elsewhere = PodUsage {
            node: "n2".into(),
            ..confirmed
        };
        assert_eq!(
            assumed_fate(
                &mut assumed("u", "p", "n1", ann),
                &Observed::Present(Some(elsewhere)),
                now,
                ttl
            ),
            Some(true)
        );
        // A reservation gives way to any real decision the store shows.
        let mut r = assumed("u", "p", "n1", "");
        r.tentative = true;
        let real = PodUsage {
            node: "n2".into(),
            bookings: vec![],
            annotation: ann.into(),
        };
        assert_eq!(
            assumed_fate(&mut r, &Observed::Present(Some(real)), now, ttl),
            None
        );
        // Never seen and too old: void.
        let mut old = assumed("u", "p", "n1", ann);
        assert_eq!(
            assumed_fate(
                &mut old,
                &Observed::Absent,
                now + Duration::from_secs(11),
                ttl
            ),
            None
        );
    }

    #[test]
    fn reservations_count_until_replaced_or_expired() {
        let (v, _w) = view(
            vec![gpu_node("n1", 2)],
            vec![pod("p", "up", "gpusched-scheduler", None, "")],
        );
        let v = v.with_reservation_ttl(Duration::from_millis(200));
        v.reserve(assumed("up", "p", "n1", "n1-gpu0,NVIDIA,1000,0:;"));
        assert_eq!(used(&v.snapshot(&["n1".into()], ""), "n1", 0), (1, 1000, 0));
        // Not against the pod itself.
        assert_eq!(used(&v.snapshot(&["n1".into()], "up"), "n1", 0), (0, 0, 0));
        // The bind's real decision replaces it; a later reservation does not replace a real one.
        v.assume(assumed("up", "p", "n1", "n1-gpu1,NVIDIA,500,0:;"));
        v.reserve(assumed("up", "p", "n1", "n1-gpu0,NVIDIA,1000,0:;"));
        let s = v.snapshot(&["n1".into()], "");
        assert_eq!(
            (used(&s, "n1", 0), used(&s, "n1", 1)),
            ((0, 0, 0), (1, 500, 0))
        );
        // A reservation whose bind never comes expires.
        v.forget("up");
        v.reserve(assumed("up", "p", "n1", "n1-gpu0,NVIDIA,1000,0:;"));
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(used(&v.snapshot(&["n1".into()], ""), "n1", 0), (0, 0, 0));
        assert_eq!(v.assumed_len(), 0);
    }

    #[tokio::test]
    async fn binds_to_one_node_are_serialised() {
        let (v, _w) = view(vec![], vec![]);
        let v = Arc::new(v);
        let g = v.lock_node("n1").await;
        let v2 = v.clone();
        let other = tokio::spawn(async move {
            let _g = v2.lock_node("n2").await;
        });
        tokio::time::timeout(Duration::from_secs(2), other)
            .await
            .unwrap()
            .unwrap();
        let v3 = v.clone();
        let mut same = tokio::spawn(async move {
            let _g = v3.lock_node("n1").await;
        });
        assert!(
            tokio::time::timeout(Duration::from_millis(100), &mut same)
                .await
                .is_err()
        );
        drop(g);
        tokio::time::timeout(Duration::from_secs(2), same)
            .await
            .unwrap()
            .unwrap();
    }
}
