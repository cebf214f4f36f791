//! Which node to preempt on, when the engine picks (`docs/placement-semantics.md` section
//! 9.4): kube-scheduler's `pickOneNodeForPreemption` order, then the node policy's score and
//! the name.

use std::cmp::Ordering;

use super::answer::{NodePreemption, PreemptChoice, PreemptVerdict, Victims};
use crate::decide::preference;
use crate::model::NodeId;
use crate::policy::NodePolicy;
use crate::score::{prefer, preference_value};

/// The choice over every node's answer (in name order), and each candidate's normalised
/// preference among the candidates set on its placement.
pub(crate) fn choose(nodes: &mut [NodePreemption], policy: NodePolicy) -> PreemptChoice {
    if nodes
        .iter()
        .any(|n| matches!(n.verdict, PreemptVerdict::NotNeeded(_)))
    {
        return PreemptChoice::NotNeeded;
    }
    let values = nodes
        .iter()
        .filter_map(|n| n.victims())
        .map(|v| preference_value(policy, &v.placement.score));
    let (min, max) = values.fold((i128::MAX, i128::MIN), |(lo, hi), k| (lo.min(k), hi.max(k)));
    let mut best: Option<(NodeId, &Victims)> = None;
    for n in nodes.iter_mut() {
        let PreemptVerdict::Victims(v) = &mut n.verdict else {
            continue;
        };
        v.placement.normalized = preference(preference_value(policy, &v.placement.score), min, max);
        let v: &Victims = v;
        if best.is_none_or(|(id, b)| better(policy, (n.node, v), (id, b)) == Ordering::Less) {
            best = Some((n.node, v));
        }
    }
    best.map_or(PreemptChoice::NoCandidate, |(id, _)| {
        PreemptChoice::Evict(id)
    })
}

/// `Less` when `a` is the better node to preempt on. Handles order like names.
fn better(policy: NodePolicy, a: (NodeId, &Victims), b: (NodeId, &Victims)) -> Ordering {
    let (sa, sb) = (&a.1.summary, &b.1.summary);
    sa.budget_violations
        .cmp(&sb.budget_violations)
        .then(sa.highest_priority.cmp(&sb.highest_priority))
        .then(sa.offset_priority_sum.cmp(&sb.offset_priority_sum))
        .then(sa.count.cmp(&sb.count))
        .then(
            sb.earliest_start_of_highest_ms
                .cmp(&sa.earliest_start_of_highest_ms),
        )
        .then(prefer(policy, &a.1.placement.score, &b.1.placement.score))
        .then(a.0.cmp(&b.0))
}
