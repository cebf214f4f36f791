//! The nearest miss of a pod that fits nowhere: the node and cards that came closest, and what
//! they lacked ("node-17 GPU-3: 2,048 MiB short").
//!
//! Read from the service's typed answers, never from rules of our own: the Filter answer with
//! explanations says, per failed node, which container failed and the first failed check of
//! every card (`CardExplanation.rejected`); `ValidateWorkload` gives the container's resolved
//! request. A node counts when usage could change its verdict (not `unresolvable`) and its
//! failing container lacks only cards that failed a capacity check (slots, memory, cores, an
//! idle card). What each such card lacks is its capacity minus its usage (as sent to the
//! service) minus what the pod's earlier app containers booked on it in the same tentative
//! placement, against the container's per-card request. The nearest node lacks the fewest
//! cards, then the least capacity (each shortfall as a share of the card's own capacity), then
//! has the smaller name.

use std::collections::HashMap;
use std::sync::Arc;

use gpusched_client::measure::{Need, need_mem};
use gpusched_client::v1;

use crate::web::model::{CardShort, NearestMiss};
use crate::web::units::thousands;

/// The reasons freeing capacity on the card can cure.
fn capacity_reason(r: v1::Reason) -> bool {
    matches!(
        r,
        v1::Reason::CardTimeSlicingExhausted
            | v1::Reason::ExclusiveDeviceAllocateConflict
            | v1::Reason::CardInsufficientMemory
            | v1::Reason::CardInsufficientCore
            | v1::Reason::CardComputeUnitsExhausted
            | v1::Reason::MigNoFreePlacement
    )
}

/// A resolved container's per-card need.
fn need_of(c: &v1::ResolvedContainer) -> Need {
    Need {
        count: c.gpu_count,
        cores: c.cores_percent,
        mem_mib: c.mem_mib.unwrap_or(0),
        mem_percent: c.mem_percent.unwrap_or(0),
    }
}

/// Extra (slots, MiB, cores) booked on a card by the pod's own earlier containers.
type Tentative = HashMap<String, (u32, u64, u32)>;

/// What `card` lacks for one card of `need`, and how much that is (shares of its capacity).
fn short_of(
    card: &v1::Card,
    need: &Need,
    reason: v1::Reason,
    tentative: &Tentative,
) -> (CardShort, f64) {
    let u = card.usage.unwrap_or_default();
    let (ts, tm, tc) = tentative.get(&card.id).copied().unwrap_or_default();
    let used_slots = u.used_slots.saturating_add(ts);
    let used_mem = u.used_mem_mib.saturating_add(tm);
    let used_cores = u.used_cores.saturating_add(tc);
    let slots = used_slots.saturating_add(1).saturating_sub(card.slots);
    let mem = need_mem(need, card).saturating_sub(card.total_mem_mib.saturating_sub(used_mem));
    let cores = need
        .cores
        .saturating_sub(card.total_cores.saturating_sub(used_cores));
    let needs_idle = reason == v1::Reason::ExclusiveDeviceAllocateConflict;
    // A MIG card books instances, not MiB and cores: what it lacks is a free placement.
    let mig = reason == v1::Reason::MigNoFreePlacement;
    let (slots, mem, cores) = if mig { (0, 0, 0) } else { (slots, mem, cores) };
    let part = |x: u64, of: u64| if of == 0 { 1.0 } else { x as f64 / of as f64 };
    let mut size = part(mem, card.total_mem_mib)
        + part(u64::from(cores), u64::from(card.total_cores))
        + part(u64::from(slots), u64::from(card.slots));
    if needs_idle || mig {
        // Every booking on the card (or one of its MIG instances) would have to go.
        size += 1.0;
    }
    if reason == v1::Reason::CardComputeUnitsExhausted {
        size += part(1, u64::from(card.total_cores));
    }
    let short = CardShort {
        card: card.id.clone(),
        index: card.index,
        reason: reason_name(reason),
        mem_mib: mem,
        cores,
        slots,
        needs_idle,
    };
    (short, size)
}

fn reason_name(r: v1::Reason) -> String {
    r.as_str_name().trim_start_matches("REASON_").to_owned()
}

