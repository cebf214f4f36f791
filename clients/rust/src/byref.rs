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
}

/// The response metadata a server that reads `node_refs` sets on every PlacementService answer.
pub const NODE_REFS_HEADER: &str = "gpusched-node-refs";

impl ByRef {
    /// Whether the server has shown it reads `node_refs` (see [`NODE_REFS_HEADER`]).
    pub(crate) fn server_reads_refs(&self) -> bool {
        self.server_reads_refs
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Notes the metadata of an answer: [`NODE_REFS_HEADER`] switches references on.
    pub(crate) fn note(&self, metadata: &tonic::metadata::MetadataMap) {
        if !self.server_reads_refs() && metadata.contains_key(NODE_REFS_HEADER) {
            self.server_reads_refs
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
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
    /// Sets the references.
    fn set_refs(&mut self, refs: Vec<v1::NodeRef>);
}

macro_rules! nodes_request {
    ($($t:ty),*) => {$(
        impl NodesRequest for $t {
            fn take_nodes(&mut self) -> Option<Vec<v1::Node>> {
                (self.node_refs.is_empty() && !self.nodes.is_empty())
                    .then(|| std::mem::take(&mut self.nodes))
            }
            fn set_refs(&mut self, refs: Vec<v1::NodeRef>) {
                self.node_refs = refs;
            }
        }
    )*};
}

nodes_request!(
    v1::FilterRequest,
    v1::ScoreRequest,
    v1::AllocateRequest,
    v1::AllocateBatchRequest
);

/// `node_refs[i].inventory...` / `node_refs[i]...` back to `nodes[i]...` (the client sent node
/// `i` as reference `i`).
pub(crate) fn field_back(field: &str) -> String {
    let Some(rest) = field.strip_prefix("node_refs[") else {
        return field.to_owned();
    };
    let Some((num, tail)) = rest.split_once(']') else {
        return field.to_owned();
    };
    let tail = tail
        .strip_prefix(".inventory_digest")
        .map_or_else(|| tail.strip_prefix(".inventory").unwrap_or(tail), |_| "");
    format!("nodes[{num}]{tail}")
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
        assert_eq!(
            field_back("node_refs[2].inventory.cards[0].health"),
            "nodes[2].cards[0].health"
        );
        assert_eq!(field_back("node_refs[2].inventory"), "nodes[2]");
        assert_eq!(field_back("workload.x"), "workload.x");
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
        assert_eq!(idle.inventory_key, busy.inventory_key);
        assert!(idle.usage_key.is_none());
        let u = v1::NodeUsage::decode(busy.usage.as_slice()).unwrap();
        assert_eq!(u.cards.len(), 1);
        assert_eq!(u.cards[0].card_id, n.cards[1].id);
    }
}
