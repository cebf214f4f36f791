//! The extender's answers built from the service's: `Filter` → `ExtenderFilterResult`, `Score`
//! → `HostPriorityList`. Pure functions over [`crate::extender_v1`] and the v1 API types.

use std::collections::BTreeMap;

use gpusched_client::v1;

use crate::extender_v1::{ExtenderArgs, ExtenderFilterResult, HostPriority};

/// The filter answer when every candidate passes (pods without GPU requests).
pub fn pass_all(args: &ExtenderArgs) -> ExtenderFilterResult {
    ExtenderFilterResult {
        nodes: args.nodes.clone(),
        node_names: if args.nodes.is_some() && args.node_names.is_none() {
            None
        } else {
            Some(args.candidates())
        },
        ..ExtenderFilterResult::default()
    }
}

/// An error answer.
pub fn filter_error(message: impl Into<String>) -> ExtenderFilterResult {
    ExtenderFilterResult {
        error: message.into(),
        ..ExtenderFilterResult::default()
    }
}

/// The filter answer for a pod that no node can ever take as it is (the service rejected its
/// request as invalid, e.g. a bad annotation): every candidate fails unresolvable with `reason`,
/// which names the key. kube-scheduler then marks the pod unschedulable with the reason
/// (PodScheduled=False, reason Unschedulable, and a FailedScheduling event) and parks it until
/// something changes, instead of the error path's retry after every backoff (~10 s, forever).
pub fn invalid_pod(args: &ExtenderArgs, reason: &str) -> ExtenderFilterResult {
    let mut out = ExtenderFilterResult {
        failed_and_unresolvable_nodes: args
            .candidates()
            .into_iter()
            .map(|n| (n, reason.to_owned()))
            .collect(),
        ..ExtenderFilterResult::default()
    };
    if let Some(list) = &args.nodes
        && args.node_names.is_none()
    {
        let mut list = list.clone();
        if let Some(items) = list.get_mut("items").and_then(|i| i.as_array_mut()) {
            items.clear();
        }
        out.nodes = Some(list);
    } else {
        out.node_names = Some(Vec::new());
    }
    out
}

/// Builds the filter answer from the service's Filter answer and the nodes the shim left out
/// (no readable inventory, not in the cache yet).
pub fn filter_result(
    args: &ExtenderArgs,
    resp: &v1::FilterResponse,
    unusable: &[(String, String, bool)],
) -> ExtenderFilterResult {
    let mut out = ExtenderFilterResult::default();
    for f in &resp.failed_nodes {
        let msg = if f.message.is_empty() {
            "cannot host the pod".to_owned()
        } else {
            f.message.clone()
        };
        if f.unresolvable {
            out.failed_and_unresolvable_nodes
                .insert(f.node_name.clone(), msg);
        } else {
            out.failed_nodes.insert(f.node_name.clone(), msg);
        }
    }
    for (name, msg, unresolvable) in unusable {
        if *unresolvable {
            out.failed_and_unresolvable_nodes
                .insert(name.clone(), msg.clone());
        } else {
            out.failed_nodes.insert(name.clone(), msg.clone());
        }
    }
    let feasible: std::collections::HashSet<&str> = resp
        .feasible_node_names
        .iter()
        .map(String::as_str)
        .collect();
    // Keep kube-scheduler's order of candidates.
    let names: Vec<String> = args
        .candidates()
        .into_iter()
        .filter(|n| feasible.contains(n.as_str()))
        .collect();
    if let Some(list) = &args.nodes
        && args.node_names.is_none()
    {
        let mut list = list.clone();
        if let Some(items) = list.get_mut("items").and_then(|i| i.as_array_mut()) {
            items.retain(|n| {
                n.pointer("/metadata/name")
                    .and_then(|v| v.as_str())
                    .is_some_and(|name| feasible.contains(name))
            });
        }
        out.nodes = Some(list);
    } else {
        out.node_names = Some(names);
    }
    out
}

