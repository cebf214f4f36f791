//! A kept node set with a spare copy of its node list, reused by the requests that change a
//! few of its nodes (the common case: a shim's or an adapter's next decision differs from the
//! kept set in the usage of the nodes the last decisions went to).
//!
//! Building the changed set afresh ([`Candidates::with_changes`]) touches every node's shared
//! count twice (clone, then drop), 2,000 atomic operations for a 1,000-node set: a tenth of the
//! server's CPU per decision. When every change replaces a node of the same name, nothing is
//! removed and no node is invalid, a request instead leases the spare list, puts the kept nodes
//! back where the last lease had replaced them, puts its own in, decides, and hands the list
//! back: work in the number of changed nodes, not in the size of the set.
//!
//! The leased list holds exactly the nodes [`Candidates::with_changes`] would build (a
//! property test says so), so decisions do not depend on whether a spare was there: requests
//! deciding on one set at the same time lease one spare each (up to [`MAX_SPARES`] are kept,
//! more are built and dropped), and spares lost with their set are rebuilt from the next one
//! kept. A spare holds at most [`MAX_REPLACED`] nodes beyond its set, so the set cache's bound
//! grows by at most `MAX_SPARES * MAX_REPLACED` nodes per set.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

use gpusched_engine::{Node, NodeId};

use crate::candidates::Candidates;

/// Most changed nodes a request may send for the spare list to be used (and kept) for it.
pub const MAX_REPLACED: usize = 32;

/// Most spare lists a kept set holds (one per request deciding on it at the same time).
pub const MAX_SPARES: usize = 4;

/// A kept set, with its spare node list.
#[derive(Debug)]
pub struct Kept {
    /// The set as it was kept.
    pub set: Candidates,
    spares: Mutex<Vec<Spare>>,
}

/// The spare: the set's node list with the nodes at `replaced` put in by the last lease.
#[derive(Debug)]
struct Spare {
    c: Candidates,
    replaced: Vec<NodeId>,
}

impl Kept {
    /// A kept set without a spare yet (the first lease makes it).
    pub fn new(set: Candidates) -> Self {
        Kept {
            set,
            spares: Mutex::new(Vec::new()),
        }
    }

    /// This set with each node of `changes` in place of the node of the same name, as a lease
    /// of the spare list; `None` (build the set with [`Candidates::with_changes`]) when a change
    /// is not such a replacement, there are more than [`MAX_REPLACED`], or a node is invalid.
    pub fn lease(self: &Arc<Self>, changes: &Candidates) -> Option<Lease> {
        if !self.set.invalid.is_empty()
            || !changes.invalid.is_empty()
            || changes.snapshot.len() > MAX_REPLACED
        {
            return None;
        }
        let base = &self.set.snapshot;
        // Both sorted by name: the positions come out ascending.
        let at: Vec<NodeId> = changes
            .snapshot
            .nodes()
            .map(|n| base.id_of(n.name()))
            .collect::<Option<_>>()?;
        let taken = self.spares.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut spare = taken.unwrap_or_else(|| Spare {
            c: Candidates::new(base.clone(), Vec::new()),
            replaced: Vec::new(),
        });
        let kept = base.shared_nodes();
        for &id in &spare.replaced {
            if at.binary_search(&id).is_err() {
                put(&mut spare.c, id, &kept[id.index()]);
            }
        }
        for (&id, n) in at.iter().zip(changes.snapshot.shared_nodes()) {
            put(&mut spare.c, id, n);
        }
        spare.replaced = at;
        Some(Lease {
            kept: Arc::clone(self),
            spare,
            intact: true,
        })
    }
}

/// Puts `node` at `id` (same name, by construction: `id` was found by the node's name).
fn put(c: &mut Candidates, id: NodeId, node: &Arc<Node>) {
    if c.snapshot.replace_same_name(id, Arc::clone(node)).is_err() {
        debug_assert!(false, "a replacement by name changed the name at {id}");
    }
}

/// The candidates of a request that changes a kept set: built afresh, or a lease of the set's
/// spare list (handed back when dropped, unless the request changed it).
#[derive(Debug)]
pub enum Changed {
    /// Built by [`Candidates::with_changes`] (or not a change at all).
    Built(Candidates),
    /// The spare list of a kept set.
    Leased(Lease),
}

/// A kept set's spare list, lent to one request.
#[derive(Debug)]
pub struct Lease {
    kept: Arc<Kept>,
    spare: Spare,
    /// Not changed by the request (only then is it handed back).
    intact: bool,
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.intact {
            return;
        }
        let mut spares = self.kept.spares.lock().unwrap_or_else(|e| e.into_inner());
        if spares.len() < MAX_SPARES {
            // An empty list in its place allocates nothing.
            let empty = Spare {
                c: Candidates::default(),
                replaced: Vec::new(),
            };
            spares.push(std::mem::replace(&mut self.spare, empty));
        }
    }
}

impl Deref for Changed {
    type Target = Candidates;