/// What one card lacks, in words: `2,048 MiB short`.
pub fn short_text(s: &CardShort) -> String {
    let mut parts = Vec::new();
    if s.mem_mib > 0 {
        parts.push(format!("{} MiB short", thousands(s.mem_mib)));
    }
    if s.cores > 0 {
        parts.push(format!("{}% cores short", s.cores));
    }
    if s.slots > 0 {
        parts.push(format!(
            "{} slot{} short",
            s.slots,
            if s.slots == 1 { "" } else { "s" }
        ));
    }
    if s.needs_idle {
        parts.push("must be idle (exclusive request)".to_owned());
    }
    if parts.is_empty() {
        parts.push(match s.reason.as_str() {
            "CARD_COMPUTE_UNITS_EXHAUSTED" => "all cores booked".to_owned(),
            "MIG_NO_FREE_PLACEMENT" => "no free MIG placement".to_owned(),
            other => other.to_owned(),
        });
    }
    parts.join(", ")
}

/// The line for a nearest miss: `node-17 GPU-3: 2,048 MiB short` (`; ` between cards).
fn text(node: &str, short: &[CardShort]) -> String {
    let cards: Vec<String> = short
        .iter()
        .map(|s| format!("{}: {}", s.card, short_text(s)))
        .collect();
    format!("{node} {}", cards.join("; "))
}

/// A candidate: (cards lacking, total size, node name) and the miss.
type Candidate = ((u32, f64), NearestMiss);

/// The nearest miss over the failed nodes of a Filter answer (with explanations), or None
/// when no node can be completed by freeing capacity.
pub fn nearest(
    failed: &[v1::FailedNode],
    explanations: &[v1::NodeExplanation],
    resolved: &[v1::ResolvedContainer],
    nodes: &[Arc<v1::Node>],
) -> Option<NearestMiss> {
    let nodes: HashMap<&str, &v1::Node> = nodes.iter().map(|n| (n.name.as_str(), &**n)).collect();
    let explained: HashMap<&str, &v1::NodeExplanation> = explanations
        .iter()
        .map(|e| (e.node_name.as_str(), e))
        .collect();
    let by_name: HashMap<&str, &v1::ResolvedContainer> = resolved
        .iter()
        .map(|c| (c.container_name.as_str(), c))
        .collect();
    let mut best: Option<Candidate> = None;
    for f in failed.iter().filter(|f| !f.unresolvable) {
        let (Some(node), Some(ex), Some(rc)) = (
            nodes.get(f.node_name.as_str()),
            explained.get(f.node_name.as_str()),
            by_name.get(f.container_name.as_str()),
        ) else {
            continue;
        };
        let Some(c) = node_miss(node, ex, rc, &by_name) else {
            continue;
        };
        let better = match &best {
            None => true,
            Some(((cards, size), miss)) => {
                c.0.0
                    .cmp(cards)
                    .then(c.0.1.total_cmp(size))
                    .then(c.1.node.cmp(&miss.node))
                    .is_lt()
            }
        };
        if better {
            best = Some(c);
        }
    }
    best.map(|(_, m)| m)
}

