//! Checks a node's decoded GPU inventory before the shim ever sends it to the service: the node
//! rules of `docs/placement-semantics.md` section 1.1 that the shim can know (the card limit per
//! node is the server's configuration, so the server alone judges it). A node that fails is
//! left out of every request and answered unresolvable with [`message`], in the service's
//! `InvalidNode: ...` form but naming the node annotations the problems come from.
//!
//! Zero-capacity cards are not a node problem (the service refuses them card by card), so they
//! are sent.

use std::collections::HashMap;

use gpusched_client::v1;

use crate::config::Names;
use crate::inventory::Inventory;

/// Largest accepted slot count (`count` in the register annotation), as the service's.
pub const MAX_CARD_SLOTS: u32 = 10_000;
/// Largest accepted memory (`devmem`, MiB): 16 TiB, as the service's.
pub const MAX_CARD_MEM_MIB: u64 = 1 << 24;
/// Largest accepted cores (`devcore`, percent), as the service's.
pub const MAX_CARD_CORES: u32 = 10_000;

/// Problems listed in a message; the others are counted.
const LISTED: usize = 8;
/// Characters of a description kept in a message.
const DESCRIPTION_CHARS: usize = 200;

/// One problem of an inventory: where (annotation and entry), the service's `ViolationReason`
/// name for it, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// `hami.io/node-nvidia-register[1].id`, `hami.io/device-cordon`, ...
    pub field: String,
    /// `DUPLICATE_ID`, `MISSING_FIELD`, `OUT_OF_RANGE`, `UNKNOWN_REFERENCE`.
    pub reason: &'static str,
    /// What is wrong.
    pub description: String,
}

/// Every problem of a decoded inventory (empty when the service would accept it).
pub fn problems(inv: &Inventory, names: &Names) -> Vec<Problem> {
    let a = &names.annotations;
    let mut out = Vec::new();
    let mut first_at: HashMap<&str, usize> = HashMap::with_capacity(inv.cards.len());
    for (j, c) in inv.cards.iter().enumerate() {
        let field = |f: &str| format!("{}[{j}].{f}", a.node_register);
        if c.id.trim().is_empty() {
            out.push(Problem {
                field: field("id"),
                reason: "MISSING_FIELD",
                description: "card id must not be blank".to_owned(),
            });
        } else if let Some(first) = first_at.get(c.id.as_str()) {
            out.push(Problem {
                field: field("id"),
                reason: "DUPLICATE_ID",
                description: format!("duplicate card id {:?} (also [{first}])", c.id),
            });
        } else {
            first_at.insert(c.id.as_str(), j);
        }
        for (name, value, max) in [
            ("count", u64::from(c.slots), u64::from(MAX_CARD_SLOTS)),
            ("devmem", c.total_mem_mib, MAX_CARD_MEM_MIB),
            (
                "devcore",
                u64::from(c.total_cores),
                u64::from(MAX_CARD_CORES),
            ),
        ] {
            if value > max {
                out.push(Problem {
                    field: field(name),
                    reason: "OUT_OF_RANGE",
                    description: format!("{value} is above the largest accepted value {max}"),
                });
            }
        }
    }
    let known = |id: &str| first_at.contains_key(id);
    for p in &inv.pair_scores {
        let v1::CardPairScore {
            card_id,
            peer_card_id,
            ..
        } = p;
        for id in [card_id, peer_card_id] {
            if !known(id) {
                out.push(Problem {
                    field: a.node_score.clone(),
                    reason: "UNKNOWN_REFERENCE",
                    description: format!(
                        "pair score {card_id:?} -> {peer_card_id:?}: card {id:?} is not a card of the node"
                    ),
                });
            }
        }
    }
    for id in &inv.cordoned {
        if !known(id) {
            out.push(Problem {
                field: a.device_cordon.clone(),
                reason: "UNKNOWN_REFERENCE",
                description: format!("cordoned card {id:?} is not a card of the node"),
            });
        }
    }
    out
}