    fn deref(&self) -> &Candidates {
        match self {
            Changed::Built(c) => c,
            Changed::Leased(l) => &l.spare.c,
        }
    }
}

impl DerefMut for Changed {
    /// A request that changes its candidates (e.g. `restrict_to_node_names`) keeps the list:
    /// the lease is not handed back.
    fn deref_mut(&mut self) -> &mut Candidates {
        match self {
            Changed::Built(c) => c,
            Changed::Leased(l) => {
                l.intact = false;
                &mut l.spare.c
            }
        }
    }
}

impl From<Candidates> for Changed {
    fn from(c: Candidates) -> Self {
        Changed::Built(c)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use gpusched_engine::{Card, NodeSpec, Snapshot};
    use proptest::prelude::*;

    fn node(i: usize, mem: u64) -> Arc<Node> {
        Arc::new(
            Node::new(NodeSpec::new(
                format!("n{i:03}"),
                vec![Card::new(format!("n{i:03}-0"), 0, "T4", mem)],
            ))
            .unwrap(),
        )
    }

    fn candidates(nodes: Vec<Arc<Node>>) -> Candidates {
        Candidates::new(Snapshot::from_nodes(nodes).unwrap(), Vec::new())
    }

    fn kept(n: usize) -> Arc<Kept> {
        Arc::new(Kept::new(candidates(
            (0..n).map(|i| node(i, 1000)).collect(),
        )))
    }

    /// Changes: (node index, new memory) pairs; a repeated index keeps the last.
    fn changes(pairs: &[(usize, u64)]) -> Candidates {
        let mut m = std::collections::BTreeMap::new();
        for &(i, mem) in pairs {
            m.insert(i, mem);
        }
        candidates(m.into_iter().map(|(i, mem)| node(i, mem)).collect())
    }

    fn built(k: &Kept, c: &Candidates) -> Snapshot {
        k.set.snapshot.with_changes(&c.snapshot, &[]).unwrap()
    }

    proptest! {
        /// A sequence of requests, each leasing (or, while another lease is out, building its
        /// own list), always decides on exactly the list built afresh.
        #[test]
        fn leases_hold_what_with_changes_builds(
            rounds in prop::collection::vec(
                (prop::collection::vec((0usize..40, 1u64..5000), 0..8), any::<bool>(), any::<bool>()),
                1..40,
            )
        ) {
            let k = kept(40);
            let mut held: Option<Changed> = None;
            for (pairs, hold, restrict) in rounds {
                let c = changes(&pairs);
                let mut got = Changed::Leased(k.lease(&c).unwrap());
                prop_assert_eq!(&got.snapshot, &built(&k, &c));
                if restrict {
                    // A request that changes its list does not hand it back.
                    got.snapshot.retain_names(&["n001".to_owned()]);
                }
                // Held across the next request: that one builds its own list.
                if hold {
                    held = Some(got);
                } else {
                    drop(got);
                    held = None;
                }
            }
            drop(held);
            // The kept set itself never changes.
            prop_assert_eq!(&k.set.snapshot, &kept(40).set.snapshot);
        }
    }

    #[test]
    fn only_replacements_within_the_bound_are_leased() {
        let k = kept(40);
        // A node the set does not hold: built afresh.
        let other = candidates(vec![node(99, 1)]);
        assert!(k.lease(&other).is_none());
        // More than MAX_REPLACED changes: built afresh.
        let many = changes(&(0..=MAX_REPLACED).map(|i| (i, 7)).collect::<Vec<_>>());
        assert!(k.lease(&many).is_none());
        let enough = changes(&(0..MAX_REPLACED).map(|i| (i, 7)).collect::<Vec<_>>());
        assert!(k.lease(&enough).is_some());
    }

    #[test]
    fn concurrent_leases_each_get_a_list_and_up_to_max_spares_are_kept() {
        let k = kept(10);
        let leases: Vec<Lease> = (0..MAX_SPARES + 2)
            .map(|i| k.lease(&changes(&[(i, 5)])).unwrap())
            .collect();
        for (i, l) in leases.iter().enumerate() {
            assert_eq!(l.spare.c.snapshot, built(&k, &changes(&[(i, 5)])));
        }
        drop(leases);
        assert_eq!(k.spares.lock().unwrap().len(), MAX_SPARES);
    }

    #[test]
    fn the_spare_list_is_reused_not_rebuilt() {
        let k = kept(10);
        let first = k.lease(&changes(&[(3, 1)])).unwrap();
        let list = first.spare.c.snapshot.shared_nodes().as_ptr();
        drop(first);
        let second = k.lease(&changes(&[(4, 2)])).unwrap();
        assert_eq!(second.spare.c.snapshot.shared_nodes().as_ptr(), list);
        // Node 3 is the kept one again (shared, not a copy).
        let kept3 = k.set.snapshot.node_named("n003").unwrap();
        let got3 = second.spare.c.snapshot.node_named("n003").unwrap();
        assert!(std::ptr::eq(kept3, got3));
    }
}
