//! Nodes by reference, done for the caller: a node is split into its inventory (the node with
//! its cards' usage cleared) and its usage (`NodeUsage`), each serialized once and named by its
//! SHA-256 digest. A part the server has acknowledged on this client (a successful call that
//! carried it inline) is sent as its digest alone; a part the server reports missing
//! (FAILED_PRECONDITION, `google.rpc.PreconditionFailure` type `MISSING`) is resent inline, once
//! per missing digest. The server never needs to remember anything for a correct answer.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use gpusched_api::v1;
use prost::Message;
use sha2::Digest as _;

/// A content address: SHA-256 and size.
pub type Key = ([u8; 32], u64);

/// Known digests kept per client before the set is reset (each part is then resent once).
const MAX_KNOWN: usize = 1 << 20;
/// Nodes memoised per client (by name) before the memo is reset.
const MAX_MEMO: usize = 1 << 17;

fn key_of(bytes: &[u8]) -> Key {
    (sha2::Sha256::digest(bytes).into(), bytes.len() as u64)
}

fn digest_msg(k: &Key) -> v1::Digest {
    v1::Digest {
        hash: k.0.to_vec(),
        size_bytes: k.1,
        function: v1::DigestFunction::Unspecified as i32,
    }
}

/// `sha256/<hex>/<size>`, as the server writes a missing digest's subject.
pub fn subject(k: &Key) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(80);
    s.push_str("sha256/");
    for b in k.0 {
        let _ = write!(s, "{b:02x}");
    }
    let _ = write!(s, "/{}", k.1);
    s
}

/// Parses a `sha256/<hex>/<size>` subject.
pub fn parse_subject(s: &str) -> Option<Key> {
    let mut it = s.split('/');
    if it.next()? != "sha256" {
        return None;
    }
    let hex = it.next()?;
    let size: u64 = it.next()?.parse().ok()?;
    if hex.len() != 64 || it.next().is_some() {
        return None;
    }
    let mut hash = [0u8; 32];
    for (i, b) in hash.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some((hash, size))
}

/// A node serialized and digested once, ready to be sent whole or by reference. Keep it (e.g.
/// beside a cluster view) and rebuild it only when the node changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreparedNode {
    /// Node name.
    pub name: String,
    inventory: Vec<u8>,
    inventory_key: Key,
    /// Empty when no card is in use.
    usage: Vec<u8>,
    usage_key: Option<Key>,
}

impl PreparedNode {
    /// Splits `node` into inventory (cards without usage) and usage, serializes and digests
    /// both.
    pub fn new(node: &v1::Node) -> Self {
        let mut inv = node.clone();
        let mut usage = v1::NodeUsage::default();
        for c in &mut inv.cards {
            if let Some(u) = c.usage.take()
                && u != v1::CardUsage::default()
            {
                usage.cards.push(v1::CardUsageEntry {
                    card_id: c.id.clone(),
                    usage: Some(u),
                });
            }
        }
        let inventory = inv.encode_to_vec();
        let usage = if usage.cards.is_empty() {
            Vec::new()
        } else {
            usage.encode_to_vec()
        };
        PreparedNode {
            name: node.name.clone(),
            inventory_key: key_of(&inventory),
            usage_key: (!usage.is_empty()).then(|| key_of(&usage)),
            inventory,
            usage,
        }
    }

    /// The whole node again (inventory with its usage), for a server that does not read
    /// references.
    pub fn to_node(&self) -> v1::Node {
        let mut node = v1::Node::decode(self.inventory.as_slice()).unwrap_or_default();
        if !self.usage.is_empty()
            && let Ok(u) = v1::NodeUsage::decode(self.usage.as_slice())
        {
            for e in u.cards {
                if let Some(c) = node.cards.iter_mut().find(|c| c.id == e.card_id) {
                    c.usage = e.usage;
                }
            }
        }
        node
    }

    /// The inventory's digest.
    pub fn inventory_key(&self) -> Key {
        self.inventory_key
    }

    /// The usage's digest (None: no card in use).
    pub fn usage_key(&self) -> Option<Key> {
        self.usage_key
    }

    /// The reference: each part inline unless `by_digest(key)` says the server holds it.
    pub fn node_ref(&self, by_digest: impl Fn(&Key) -> bool) -> v1::NodeRef {
        let inline_inv = !by_digest(&self.inventory_key);
        let (usage, usage_digest) = match &self.usage_key {
            None => (Vec::new(), None),
            Some(k) => (
                if by_digest(k) {
                    Vec::new()
                } else {
                    self.usage.clone()
                },
                Some(digest_msg(k)),
            ),
        };
        v1::NodeRef {
            inventory: if inline_inv {
                self.inventory.clone()
            } else {
                Vec::new()
            },
            inventory_digest: Some(digest_msg(&self.inventory_key)),
            usage,
            usage_digest,
        }
    }
}

