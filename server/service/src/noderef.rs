//! Candidate nodes sent whole (`nodes`) and by reference (`node_refs`): resolving references
//! through the node cache, converting inline parts with the one node conversion
//! ([`convert::node_in`], validated by [`Node::new`]) and caching them as engine nodes, and
//! building the snapshot from shared nodes ([`Snapshot::from_nodes`]: no node is copied).
//!
//! A request is answered from its own content only: a reference the cache does not hold makes
//! the whole call FAILED_PRECONDITION (every missing digest listed), never a partial decision.

use std::sync::Arc;

use gpusched_api::v1;
use gpusched_engine::{Node, NodeSpec, Snapshot, Violation, ViolationKind};
use prost::Message;

use crate::call::State;
use crate::config::Limits;
use crate::convert::{self, NodeAt};
use crate::error::{Missing, ServiceError};
use crate::node_cache::{Digest, Part, UsageList, Value};

/// Cards assumed per referenced node when sizing a request before its references are
/// resolved (only chooses between deciding inline and on the blocking pool).
pub const ASSUMED_CARDS_PER_REF: usize = 8;

/// Checks the node count of a request, and the card counts of its whole nodes, before any
/// conversion work (referenced nodes' cards are checked once resolved).
pub fn check_limits(
    nodes: &[v1::Node],
    refs: &[v1::NodeRef],
    limits: &Limits,
) -> Result<(), ServiceError> {
    if refs.is_empty() {
        return convert::check_node_limits(nodes, limits).map(|_| ());
    }
    let total = nodes.len() + refs.len();
    if total > limits.max_nodes {
        return Err(ServiceError::TooLarge(vec![Violation::new(
            ViolationKind::LimitExceeded,
            "nodes",
            format!(
                "{total} nodes ({} whole, {} by reference) exceed the limit of {} (limits.max_nodes)",
                nodes.len(),
                refs.len(),
                limits.max_nodes
            ),
        )]));
    }
    convert::check_node_limits(nodes, limits).map(|_| ())
}

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

/// (hits, misses) of the request's lookups, inventory then usage, counted once per request.
type Tally = [(u64, u64); 2];

/// One part of a node reference as found in the request.
enum Found {
    /// Neither bytes nor digest.
    Absent,
    /// Converted (inline) or found in the cache, with the part's digest.
    Value(Value, Digest),
    /// A reference the cache does not hold.
    Missing,
    /// Malformed (violations recorded).
    Bad,
}

/// Resolves one part: inline bytes are hashed (and checked against the digest when one is
/// given), converted by `convert` and cached; a digest alone is looked up.
#[allow(clippy::too_many_arguments)]
fn part_in(
    state: &State,
    part: Part,
    i: usize,
    bytes: &[u8],
    digest: Option<&v1::Digest>,
    violations: &mut Vec<Violation>,
    missing: &mut Vec<Missing>,
    tally: &mut Tally,
    convert: impl FnOnce(&[u8], &mut Vec<Violation>) -> Option<Value>,
) -> Found {
    // Field names are built only for a violation or a miss (not on the hot path).
    let name = part.as_str();
    let field = || format!("node_refs[{i}].{name}");
    let digest_field = || format!("node_refs[{i}].{name}_digest");
    let claimed = match digest {
        Some(d) => match digest_in(d, &digest_field, violations) {
            Some(d) => Some(d),
            None => return Found::Bad,
        },
        None => None,
    };
    // A digest of size 0 names the empty blob: nothing to look up or to send.
    let inline = !bytes.is_empty() || claimed.is_some_and(|d| d.size_bytes == 0);
    if inline {
        let actual = Digest::of(bytes);
        if let Some(c) = claimed
            && c != actual
        {
            violations.push(Violation::new(
                ViolationKind::InvalidNodeReference,
                digest_field(),
                format!(
                    "{c} does not match the bytes of {} (they hash to {actual})",
                    field()
                ),
            ));
            return Found::Bad;
        }
        return match convert(bytes, violations) {
            Some(v) => {
                state.node_cache.insert(part, actual, v.clone());
                Found::Value(v, actual)
            }
            None => Found::Bad,
        };
    }
    let Some(d) = claimed else {
        return Found::Absent;
    };
    let found = state.node_cache.peek(part, &d);
    let slot = &mut tally[usize::from(part == Part::Usage)];
    if found.is_some() {
        slot.0 += 1;
    } else {
        slot.1 += 1;
    }
    match found {
        Some(v) => Found::Value(v, d),
        None => {
            if !missing.iter().any(|m| m.part == part && m.digest == d) {
                missing.push(Missing {
                    part,
                    digest: d,
                    field: digest_field(),
                });
            }
            Found::Missing
        }
    }
}

