//! The node-set cache: candidate sets kept by the digest of the references they were sent as
//! (`NodeSetRef.keep`), so that a later request sends only its changes against one of them
//! (`NodeSetRef.base`). A set is a snapshot of shared nodes (`Arc`), so holding one copies no
//! node; it is bounded in entries and in bytes, counting every node it holds at its full
//! converted size (a set can keep alive nodes the node cache has already evicted).
//!
//! An optimisation only, like the node cache: a base a replica does not hold is answered
//! FAILED_PRECONDITION and the client sends its candidates in full.

use std::sync::{Arc, Mutex};

use hashlink::LinkedHashMap;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use crate::cache::digest::Digest;
use crate::cache::spare::{self, Kept};
use crate::candidates::{Candidates, InvalidNode};
use crate::config::SetLimits;

/// The metric handles of the set cache (registered by [`crate::Metrics`]).
#[derive(Clone, Debug, Default)]
pub struct SetMetrics {
    /// Bases found.
    pub hits: Counter,
    /// Bases not held (answered FAILED_PRECONDITION).
    pub misses: Counter,
    /// Sets kept.
    pub inserts: Counter,
    /// Sets evicted to stay under the bounds.
    pub evictions: Counter,
    /// Estimated bytes held.
    pub bytes: Gauge,
    /// Sets held.
    pub entries: Gauge,
}

#[derive(Debug, Default)]
struct Inner {
    /// Least recently used first.
    map: LinkedHashMap<Digest, (Arc<Kept>, usize)>,
    bytes: usize,
}

/// The bounded LRU cache of node sets (one mutex: one lookup per request, held for one map
/// operation, never across a decision).
#[derive(Debug)]
pub struct SetCache {
    inner: Mutex<Inner>,
    limits: SetLimits,
    metrics: SetMetrics,
}

/// Estimated bytes a set holds: its node lists (with the spare lists of [`Kept`]) and every
/// node (valid or invalid) at its full converted size. The at most
/// [`spare::MAX_REPLACED`] nodes a spare list holds beyond the set are within the
/// request limits and not counted.
pub fn weight(s: &Candidates) -> usize {
    const ENTRY: usize = 160;
    ENTRY
        + s.snapshot
            .shared_nodes()
            .iter()
            .map(|n| {
                (1 + spare::MAX_SPARES) * size_of::<usize>()
                    + size_of_val(n.as_ref())
                    + n.heap_bytes()
            })
            .sum::<usize>()
        + s.invalid
            .iter()
            .map(|x| size_of::<usize>() + size_of::<InvalidNode>() + x.heap_bytes())
            .sum::<usize>()
}

impl SetCache {
    /// An empty cache within `limits`.
    pub fn new(limits: SetLimits, metrics: SetMetrics) -> Self {
        SetCache {
            inner: Mutex::new(Inner::default()),
            limits,
            metrics,
        }
    }

    /// The set kept under `digest` (marked recently used); counts a hit or a miss.
    pub fn get(&self, digest: &Digest) -> Option<Arc<Kept>> {
        let found = {
            let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            let v = inner.map.get(digest).map(|(s, _)| Arc::clone(s));
            if v.is_some() {
                inner.map.to_back(digest);
            }
            v
        };
        if found.is_some() {
            self.metrics.hits.inc();
        } else {
            self.metrics.misses.inc();
        }
        found
    }

    /// Keeps `set` under `digest`, evicting least recently used sets to stay within the
    /// bounds; a set larger than the byte bound is not kept.
    pub fn insert(&self, digest: Digest, set: Candidates) {
        let w = weight(&set);
        if self.limits.max_sets == 0 || w > self.limits.max_bytes {
            return;
        }
        let (mut evicted, mut freed) = (0u64, 0usize);
        {
            let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            if inner.map.contains_key(&digest) {
                inner.map.to_back(&digest);
                return;
            }
            inner.map.insert(digest, (Arc::new(Kept::new(set)), w));
            inner.bytes += w;
            while inner.bytes > self.limits.max_bytes || inner.map.len() > self.limits.max_sets {
                let Some((_, (_, old))) = inner.map.pop_front() else {
                    break;
                };
                inner.bytes -= old;
                freed += old;
                evicted += 1;
            }
        }
        let m = &self.metrics;
        m.inserts.inc();
        m.evictions.inc_by(evicted);
        m.bytes
            .inc_by(i64::try_from(w).unwrap_or(i64::MAX) - i64::try_from(freed).unwrap_or(0));
        m.entries.inc_by(1 - i64::try_from(evicted).unwrap_or(0));
    }

    /// (sets, estimated bytes) held now.
    pub fn usage(&self) -> (usize, usize) {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        (inner.map.len(), inner.bytes)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use gpusched_engine::{Card, NodeSpec, Snapshot};

    fn set(n: usize, tag: &str) -> Candidates {
        let s = Snapshot::new(
            (0..n)
                .map(|i| {
                    NodeSpec::new(
                        format!("{tag}-{i}"),
                        vec![Card::new(format!("{tag}-{i}-0"), 0, "T4", 16384)],
                    )
                })
                .collect(),
        )
        .unwrap();
        Candidates::new(s, Vec::new())
    }

    #[test]
    fn bounded_in_sets_and_bytes_lru_first_out() {
        let one = weight(&set(10, "x"));
        let m = SetMetrics::default();
        let c = SetCache::new(
            SetLimits {
                max_sets: 3,
                max_bytes: one * 10,
            },
            m.clone(),
        );
        for k in 0..4u8 {
            c.insert(Digest::of(&[k]), set(10, &k.to_string()));
        }
        assert_eq!(c.usage().0, 3);
        assert!(c.get(&Digest::of(&[0])).is_none());
        assert!(c.get(&Digest::of(&[1])).is_some());
        // 1 was used: 2 goes first.
        c.insert(Digest::of(&[9]), set(10, "9"));
        assert!(c.get(&Digest::of(&[2])).is_none());
        assert!(c.get(&Digest::of(&[1])).is_some());
        assert_eq!(m.evictions.get(), 2);
        assert_eq!(m.entries.get(), 3);
        // A set over the byte bound is not kept; the byte bound evicts.
        c.insert(Digest::of(b"big"), set(200, "big"));
        assert!(c.get(&Digest::of(b"big")).is_none());
        c.insert(Digest::of(b"half"), set(45, "half"));
        let (_, bytes) = c.usage();
        assert!(bytes <= one * 10, "{bytes}");
        assert_eq!(m.bytes.get(), i64::try_from(bytes).unwrap());
    }

    #[test]
    fn zero_sets_keeps_nothing() {
        let c = SetCache::new(
            SetLimits {
                max_sets: 0,
                max_bytes: 1 << 30,
            },
            SetMetrics::default(),
        );
        c.insert(Digest::of(b"a"), set(2, "a"));
        assert!(c.get(&Digest::of(b"a")).is_none());
    }
}
