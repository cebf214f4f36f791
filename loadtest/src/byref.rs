//! Nodes by reference (`node_refs`, field 5 of Filter/Score/AllocateRequest) for the request
//! pool, prepared with the Rust client's own splitting and digests
//! ([`gpusched_client::PreparedNode`]).
//!
//! - `warm`: the server holds every node's parts (a prime request sent them inline before the
//!   load). Request `i` sends every node by digest except one: node `i mod N` changed its usage
//!   (as after a bind), so its usage goes inline, as a scheduler shim's would.
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
    /// Every part inline every time.
    Cold,
}

fn refs_bytes(refs: Vec<v1::NodeRef>) -> Bytes {
    Bytes::from(
        v1::AllocateRequest {
            node_refs: refs,
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
    let inline = refs_bytes(prepared.iter().map(|p| p.node_ref(|_| false)).collect());
    let first = pool.encoded.first().cloned()?;
    let prime = Encoded {
        nodes: inline.clone(),
        ..first
    };
    let n = pool.nodes.len();
    for (i, e) in pool.encoded.iter_mut().enumerate() {
        e.nodes = match mode {
            ByRefMode::Cold => inline.clone(),
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
                refs_bytes(refs)
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
}