/// Decodes and converts an inline inventory: the node conversion of nodes sent whole.
fn inventory_in(
    state: &State,
    whole: usize,
    i: usize,
    bytes: &[u8],
    violations: &mut Vec<Violation>,
    invalid: &mut Vec<Invalid>,
) -> Option<Value> {
    let field = format!("node_refs[{i}].inventory");
    let node = match v1::Node::decode(bytes) {
        Ok(n) => n,
        Err(e) => {
            violations.push(Violation::new(
                ViolationKind::InvalidNodeReference,
                field,
                format!("not a serialized gpusched.v1.Node: {e}"),
            ));
            return None;
        }
    };
    let limits = &state.settings.limits;
    if node.cards.len() > limits.max_cards_per_node {
        violations.push(Violation::new(
            ViolationKind::LimitExceeded,
            format!("{field}.cards"),
            format!(
                "{} cards exceed the limit of {} per node (limits.max_cards_per_node)",
                node.cards.len(),
                limits.max_cards_per_node
            ),
        ));
        return None;
    }
    let before = violations.len();
    let spec = convert::node_in(node, NodeAt::Ref(i), &state.settings.names, violations);
    if violations.len() != before {
        return None;
    }
    validated(spec, whole + i, invalid).map(|n| Value::Inventory(Arc::new(n)))
}

/// A node that failed [`Node::new`]: its position in the combined list (whole nodes, then
/// references), its name and its violations (fields relative to the node). Reported, like
/// `Snapshot::new` did, only when the request has no other problem, with duplicate names.
struct Invalid {
    at: usize,
    name: String,
    violations: Vec<Violation>,
}

/// Validates one converted node ([`Node::new`]); a failure is kept in `invalid`.
fn validated(spec: NodeSpec, at: usize, invalid: &mut Vec<Invalid>) -> Option<Node> {
    let name = spec.name.clone();
    match Node::new(spec) {
        Ok(n) => Some(n),
        Err(e) => {
            invalid.push(Invalid {
                at,
                name,
                violations: e.violations,
            });
            None
        }
    }
}

/// Decodes and converts an inline usage part; card ids non-empty and unique.
fn usage_part_in(i: usize, bytes: &[u8], violations: &mut Vec<Violation>) -> Option<Value> {
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
    let mut list: UsageList = Vec::with_capacity(cards.len());
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
        list.push((card_id, convert::usage_in(usage)));
    }
    (violations.len() == before).then(|| Value::Usage(Arc::new(list)))
}

