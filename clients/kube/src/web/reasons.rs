//! Why no node takes a pod, grouped: the service's typed reasons of every failed node (a
//! `FilterResponse`'s `failed_nodes`) and the nodes the shim keeps back, one group per reason
//! with the number of nodes, the cards it applied to and the first node names.

use std::collections::BTreeMap;

use gpusched_client::v1;

use crate::web::model::ReasonGroup;

/// How many node names a group lists.
pub const NAMES_PER_GROUP: usize = 8;

/// A reason's name: HAMi's (`CardInsufficientMemory`), else the enum's.
fn reason_name(r: &v1::ReasonCount) -> String {
    if !r.name.is_empty() {
        return r.name.clone();
    }
    match v1::Reason::try_from(r.reason) {
        Ok(x) => x.as_str_name().trim_start_matches("REASON_").to_owned(),
        Err(_) => format!("Reason{}", r.reason),
    }
}

/// The kind of a node the shim keeps back, from the reason it gives (`view::Snapshot`'s
/// `unusable`): an invalid inventory (`InvalidNode: ...`), an unreadable one, or a node the
/// informer has not shown yet.
fn kept_back_kind(reason: &str) -> &'static str {
    if reason.starts_with("InvalidNode") {
        "InvalidNode"
    } else if reason.contains("GPU inventory") {
        "UnreadableInventory"
    } else {
        "NotInCache"
    }
}

/// The groups, most nodes first (then by name); `unusable` is (node, reason, unresolvable).
pub fn group(failed: &[v1::FailedNode], unusable: &[(String, String, bool)]) -> Vec<ReasonGroup> {
    let mut groups: BTreeMap<(String, bool), ReasonGroup> = BTreeMap::new();
    let mut add = |reason: String, unresolvable: bool, node: &str, cards: u64| {
        let g = groups
            .entry((reason.clone(), unresolvable))
            .or_insert_with(|| ReasonGroup {
                reason,
                unresolvable,
                ..ReasonGroup::default()
            });
        g.nodes += 1;
        g.cards += cards;
        if g.node_names.len() < NAMES_PER_GROUP {
            g.node_names.push(node.to_owned());
        }
    };
    for f in failed {
        for r in &f.reasons {
            add(
                reason_name(r),
                f.unresolvable,
                &f.node_name,
                u64::from(r.count),
            );
        }
    }
    for (node, reason, unresolvable) in unusable {
        add(kept_back_kind(reason).to_owned(), *unresolvable, node, 0);
    }
    let mut out: Vec<ReasonGroup> = groups.into_values().collect();
    out.sort_by(|a, b| b.nodes.cmp(&a.nodes).then(a.reason.cmp(&b.reason)));
    for g in &mut out {
        g.node_names.sort();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(
        node: &str,
        unresolvable: bool,
        reasons: &[(v1::Reason, u32, &str)],
    ) -> v1::FailedNode {
        v1::FailedNode {
            node_name: node.into(),
            reasons: reasons
                .iter()
                .map(|&(reason, count, name)| v1::ReasonCount {
                    reason: reason as i32,
                    count,
                    name: name.into(),
                })
                .collect(),
            unresolvable,
            ..v1::FailedNode::default()
        }
    }

    #[test]
    fn nodes_are_grouped_by_typed_reason() {
        use v1::Reason as R;
        let failed = [
            failed(
                "n1",
                false,
                &[
                    (R::CardInsufficientMemory, 3, "CardInsufficientMemory"),
                    (R::CardCordoned, 1, "CardCordoned"),
                ],
            ),
            failed(
                "n2",
                false,
                &[(R::CardInsufficientMemory, 4, "CardInsufficientMemory")],
            ),
            failed("n3", true, &[(R::NodeInsufficientDevice, 1, "")]),
        ];
        let unusable = [
            (
                "bad".to_owned(),
                "InvalidNode: cards[1].id DUPLICATE_ID: x".to_owned(),
                true,
            ),
            (
                "new".to_owned(),
                "node not in gpusched-kube's cache yet".to_owned(),
                false,
            ),
        ];
        let got: Vec<(String, bool, usize, u64, Vec<String>)> = group(&failed, &unusable)
            .into_iter()
            .map(|g| (g.reason, g.unresolvable, g.nodes, g.cards, g.node_names))
            .collect();
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            got,
            vec![
                (
                    "CardInsufficientMemory".into(),
                    false,
                    2,
                    7,
                    s(&["n1", "n2"])
                ),
                ("CardCordoned".into(), false, 1, 1, s(&["n1"])),
                ("InvalidNode".into(), true, 1, 0, s(&["bad"])),
                ("NODE_INSUFFICIENT_DEVICE".into(), true, 1, 1, s(&["n3"])),
                ("NotInCache".into(), false, 1, 0, s(&["new"])),
            ]
        );
    }

    #[test]
    fn a_group_lists_only_the_first_names() {
        let many: Vec<v1::FailedNode> = (0..20)
            .map(|i| {
                failed(
                    &format!("n{i:02}"),
                    false,
                    &[(v1::Reason::CardNotHealth, 1, "CardNotHealth")],
                )
            })
            .collect();
        let g = group(&many, &[]);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].nodes, 20);
        assert_eq!(g[0].node_names.len(), NAMES_PER_GROUP);
        assert_eq!(g[0].node_names[0], "n00");
    }
}
