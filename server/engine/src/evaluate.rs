//! Tentative placement of a whole workload on one node: init containers (peak rule), app
//! containers, the node score after placement (`docs/placement-semantics.md` sections 6 and 7).

use crate::explain::{ContainerExplanation, FragmentationExplanation, NodeExplanation};
use crate::fgd_lone::{self, LoneScratch};
use crate::fit::{FitScratch, LoneFit, Pick, Prepared, add_usage, lone_fit, place_container};
use crate::frag::{FragScratch, Fragmentation, host_after};
use crate::model::{CardUsage, Node};
use crate::reason::NodeFailure;
use crate::score::{NodeScore, node_score, score_from_sums};

/// Reusable buffers for evaluating many nodes.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    pub(crate) fit: FitScratch,
    base: Vec<CardUsage>,
    work: Vec<CardUsage>,
    peak: Vec<CardUsage>,
    /// Usage of the node's cards after the last successful evaluation.
    pub(crate) final_usage: Vec<CardUsage>,
    /// Cards chosen in the last successful evaluation (when picks were asked for).
    pub(crate) picks: Vec<Pick>,
    discard: Vec<Pick>,
    /// The fragmentation measure's buffers and the node's usage as it is (node policy `fgd`).
    frag: FragScratch,
    before: Vec<CardUsage>,
    /// The lone-container shortcut under fgd (section 12.3).
    lone: LoneScratch,
}

/// Outcome of one node.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum NodeOutcome {
    Fit(NodeScore),
    Fail(NodeFailure),
}

/// What to collect while evaluating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EvalMode {
    /// Record the chosen cards in `scratch.picks`.
    pub(crate) picks: bool,
    /// Evaluate as if every card were idle.
    pub(crate) idle: bool,
}

/// Evaluates `node` for the prepared workload. On a failure, also classifies whether it is
/// unresolvable (fails even with every card idle).
pub(crate) fn evaluate_node(
    node: &Node,
    prep: &Prepared<'_>,
    scratch: &mut Scratch,
    picks: bool,
    mut explain: Option<&mut NodeExplanation>,
) -> NodeOutcome {
    let outcome = evaluate_once(
        node,
        prep,
        scratch,
        EvalMode { picks, idle: false },
        explain.as_deref_mut(),
    );
    if let Some(ex) = explain.as_deref_mut() {
        scratch.fit.quota.explain(ex);
    }
    if let (Some(ex), Some(mix)) = (explain, prep.mix.as_ref()) {
        let before = node.cards.iter().map(|c| c.usage).collect::<Vec<_>>();
        let after = matches!(outcome, NodeOutcome::Fit(_)).then(|| {
            mix.explain(
                node,
                &scratch.final_usage,
                host_after(node.host, prep.workload.host),
            )
        });
        ex.fragmentation = Some(FragmentationExplanation {
            total_weight: mix.total_weight(),
            before: mix.explain(node, &before, node.host),
            after,
        });
    }
    match outcome {
        NodeOutcome::Fit(score) if prep.node_fgd && score.fragmentation.is_none() => {
            NodeOutcome::Fit(with_fragmentation(node, prep, scratch, score))
        }
        NodeOutcome::Fail(mut failure) => {
            let idle = evaluate_once(
                node,
                prep,
                scratch,
                EvalMode {
                    picks: false,
                    idle: true,
                },
                None,
            );
            failure.unresolvable = matches!(idle, NodeOutcome::Fail(_));
            NodeOutcome::Fail(failure)
        }
        fit => fit,
    }
}