/// The candidate nodes of a request: whole nodes converted as always, references resolved.
pub fn snapshot_in(
    state: &State,
    nodes: Vec<v1::Node>,
    refs: Vec<v1::NodeRef>,
) -> Result<Snapshot, ServiceError> {
    let names = &state.settings.names;
    if refs.is_empty() {
        return convert::snapshot_in(nodes, names);
    }
    let whole = nodes.len();
    let mut violations = Vec::new();
    let mut missing = Vec::new();
    let mut tally: Tally = [(0, 0); 2];
    let mut shared: Vec<Arc<Node>> = Vec::with_capacity(whole + refs.len());
    // Position of each shared node in the combined list (whole nodes, then references).
    let mut shared_at: Vec<usize> = Vec::with_capacity(whole + refs.len());
    let mut invalid: Vec<Invalid> = Vec::new();
    for (i, n) in nodes.into_iter().enumerate() {
        let before = violations.len();
        let spec = convert::node_in(n, NodeAt::Whole(i), names, &mut violations);
        if violations.len() == before
            && let Some(node) = validated(spec, i, &mut invalid)
        {
            shared.push(Arc::new(node));
            shared_at.push(i);
        }
    }
    let limits = &state.settings.limits;
    for (i, r) in refs.into_iter().enumerate() {
        let v1::NodeRef {
            inventory,
            inventory_digest,
            usage,
            usage_digest,
        } = r;
        // An unchanged node (both parts by digest): one lookup of the combined node.
        if inventory.is_empty()
            && usage.is_empty()
            && let (Some(inv_d), Some(use_d)) = (inventory_digest.as_ref(), usage_digest.as_ref())
            && let Some(node) = pair_of(state, inv_d, use_d)
        {
            tally[0].0 += 1;
            tally[1].0 += 1;
            if within_card_limit(&node, i, limits, &mut violations) {
                shared.push(node);
                shared_at.push(whole + i);
            }
            continue;
        }
        let inv = part_in(
            state,
            Part::Inventory,
            i,
            &inventory,
            inventory_digest.as_ref(),
            &mut violations,
            &mut missing,
            &mut tally,
            |b, v| inventory_in(state, whole, i, b, v, &mut invalid),
        );
        let use_ = part_in(
            state,
            Part::Usage,
            i,
            &usage,
            usage_digest.as_ref(),
            &mut violations,
            &mut missing,
            &mut tally,
            |b, v| usage_part_in(i, b, v),
        );
        let (inv, inv_d) = match inv {
            Found::Value(Value::Inventory(n), d) => (n, d),
            Found::Absent => {
                violations.push(Violation::new(
                    ViolationKind::MissingField,
                    format!("node_refs[{i}]"),
                    "inventory or inventory_digest is required",
                ));
                continue;
            }
            _ => continue,
        };
        let usage = match use_ {
            Found::Value(Value::Usage(u), d) => Some((u, d)),
            Found::Absent => None,
            _ => continue,
        };
        if !within_card_limit(&inv, i, limits, &mut violations) {
            continue;
        }
        let Some((usage, use_d)) = usage else {
            shared.push(inv);
            shared_at.push(whole + i);
            continue;
        };
        // Clients list usage in card order: look from the card after the last match first.
        let cards = inv.cards();
        let n = cards.len();
        let before = violations.len();
        let mut next = 0usize;
        let mut updates = Vec::with_capacity(usage.len());
        for (k, (id, u)) in usage.iter().enumerate() {
            match (0..n)
                .map(|d| (next + d) % n)
                .find(|&j| cards.get(j).is_some_and(|c| c.id == *id))
            {
                Some(j) => {
                    next = j + 1;
                    updates.push((j, *u));
                }
                None => violations.push(Violation::new(
                    ViolationKind::UnknownReference,
                    format!("node_refs[{i}].usage.cards[{k}].card_id"),
                    format!("card {id:?} is not a card of node {:?}", inv.name()),
                )),
            }
        }
        if violations.len() != before {
            continue;
        }
        // The positions are the node's cards: always `Some`.
        if let Some(node) = inv.with_card_usage(updates) {
            let node = Arc::new(node);
            state.node_cache.insert_pair(inv_d, use_d, node.clone());
            shared.push(node);
            shared_at.push(whole + i);
        }
    }
    for (part, (hits, misses)) in [Part::Inventory, Part::Usage].into_iter().zip(tally) {
        state.node_cache.count(part, hits, misses);
    }
    if !violations.is_empty() {
        return Err(ServiceError::InvalidArgument(violations));
    }
    if !missing.is_empty() {
        return Err(ServiceError::Missing(missing));
    }
    let cards: usize = shared.iter().map(|n| n.cards().len()).sum();
    if cards > limits.max_cards {
        return Err(ServiceError::TooLarge(vec![Violation::new(
            ViolationKind::LimitExceeded,
            "nodes",
            format!(
                "{cards} cards exceed the limit of {} (limits.max_cards)",
                limits.max_cards
            ),
        )]));
    }
    if !invalid.is_empty() {
        return Err(ServiceError::InvalidArgument(invalid_nodes(
            &shared, &shared_at, invalid, whole,
        )));
    }
    Snapshot::from_nodes(shared).map_err(|e| {
        ServiceError::InvalidArgument(
            e.violations
                .into_iter()
                .map(|v| Violation {
                    field: rename(&v.field, whole),
                    ..v
                })
                .collect(),
        )
    })
}

