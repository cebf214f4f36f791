//! Candidate nodes by reference (`node_refs`), after the nodes sent whole: resolving references
//! through the node cache, converting inline parts with the one node conversion ([`checked`],
//! validated by [`Node::new`]) and caching them as engine nodes (or, for an inventory that is
//! invalid itself, as that verdict), and building the candidates from shared nodes
//! ([`Snapshot::from_nodes`](gpusched_engine::Snapshot::from_nodes): no node is copied).
//!
//! A request is answered from its own content only: a reference the cache does not hold makes
//! the whole call FAILED_PRECONDITION (every missing digest listed), never a partial decision.
//! An invalid node is answered the same whether sent whole or by reference (its problems are
//! named relative to the node).

use std::sync::Arc;

use gpusched_api::v1;
use gpusched_engine::{CardUsage, Node, Violation, ViolationKind};
use prost::Message;

use crate::cache::digest::{Digest, Part};
use crate::cache::nodes::Value;
use crate::candidates::{Candidates, InvalidNode};
use crate::convert::node::NodeAt;
use crate::convert::refs::{digest_in, usage_list_in};
use crate::error::{Missing, ServiceError};
use crate::pipeline::resolve::build::{Builder, checked};
use crate::pipeline::resolve::whole;
use crate::state::State;

/// Cards assumed per referenced node when sizing a request before its references are
/// resolved (only chooses between deciding inline and on the blocking pool).
pub const ASSUMED_CARDS_PER_REF: usize = 8;

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

/// Decodes and converts an inline inventory: the node conversion of nodes sent whole. A node
/// invalid itself is kept (and cached) as that verdict; request errors are not cached.
fn inventory_in(
    state: &State,
    i: usize,
    bytes: &[u8],
    violations: &mut Vec<Violation>,
) -> Option<Value> {
    let node = match v1::Node::decode(bytes) {
        Ok(n) => n,
        Err(e) => {
            violations.push(Violation::new(
                ViolationKind::InvalidNodeReference,
                format!("node_refs[{i}].inventory"),
                format!("not a serialized gpusched.v1.Node: {e}"),
            ));
            return None;
        }
    };
    let settings = &state.settings;
    match checked(
        node,
        NodeAt::Ref(i),
        &settings.names,
        &settings.limits,
        violations,
    )? {
        Ok(n) => Some(Value::Inventory(n)),
        Err(bad) => Some(Value::Invalid(bad)),
    }
}

/// The candidate nodes of a request: whole nodes converted as always, then references
/// resolved, into one [`Builder`].
pub fn candidates_in(
    state: &State,
    nodes: Vec<v1::Node>,
    refs: Vec<v1::NodeRef>,
) -> Result<Candidates, ServiceError> {
    let settings = &state.settings;
    let limits = &settings.limits;
    let mut b = Builder::with_capacity(nodes.len() + refs.len());
    whole::push(&mut b, nodes, &settings.names, limits);
    if refs.is_empty() {
        return b.finish(limits);
    }
    let mut tally: Tally = [(0, 0); 2];
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
            // Cached nodes were checked against limits.max_cards_per_node before caching.
            b.cards += node.cards().len();
            b.valid(node);
            continue;
        }
        let inv = part_in(
            state,
            Part::Inventory,
            i,
            &inventory,
            inventory_digest.as_ref(),
            &mut b.violations,
            &mut b.missing,
            &mut tally,
            |bytes, v| inventory_in(state, i, bytes, v),
        );
        let use_ = part_in(
            state,
            Part::Usage,
            i,
            &usage,
            usage_digest.as_ref(),
            &mut b.violations,
            &mut b.missing,
            &mut tally,
            |bytes, v| usage_list_in(i, bytes, v).map(|u| Value::Usage(Arc::new(u))),
        );
        let (inv, inv_d) = match inv {
            Found::Value(Value::Inventory(n), d) => (n, d),
            Found::Value(Value::Invalid(bad), _) => {
                // Invalid itself: its usage part (resolved above, so that missing or malformed
                // parts are still reported) does not matter.
                b.cards += bad.failure().cards_on_node as usize;
                b.invalid(bad);
                continue;
            }
            Found::Absent => {
                b.violations.push(Violation::new(
                    ViolationKind::MissingField,
                    format!("node_refs[{i}]"),
                    "inventory or inventory_digest is required",
                ));
                b.none();
                continue;
            }
            _ => {
                b.none();
                continue;
            }
        };
        b.cards += inv.cards().len();
        let usage = match use_ {
            Found::Value(Value::Usage(u), d) => Some((u, d)),
            Found::Absent => None,
            _ => {
                b.none();
                continue;
            }
        };
        let Some((usage, use_d)) = usage else {
            b.valid(inv);
            continue;
        };
        // Clients list usage in card order: look from the card after the last match first.
        let node_cards = inv.cards();
        let n = node_cards.len();
        let mut unknown = Vec::new(); // the node's problems: unknown cards, MIG usage
        let mut next = 0usize;
        let mut updates = Vec::with_capacity(usage.len());
        for (k, (id, u)) in usage.iter().enumerate() {
            match (0..n)
                .map(|d| (next + d) % n)
                .find(|&j| node_cards.get(j).is_some_and(|c| c.id == *id))
            {
                Some(j) => {
                    next = j + 1;
                    match node_cards.get(j) {
                        // A MIG card's usage is its instances' (contract section 11.5), which
                        // travel with the inventory: a usage entry may only repeat it or be
                        // zero.
                        Some(c) if c.mig.is_some() => {
                            if *u != CardUsage::default() && *u != c.usage {
                                unknown.push(Violation::new(
                                    ViolationKind::OutOfRange,
                                    format!("usage.cards[{k}].usage"),
                                    format!(
                                        "card {id:?} of node {:?} is a MIG card: its usage is \
                                         what its instances in use book ({} slots, {} MiB, {} \
                                         cores); send its instances with the inventory and \
                                         leave its usage unset",
                                        inv.name(),
                                        c.usage.used,
                                        c.usage.used_mem_mib,
                                        c.usage.used_cores
                                    ),
                                ));
                            }
                        }
                        _ => updates.push((j, *u)),
                    }
                }
                None => unknown.push(Violation::new(
                    ViolationKind::UnknownReference,
                    format!("usage.cards[{k}].card_id"),
                    format!("card {id:?} is not a card of node {:?}", inv.name()),
                )),
            }
        }
        if !unknown.is_empty() {
            // The node's usage names cards it does not have: the node is invalid (as a node
            // sent whole cannot be: there, usage is written in its cards).
            let bad = InvalidNode::new(inv.name().to_owned(), n, unknown);
            b.invalid(Arc::new(bad));
            continue;
        }
        // The positions are the node's cards: always `Some`.
        match inv.with_card_usage(updates) {
            Some(node) => {
                let node = Arc::new(node);
                state.node_cache.insert_pair(inv_d, use_d, node.clone());
                b.valid(node);
            }
            None => b.none(),
        }
    }
    for (part, (hits, misses)) in [Part::Inventory, Part::Usage].into_iter().zip(tally) {
        state.node_cache.count(part, hits, misses);
    }
    b.finish(limits)
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