/// Rescales the service's node scores (normalized 0..100, most preferred first) to the
/// extender's 0..10. The service's first choice alone gets 10 (others at most 9), so that
/// kube-scheduler, whose own score plugins are outweighed by the extender weight, lands on the
/// node `Allocate` would choose, ties included (the service breaks ties by name; kube-scheduler
/// would break them at random). Candidates the service did not score get 0.
pub fn priorities(candidates: &[String], scores: &[v1::NodeScore]) -> Vec<HostPriority> {
    let mut by_node: BTreeMap<&str, i64> = BTreeMap::new();
    for (i, s) in scores.iter().enumerate() {
        let scaled = (i64::from(s.normalized_score.min(100)) + 5) / 10;
        let score = if i == 0 { 10 } else { scaled.min(9) };
        by_node.entry(s.node_name.as_str()).or_insert(score);
    }
    candidates
        .iter()
        .map(|n| HostPriority {
            host: n.clone(),
            score: by_node.get(n.as_str()).copied().unwrap_or(0),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn an_invalid_pod_fails_every_candidate_unresolvable() {
        let args = ExtenderArgs {
            node_names: Some(vec!["n1".into(), "n2".into()]),
            ..ExtenderArgs::default()
        };
        let r = invalid_pod(
            &args,
            "annotations[\"hami.io/device-scoring-weights\"]: bad",
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["NodeNames"], json!([]));
        assert_eq!(
            v["FailedAndUnresolvableNodes"]["n2"],
            "annotations[\"hami.io/device-scoring-weights\"]: bad"
        );
        assert_eq!(v["Error"], "");
        assert!(r.failed_nodes.is_empty());
        // Node-list mode: the list comes back empty.
        let listed = ExtenderArgs {
            nodes: Some(json!({"items": [{"metadata": {"name": "n1"}}]})),
            ..ExtenderArgs::default()
        };
        let r = invalid_pod(&listed, "bad");
        assert_eq!(r.nodes.unwrap()["items"], json!([]));
        assert_eq!(r.failed_and_unresolvable_nodes["n1"], "bad");
    }

    #[test]
    fn filter_result_uses_go_field_names_and_splits_unresolvable() {
        let args = ExtenderArgs {
            node_names: Some(vec!["n3".into(), "n1".into(), "n2".into(), "cpu".into()]),
            ..ExtenderArgs::default()
        };
        let resp = v1::FilterResponse {
            feasible_node_names: vec!["n1".into(), "n3".into()],
            failed_nodes: vec![
                v1::FailedNode {
                    node_name: "n2".into(),
                    message: "4/4 CardInsufficientMemory".into(),
                    unresolvable: false,
                    ..Default::default()
                },
                v1::FailedNode {
                    node_name: "n4".into(),
                    message: "NodeInsufficientDevice".into(),
                    unresolvable: true,
                    ..Default::default()
                },
            ],
            requests_gpu: true,
            ..Default::default()
        };
        let unusable = vec![("cpu".to_owned(), "no GPU inventory".to_owned(), true)];
        let r = filter_result(&args, &resp, &unusable);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v,
            json!({
                "NodeNames": ["n3", "n1"],
                "FailedNodes": {"n2": "4/4 CardInsufficientMemory"},
                "FailedAndUnresolvableNodes": {"n4": "NodeInsufficientDevice", "cpu": "no GPU inventory"},
                "Error": ""
            })
        );
        // Node objects in, node objects out.
        let args = ExtenderArgs {
            nodes: Some(
                json!({"items": [{"metadata": {"name": "n1"}}, {"metadata": {"name": "n2"}}]}),
            ),
            ..ExtenderArgs::default()
        };
        let r = filter_result(&args, &resp, &[]);
        assert_eq!(
            r.nodes.unwrap()["items"],
            json!([{"metadata": {"name": "n1"}}])
        );
        assert!(r.node_names.is_none());
        let all = pass_all(&ExtenderArgs {
            node_names: Some(vec!["a".into()]),
            ..ExtenderArgs::default()
        });
        assert_eq!(
            serde_json::to_value(all).unwrap(),
            json!({"NodeNames": ["a"], "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": ""})
        );
        let e = serde_json::to_value(filter_error("bad")).unwrap();
        assert_eq!(e["Error"], "bad");
    }

    #[test]
    fn priorities_rescale_and_keep_the_services_choice_on_top() {
        let s = |n: &str, v: u32| v1::NodeScore {
            fragmentation: None,
            node_name: n.into(),
            normalized_score: v,
            raw_score: 0.0,
        };
        let cands: Vec<String> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let p = priorities(&cands, &[s("b", 100), s("a", 100), s("c", 54), s("d", 0)]);
        let got: Vec<(&str, i64)> = p.iter().map(|h| (h.host.as_str(), h.score)).collect();
        assert_eq!(got, vec![("a", 9), ("b", 10), ("c", 5), ("d", 0), ("e", 0)]);
        assert_eq!(
            serde_json::to_value(&p[1]).unwrap(),
            json!({"Host": "b", "Score": 10})
        );
        assert!(priorities(&cands, &[]).iter().all(|h| h.score == 0));
    }
}