/// What `node` lacks for the container `rc` that failed there, if freeing capacity can cure it.
fn node_miss(
    node: &v1::Node,
    ex: &v1::NodeExplanation,
    rc: &v1::ResolvedContainer,
    by_name: &HashMap<&str, &v1::ResolvedContainer>,
) -> Option<Candidate> {
    // The explanation runs up to the container that failed: the last one.
    let (failing, earlier) = ex.containers.split_last()?;
    if failing.container_name != rc.container_name {
        return None;
    }
    // App containers share the node with the earlier app containers' tentative bookings; an
    // init container is placed alone.
    let mut tentative: Tentative = HashMap::new();
    if !rc.init {
        for c in earlier.iter().filter(|c| !c.init) {
            let Some(prev) = by_name.get(c.container_name.as_str()) else {
                continue;
            };
            let need = need_of(prev);
            for ce in c.cards.iter().filter(|ce| ce.chosen) {
                let Some(card) = node.cards.iter().find(|k| k.id == ce.card_id) else {
                    continue;
                };
                let e = tentative.entry(card.id.clone()).or_default();
                e.0 += 1;
                e.1 += need_mem(&need, card);
                e.2 += need.cores;
            }
        }
    }
    let need = need_of(rc);
    let fitting = u32::try_from(
        failing
            .cards
            .iter()
            .filter(|c| c.visited && c.rejected == v1::Reason::Unspecified as i32)
            .count(),
    )
    .unwrap_or(u32::MAX);
    let missing = rc.gpu_count.checked_sub(fitting).filter(|m| *m > 0)?;
    let mut shorts: Vec<(CardShort, f64)> = failing
        .cards
        .iter()
        .filter(|c| c.visited)
        .filter_map(|ce| {
            let reason = v1::Reason::try_from(ce.rejected).ok()?;
            if !capacity_reason(reason) {
                return None;
            }
            let card = node.cards.iter().find(|k| k.id == ce.card_id)?;
            Some(short_of(card, &need, reason, &tentative))
        })
        .collect();
    if shorts.len() < missing as usize {
        return None;
    }
    shorts.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.index.cmp(&b.0.index)));
    shorts.truncate(missing as usize);
    let size: f64 = shorts.iter().map(|s| s.1).sum();
    let short: Vec<CardShort> = shorts.into_iter().map(|s| s.0).collect();
    Some((
        (missing, size),
        NearestMiss {
            node: node.name.clone(),
            container: rc.container_name.clone(),
            wanted: rc.gpu_count,
            fitting,
            text: text(&node.name, &short),
            short,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    use v1::Reason as R;

    fn card(node: &str, i: u32, used_mem: u64, used_cores: u32, used_slots: u32) -> v1::Card {
        v1::Card {
            id: format!("{node}-gpu{i}"),
            index: i,
            slots: 4,
            total_mem_mib: 16384,
            total_cores: 100,
            health: v1::CardHealth::Healthy as i32,
            usage: Some(v1::CardUsage {
                used_slots,
                used_mem_mib: used_mem,
                used_cores,
            }),
            ..v1::Card::default()
        }
    }

    /// A node with cards (used MiB, used cores, used slots, the service's rejection).
    struct N {
        name: &'static str,
        unresolvable: bool,
        cards: Vec<(u64, u32, u32, R)>,
    }

    fn answer(
        ns: &[N],
        container: &str,
    ) -> (
        Vec<v1::FailedNode>,
        Vec<v1::NodeExplanation>,
        Vec<Arc<v1::Node>>,
    ) {
        let mut failed = vec![];
        let mut ex = vec![];
        let mut nodes = vec![];
        for n in ns {
            let cards: Vec<v1::Card> = n
                .cards
                .iter()
                .enumerate()
                .map(|(i, &(m, c, s, _))| card(n.name, i as u32, m, c, s))
                .collect();
            failed.push(v1::FailedNode {
                node_name: n.name.into(),
                container_name: container.into(),
                unresolvable: n.unresolvable,
                ..v1::FailedNode::default()
            });
            ex.push(v1::NodeExplanation {
                node_name: n.name.into(),
                containers: vec![v1::ContainerExplanation {
                    container_name: container.into(),
                    init: false,
                    cards: cards
                        .iter()
                        .zip(&n.cards)
                        .enumerate()
                        .map(|(i, (c, &(_, _, _, r)))| v1::CardExplanation {
                            card_id: c.id.clone(),
                            card_index: c.index,
                            visit_position: i as u32,
                            rejected: r as i32,
                            visited: true,
                            ..v1::CardExplanation::default()
                        })
                        .collect(),
                }],
                ..v1::NodeExplanation::default()
            });
            nodes.push(Arc::new(v1::Node {
                name: n.name.into(),
                cards,
                ..v1::Node::default()
            }));
        }
        (failed, ex, nodes)
    }

    fn main(count: u32, mem: Option<u64>, pct: Option<u32>, cores: u32) -> v1::ResolvedContainer {
        v1::ResolvedContainer {
            container_name: "main".into(),
            init: false,
            gpu_count: count,
            mem_mib: mem,
            mem_percent: pct,
            cores_percent: cores,
        }
    }

    /// Each case: nodes as the service answered them, the request, the expected line (None:
    /// no node can be cured by freeing capacity).
    #[test]
    fn the_nearest_miss_is_the_smallest_shortfall() {
        let ok = R::Unspecified;
        let cases: Vec<(&str, Vec<N>, v1::ResolvedContainer, Option<&str>)> = vec![
            (
                "the card with most free memory, by how much it lacks",
                vec![
                    N {
                        name: "a",
                        unresolvable: false,
                        cards: vec![
                            (8192, 0, 1, R::CardInsufficientMemory),
                            (4096, 0, 1, R::CardInsufficientMemory),
                        ],
                    },
                    N {
                        name: "b",
                        unresolvable: false,
                        cards: vec![(2048, 0, 1, R::CardInsufficientMemory)],
                    },
                ],
                main(1, Some(16384), None, 0),
                Some("b b-gpu0: 2,048 MiB short"),
            ),
            (
                "fewest cards lacking wins over a smaller shortfall",
                vec![
                    N {
                        name: "a",
                        unresolvable: false,
                        cards: vec![
                            (1, 0, 1, R::CardInsufficientMemory),
                            (1, 0, 1, R::CardInsufficientMemory),
                        ],
                    },
                    N {
                        name: "b",
                        unresolvable: false,
                        cards: vec![(0, 0, 0, ok), (8192, 0, 1, R::CardInsufficientMemory)],
                    },
                ],
                main(2, Some(16384), None, 0),
                Some("b b-gpu1: 8,192 MiB short"),
            ),
            (
                "cores, slots and an idle card",
                vec![
                    N {
                        name: "a",
                        unresolvable: false,
                        cards: vec![(0, 80, 1, R::CardInsufficientCore)],
                    },
                    N {
                        name: "b",
                        unresolvable: false,
                        cards: vec![(0, 10, 4, R::CardTimeSlicingExhausted)],
                    },
                    N {
                        name: "c",
                        unresolvable: false,
                        cards: vec![(0, 10, 1, R::ExclusiveDeviceAllocateConflict)],
                    },
                ],
                main(1, None, Some(50), 30),
                Some("a a-gpu0: 10% cores short"),
            ),
            (
                "a percentage of the card and a second card short",
                vec![N {
                    name: "a",
                    unresolvable: false,
                    cards: vec![
                        (12288, 0, 1, R::CardInsufficientMemory),
                        (10240, 0, 1, R::CardInsufficientMemory),
                        (0, 0, 4, R::CardTimeSlicingExhausted),
                    ],
                }],
                main(2, None, Some(50), 0),
                Some("a a-gpu1: 2,048 MiB short; a-gpu0: 4,096 MiB short"),
            ),
            (
                "a MIG card without a free placement lacks an instance, not MiB",
                vec![
                    N {
                        name: "a",
                        unresolvable: false,
                        cards: vec![(16384, 100, 1, R::MigNoFreePlacement)],
                    },
                    N {
                        name: "b",
                        unresolvable: false,
                        cards: vec![(0, 0, 0, R::QuotaMemoryExceeded)],
                    },
                ],
                main(1, Some(4096), None, 0),
                Some("a a-gpu0: no free MIG placement"),
            ),
            (
                "unresolvable nodes and cards no usage can cure are never the nearest",
                vec![
                    N {
                        name: "a",
                        unresolvable: true,
                        cards: vec![(8192, 0, 1, R::CardInsufficientMemory)],
                    },
                    N {
                        name: "b",
                        unresolvable: false,
                        cards: vec![(0, 0, 0, R::CardCordoned)],
                    },
                ],
                main(1, Some(16384), None, 0),
                None,
            ),
        ];
        for (what, ns, rc, want) in cases {
            let (failed, ex, nodes) = answer(&ns, "main");
            let got = nearest(&failed, &ex, std::slice::from_ref(&rc), &nodes);
            assert_eq!(got.as_ref().map(|m| m.text.as_str()), want, "{what}");
            if let Some(m) = got {
                assert_eq!(m.wanted, rc.gpu_count, "{what}");
                assert_eq!(m.short.len() as u32 + m.fitting, rc.gpu_count, "{what}");
            }
        }
    }

    #[test]
    fn earlier_app_containers_book_their_cards_first() {
        // "first" took 8,192 MiB of gpu0 in the same tentative placement; "main" then lacks
        // 8,192 + 4,096 - 8,192 free = 4,096 more than the usage alone says.
        let (failed, mut ex, nodes) = answer(
            &[N {
                name: "a",
                unresolvable: false,
                cards: vec![(4096, 0, 1, R::CardInsufficientMemory)],
            }],
            "main",
        );
        let mut first = ex[0].containers[0].clone();
        first.container_name = "first".into();
        first.cards[0].rejected = 0;
        first.cards[0].chosen = true;
        ex[0].containers.insert(0, first);
        let rc = [
            v1::ResolvedContainer {
                container_name: "first".into(),
                ..main(1, Some(8192), None, 0)
            },
            main(1, Some(8192), None, 0),
        ];
        let m = nearest(&failed, &ex, &rc, &nodes).expect("a miss");
        assert_eq!(m.text, "a a-gpu0: 4,096 MiB short");
    }
}
