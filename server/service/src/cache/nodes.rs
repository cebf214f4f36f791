//! The node cache: node parts sent by reference (`NodeRef`), decoded AND converted, keyed by
//! their content digest; inventories held as validated engine nodes (`Arc<Node>`), or, for an
//! inventory invalid itself, as that verdict (`Arc<InvalidNode>`: never a node), and each
//! inventory+usage pair seen as the combined node, keyed by both digests (compared in full), so
//! an unchanged node costs one lookup and an `Arc` clone. Bounded in bytes and entries (LRU per shard); safe under concurrent
//! calls (sharded mutexes, each held only for one map operation, never across a decision).
//!
//! The cache is an optimisation only: a miss is answered with FAILED_PRECONDITION listing every
//! missing digest and the client resends those parts, so no answer depends on what a replica
//! remembers.

use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex};

use gpusched_engine::{CardUsage, Node};

use crate::cache::digest::{Digest, Part};
use crate::candidates::InvalidNode;
use crate::config::CacheLimits;

use hashlink::LinkedHashMap;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

/// Number of shards (a power of two).
const SHARDS: usize = 16;

/// Per-card usage of a node (card id, usage), in the order given, card ids unique.
pub type UsageList = Vec<(String, CardUsage)>;

/// A cached, converted part (or pair of parts).
#[derive(Clone, Debug)]
pub enum Value {
    /// A validated inventory (usage as written in it), or an inventory with a usage part
    /// applied (the combined node of a pair).
    Inventory(Arc<Node>),
    /// A converted usage part.
    Usage(Arc<UsageList>),
    /// An inventory that is invalid itself (answered as a failed node, REASON_INVALID_NODE):
    /// the verdict, so that a client that sent it once may name it by digest like any other.
    Invalid(Arc<InvalidNode>),
}

impl Value {
    /// Estimated heap bytes of the value (what the byte bound counts), plus a per-entry
    /// overhead for the key, the map slot and the `Arc`.
    pub fn weight(&self) -> usize {
        const ENTRY: usize = 160;
        ENTRY
            + match self {
                Value::Inventory(n) => size_of::<Node>() + n.heap_bytes(),
                Value::Usage(u) => {
                    u.capacity() * size_of::<(String, CardUsage)>()
                        + u.iter().map(|(id, _)| id.capacity()).sum::<usize>()
                }
                Value::Invalid(x) => size_of::<InvalidNode>() + x.heap_bytes(),
            }
    }
}

/// The metric handles of the cache (registered by [`crate::Metrics`]).
#[derive(Clone, Debug, Default)]
pub struct CacheMetrics {
    /// Lookups that found the part, by part.
    pub hits: [Counter; 2],
    /// Lookups that did not, by part.
    pub misses: [Counter; 2],
    /// Parts received inline and inserted, by part.
    pub inserts: [Counter; 2],
    /// Entries evicted to stay under the bounds.
    pub evictions: Counter,
    /// Estimated bytes held.
    pub bytes: Gauge,
    /// Entries held.
    pub entries: Gauge,
}

fn part_index(p: Part) -> usize {
    match p {
        Part::Inventory => 0,
        Part::Usage => 1,
    }
}