pub(crate) fn evaluate_once(
    node: &Node,
    prep: &Prepared<'_>,
    scratch: &mut Scratch,
    mode: EvalMode,
    mut explain: Option<&mut NodeExplanation>,
) -> NodeOutcome {
    if let (Some(position), false, None, false) =
        (prep.fgd_lone(), mode.picks, explain.as_ref(), mode.idle)
        && let Some(req) = prep.workload.containers.get(position)
        && let Some(outcome) = fgd_lone::evaluate(node, position, req, prep, &mut scratch.lone)
    {
        return match outcome {
            Ok(score) => NodeOutcome::Fit(score),
            Err(failure) => NodeOutcome::Fail(failure),
        };
    }
    // Under node policy fgd the node's measure after needs the cards chosen (the shortcut
    // above, or the full path); an idle evaluation only classifies a failure.
    let lone = prep.lone.filter(|_| !prep.node_fgd || mode.idle);
    if let (Some(position), false, None) = (lone, mode.picks, explain.as_ref())
        && let Some(req) = prep.workload.containers.get(position)
    {
        let fit = if prep.lone_quota.is_some() {
            lone_fit::<true>(node, mode.idle, req, prep)
        } else {
            lone_fit::<false>(node, mode.idle, req, prep)
        };
        match fit {
            Err(reasons) => {
                return NodeOutcome::Fail(NodeFailure {
                    container_position: position,
                    reasons,
                    cards_on_node: u32::try_from(node.cards.len()).unwrap_or(u32::MAX),
                    unresolvable: false,
                });
            }
            Ok(LoneFit::Uniform { booked_mem }) => {
                let k = u64::from(req.gpus);
                let mut sums = node.sums;
                if mode.idle {
                    (sums.used, sums.used_cores, sums.used_mem) = (0, 0, 0);
                }
                sums.used += k;
                sums.used_cores += k * u64::from(req.cores);
                sums.used_mem = sums.used_mem.saturating_add(booked_mem.saturating_mul(k));
                return NodeOutcome::Fit(score_from_sums(&sums));
            }
            Ok(LoneFit::Varying) => {}
        }
    }
    let cards_on_node = u32::try_from(node.cards.len()).unwrap_or(u32::MAX);
    scratch.fit.begin(mode.idle);
    let fill = |v: &mut Vec<CardUsage>| {
        v.clear();
        v.extend(node.cards.iter().map(|c| {
            if mode.idle {
                CardUsage::default()
            } else {
                c.usage
            }
        }));
    };
    scratch.picks.clear();
    scratch.fit.quota.start(prep.workload, node.cards.len());
    let containers = &prep.workload.containers;
    let has_init = containers.iter().any(|c| c.init && c.gpus > 0);
    if has_init {
        fill(&mut scratch.base);
        scratch.peak.clone_from(&scratch.base);
    }
    // Init containers one at a time against the node without anything else of this workload,
    // then the app containers one after another.
    let mut app_started = false;
    for (position, req) in containers.iter().enumerate() {
        if req.gpus == 0 {
            continue;
        }
        if req.init {
            scratch.work.clone_from(&scratch.base);
        } else if !app_started {
            fill(&mut scratch.work);
            // MIG instances of init containers stay booked (section 11.5).
            if !scratch.fit.mig_taken.is_empty() {
                book_mig(&mut scratch.work, &scratch.fit.mig_taken);
            }
            app_started = true;
        }
        let mig_before = scratch.fit.mig_taken.len();
        let mut card_ex = explain.as_ref().map(|_| Vec::new());
        let sink = if mode.picks {
            &mut scratch.picks
        } else {
            &mut scratch.discard
        };
        let placed = place_container(
            node,
            &mut scratch.work,
            position,
            req,
            prep,
            &mut scratch.fit,
            sink,
            card_ex.as_mut(),
        );
        scratch.discard.clear();
        if let (Some(ex), Some(cards)) = (explain.as_deref_mut(), card_ex) {
            ex.containers.push(ContainerExplanation { position, cards });
        }
        if let Err(reasons) = placed {
            return NodeOutcome::Fail(NodeFailure {
                container_position: position,
                reasons,
                cards_on_node,
                unresolvable: false,
            });
        }
        if req.init {
            for (p, w) in scratch.peak.iter_mut().zip(&scratch.work) {
                *p = p.max(*w);
            }
            // The next init containers meet this one's MIG instances.
            let taken = scratch.fit.mig_taken.get(mig_before..).unwrap_or_default();
            book_mig(&mut scratch.base, taken);
        }
    }
    if !app_started {
        fill(&mut scratch.work);
    }
    scratch.final_usage.clear();
    if has_init {
        scratch.final_usage.extend(
            scratch
                .work
                .iter()
                .zip(&scratch.peak)
                .map(|(w, p)| w.max(*p)),
        );
        return NodeOutcome::Fit(node_score(&node.cards, &scratch.final_usage));
    }
    std::mem::swap(&mut scratch.final_usage, &mut scratch.work);
    NodeOutcome::Fit(node_score(&node.cards, &scratch.final_usage))
}

/// The node score with the node's fragmentation before and after the placement whose final
/// usage is in `scratch` (section 12.3); a workload without a mix measures 0 everywhere.
fn with_fragmentation(
    node: &Node,
    prep: &Prepared<'_>,
    scratch: &mut Scratch,
    score: NodeScore,
) -> NodeScore {
    let Some(mix) = prep.mix.as_ref() else {
        return score.with_fragmentation(Fragmentation {
            weighted_before: 0,
            weighted_after: 0,
            total_weight: 0,
        });
    };
    scratch.before.clear();
    scratch.before.extend(node.cards.iter().map(|c| c.usage));
    let weighted_before = mix.measure(node, &scratch.before, node.host, &mut scratch.frag);
    let free_gpu = scratch.frag.free_total();
    let booked: u64 = scratch
        .final_usage
        .iter()
        .zip(&scratch.before)
        .map(|(a, b)| u64::from(a.used_cores.saturating_sub(b.used_cores)))
        .sum();
    let host = host_after(node.host, prep.workload.host);
    let weighted_after = mix.measure(node, &scratch.final_usage, host, &mut scratch.frag);
    score
        .with_fragmentation(Fragmentation {
            weighted_before,
            weighted_after,
            total_weight: mix.total_weight(),
        })
        .with_host_match(node.host, prep.workload.host.cpu_milli, free_gpu, booked)
}

/// Adds the usage of MIG instances chosen in this evaluation to `usage` (by card position).
#[inline(never)]
fn book_mig(usage: &mut [CardUsage], taken: &[crate::mig::choose::MigTaken]) {
    for t in taken {
        if let Some(u) = usage.get_mut(t.card) {
            *u = add_usage(*u, t.choice.booked);
        }
    }
}
