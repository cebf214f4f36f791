//! The lone-container shortcut under node and GPU policy `fgd` (`docs/placement-semantics.md`
//! section 12.3): one app container, no init container, numa-bind, topology, mutex or quota.
//! Its cards are the first passing ones in `Δ_card` order, so the node needs one measure and
//! the cards' `Δ_card`, not the full card visit and two more measures; for one card the
//! measure after is the measure before plus the chosen card's `Δ_card` (unless the workload's
//! host request changes the node's host resources). The full path gives the same answer
//! (property `the_lone_shortcut_agrees_with_the_full_evaluation`).

use crate::fit::{
    OrderEntry, Prepared, card_keys, cmp_entries, frag_key, lone_fit, post_checks, pre_checks,
};
use crate::frag::{FragScratch, Fragmentation, host_after};
use crate::model::{Card, CardUsage, Node};
use crate::reason::NodeFailure;
use crate::score::{NodeScore, score_from_sums};
use crate::workload::ContainerRequest;

/// Reusable buffers of the shortcut.
#[derive(Debug, Default)]
pub(crate) struct LoneScratch {
    frag: FragScratch,
    before: Vec<CardUsage>,
    final_usage: Vec<CardUsage>,
    deltas: Vec<i128>,
    order: Vec<OrderEntry>,
    passing: Vec<bool>,
}

/// The outcome of `node` for the lone container at `position`, without choosing cards for the
/// answer (the chosen node is evaluated again in full, with picks); `None`: take the full path.
pub(crate) fn evaluate(
    node: &Node,
    position: usize,
    req: &ContainerRequest,
    prep: &Prepared<'_>,
    scratch: &mut LoneScratch,
) -> Option<Result<NodeScore, NodeFailure>> {
    let mix = prep.mix.as_ref()?;
    if let Err(reasons) = lone_fit::<false>(node, false, req, prep) {
        return Some(Err(NodeFailure {
            container_position: position,
            reasons,
            cards_on_node: u32::try_from(node.cards.len()).unwrap_or(u32::MAX),
            unresolvable: false,
        }));
    }
    scratch.before.clear();
    scratch.before.extend(node.cards.iter().map(|c| c.usage));
    // The cards that pass the checks (the only ones that can be chosen).
    scratch.passing.clear();
    for (pos, card) in node.cards.iter().enumerate() {
        let passes = pre_checks(card, node.is_cordoned(pos), prep).is_none()
            && post_checks(card, pos, card.usage, req, prep, None).is_none();
        scratch.passing.push(passes);
    }
    let weighted_before = mix.measure(node, &scratch.before, node.host, &mut scratch.frag);
    let free_gpu = scratch.frag.free_total();
    let passing = &scratch.passing;
    let booking = |pos: usize, card: &Card| {
        passing
            .get(pos)
            .copied()
            .unwrap_or(false)
            .then(|| CardUsage {
                used: 1,
                used_mem_mib: req.booked_mem(card),
                used_cores: req.cores,
            })
    };
    mix.card_deltas(
        node,
        &scratch.before,
        booking,
        &mut scratch.frag,
        &mut scratch.deltas,
    );
    let need = req.gpus as usize;
    // Cards in order of Δ_card; the device score (the second key) only where Δ ties at the
    // boundary of the cards taken.
    scratch.order.clear();
    for (pos, card) in node.cards.iter().enumerate() {
        if !passing.get(pos).copied().unwrap_or(false) {
            continue;
        }
        let frag = scratch.deltas.get(pos).copied().unwrap_or(0);
        scratch.order.push(OrderEntry {
            keys: [frag_key(frag), 0, 0, 0],
            index: card.index,
            pos,
        });
    }
    if scratch.order.len() < need {
        // lone_fit said enough cards pass (unreachable): the full path decides.
        return None;
    }
    scratch.order.sort_unstable_by_key(|e| e.keys[0]);
    let boundary = scratch.order.get(need - 1).map_or(0, |e| e.keys[0]);
    // Cards strictly below the boundary are taken whatever their device score; those at the
    // boundary compete with their full keys.
    let sure = scratch.order.partition_point(|e| e.keys[0] < boundary);
    let ties_end = scratch.order.partition_point(|e| e.keys[0] <= boundary);
    for e in scratch.order.get_mut(sure..ties_end).unwrap_or_default() {
        if let Some(card) = node.cards.get(e.pos) {
            let frag = scratch.deltas.get(e.pos).copied().unwrap_or(0);
            e.keys = card_keys(&prep.plan, card, card.usage, req, prep.norm, None, frag);
        }
    }
    if let Some(tied) = scratch.order.get_mut(sure..ties_end) {
        tied.sort_by(|a, b| cmp_entries(node, a, b));
    }
    scratch.order.truncate(need);
    let mut sums = node.sums;
    scratch.final_usage.clone_from(&scratch.before);
    let mut delta_sum: i128 = 0;
    for e in &scratch.order {
        let Some(card) = node.cards.get(e.pos) else {
            continue;
        };
        let b = CardUsage {
            used: 1,
            used_mem_mib: req.booked_mem(card),
            used_cores: req.cores,
        };
        if let Some(u) = scratch.final_usage.get_mut(e.pos) {
            u.used = u.used.saturating_add(1);
            u.used_mem_mib = u.used_mem_mib.saturating_add(b.used_mem_mib);
            u.used_cores = u.used_cores.saturating_add(b.used_cores);
        }
        sums.used += 1;
        sums.used_cores += u64::from(b.used_cores);
        sums.used_mem = sums.used_mem.saturating_add(b.used_mem_mib);
        delta_sum += scratch.deltas.get(e.pos).copied().unwrap_or(0);
    }
    let host_changes = node.host.is_some() && prep.workload.host != Default::default();
    let weighted_after = if need == 1 && !host_changes {
        u128::try_from(i128::try_from(weighted_before).unwrap_or(i128::MAX) + delta_sum)
            .unwrap_or(0)
    } else {
        let host = host_after(node.host, prep.workload.host);
        mix.measure(node, &scratch.final_usage, host, &mut scratch.frag)
    };
    let booked = sums.used_cores.saturating_sub(node.sums.used_cores);
    Some(Ok(score_from_sums(&sums)
        .with_fragmentation(Fragmentation {
            weighted_before,
            weighted_after,
            total_weight: mix.total_weight(),
        })
        .with_host_match(
            node.host,
            prep.workload.host.cpu_milli,
            free_gpu,
            booked,
        )))
}
