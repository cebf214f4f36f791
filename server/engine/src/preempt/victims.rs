//! One node: who must leave so that the pending workload fits (`docs/placement-semantics.md`
//! section 9.3, steps 1 to 6), every "fits" being the ordinary placement of `evaluate.rs`.

use std::cmp::Ordering;

use super::answer::{
    NodePreemption, NotCandidate, NotCandidateReason, PreemptVerdict, Reprieve, ReprieveOutcome,
    VictimSummary, Victims,
};
use super::input::{PlacedWorkload, Resident};
use crate::decide::{Stop, placement_on};
use crate::evaluate::{EvalMode, NodeOutcome, Scratch, evaluate_node, evaluate_once};
use crate::fit::Prepared;
use crate::model::{CardUsage, Node, NodeId};
use crate::reason::NodeFailure;

/// The pending workload as every node sees it.
pub(crate) struct Pending<'p, 'w> {
    pub(crate) prep: &'p Prepared<'w>,
    pub(crate) priority: i32,
    /// Two or more GPU app containers: the fit may not be monotone in usage (step 5).
    pub(crate) second_look: bool,
    pub(crate) explain: bool,
}

impl Pending<'_, '_> {
    /// Whether the workload's fit can need the second look (two or more GPU app containers).
    pub(crate) fn needs_second_look(prep: &Prepared<'_>) -> bool {
        prep.workload
            .containers
            .iter()
            .filter(|c| !c.init && c.gpus > 0)
            .count()
            >= 2
    }
}

/// Reprieve order (step 4): budget violators first, then higher priority, earlier start,
/// smaller id.
fn reprieve_order(a: &Resident, b: &Resident) -> Ordering {
    let (a, b) = (&a.workload, &b.workload);
    b.violates_budget
        .cmp(&a.violates_budget)
        .then_with(|| importance(a, b))
}

/// Importance (step 6): higher priority, then earlier start, then smaller id.
fn importance(a: &PlacedWorkload, b: &PlacedWorkload) -> Ordering {
    b.priority
        .cmp(&a.priority)
        .then(a.start_time_ms.cmp(&b.start_time_ms))
        .then_with(|| a.id.cmp(&b.id))
}

