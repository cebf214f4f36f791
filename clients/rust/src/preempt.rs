//! Reading a `Preempt` answer (docs/placement-semantics.md 9.5).

use gpusched_api::v1;

/// The victims of the node the service chose, when its choice is to evict (None for "not
/// needed", "no candidate", or an answer whose chosen node carries no victims).
pub fn chosen_victims(resp: &v1::PreemptResponse) -> Option<&v1::Victims> {
    if resp.choice != v1::PreemptChoiceKind::Evict as i32 {
        return None;
    }
    match resp
        .nodes
        .iter()
        .find(|n| n.node_name == resp.node_name)?
        .verdict
        .as_ref()?
    {
        v1::node_preemption::Verdict::Victims(v) => Some(v),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chosen_nodes_victims_only_when_evicting() {
        let node = |name: &str, verdict| v1::NodePreemption {
            node_name: name.into(),
            verdict: Some(verdict),
            ..v1::NodePreemption::default()
        };
        let victims = v1::Victims {
            ids: vec!["a".into()],
            ..v1::Victims::default()
        };
        let mut resp = v1::PreemptResponse {
            nodes: vec![
                node(
                    "n1",
                    v1::node_preemption::Verdict::Victims(v1::Victims::default()),
                ),
                node("n2", v1::node_preemption::Verdict::Victims(victims.clone())),
            ],
            choice: v1::PreemptChoiceKind::Evict as i32,
            node_name: "n2".into(),
            ..v1::PreemptResponse::default()
        };
        assert_eq!(chosen_victims(&resp), Some(&victims));
        resp.node_name = "n3".into();
        assert_eq!(chosen_victims(&resp), None);
        resp.node_name = "n2".into();
        resp.choice = v1::PreemptChoiceKind::NotNeeded as i32;
        assert_eq!(chosen_victims(&resp), None);
    }
}