/// What `Snapshot::new` reported for the combined list when some nodes failed [`Node::new`]:
/// each node's own violations, then duplicate names, in node order, named after the request.
fn invalid_nodes(
    shared: &[Arc<Node>],
    shared_at: &[usize],
    invalid: Vec<Invalid>,
    whole: usize,
) -> Vec<Violation> {
    let mut names: Vec<(usize, &str)> = shared_at
        .iter()
        .zip(shared)
        .map(|(&k, n)| (k, n.name()))
        .chain(invalid.iter().map(|x| (x.at, x.name.as_str())))
        .collect();
    names.sort_by_key(|&(k, _)| k);
    let mut out: Vec<(usize, bool, Violation)> = Vec::new();
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by(|&a, &b| names[a].1.cmp(names[b].1).then(a.cmp(&b)));
    let mut first = 0usize;
    for (j, &x) in order.iter().enumerate() {
        let (k, name) = names[x];
        if j > 0 && !name.is_empty() && name == names[order[j - 1]].1 {
            out.push((
                k,
                true,
                Violation::new(
                    ViolationKind::DuplicateId,
                    format!("nodes[{k}].name"),
                    format!(
                        "duplicate node name {name:?} (also nodes[{}])",
                        names[order[first]].0
                    ),
                ),
            ));
        } else {
            first = j;
        }
    }
    for x in invalid {
        let k = x.at;
        out.extend(x.violations.into_iter().map(|v| {
            (
                k,
                false,
                Violation {
                    field: format!("nodes[{k}].{}", v.field),
                    ..v
                },
            )
        }));
    }
    // Each node's own violations before its duplicate name, as `Snapshot::new` orders them.
    out.sort_by_key(|&(k, name_dup, _)| (k, name_dup));
    out.into_iter()
        .map(|(_, _, v)| Violation {
            field: rename(&v.field, whole),
            ..v
        })
        .collect()
}

/// The combined node of two well-formed, non-empty digests, when cached (a malformed digest
/// falls through to the part-by-part path, which reports it).
fn pair_of(state: &State, inv: &v1::Digest, usage: &v1::Digest) -> Option<Arc<Node>> {
    let mut scratch = Vec::new();
    let inv = digest_in(inv, &String::new, &mut scratch)?;
    let usage = digest_in(usage, &String::new, &mut scratch)?;
    if inv.size_bytes == 0 || usage.size_bytes == 0 {
        return None;
    }
    state.node_cache.peek_pair(&inv, &usage)
}

/// Whether a referenced node is within `limits.max_cards_per_node` (a violation when not).
fn within_card_limit(
    node: &Node,
    i: usize,
    limits: &Limits,
    violations: &mut Vec<Violation>,
) -> bool {
    let n = node.cards().len();
    if n <= limits.max_cards_per_node {
        return true;
    }
    violations.push(Violation::new(
        ViolationKind::LimitExceeded,
        format!("node_refs[{i}].inventory.cards"),
        format!(
            "{n} cards exceed the limit of {} per node (limits.max_cards_per_node)",
            limits.max_cards_per_node
        ),
    ));
    false
}

/// `nodes[k]...` of the combined list back to the request's fields: `nodes[k]` for whole
/// nodes, `node_refs[k - whole].inventory` for references.
fn rename(field: &str, whole: usize) -> String {
    let Some(rest) = field.strip_prefix("nodes[") else {
        return field.to_owned();
    };
    let Some((num, tail)) = rest.split_once(']') else {
        return field.to_owned();
    };
    match num.parse::<usize>() {
        Ok(k) if k >= whole => format!("node_refs[{}].inventory{tail}", k - whole),
        _ => field.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::rename;

    #[test]
    fn fields_of_the_combined_list_name_the_request() {
        assert_eq!(rename("nodes[1].name", 2), "nodes[1].name");
        assert_eq!(
            rename("nodes[3].cards[0].id", 2),
            "node_refs[1].inventory.cards[0].id"
        );
        assert_eq!(rename("workload", 2), "workload");
    }
}