/// A node's answer, or `None` when `stop` asked to abandon during the second look.
pub(crate) fn node_preemption(
    node: &Node,
    id: NodeId,
    residents: &[Resident],
    pending: &Pending<'_, '_>,
    scratch: &mut Scratch,
    stop: Stop<'_>,
) -> Option<NodePreemption> {
    let mut eligible: Vec<&Resident> = residents
        .iter()
        .filter(|r| r.workload.priority < pending.priority)
        .collect();
    eligible.sort_by(|a, b| reprieve_order(a, b));
    let answer = |verdict, reprieves| NodePreemption {
        node: id,
        eligible: u32::try_from(eligible.len()).unwrap_or(u32::MAX),
        verdict,
        reprieves,
    };
    // Step 2: as it is.
    let failure = match evaluate_node(node, pending.prep, scratch, false, None) {
        NodeOutcome::Fit(score) => {
            return Some(answer(PreemptVerdict::NotNeeded(score), Vec::new()));
        }
        NodeOutcome::Fail(failure) => failure,
    };
    if eligible.is_empty() {
        let not = NotCandidate {
            reason: NotCandidateReason::NoLowerPriority,
            failure,
        };
        return Some(answer(PreemptVerdict::NotCandidate(not), Vec::new()));
    }
    // Step 3: every eligible workload gone.
    let mut usage = Held {
        usage: node.cards.iter().map(|c| c.usage).collect(),
        gone: Vec::new(),
        mig: eligible.iter().any(|r| !r.instances.is_empty()),
    };
    for r in &eligible {
        take(&mut usage, r);
    }
    let mut work = node.clone();
    let mut trial = usage.clone();
    if let Err(Some(failure)) = fits(&mut work, node, &trial, pending, scratch, true) {
        let not = NotCandidate {
            reason: NotCandidateReason::InsufficientAfterEviction,
            failure,
        };
        return Some(answer(PreemptVerdict::NotCandidate(not), Vec::new()));
    }
    // Step 4: put each back in reprieve order, keep it when the workload still fits. What
    // happened to each is recorded only for an explanation (then with the failure met).
    let why = pending.explain;
    let mut outcomes: Vec<ReprieveOutcome> = Vec::new();
    let mut victims: Vec<usize> = Vec::new();
    for (at, r) in eligible.iter().enumerate() {
        trial.clone_from(&usage);
        give(&mut trial, r);
        match fits(&mut work, node, &trial, pending, scratch, why) {
            Ok(()) => {
                std::mem::swap(&mut usage, &mut trial);
                outcomes.extend(why.then_some(ReprieveOutcome::Kept));
            }
            Err(failure) => {
                victims.push(at);
                outcomes.extend(failure.map(ReprieveOutcome::Evicted));
            }
        }
    }
    // Step 5: the second look, for a fit that is not monotone in usage.
    if pending.second_look {
        'rounds: loop {
            if stop() {
                return None;
            }
            for (v, &at) in victims.iter().enumerate() {
                let Some(r) = eligible.get(at) else { continue };
                trial.clone_from(&usage);
                give(&mut trial, r);
                if fits(&mut work, node, &trial, pending, scratch, false).is_ok() {
                    std::mem::swap(&mut usage, &mut trial);
                    if let Some(o) = outcomes.get_mut(at) {
                        *o = ReprieveOutcome::KeptAtSecondLook;
                    }
                    victims.remove(v);
                    continue 'rounds;
                }
            }
            break;
        }
    }
    // Step 6: the placement once the victims are gone.
    usage.apply(&mut work, node);
    let placement = match placement_on(&work, id, pending.prep, scratch, None) {
        Ok(placement) => placement,
        // Not reached: `usage` is the last state that fitted, and fitting is deterministic.
        Err(failure) => {
            let not = NotCandidate {
                reason: NotCandidateReason::InsufficientAfterEviction,
                failure,
            };
            return Some(answer(PreemptVerdict::NotCandidate(not), Vec::new()));
        }
    };
    let mut chosen: Vec<&Resident> = victims
        .iter()
        .filter_map(|&at| eligible.get(at).copied())
        .collect();
    chosen.sort_by(|a, b| importance(&a.workload, &b.workload));
    let reprieves = if why {
        eligible
            .iter()
            .zip(outcomes)
            .map(|(r, outcome)| Reprieve {
                id: r.workload.id.clone(),
                priority: r.workload.priority,
                violates_budget: r.workload.violates_budget,
                start_time_ms: r.workload.start_time_ms,
                outcome,
            })
            .collect()
    } else {
        Vec::new()
    };
    let victims = Victims {
        ids: chosen.iter().map(|r| r.workload.id.clone()).collect(),
        summary: summary(&chosen),
        placement,
    };
    Some(answer(PreemptVerdict::Victims(victims), reprieves))
}

/// What the node holds while victims are tried: each card's usage and the MIG instances taken
/// away with the workloads that held them.
#[derive(Debug)]
struct Held {
    usage: Vec<CardUsage>,
    /// `(card position, instance start)` of the instances taken away.
    gone: Vec<(usize, u32)>,
    /// Some eligible workload holds a MIG instance: layouts follow `gone`.
    mig: bool,
}

impl Clone for Held {
    fn clone(&self) -> Self {
        Held {
            usage: self.usage.clone(),
            gone: self.gone.clone(),
            mig: self.mig,
        }
    }

    /// Field by field, reusing the vectors (the reprieve copies the state once per workload).
    fn clone_from(&mut self, source: &Self) {
        self.usage.clone_from(&source.usage);
        self.gone.clone_from(&source.gone);
        self.mig = source.mig;
    }
}