/// The key hash is already uniform: use its first bytes.
#[derive(Clone, Copy, Debug, Default)]
struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Keys hash as (part, hash, size): fold everything, cheaply.
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.0 =
                (self.0.rotate_left(5) ^ u64::from_le_bytes(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct BuildDigestHasher;

impl BuildHasher for BuildDigestHasher {
    type Hasher = DigestHasher;
    fn build_hasher(&self) -> DigestHasher {
        DigestHasher(0)
    }
}

/// What an entry is keyed by: one part's digest, or an inventory+usage pair's two digests
/// (both compared in full: never a hash of them that could collide).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    Part(Part, Digest),
    Pair { inventory: Digest, usage: Digest },
}

impl Key {
    fn shard(&self) -> usize {
        let b = match self {
            Key::Part(_, d) => d.hash[0],
            Key::Pair { inventory, usage } => inventory.hash[0] ^ usage.hash[0],
        };
        usize::from(b) % SHARDS
    }
}

#[derive(Debug, Default)]
struct Shard {
    /// Least recently used first.
    map: LinkedHashMap<Key, (Value, usize), BuildDigestHasher>,
    bytes: usize,
}

/// The bounded, sharded LRU cache of converted node parts.
#[derive(Debug)]
pub struct NodeCache {
    shards: Box<[Mutex<Shard>]>,
    shard_max_bytes: usize,
    shard_max_entries: usize,
    enabled: bool,
    metrics: CacheMetrics,
}

impl NodeCache {
    /// A cache within `limits` (each shard holds at most 1/16 of each bound, so the whole never
    /// exceeds them).
    pub fn new(limits: &CacheLimits, metrics: CacheMetrics) -> Self {
        NodeCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_max_bytes: limits.max_bytes / SHARDS,
            shard_max_entries: limits.max_entries / SHARDS,
            enabled: limits.enabled,
            metrics,
        }
    }

    fn shard(&self, key: &Key) -> &Mutex<Shard> {
        // `key.shard() < SHARDS == shards.len()`.
        &self.shards[key.shard()]
    }

    /// The converted part, when held (and marks it recently used); counts a hit or a miss.
    pub fn get(&self, part: Part, digest: &Digest) -> Option<Value> {
        let found = self.peek(part, digest);
        let hit = u64::from(found.is_some());
        self.count(part, hit, 1 - hit);
        found
    }

    /// Adds to the hit and miss counters (callers that look up many parts count once).
    pub fn count(&self, part: Part, hits: u64, misses: u64) {
        let i = part_index(part);
        if hits > 0 {
            self.metrics.hits[i].inc_by(hits);
        }
        if misses > 0 {
            self.metrics.misses[i].inc_by(misses);
        }
    }

    /// Like [`NodeCache::get`], without counting.
    pub fn peek(&self, part: Part, digest: &Digest) -> Option<Value> {
        self.peek_key(Key::Part(part, *digest))
    }

    /// The combined node of an inventory and a usage part, when held (not counted: the caller
    /// counts it as a hit of both parts).
    pub fn peek_pair(&self, inventory: &Digest, usage: &Digest) -> Option<Arc<Node>> {
        match self.peek_key(Key::Pair {
            inventory: *inventory,
            usage: *usage,
        }) {
            Some(Value::Inventory(n)) => Some(n),
            _ => None,
        }
    }

    /// Holds the combined node of an inventory and a usage part (counted in the bounds, the
    /// bytes and entries gauges and evictions; not in the per-part inserts).
    pub fn insert_pair(&self, inventory: Digest, usage: Digest, node: Arc<Node>) {
        self.insert_key(Key::Pair { inventory, usage }, Value::Inventory(node));
    }

    fn peek_key(&self, key: Key) -> Option<Value> {
        if !self.enabled {
            return None;
        }
        let mut shard = self.shard(&key).lock().unwrap_or_else(|e| e.into_inner());
        let v = shard.map.get(&key).map(|(v, _)| v.clone());
        if v.is_some() {
            shard.map.to_back(&key);
        }
        v
    }

    /// Holds a converted part, evicting least recently used entries of its shard to stay within
    /// the bounds. A value larger than a shard's byte bound is not held.
    pub fn insert(&self, part: Part, digest: Digest, value: Value) {
        if self.insert_key(Key::Part(part, digest), value) {
            self.metrics.inserts[part_index(part)].inc();
        }
    }

    /// Whether the entry was added.
    fn insert_key(&self, key: Key, value: Value) -> bool {
        if !self.enabled {
            return false;
        }
        let weight = value.weight();
        if weight > self.shard_max_bytes || self.shard_max_entries == 0 {
            return false;
        }
        let mut evicted = 0u64;
        let mut freed = 0usize;
        {
            let mut shard = self.shard(&key).lock().unwrap_or_else(|e| e.into_inner());
            if shard.map.contains_key(&key) {
                shard.map.to_back(&key);
                return false;
            }
            shard.map.insert(key, (value, weight));
            shard.bytes += weight;
            while shard.bytes > self.shard_max_bytes || shard.map.len() > self.shard_max_entries {
                let Some((_, (_, w))) = shard.map.pop_front() else {
                    break;
                };
                shard.bytes -= w;
                freed += w;
                evicted += 1;
            }
        }
        let m = &self.metrics;
        m.evictions.inc_by(evicted);
        m.bytes
            .inc_by(i64::try_from(weight).unwrap_or(i64::MAX) - i64::try_from(freed).unwrap_or(0));
        m.entries.inc_by(1 - i64::try_from(evicted).unwrap_or(0));
        true
    }

    /// (entries, estimated bytes) held now.
    pub fn usage(&self) -> (usize, usize) {
        self.shards.iter().fold((0, 0), |(n, b), s| {
            let s = s.lock().unwrap_or_else(|e| e.into_inner());
            (n + s.map.len(), b + s.bytes)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use gpusched_engine::{Card, NodeSpec};

    fn node(i: usize) -> Value {
        Value::Inventory(Arc::new(
            Node::new(NodeSpec::new(
                format!("node-{i}"),
                (0..8)
                    .map(|j| Card::new(format!("GPU-{i}-{j}"), j, "NVIDIA-A100", 40960))
                    .collect(),
            ))
            .unwrap(),
        ))
    }

    #[test]
    fn a_flood_of_distinct_nodes_stays_under_both_bounds() {
        let limits = CacheLimits {
            enabled: true,
            max_bytes: 256 << 10,
            max_entries: 1000,
        };
        let m = CacheMetrics::default();
        let c = NodeCache::new(&limits, m.clone());
        for i in 0..20_000 {
            c.insert(
                Part::Inventory,
                Digest::of(format!("{i}").as_bytes()),
                node(i),
            );
            let (n, b) = c.usage();
            assert!(n <= limits.max_entries && b <= limits.max_bytes, "{n} {b}");
        }
        let (n, b) = c.usage();
        assert!(m.evictions.get() > 19_000);
        assert_eq!(m.entries.get(), i64::try_from(n).unwrap());
        assert_eq!(m.bytes.get(), i64::try_from(b).unwrap());
        // The most recent survive; the first are gone.
        assert!(c.get(Part::Inventory, &Digest::of(b"19999")).is_some());
        assert!(c.get(Part::Inventory, &Digest::of(b"0")).is_none());
        // Same bytes read as another part are another entry.
        assert!(c.get(Part::Usage, &Digest::of(b"19999")).is_none());
    }

    #[test]
    fn entry_bound_and_lru_order() {
        let limits = CacheLimits {
            enabled: true,
            max_bytes: usize::MAX / 2,
            max_entries: 16 * 2,
        };
        let c = NodeCache::new(&limits, CacheMetrics::default());
        // Three keys in one shard (same first hash byte): the least recently used goes.
        let d = |k: u8| Digest {
            hash: [
                0, k, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                0, 0, 0, 0,
            ],
            size_bytes: 1,
        };
        c.insert(Part::Inventory, d(1), node(1));
        c.insert(Part::Inventory, d(2), node(2));
        assert!(c.get(Part::Inventory, &d(1)).is_some());
        c.insert(Part::Inventory, d(3), node(3));
        assert!(c.get(Part::Inventory, &d(1)).is_some());
        assert!(c.get(Part::Inventory, &d(2)).is_none());
        assert!(c.get(Part::Inventory, &d(3)).is_some());
    }

    #[test]
    fn pairs_are_keyed_by_both_digests_and_bounded() {
        let limits = CacheLimits {
            enabled: true,
            max_bytes: 256 << 10,
            max_entries: 1000,
        };
        let m = CacheMetrics::default();
        let c = NodeCache::new(&limits, m.clone());
        let (a, b) = (Digest::of(b"a"), Digest::of(b"b"));
        let Value::Inventory(n) = node(1) else {
            unreachable!()
        };
        c.insert_pair(a, b, n.clone());
        assert!(Arc::ptr_eq(&c.peek_pair(&a, &b).unwrap(), &n));
        // Either digest differing (or swapped) is another entry; parts are other entries.
        assert!(c.peek_pair(&b, &a).is_none());
        assert!(c.peek_pair(&a, &a).is_none());
        assert!(c.peek(Part::Inventory, &a).is_none());
        // Same first bytes and size, one differing byte at the end: another entry.
        let mut a2 = a;
        a2.hash[31] ^= 1;
        assert!(c.peek_pair(&a2, &b).is_none());
        for i in 0..20_000u32 {
            c.insert_pair(Digest::of(&i.to_le_bytes()), b, n.clone());
            let (k, w) = c.usage();
            assert!(k <= limits.max_entries && w <= limits.max_bytes, "{k} {w}");
        }
        let (k, w) = c.usage();
        assert_eq!(m.entries.get(), i64::try_from(k).unwrap());
        assert_eq!(m.bytes.get(), i64::try_from(w).unwrap());
        assert_eq!(m.inserts[0].get() + m.inserts[1].get(), 0);
    }

    #[test]
    fn disabled_holds_nothing() {
        let limits = CacheLimits {
            enabled: false,
            max_bytes: 1 << 20,
            max_entries: 100,
        };
        let c = NodeCache::new(&limits, CacheMetrics::default());
        c.insert(Part::Inventory, Digest::of(b"x"), node(0));
        assert!(c.get(Part::Inventory, &Digest::of(b"x")).is_none());
        assert_eq!(c.usage(), (0, 0));
    }
}
