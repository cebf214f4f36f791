//! Decode caches: each node's inventory and each pod's usage, decoded from their annotations
//! once per resourceVersion.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::config::Names;
use crate::inventory::Inventory;
use crate::translate::{self, PodUsage};

/// Decoded inventories by node name and decoded usages by pod uid.
#[derive(Debug, Default)]
pub(super) struct Decoded {
    /// Decoded inventories by node name, valid for one resourceVersion.
    inventories: Mutex<HashMap<String, (String, Arc<Inventory>)>>,
    /// Decoded pod usage by uid, valid for one resourceVersion.
    usages: Mutex<UsageCache>,
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

/// The decoded usages of exactly the pods of one copy of the store, held locked.
pub(super) struct Usages<'a>(MutexGuard<'a, UsageCache>);

impl Usages<'_> {
    /// None: the pod is not in the store; `Some(None)`: it is and counts nothing.
    pub(super) fn get(&self, uid: &str) -> Option<Option<&Arc<PodUsage>>> {
        self.0.by_uid.get(uid).map(|e| e.usage.as_ref())
    }

    /// Every pod by uid with the usage it counts for, if any.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&String, Option<&Arc<PodUsage>>)> {
        self.0.by_uid.iter().map(|(uid, e)| (uid, e.usage.as_ref()))
    }
}

impl Decoded {
    /// The node's decoded inventory (from the cache while its resourceVersion is unchanged; the
    /// cache is emptied when it holds more than `max_entries`).
    pub(super) fn inventory(
        &self,
        node: &Node,
        names: &Names,
        max_entries: usize,
    ) -> Arc<Inventory> {
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
        let inv = Arc::new(translate::inventory(node, names));
        if cache.len() > max_entries {
            cache.clear();
        }
        cache.insert(name, (rv, inv.clone()));
        inv
    }

    /// The usages of `pods` (one consistent copy of the store), decoding only the pods whose
    /// resourceVersion changed since the last call and dropping those no longer in it.
    pub(super) fn usages(&self, pods: &[Arc<Pod>], names: &Names) -> Usages<'_> {
        let mut cache = match self.usages.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        let c = &mut *cache;
        c.generation = c.generation.wrapping_add(1);
        let generation = c.generation;
        for p in pods {
            let uid = p.metadata.uid.as_deref().unwrap_or("");
            let rv = p.metadata.resource_version.as_deref().unwrap_or("");
            match c.by_uid.get_mut(uid) {
                Some(e) if e.rv == rv && !rv.is_empty() => e.generation = generation,
                _ => {
                    c.by_uid.insert(
                        uid.to_owned(),
                        CachedUsage {
                            rv: rv.to_owned(),
                            usage: translate::pod_usage(p, names).map(Arc::new),
                            generation,
                        },
                    );
                }
            }
        }
        c.by_uid.retain(|_, e| e.generation == generation);
        Usages(cache)
    }
}
