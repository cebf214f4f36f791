//! A node by reference in: its digests (checked: SHA-256, 32 bytes) and its usage part.

use gpusched_api::v1;
use gpusched_engine::{CardUsage, Violation, ViolationKind};
use prost::Message as _;

use crate::cache::digest::Digest;
use crate::convert::node::usage_in;

/// The digest of a `Digest` field, checked; `None` (with a violation) when malformed.
pub fn digest_in(
    d: &v1::Digest,
    field: &dyn Fn() -> String,
    violations: &mut Vec<Violation>,
) -> Option<Digest> {
    let v1::Digest {
        hash,
        size_bytes,
        function,
    } = d;
    let mut ok = true;
    match v1::DigestFunction::try_from(*function) {
        Ok(v1::DigestFunction::Unspecified | v1::DigestFunction::Sha256) => {}
        Err(_) => {
            violations.push(Violation::new(
                ViolationKind::InvalidNodeReference,
                format!("{}.function", field()),
                format!("unknown DigestFunction value {function} (only SHA-256 is supported)"),
            ));
            ok = false;
        }
    }
    let hash: Option<[u8; 32]> = hash.as_slice().try_into().ok();
    if hash.is_none() {
        violations.push(Violation::new(
            ViolationKind::InvalidNodeReference,
            format!("{}.hash", field()),
            format!(
                "must be the 32 raw bytes of a SHA-256 hash, got {} bytes",
                d.hash.len()
            ),
        ));
    }
    match (ok, hash) {
        (true, Some(hash)) => Some(Digest {
            hash,
            size_bytes: *size_bytes,
        }),
        _ => None,
    }
}

/// Decodes and converts the inline usage part of `node_refs[i]`: (card id, usage) in the order
/// given, card ids non-empty and unique; `None` with violations otherwise.
pub fn usage_list_in(
    i: usize,
    bytes: &[u8],
    violations: &mut Vec<Violation>,
) -> Option<Vec<(String, CardUsage)>> {
    let field = format!("node_refs[{i}].usage");
    let usage = match v1::NodeUsage::decode(bytes) {
        Ok(u) => u,
        Err(e) => {
            violations.push(Violation::new(
                ViolationKind::InvalidNodeReference,
                field,
                format!("not a serialized gpusched.v1.NodeUsage: {e}"),
            ));
            return None;
        }
    };
    let v1::NodeUsage { cards } = usage;
    let before = violations.len();
    let mut list: Vec<(String, CardUsage)> = Vec::with_capacity(cards.len());
    for (k, e) in cards.into_iter().enumerate() {
        let v1::CardUsageEntry { card_id, usage } = e;
        if card_id.is_empty() {
            violations.push(Violation::new(
                ViolationKind::MissingField,
                format!("{field}.cards[{k}].card_id"),
                "card id must not be empty",
            ));
        } else if let Some(first) = list.iter().position(|(id, _)| *id == card_id) {
            violations.push(Violation::new(
                ViolationKind::DuplicateId,
                format!("{field}.cards[{k}].card_id"),
                format!("duplicate card id {card_id:?} (also cards[{first}])"),
            ));
        }
        list.push((card_id, usage_in(usage)));
    }
    (violations.len() == before).then_some(list)
}