/// Per-client state of the automatic mode (shared by clones of a client).
#[derive(Debug, Default)]
pub(crate) struct ByRef {
    /// Digests the server acknowledged (a successful call carried them inline).
    known: Mutex<HashSet<Key>>,
    /// The last node seen per name, and its prepared form.
    memo: Mutex<HashMap<String, (v1::Node, Arc<PreparedNode>)>>,
    /// Whether a PlacementService answer on this client carried [`NODE_REFS_HEADER`]: until
    /// then nodes go whole (a server that predates `node_refs` would ignore them).
    server_reads_refs: std::sync::atomic::AtomicBool,
    /// Whether an answer carried [`NODE_SETS_HEADER`]: until then no node set is named.
    server_reads_sets: std::sync::atomic::AtomicBool,
    /// The last candidate list sent in full and kept by the server as a node set.
    base: Mutex<Option<Arc<Base>>>,
}

/// A node set the client kept (`NodeSetRef.keep`): its digest and each node's part digests.
#[derive(Debug)]
pub(crate) struct Base {
    pub(crate) key: Key,
    nodes: HashMap<String, (Key, Option<Key>)>,
}

/// Smallest candidate list sent as a node set (smaller lists gain nothing).
pub const MIN_SET_NODES: usize = 16;

/// How the candidates of one call go.
#[derive(Debug)]
pub(crate) enum Plan {
    /// Every node by reference; `keep`: ask the server to keep them as a set.
    Full { keep: bool },
    /// Changes against a kept set: the nodes at these positions, and removed names.
    Delta {
        base: Arc<Base>,
        changed: Vec<usize>,
        removed: Vec<String>,
    },
}

impl Plan {
    /// The `node_set` field and the references of this plan.
    pub(crate) fn request(
        &self,
        byref: &ByRef,
        nodes: &[Arc<PreparedNode>],
        force_inline: &HashSet<Key>,
    ) -> (Option<v1::NodeSetRef>, Vec<v1::NodeRef>) {
        match self {
            Plan::Full { keep } => (
                keep.then(|| v1::NodeSetRef {
                    keep: true,
                    ..Default::default()
                }),
                byref.refs(nodes, force_inline),
            ),
            Plan::Delta { base, removed, .. } => (
                Some(v1::NodeSetRef {
                    base: Some(digest_msg(&base.key)),
                    removed_node_names: removed.clone(),
                    keep: false,
                }),
                byref.refs(&self.sent(nodes), force_inline),
            ),
        }
    }

    /// The nodes this plan sends: all of them, or only the changed ones.
    pub(crate) fn sent(&self, nodes: &[Arc<PreparedNode>]) -> Vec<Arc<PreparedNode>> {
        match self {
            Plan::Full { .. } => nodes.to_vec(),
            Plan::Delta { changed, .. } => changed.iter().map(|&i| Arc::clone(&nodes[i])).collect(),
        }
    }

    /// Position in the caller's node list of reference `j` of this plan's request.
    pub(crate) fn position(&self, j: usize) -> usize {
        match self {
            Plan::Full { .. } => j,
            Plan::Delta { changed, .. } => changed.get(j).copied().unwrap_or(j),
        }
    }
}

/// The digest of a node set kept from references to `nodes` in this order: SHA-256 over each
/// node's inventory hash and usage hash (32 zero bytes without usage); size 64 per node.
pub fn set_key<'a>(nodes: impl IntoIterator<Item = &'a PreparedNode>) -> Key {
    let mut h = sha2::Sha256::new();
    let mut n = 0u64;
    for p in nodes {
        h.update(p.inventory_key.0);
        h.update(p.usage_key.map_or([0u8; 32], |k| k.0));
        n += 1;
    }
    (h.finalize().into(), 64 * n)
}

/// The `Digest` message of a key.
pub fn digest_of(k: &Key) -> v1::Digest {
    digest_msg(k)
}

/// `nodeset/sha256/<hex>/<size>`: the subject of a missing node set.
pub const SET_SUBJECT_PREFIX: &str = "nodeset/";

/// The response metadata a server that reads `node_refs` sets on every PlacementService
/// answer, and the one a server that reads `node_set` (NodeSetRef) sets (defined once, in
/// `gpusched-api`, for the service and the clients).
pub use gpusched_api::{NODE_REFS_HEADER, NODE_SETS_HEADER};

