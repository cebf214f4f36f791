//! A pod's decision explained by the service: its node ranking (Score) and, on the node it is
//! bound to (or the node the service would choose now), every card in visiting order with its
//! score terms and check outcome (Allocate with explanations, restricted to that node as the
//! bind is). The shim keeps no record of past calls: the service is asked again on the current
//! view with the pod's own booking released, which is the decision as it was when nothing else
//! changed since, and is compared with the cards the pod's annotation records.

use gpusched_client::v1;
use k8s_openapi::api::core::v1::Pod;

use crate::translate;
use crate::web::ask::Ask;
use crate::web::model::{
    Assigned, CardScore, ContainerCards, Explanation, NodeDecision, RankedNode, Verdict,
};
use crate::web::pending::{self, pod_key};

/// How many nodes of the ranking are shown (the bound node is added when it is further down).
pub const RANKED: usize = 10;

/// Scores closer than this are the same score (the service compares `round(1e9 * score)`).
const SAME: f64 = 1e-9;

/// The policy an answer used, in words: `node binpack, gpu spread, weights slot=1 core=1
/// memory=1`.
pub fn policy_text(p: Option<&v1::EffectivePolicy>) -> String {
    let Some(p) = p else {
        return String::new();
    };
    let node = v1::NodePolicy::try_from(p.node_policy)
        .map(|n| {
            n.as_str_name()
                .trim_start_matches("NODE_POLICY_")
                .to_lowercase()
        })
        .unwrap_or_default();
    let mut s = format!("node {node}, gpu {}", p.gpu_policy_text);
    if let Some(w) = &p.scoring_weights {
        s.push_str(&format!(
            ", weights slot={} core={} memory={}",
            w.slot, w.core, w.memory
        ));
    }
    if p.numa_bind {
        s.push_str(", numa-bind");
    }
    s
}

/// The cards a pod's decision annotation records, labelled by container name (init containers
/// first, as HAMi writes them).
pub fn recorded(pod: &Pod, annotation_key: &str) -> Vec<Assigned> {
    let Some(text) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotation_key))
    else {
        return Vec::new();
    };
    let Ok(segments) = gpusched_hami::decode_pod_devices(text) else {
        return Vec::new();
    };
    let names: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers))
        .map(|c| c.name.clone())
        .collect();
    segments
        .iter()
        .enumerate()
        .flat_map(|(i, seg)| {
            let container = names.get(i).cloned().unwrap_or_else(|| format!("#{i}"));
            seg.iter().map(move |b| Assigned {
                container: container.clone(),
                card: b.uuid.clone(),
                mem_mib: b.mem_mib,
                cores: b.cores,
            })
        })
        .collect()
}

/// The cards an Allocate answer gives, labelled by container name.
pub fn assigned(r: &v1::AllocationResult) -> Vec<Assigned> {
    r.containers
        .iter()
        .flat_map(|c| {
            c.cards.iter().map(|k| Assigned {
                container: c.container_name.clone(),
                card: k.card_id.clone(),
                mem_mib: k.mem_mib,
                cores: k.cores_percent,
            })
        })
        .collect()
}

/// The service's ranking: the first [`RANKED`] nodes and `keep` wherever it is.
pub fn ranking(scores: &[v1::NodeScore], keep: Option<&str>) -> Vec<RankedNode> {
    let mut out = Vec::new();
    for (i, s) in scores.iter().enumerate() {
        let tie = i > 0 && (scores[i - 1].raw_score - s.raw_score).abs() < SAME;
        if i < RANKED || keep == Some(s.node_name.as_str()) {
            out.push(RankedNode {
                rank: i + 1,
                node: s.node_name.clone(),
                raw_score: s.raw_score,
                normalized: s.normalized_score,
                tie,
            });
        }
    }
    out
}

/// The card tables of one node's explanation.
pub fn decision(ex: &v1::NodeExplanation, raw_score: f64) -> NodeDecision {
    NodeDecision {
        node: ex.node_name.clone(),
        raw_score,
        containers: ex
            .containers
            .iter()
            .map(|c| {
                let mut cards: Vec<CardScore> = c
                    .cards
                    .iter()
                    .map(|k| CardScore {
                        card: k.card_id.clone(),
                        index: k.card_index,
                        numa: k.numa,
                        visited: k.visited,
                        visit: k.visit_position,
                        slot_term: k.slot_term,
                        core_term: k.core_term,
                        memory_term: k.memory_term,
                        score: k.score,
                        chosen: k.chosen,
                        rejected: match v1::Reason::try_from(k.rejected) {
                            Ok(v1::Reason::Unspecified) => String::new(),
                            Ok(r) => r.as_str_name().trim_start_matches("REASON_").to_owned(),
                            Err(_) => format!("Reason{}", k.rejected),
                        },
                        tie: false,
                    })
                    .collect();
                let scores: Vec<f64> = cards
                    .iter()
                    .filter(|k| k.visited && k.rejected.is_empty())
                    .map(|k| k.score)
                    .collect();
                for k in cards
                    .iter_mut()
                    .filter(|k| k.visited && k.rejected.is_empty())
                {
                    k.tie = scores
                        .iter()
                        .filter(|s| (*s - k.score).abs() < SAME)
                        .count()
                        > 1;
                }
                ContainerCards {
                    name: c.container_name.clone(),
                    init: c.init,
                    cards,
                }
            })
            .collect(),
    }
}

