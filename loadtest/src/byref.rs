//! Nodes by reference (`node_refs`, field 5 of Filter/Score/AllocateRequest) for the request
//! pool, prepared with the Rust client's own splitting and digests
//! ([`gpusched_client::PreparedNode`]).
//!
//! - `warm`: the server holds every node's parts (a prime request sent them inline before the
//!   load). Request `i` sends every node by digest except one: node `i mod N` changed its usage
//!   (as after a bind), so its usage goes inline, as a scheduler shim's would.
//! - `sets`: as a shim with the Rust client does: the prime request sends every node by
//!   reference and asks the server to keep them as a node set (`NodeSetRef.keep`); request `i`
//!   names that set as its base and sends only node `i mod N`, whose usage changed, by
//!   reference (its usage inline).
//! - `cold`: every part inline in every request (a replica whose cache never helps: it decodes,
//!   hashes, converts and caches every node every time).

use bytes::Bytes;
use gpusched_client::{PreparedNode, v1};
use prost::Message;
use serde::Serialize;

use crate::synth::{Encoded, Pool};

/// How the pool's requests carry their nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ByRefMode {
    /// Whole nodes (field 1).
    #[default]
    Off,
    /// By digest, one node's usage changed per request; the cache primed first.
    Warm,
    /// Changes against a kept node set: one node per request.
    Sets,
    /// Every part inline every time.
    Cold,
}

fn refs_bytes(refs: Vec<v1::NodeRef>, set: Option<v1::NodeSetRef>) -> Bytes {
    Bytes::from(
        v1::AllocateRequest {
            node_refs: refs,
            node_set: set,
            ..v1::AllocateRequest::default()
        }
        .encode_to_vec(),
    )
}

/// The node with one card's usage moved (a bind or a release happened on it), still valid.
fn touched(n: &v1::Node, round: usize) -> v1::Node {
    let mut n = n.clone();
    if let Some(c) = n.cards.first_mut() {
        let u = c.usage.get_or_insert_with(v1::CardUsage::default);
        let step = (round % 3) as u32 + 1;
        u.used_slots = (u.used_slots + step) % c.slots.max(1);
        u.used_mem_mib = (u.used_mem_mib + 1024 * u64::from(step)) % c.total_mem_mib.max(1);
        u.used_cores = (u.used_cores + 5 * step) % (c.total_cores + 1);
    }
    n
}

/// Rewrites the pool's requests for `mode`; returns the prime request (every part inline) that
/// warms a server before a `warm` run.
pub fn apply(pool: &mut Pool, mode: ByRefMode) -> Option<Encoded> {
    if mode == ByRefMode::Off || pool.nodes.is_empty() {
        return None;
    }
    let prepared: Vec<PreparedNode> = pool.nodes.iter().map(PreparedNode::new).collect();
    let keep = (mode == ByRefMode::Sets).then(|| v1::NodeSetRef {
        keep: true,
        ..Default::default()
    });
    let inline = refs_bytes(
        prepared.iter().map(|p| p.node_ref(|_| false)).collect(),
        keep,
    );
    let base = gpusched_client::byref::digest_of(&gpusched_client::byref::set_key(&prepared));
    let first = pool.encoded.first().cloned()?;
    let prime = Encoded {
        nodes: inline.clone(),
        ..first
    };
    let n = pool.nodes.len();
    for (i, e) in pool.encoded.iter_mut().enumerate() {
        e.nodes = match mode {
            ByRefMode::Cold => inline.clone(),
            ByRefMode::Sets => {
                let k = i % n;
                let changed = PreparedNode::new(&touched(&pool.nodes[k], i / n));
                let inv = changed.inventory_key();
                refs_bytes(
                    vec![changed.node_ref(|key| *key == inv)],
                    Some(v1::NodeSetRef {
                        base: Some(base.clone()),
                        ..Default::default()
                    }),
                )
            }
            ByRefMode::Warm | ByRefMode::Off => {
                let k = i % n;
                let changed = PreparedNode::new(&touched(&pool.nodes[k], i / n));
                let refs = prepared
                    .iter()
                    .enumerate()
                    .map(|(j, p)| {
                        if j == k {
                            let inv = changed.inventory_key();
                            changed.node_ref(|key| *key == inv)
                        } else {
                            p.node_ref(|_| true)
                        }
                    })
                    .collect();
                refs_bytes(refs, None)
            }
        };
    }
    Some(prime)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::synth::{ClusterSpec, Form, Mix};

    #[test]
    fn warm_requests_are_small_and_name_every_node() {
        let spec = ClusterSpec::new(100, 8);
        let mut pool = Pool::build(&spec, &Mix::default(), Form::Kubernetes, 4, 42);
        let whole = pool.mean_request_bytes();
        let prime = apply(&mut pool, ByRefMode::Warm).unwrap();
        assert!(
            pool.mean_request_bytes() * 4.0 < whole,
            "{} vs {whole}",
            pool.mean_request_bytes()
        );
        let req = v1::AllocateRequest::decode(pool.encoded[1].to_vec().as_slice()).unwrap();
        assert_eq!(req.node_refs.len(), 100);
        assert!(req.nodes.is_empty());
        let inline: Vec<_> = req
            .node_refs
            .iter()
            .filter(|r| !r.usage.is_empty())
            .collect();
        assert_eq!(inline.len(), 1, "one node's usage changed");
        assert!(req.node_refs.iter().all(|r| r.inventory.is_empty()));
        let p = v1::AllocateRequest::decode(prime.to_vec().as_slice()).unwrap();
        assert!(p.node_refs.iter().all(|r| !r.inventory.is_empty()));
    }

    #[test]
    fn set_requests_send_one_node_against_the_kept_set() {
        let spec = ClusterSpec::new(100, 8);
        let mut pool = Pool::build(&spec, &Mix::default(), Form::Kubernetes, 4, 42);
        let prime = apply(&mut pool, ByRefMode::Sets).unwrap();
        let p = v1::AllocateRequest::decode(prime.to_vec().as_slice()).unwrap();
        assert!(p.node_set.as_ref().unwrap().keep);
        assert_eq!(p.node_refs.len(), 100);
        let prepared: Vec<PreparedNode> = pool.nodes.iter().map(PreparedNode::new).collect();
        let want = gpusched_client::byref::digest_of(&gpusched_client::byref::set_key(&prepared));
        for e in &pool.encoded {
            let req = v1::AllocateRequest::decode(e.to_vec().as_slice()).unwrap();
            assert_eq!(req.node_refs.len(), 1);
            assert!(!req.node_refs[0].usage.is_empty());
            assert_eq!(req.node_set.as_ref().unwrap().base.as_ref(), Some(&want));
        }
    }
}