impl Held {
    /// `work` (a copy of `base`) with this usage and, on MIG cards, `base`'s instances but the
    /// ones taken away (their slices are free: section 9.1).
    fn apply(&self, work: &mut Node, base: &Node) {
        work.set_usage(&self.usage);
        if !self.mig {
            return;
        }
        for (pos, (card, from)) in work.cards.iter_mut().zip(&base.cards).enumerate() {
            if let Some(layout) = from.mig.as_deref() {
                let mut l = layout.clone();
                l.instances
                    .retain(|i| !self.gone.contains(&(pos, i.placement.start)));
                card.mig = Some(Box::new(l));
            }
        }
    }
}

/// Whether the workload fits `work` (a copy of `base`) holding `held`; when it does not, the
/// node failure (classified unresolvable or not, as for any failed node) only when `why`:
/// without, one evaluation instead of two.
fn fits(
    work: &mut Node,
    base: &Node,
    held: &Held,
    pending: &Pending<'_, '_>,
    scratch: &mut Scratch,
    why: bool,
) -> Result<(), Option<NodeFailure>> {
    held.apply(work, base);
    let outcome = if why {
        evaluate_node(work, pending.prep, scratch, false, None)
    } else {
        let mode = EvalMode {
            picks: false,
            idle: false,
        };
        evaluate_once(work, pending.prep, scratch, mode, None)
    };
    match outcome {
        NodeOutcome::Fit(_) => Ok(()),
        NodeOutcome::Fail(failure) => Err(why.then_some(failure)),
    }
}

/// Takes a resident's bookings away (validated: never more than the card holds), and its MIG
/// instances.
fn take(held: &mut Held, r: &Resident) {
    held.gone.extend_from_slice(&r.instances);
    for &(pos, h) in &r.holds {
        if let Some(u) = held.usage.get_mut(pos) {
            u.used = u.used.saturating_sub(h.used);
            u.used_mem_mib = u.used_mem_mib.saturating_sub(h.used_mem_mib);
            u.used_cores = u.used_cores.saturating_sub(h.used_cores);
        }
    }
}

/// Puts a resident's bookings back, and its MIG instances.
fn give(held: &mut Held, r: &Resident) {
    held.gone.retain(|g| !r.instances.contains(g));
    for &(pos, h) in &r.holds {
        if let Some(u) = held.usage.get_mut(pos) {
            u.used = u.used.saturating_add(h.used);
            u.used_mem_mib = u.used_mem_mib.saturating_add(h.used_mem_mib);
            u.used_cores = u.used_cores.saturating_add(h.used_cores);
        }
    }
}

/// Rules 1 to 5 of the node choice over `victims` (not empty: a node with victims).
fn summary(victims: &[&Resident]) -> VictimSummary {
    let highest = victims
        .iter()
        .map(|r| r.workload.priority)
        .max()
        .unwrap_or(i32::MIN);
    VictimSummary {
        budget_violations: u32::try_from(
            victims
                .iter()
                .filter(|r| r.workload.violates_budget)
                .count(),
        )
        .unwrap_or(u32::MAX),
        highest_priority: highest,
        offset_priority_sum: victims.iter().map(|r| offset(r.workload.priority)).sum(),
        count: u32::try_from(victims.len()).unwrap_or(u32::MAX),
        earliest_start_of_highest_ms: victims
            .iter()
            .filter(|r| r.workload.priority == highest)
            .map(|r| r.workload.start_time_ms)
            .min()
            .unwrap_or(i64::MAX),
    }
}

/// `priority + 2^31`, at least 0 (kube-scheduler's offset).
fn offset(priority: i32) -> u128 {
    // i64 holds -2^31 + 2^31 = 0 ..= 2^31 - 1 + 2^31 exactly; never negative.
    u128::try_from(i64::from(priority) + (1i64 << 31)).unwrap_or(0)
}