/// `InvalidNode: <field> <REASON>: <description>; ...` (at most 8, then `and N more`).
pub fn message(problems: &[Problem]) -> String {
    let mut items: Vec<String> = problems
        .iter()
        .take(LISTED)
        .map(|p| {
            let mut d: String = p.description.chars().take(DESCRIPTION_CHARS).collect();
            if d.len() < p.description.len() {
                d.push('…');
            }
            format!("{} {}: {d}", p.field, p.reason)
        })
        .collect();
    if problems.len() > LISTED {
        items.push(format!("and {} more", problems.len() - LISTED));
    }
    format!("InvalidNode: {}", items.join("; "))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn names() -> Names {
        Names::default()
    }

    fn inv(edit: impl FnOnce(&mut Inventory)) -> Inventory {
        let mut i = Inventory {
            cards: gpusched_client::node("n", 3, 16384, "NVIDIA-A100").cards,
            ..Inventory::default()
        };
        edit(&mut i);
        i
    }

    fn found(i: &Inventory) -> Vec<(String, &'static str)> {
        problems(i, &names())
            .into_iter()
            .map(|p| (p.field, p.reason))
            .collect()
    }

    #[test]
    fn each_kind_is_found_and_named() {
        let reg = "hami.io/node-nvidia-register";
        assert!(found(&inv(|_| {})).is_empty());
        let cases: Vec<(Inventory, Vec<(String, &str)>)> = vec![
            (
                inv(|i| i.cards[2].id = i.cards[0].id.clone()),
                vec![(format!("{reg}[2].id"), "DUPLICATE_ID")],
            ),
            (
                inv(|i| i.cards[1].id = " ".into()),
                vec![(format!("{reg}[1].id"), "MISSING_FIELD")],
            ),
            (
                inv(|i| {
                    i.cards[0].slots = MAX_CARD_SLOTS + 1;
                    i.cards[1].total_mem_mib = MAX_CARD_MEM_MIB + 1;
                    i.cards[2].total_cores = MAX_CARD_CORES + 1;
                }),
                vec![
                    (format!("{reg}[0].count"), "OUT_OF_RANGE"),
                    (format!("{reg}[1].devmem"), "OUT_OF_RANGE"),
                    (format!("{reg}[2].devcore"), "OUT_OF_RANGE"),
                ],
            ),
            (
                inv(|i| {
                    i.pair_scores = vec![v1::CardPairScore {
                        card_id: i.cards[0].id.clone(),
                        peer_card_id: "GPU-x".into(),
                        score: 1,
                    }];
                }),
                vec![("hami.io/node-nvidia-score".into(), "UNKNOWN_REFERENCE")],
            ),
            (
                inv(|i| i.cordoned = vec![i.cards[0].id.clone(), "GPU-y".into()]),
                vec![("hami.io/device-cordon".into(), "UNKNOWN_REFERENCE")],
            ),
        ];
        for (i, want) in cases {
            assert_eq!(found(&i), want);
        }
        // At the bounds, and with zero capacity (refused card by card by the service): valid.
        assert!(
            found(&inv(|i| {
                i.cards[0].slots = MAX_CARD_SLOTS;
                i.cards[0].total_mem_mib = MAX_CARD_MEM_MIB;
                i.cards[0].total_cores = MAX_CARD_CORES;
                i.cards[1].slots = 0;
                i.cards[1].total_mem_mib = 0;
                i.cards[1].total_cores = 0;
            }))
            .is_empty()
        );
    }

    #[test]
    fn messages_are_bounded() {
        let i = inv(|i| {
            for c in &mut i.cards {
                c.total_mem_mib = u64::MAX;
            }
            i.cordoned = (0..10)
                .map(|k| format!("GPU-{}", "z".repeat(k * 100)))
                .collect();
        });
        let m = message(&problems(&i, &names()));
        assert!(
            m.starts_with("InvalidNode: hami.io/node-nvidia-register[0].devmem OUT_OF_RANGE: ")
        );
        assert!(m.ends_with("; and 5 more"), "{m}");
        assert!(m.len() < 8 * 300, "{}", m.len());
    }
}
