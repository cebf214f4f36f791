//! Nodes by reference in tests: digests, a node split into its parts, references inline or
//! by digest, as the clients build them.
#![allow(dead_code)]

use gpusched_api::v1;
use prost::Message;
use sha2::Digest as _;

pub fn digest(bytes: &[u8]) -> v1::Digest {
    v1::Digest {
        hash: sha2::Sha256::digest(bytes).to_vec(),
        size_bytes: bytes.len() as u64,
        function: 0,
    }
}

pub fn subject(d: &v1::Digest) -> String {
    let hex: String = d.hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256/{hex}/{}", d.size_bytes)
}

/// The node split into inventory bytes (usage cleared) and usage bytes (may be empty).
pub fn split(n: &v1::Node) -> (Vec<u8>, Vec<u8>) {
    let mut inv = n.clone();
    let mut usage = v1::NodeUsage::default();
    for c in &mut inv.cards {
        if let Some(u) = c.usage.take() {
            usage.cards.push(v1::CardUsageEntry {
                card_id: c.id.clone(),
                usage: Some(u),
            });
        }
    }
    (inv.encode_to_vec(), usage.encode_to_vec())
}

/// A reference carrying both parts inline (with digests).
pub fn inline(n: &v1::Node) -> v1::NodeRef {
    let (inv, usage) = split(n);
    v1::NodeRef {
        inventory_digest: Some(digest(&inv)),
        usage_digest: (!usage.is_empty()).then(|| digest(&usage)),
        inventory: inv,
        usage,
    }
}

/// The same reference, by digest only.
pub fn by_digest(n: &v1::Node) -> v1::NodeRef {
    let mut r = inline(n);
    r.inventory.clear();
    r.usage.clear();
    r
}