impl ByRef {
    /// Whether the server has shown it reads `node_refs` (see [`NODE_REFS_HEADER`]).
    pub(crate) fn server_reads_refs(&self) -> bool {
        self.server_reads_refs
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Notes the metadata of an answer: [`NODE_REFS_HEADER`] switches references on,
    /// [`NODE_SETS_HEADER`] node sets.
    pub(crate) fn note(&self, metadata: &tonic::metadata::MetadataMap) {
        use std::sync::atomic::Ordering::Relaxed;
        if !self.server_reads_refs() && metadata.contains_key(NODE_REFS_HEADER) {
            self.server_reads_refs.store(true, Relaxed);
        }
        if !self.server_reads_sets.load(Relaxed) && metadata.contains_key(NODE_SETS_HEADER) {
            self.server_reads_sets.store(true, Relaxed);
        }
    }

    /// How to send `nodes`: as changes to the kept set when few changed, else in full (kept
    /// as a set when the server reads sets and the list is long enough).
    pub(crate) fn plan(&self, nodes: &[Arc<PreparedNode>]) -> Plan {
        if !self
            .server_reads_sets
            .load(std::sync::atomic::Ordering::Relaxed)
            || nodes.len() < MIN_SET_NODES
        {
            return Plan::Full { keep: false };
        }
        let base = self.base.lock().unwrap_or_else(|e| e.into_inner()).clone();
        // A repeated name goes in full, so the server reports it (as a change it would
        // silently collapse into one node).
        let mut names: HashSet<&str> = HashSet::with_capacity(nodes.len());
        if !nodes.iter().all(|p| names.insert(p.name.as_str())) {
            return Plan::Full { keep: false };
        }
        let Some(base) = base else {
            return Plan::Full { keep: true };
        };
        // Few enough changes: at most one in eight of the base (at least 8).
        let budget = (base.nodes.len() / 8).max(8);
        let mut changed = Vec::new();
        let mut seen = 0usize;
        for (i, p) in nodes.iter().enumerate() {
            match base.nodes.get(&p.name) {
                Some(keys) if *keys == (p.inventory_key, p.usage_key) => seen += 1,
                Some(_) => {
                    seen += 1;
                    changed.push(i);
                }
                None => changed.push(i),
            }
            if changed.len() > budget {
                return Plan::Full { keep: true };
            }
        }
        let removed: Vec<String> = if seen == base.nodes.len() {
            Vec::new()
        } else {
            let mut r: Vec<String> = base
                .nodes
                .keys()
                .filter(|n| !names.contains(n.as_str()))
                .cloned()
                .collect();
            r.sort();
            r
        };
        if changed.len() + removed.len() > budget {
            return Plan::Full { keep: true };
        }
        Plan::Delta {
            base,
            changed,
            removed,
        }
    }

    /// After a successful call in full with `keep`: `nodes` are the server's kept set.
    pub(crate) fn kept(&self, nodes: &[Arc<PreparedNode>]) {
        let base = Base {
            key: set_key(nodes.iter().map(AsRef::as_ref)),
            nodes: nodes
                .iter()
                .map(|p| (p.name.clone(), (p.inventory_key, p.usage_key)))
                .collect(),
        };
        *self.base.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(base));
    }

    /// After FAILED_PRECONDITION naming the kept set: it is not held (by that replica).
    pub(crate) fn drop_base(&self, key: &Key) {
        let mut base = self.base.lock().unwrap_or_else(|e| e.into_inner());
        if base.as_ref().is_some_and(|b| b.key == *key) {
            *base = None;
        }
    }

