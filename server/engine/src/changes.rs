//! A snapshot built from another by changes: nodes removed by name, nodes added or replaced by
//! name. Used for candidate sets sent as a change to a set sent before (the service's node
//! sets); the result is the snapshot of the changed node list, so decisions on it are those on
//! the list sent in full. No node is copied; names stay sorted and unique by construction.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::model::{Node, NodeId, Snapshot};

/// Why a change does not apply (positions are in the caller's `removed` list).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    /// A removed name is not a node of the base snapshot.
    #[error("node {name:?} is not in the base set")]
    NotInBase {
        /// Position in `removed`.
        at: usize,
        /// The name.
        name: String,
    },
    /// A removed name is also a node of the changes.
    #[error("node {name:?} is both removed and sent")]
    RemovedAndSent {
        /// Position in `removed`.
        at: usize,
        /// The name.
        name: String,
    },
    /// A name is removed twice.
    #[error("node {name:?} is removed twice")]
    RemovedTwice {
        /// Position in `removed` of the second mention.
        at: usize,
        /// The name.
        name: String,
    },
}

impl Snapshot {
    /// This snapshot without the `removed` nodes, with each node of `changes` replacing the
    /// node of the same name or added. Every problem of `removed` is reported, in list order.
    /// Costs one pass over both snapshots plus `removed.len() * log` lookups.
    pub fn with_changes(
        &self,
        changes: &Snapshot,
        removed: &[&str],
    ) -> Result<Snapshot, Vec<ChangeError>> {
        let mut errors = Vec::new();
        let mut gone: Vec<(&str, usize)> = removed.iter().copied().zip(0..).collect();
        gone.sort_unstable();
        for w in 1..gone.len() {
            if gone[w].0 == gone[w - 1].0 {
                let (name, at) = gone[w];
                errors.push(ChangeError::RemovedTwice {
                    at,
                    name: name.to_owned(),
                });
            }
        }
        for &(name, at) in &gone {
            if self.id_of(name).is_none() {
                errors.push(ChangeError::NotInBase {
                    at,
                    name: name.to_owned(),
                });
            } else if changes.id_of(name).is_some() {
                errors.push(ChangeError::RemovedAndSent {
                    at,
                    name: name.to_owned(),
                });
            }
        }
        if !errors.is_empty() {
            errors.sort_by_key(|e| match e {
                ChangeError::NotInBase { at, .. }
                | ChangeError::RemovedAndSent { at, .. }
                | ChangeError::RemovedTwice { at, .. } => *at,
            });
            return Err(errors);
        }
        gone.dedup_by_key(|g| g.0);
        let base = &self.nodes;
        let new = &changes.nodes;
        let mut out: Vec<Arc<Node>> = Vec::with_capacity(base.len() + new.len());
        let (mut i, mut j, mut g) = (0usize, 0usize, 0usize);
        while i < base.len() || j < new.len() {
            let order = match (base.get(i), new.get(j)) {
                (Some(b), Some(n)) => b.name.cmp(&n.name),
                (Some(_), None) => Ordering::Less,
                _ => Ordering::Greater,
            };
            match order {
                Ordering::Less => {
                    let b = &base[i];
                    // Removed names are sorted and all in the base: advance in step.
                    if gone.get(g).is_some_and(|(name, _)| *name == b.name) {
                        g += 1;
                    } else {
                        out.push(b.clone());
                    }
                    i += 1;
                }
                Ordering::Equal => {
                    out.push(new[j].clone());
                    i += 1;
                    j += 1;
                }
                Ordering::Greater => {
                    out.push(new[j].clone());
                    j += 1;
                }
            }
        }
        Ok(Snapshot::sorted(out))
    }

    /// Puts `node` in place of the node behind `id` when both have the same name (so the name
    /// order, and every handle, stay as they were) and returns the node it replaced; else gives
    /// `node` back and changes nothing. A snapshot that differs from another in a few nodes of
    /// the same names can so be turned into a third without rebuilding its node list.
    pub fn replace_same_name(
        &mut self,
        id: NodeId,
        node: Arc<Node>,
    ) -> Result<Arc<Node>, Arc<Node>> {
        match self.nodes.get_mut(id.index()) {
            Some(slot) if slot.name == node.name => {
                self.cards = self.cards - slot.cards.len() + node.cards.len();
                Ok(std::mem::replace(slot, node))
            }
            _ => Err(node),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::model::{Card, NodeSpec};

    fn node(name: &str, mem: u32) -> NodeSpec {
        NodeSpec::new(
            name,
            vec![Card::new(format!("{name}-0"), 0, "T4", mem.into())],
        )
    }

    fn snap(nodes: &[(&str, u32)]) -> Snapshot {
        Snapshot::new(nodes.iter().map(|&(n, m)| node(n, m)).collect()).unwrap()
    }

    #[test]
    fn replaces_adds_and_removes_by_name() {
        let base = snap(&[("a", 1), ("b", 1), ("c", 1), ("e", 1)]);
        let changes = snap(&[("b", 2), ("d", 2), ("f", 2)]);
        let got = base.with_changes(&changes, &["c", "a"]).unwrap();
        let want = snap(&[("b", 2), ("d", 2), ("e", 1), ("f", 2)]);
        assert_eq!(got, want);
        // Unchanged nodes are shared, not copied.
        let e = base.node_named("e").unwrap();
        assert!(std::ptr::eq(got.node_named("e").unwrap(), e));
    }

    #[test]
    fn replacing_keeps_the_name_and_gives_back_a_stranger() {
        let mut s = snap(&[("a", 1), ("b", 1)]);
        let b = s.id_of("b").unwrap();
        let new_b = Arc::new(Node::new(node("b", 2)).unwrap());
        let old = s.replace_same_name(b, new_b.clone()).unwrap();
        assert_eq!(old.cards[0].total_mem_mib, 1);
        assert_eq!(s, snap(&[("a", 1), ("b", 2)]));
        // More cards under the same name: counted.
        let two = NodeSpec::new(
            "b",
            vec![Card::new("b-0", 0, "T4", 1), Card::new("b-1", 1, "T4", 1)],
        );
        s.replace_same_name(b, Arc::new(Node::new(two).unwrap()))
            .unwrap();
        assert_eq!(s.card_count(), 3);
        // Another name, or a handle of a larger snapshot: nothing changes.
        let c = Arc::new(Node::new(node("c", 2)).unwrap());
        assert!(s.replace_same_name(b, c.clone()).is_err());
        assert!(s.replace_same_name(NodeId::at(7).unwrap(), new_b).is_err());
        assert_eq!(s.card_count(), 3);
    }

    #[test]
    fn no_changes_is_the_base() {
        let base = snap(&[("a", 1), ("b", 1)]);
        assert_eq!(base.with_changes(&Snapshot::default(), &[]).unwrap(), base);
    }

    #[test]
    fn bad_removals_are_all_reported_in_list_order() {
        let base = snap(&[("a", 1), ("b", 1)]);
        let changes = snap(&[("b", 2)]);
        let err = base
            .with_changes(&changes, &["x", "b", "a", "a"])
            .unwrap_err();
        assert_eq!(
            err,
            vec![
                ChangeError::NotInBase {
                    at: 0,
                    name: "x".into()
                },
                ChangeError::RemovedAndSent {
                    at: 1,
                    name: "b".into()
                },
                ChangeError::RemovedTwice {
                    at: 3,
                    name: "a".into()
                },
            ]
        );
    }
}