/// The explanation of `pod`'s decision (or, for a pending pod, of where it would go now).
pub async fn explain(ask: &Ask<'_>, pod: &Pod) -> Explanation {
    let names = ask.view.names();
    let bound = translate::decided_node(pod, names);
    let mut out = Explanation {
        pod: pod_key(pod),
        bound_node: bound.clone(),
        recorded: recorded(pod, &names.annotations.devices_allocated),
        ..Explanation::default()
    };
    if !translate::requests_gpu(pod, names) {
        out.note = "the pod asks for no GPU resource: gpusched decides nothing for it".into();
        return out;
    }
    let (w, _) = ask.workload(pod);
    let snap = ask.candidates(pod);
    out.candidates = snap.nodes.len() + snap.unusable.len();
    let score = match ask.score(&w, &snap).await {
        Ok(s) => s,
        Err(v) => {
            out.verdict = Some(v);
            return out;
        }
    };
    out.policy = policy_text(score.effective_policy.as_ref());
    out.feasible = score.scores.len();
    out.ranking = ranking(&score.scores, bound.as_deref());
    let target = bound
        .clone()
        .or_else(|| score.scores.first().map(|s| s.node_name.clone()));
    let Some(target) = target else {
        // Fits nowhere: why, with the nearest miss.
        out.verdict = Some(pending::verdict(ask, pod).await.0);
        out.note = format!(
            "asked now: no node of the {} candidates can host the pod",
            out.candidates
        );
        return out;
    };
    match ask.allocate(&w, &snap, Some(&target), true).await {
        Ok(r) if r.placed => {
            let raw = r.node_score.as_ref().map_or(0.0, |s| s.raw_score);
            if let Some(ex) = r.explanations.iter().find(|e| e.node_name == target) {
                out.decision = Some(decision(ex, raw));
            }
            if bound.is_some() {
                out.matches_recorded = Some(assigned(&r) == out.recorded);
            }
        }
        Ok(r) => {
            let why = r
                .failed_nodes
                .first()
                .map_or_else(|| "not placed".to_owned(), |f| f.message.clone());
            out.verdict = Some(Verdict::Unknown {
                error: format!("{target} cannot host the pod now: {why}"),
            });
        }
        Err(v) => out.verdict = Some(v),
    }
    out.note = match &bound {
        Some(node) => format!(
            "asked again now with this pod's own booking released: the ranking is the \
             service's Score over the {} candidate nodes, the cards its Allocate on {node} \
             (restricted to it, as the bind is)",
            out.candidates
        ),
        None => format!(
            "pending: where the service would place it now (Score over the {} candidate \
             nodes, the cards its Allocate on the first)",
            out.candidates
        ),
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn score(n: &str, raw: f64, norm: u32) -> v1::NodeScore {
        v1::NodeScore {
            node_name: n.into(),
            raw_score: raw,
            normalized_score: norm,
            fragmentation: None,
        }
    }

    #[test]
    fn the_ranking_marks_ties_and_keeps_the_bound_node() {
        let mut scores = vec![score("a", 20.0, 100), score("b", 20.0, 100)];
        scores.extend((0..12).map(|i| score(&format!("n{i:02}"), 10.0 - f64::from(i), 50)));
        let r = ranking(&scores, Some("n11"));
        assert_eq!(r.len(), RANKED + 1);
        assert_eq!((r[0].node.as_str(), r[0].tie), ("a", false));
        assert_eq!((r[1].node.as_str(), r[1].tie), ("b", true));
        assert_eq!((r[2].node.as_str(), r[2].tie), ("n00", false));
        let last = r.last().map(|x| (x.rank, x.node.as_str()));
        assert_eq!(last, Some((14, "n11")));
        assert!(ranking(&scores, None).len() == RANKED);
    }

    #[test]
    fn cards_with_equal_scores_are_ties() {
        let card = |id: &str, score: f64, rejected: v1::Reason, chosen: bool| v1::CardExplanation {
            card_id: id.into(),
            score,
            rejected: rejected as i32,
            chosen,
            visited: true,
            ..v1::CardExplanation::default()
        };
        let ex = v1::NodeExplanation {
            node_name: "n".into(),
            containers: vec![v1::ContainerExplanation {
                container_name: "main".into(),
                init: false,
                cards: vec![
                    card("g0", 7.5, v1::Reason::Unspecified, true),
                    card("g1", 7.5, v1::Reason::Unspecified, false),
                    card("g2", 3.0, v1::Reason::Unspecified, false),
                    card("g3", 7.5, v1::Reason::CardCordoned, false),
                ],
            }],
            ..v1::NodeExplanation::default()
        };
        let d = decision(&ex, 12.0);
        let got: Vec<(&str, bool, &str)> = d.containers[0]
            .cards
            .iter()
            .map(|k| (k.card.as_str(), k.tie, k.rejected.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("g0", true, ""),
                ("g1", true, ""),
                ("g2", false, ""),
                ("g3", false, "CARD_CORDONED")
            ]
        );
    }

    #[test]
    fn policies_read_as_words() {
        let p = v1::EffectivePolicy {
            node_policy: v1::NodePolicy::Binpack as i32,
            gpu_policy: vec![],
            scoring_weights: Some(v1::ScoringWeights {
                slot: 1,
                core: 1,
                memory: 3,
            }),
            numa_bind: true,
            gpu_policy_text: "spread".into(),
        };
        assert_eq!(
            policy_text(Some(&p)),
            "node binpack, gpu spread, weights slot=1 core=1 memory=3, numa-bind"
        );
        assert_eq!(policy_text(None), "");
    }
}