    /// The kept set's digest, if any (tests, diagnostics).
    pub(crate) fn base_key(&self) -> Option<Key> {
        self.base
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|b| b.key)
    }

    /// Prepared forms of `nodes`, reusing the last one for a node that did not change.
    pub(crate) fn prepare(&self, nodes: Vec<v1::Node>) -> Vec<Arc<PreparedNode>> {
        let mut memo = self.memo.lock().unwrap_or_else(|e| e.into_inner());
        if memo.len() > MAX_MEMO {
            memo.clear();
        }
        nodes
            .into_iter()
            .map(|n| {
                if let Some((old, p)) = memo.get(&n.name)
                    && *old == n
                {
                    return Arc::clone(p);
                }
                let p = Arc::new(PreparedNode::new(&n));
                memo.insert(n.name.clone(), (n, Arc::clone(&p)));
                p
            })
            .collect()
    }

    /// References for `nodes`: by digest when acknowledged and not in `force_inline`.
    pub(crate) fn refs(
        &self,
        nodes: &[Arc<PreparedNode>],
        force_inline: &HashSet<Key>,
    ) -> Vec<v1::NodeRef> {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        nodes
            .iter()
            .map(|p| p.node_ref(|k| known.contains(k) && !force_inline.contains(k)))
            .collect()
    }

    /// After a successful call: every part of `nodes` is held by the server that answered.
    pub(crate) fn acknowledge(&self, nodes: &[Arc<PreparedNode>]) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if known.len() + 2 * nodes.len() > MAX_KNOWN {
            known.clear();
        }
        for p in nodes {
            known.insert(p.inventory_key);
            if let Some(k) = p.usage_key {
                known.insert(k);
            }
        }
    }

    /// After FAILED_PRECONDITION: these are not held (by the replica that answered).
    pub(crate) fn forget(&self, keys: &HashSet<Key>) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        for k in keys {
            known.remove(k);
        }
    }

    /// Number of acknowledged digests (tests, diagnostics).
    pub(crate) fn known_len(&self) -> usize {
        self.known.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// A request whose nodes may go by reference.
pub(crate) trait NodesRequest: Clone {
    /// Takes the whole nodes out, when the request has no references of its own.
    fn take_nodes(&mut self) -> Option<Vec<v1::Node>>;
    /// Puts whole nodes in.
    fn put_nodes(&mut self, nodes: Vec<v1::Node>);
    /// Sets the references and the node set.
    fn set_refs(&mut self, refs: Vec<v1::NodeRef>, set: Option<v1::NodeSetRef>);
}

macro_rules! nodes_request {
    ($($t:ty),*) => {$(
        impl NodesRequest for $t {
            fn take_nodes(&mut self) -> Option<Vec<v1::Node>> {
                (self.node_refs.is_empty() && !self.nodes.is_empty() && self.node_set.is_none())
                    .then(|| std::mem::take(&mut self.nodes))
            }
            fn put_nodes(&mut self, nodes: Vec<v1::Node>) {
                self.nodes = nodes;
            }
            fn set_refs(&mut self, refs: Vec<v1::NodeRef>, set: Option<v1::NodeSetRef>) {
                self.node_refs = refs;
                self.node_set = set;
            }
        }
    )*};
}

nodes_request!(
    v1::FilterRequest,
    v1::ScoreRequest,
    v1::AllocateRequest,
    v1::AllocateBatchRequest,
    v1::PreemptRequest
);

/// `node_refs[j].inventory...` / `node_refs[j]...` back to `nodes[i]...`, where reference `j`
/// was the caller's node `i = position(j)`.
pub(crate) fn field_back(field: &str, position: impl Fn(usize) -> usize) -> String {
    let Some(rest) = field.strip_prefix("node_refs[") else {
        return field.to_owned();
    };
    let Some((num, tail)) = rest.split_once(']') else {
        return field.to_owned();
    };
    let tail = tail
        .strip_prefix(".inventory_digest")
        .map_or_else(|| tail.strip_prefix(".inventory").unwrap_or(tail), |_| "");
    match num.parse::<usize>() {
        Ok(j) => format!("nodes[{}]{tail}", position(j)),
        Err(_) => field.to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn subjects_round_trip() {
        let k = key_of(b"abc");
        assert_eq!(parse_subject(&subject(&k)), Some(k));
        assert_eq!(parse_subject("md5/00/1"), None);
    }

    #[test]
    fn fields_map_back() {
        let same = |j| j;
        assert_eq!(
            field_back("node_refs[2].inventory.cards[0].health", same),
            "nodes[2].cards[0].health"
        );
        assert_eq!(field_back("node_refs[2].inventory", same), "nodes[2]");
        assert_eq!(field_back("workload.x", same), "workload.x");
        assert_eq!(
            field_back("node_refs[1].usage", |j| j + 5),
            "nodes[6].usage"
        );
    }

    #[test]
    fn usage_is_split_from_the_inventory() {
        let mut n = crate::node("n", 2, 1000, "T");
        let idle = PreparedNode::new(&n);
        n.cards[1].usage = Some(v1::CardUsage {
            used_slots: 1,
            used_mem_mib: 10,
            used_cores: 5,
        });
        let busy = PreparedNode::new(&n);
        assert_eq!(busy.to_node(), n);
        assert_eq!(idle.inventory_key, busy.inventory_key);
        assert!(idle.usage_key.is_none());
        let u = v1::NodeUsage::decode(busy.usage.as_slice()).unwrap();
        assert_eq!(u.cards.len(), 1);
        assert_eq!(u.cards[0].card_id, n.cards[1].id);
    }
}
