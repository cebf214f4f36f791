//! Holds: the placement a preemption made room for, kept for its pod (the preemptor) while its
//! victims terminate and for a while after they are gone, so that no other pod takes the cards
//! first. A hold counts as usage no workload accounts for (never evicted), for every pod but its
//! own, and the rule [`hold_fate`] says when it counts. An **offer** (a hold made at
//! kube-scheduler's `/preempt`, one per node it may choose) counts only once the preemptor is
//! nominated to its node.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpusched_hami::Booking;

use crate::translate::PodUsage;

/// The cards kept for a preemptor on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    /// The preemptor's namespace.
    pub namespace: String,
    /// The preemptor's name.
    pub name: String,
    /// The preemptor's uid.
    pub uid: String,
    /// The node.
    pub node: String,
    /// The placement it waits for, per container (as the service's Preempt answer gave it).
    pub bookings: Vec<Vec<Booking>>,
    /// The victims' uids.
    pub victims: Vec<String>,
    /// The victims' `namespace/name`, in the order of `victims`.
    pub victim_names: Vec<String>,
    /// When it was made.
    pub at: Instant,
    /// Whether the view has shown the preemptor since.
    pub seen: bool,
    /// An offer: counts only while the preemptor is nominated to `node`.
    pub offer: bool,
    /// When the view first showed every victim gone.
    pub victims_gone_at: Option<Instant>,
}

/// How the view shows the preemptor of a hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Preemptor {
    /// Not in the store (not shown yet, or deleted).
    Absent,
    /// In the store without a decision that counts: still pending, nominated to a node or not.
    Pending(Option<String>),
    /// Its decision counts (bound, or assumed or reserved by this instance).
    Decided,
}

/// How long holds last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldTimes {
    /// After every victim is gone.
    pub hold: Duration,
    /// At most, while victims are still there.
    pub victims_timeout: Duration,
}

impl Default for HoldTimes {
    fn default() -> Self {
        HoldTimes {
            hold: Duration::from_secs(30),
            victims_timeout: Duration::from_secs(600),
        }
    }
}

/// What happens to a hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// It counts.
    Count,
    /// It is kept without counting (an offer whose preemptor is not nominated yet).
    Wait,
    /// It ends.
    Drop,
}

/// What a hold does, given how the view shows its preemptor and how many of its victims are
/// still in the store. It ends when the preemptor's own decision counts (its bind replaces it),
/// when the preemptor is gone (after the view has shown it once; before that, as for an assumed
/// decision, it may just not be shown yet), `times.hold` after the view first shows every victim
/// gone, or `times.victims_timeout` after it was made while victims remain. An offer waits
/// (`times.hold` at most) until the preemptor is nominated: to its node, it counts from then on
/// like any hold; to another node, it ends.
pub fn hold_fate(
    h: &mut Hold,
    preemptor: &Preemptor,
    victims_left: usize,
    now: Instant,
    times: HoldTimes,
) -> Fate {
    let nominated = match preemptor {
        Preemptor::Decided => return Fate::Drop,
        Preemptor::Absent if h.seen => return Fate::Drop,
        Preemptor::Absent => None,
        Preemptor::Pending(n) => {
            h.seen = true;
            n.as_deref()
        }
    };
    if h.offer {
        match nominated {
            Some(n) if n == h.node => h.offer = false,
            Some(_) => return Fate::Drop,
            None if now.duration_since(h.at) <= times.hold => return Fate::Wait,
            None => return Fate::Drop,
        }
    }
    let keep = if victims_left > 0 {
        now.duration_since(h.at) <= times.victims_timeout
    } else {
        let gone = *h.victims_gone_at.get_or_insert(now);
        now.duration_since(gone) <= times.hold
    };
    if keep { Fate::Count } else { Fate::Drop }
}

/// Holds by (preemptor uid, node), each with the usage it counts for.
type Entries = HashMap<(String, String), (Hold, Arc<PodUsage>)>;

/// The holds by preemptor uid and node, and the usage each counts for.
#[derive(Debug, Default)]
pub(super) struct Holds {
    times: HoldTimes,
    entries: Mutex<Entries>,
}

impl Holds {
    /// Sets how long holds last.
    pub(super) fn set_times(&mut self, times: HoldTimes) {
        self.times = times;
    }

    /// Records a hold or an offer. A hold replaces every earlier hold and offer of its pod; an
    /// offer replaces only the pod's earlier offer on the same node.
    pub(super) fn insert(&self, h: Hold) {
        let usage = Arc::new(PodUsage {
            node: h.node.clone(),
            namespace: h.namespace.clone(),
            bookings: h.bookings.clone(),
            init: 0,
            mig: Vec::new(),
            owner: format!("{}/{}", h.namespace, h.name),
            annotation: String::new(),
            problem: None,
        });
        if let Ok(mut m) = self.entries.lock() {
            if !h.offer {
                m.retain(|(uid, _), _| uid != &h.uid);
            }
            m.insert((h.uid.clone(), h.node.clone()), (h, usage));
        }
    }

    /// Drops the pod's holds and offers.
    pub(super) fn remove(&self, uid: &str) {
        if let Ok(mut m) = self.entries.lock() {
            m.retain(|(u, _), _| u != uid);
        }
    }

    /// The pod's holds and offers.
    pub(super) fn of(&self, uid: &str) -> Vec<Hold> {
        let Ok(m) = self.entries.lock() else {
            return Vec::new();
        };
        m.iter()
            .filter(|((u, _), _)| u == uid)
            .map(|(_, (h, _))| h.clone())
            .collect()
    }

    /// Number of holds and offers.
    pub(super) fn len(&self) -> usize {
        self.entries.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether there is none (the common case: the view skips judging them).
    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Judges every hold ([`hold_fate`]; `preemptor` and `present` read the view), drops those
    /// that end, and returns the usage of those that count by preemptor uid (the same `Arc`
    /// while a hold is unchanged).
    pub(super) fn counted(
        &self,
        preemptor: impl Fn(&str) -> Preemptor,
        present: impl Fn(&str) -> bool,
    ) -> Vec<(String, Arc<PodUsage>)> {
        let now = Instant::now();
        let Ok(mut m) = self.entries.lock() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        m.retain(|(uid, _), (h, u)| {
            let left = h.victims.iter().filter(|v| present(v)).count();
            match hold_fate(h, &preemptor(uid), left, now, self.times) {
                Fate::Count => {
                    out.push((uid.clone(), u.clone()));
                    true
                }
                Fate::Wait => true,
                Fate::Drop => false,
            }
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold() -> Hold {
        Hold {
            namespace: "ns".into(),
            name: "high".into(),
            uid: "h".into(),
            node: "n1".into(),
            bookings: vec![],
            victims: vec!["v1".into(), "v2".into()],
            victim_names: vec!["ns/v1".into(), "ns/v2".into()],
            at: Instant::now(),
            seen: false,
            offer: false,
            victims_gone_at: None,
        }
    }

    const TIMES: HoldTimes = HoldTimes {
        hold: Duration::from_secs(30),
        victims_timeout: Duration::from_secs(600),
    };

    fn pending() -> Preemptor {
        Preemptor::Pending(None)
    }

    #[test]
    fn a_hold_lasts_while_victims_terminate_then_for_the_hold_time() {
        let mut h = hold();
        let t0 = h.at;
        let s = Duration::from_secs;
        // (preemptor, victims left, seconds after the hold was made, fate)
        let steps = [
            (Preemptor::Absent, 2, 0, Fate::Count), // not shown yet
            (pending(), 2, 1, Fate::Count),
            (pending(), 1, 500, Fate::Count), // victims still terminating
            (pending(), 0, 550, Fate::Count), // all gone: the hold's 30 s start
            (pending(), 0, 579, Fate::Count),
            (pending(), 0, 581, Fate::Drop),
        ];
        for (p, left, at, fate) in steps {
            assert_eq!(
                hold_fate(&mut h, &p, left, t0 + s(at), TIMES),
                fate,
                "{p:?} {left} {at}s"
            );
        }
        assert_eq!(h.victims_gone_at, Some(t0 + s(550)));
    }

    #[test]
    fn a_hold_ends_at_the_bind_at_the_deletion_and_after_the_victims_timeout() {
        let s = Duration::from_secs;
        let mut h = hold();
        let t0 = h.at;
        let f = hold_fate(&mut h, &Preemptor::Decided, 2, t0, TIMES);
        assert_eq!(f, Fate::Drop, "bound");
        let mut h = hold();
        assert_eq!(hold_fate(&mut h, &pending(), 2, t0, TIMES), Fate::Count);
        let f = hold_fate(&mut h, &Preemptor::Absent, 2, t0 + s(1), TIMES);
        assert_eq!(f, Fate::Drop, "deleted after it was seen");
        let mut h = hold();
        let f = hold_fate(&mut h, &pending(), 1, t0 + s(600), TIMES);
        assert_eq!(f, Fate::Count);
        let f = hold_fate(&mut h, &pending(), 1, t0 + s(601), TIMES);
        assert_eq!(f, Fate::Drop, "victims stuck");
    }

    #[test]
    fn an_offer_counts_once_its_node_is_nominated_and_ends_on_another_or_after_the_hold_time() {
        let s = Duration::from_secs;
        let nominated = |n: &str| Preemptor::Pending(Some(n.to_owned()));
        let offer = || Hold {
            offer: true,
            ..hold()
        };
        let mut h = offer();
        let t0 = h.at;
        assert_eq!(hold_fate(&mut h, &pending(), 2, t0, TIMES), Fate::Wait);
        assert_eq!(
            hold_fate(&mut h, &nominated("n1"), 2, t0 + s(5), TIMES),
            Fate::Count
        );
        assert!(!h.offer, "a hold from then on");
        // Cleared nomination later: a hold now, it keeps counting.
        assert_eq!(
            hold_fate(&mut h, &pending(), 2, t0 + s(60), TIMES),
            Fate::Count
        );
        let mut h = offer();
        assert_eq!(
            hold_fate(&mut h, &nominated("n2"), 2, t0, TIMES),
            Fate::Drop
        );
        let mut h = offer();
        assert_eq!(
            hold_fate(&mut h, &pending(), 2, t0 + s(31), TIMES),
            Fate::Drop
        );
    }

    #[test]
    fn counted_keeps_the_same_usage_while_a_hold_lasts_and_drops_ended_ones() {
        let holds = Holds::default();
        holds.insert(hold());
        holds.insert(Hold {
            uid: "other".into(),
            ..hold()
        });
        let first = holds.counted(|_| pending(), |_| true);
        assert_eq!(first.len(), 2);
        let again = holds.counted(
            |uid| {
                if uid == "other" {
                    Preemptor::Decided
                } else {
                    pending()
                }
            },
            |_| true,
        );
        assert_eq!(again.len(), 1);
        let (uid, u) = &again[0];
        assert_eq!(uid, "h");
        let before = first
            .iter()
            .find(|(id, _)| id == "h")
            .map(|(_, u)| u.clone());
        assert!(before.is_some_and(|b| Arc::ptr_eq(&b, u)));
        assert_eq!(holds.len(), 1);
        holds.remove("h");
        assert!(holds.is_empty());
    }

    #[test]
    fn offers_live_side_by_side_and_a_hold_replaces_them() {
        let holds = Holds::default();
        for node in ["n1", "n2"] {
            holds.insert(Hold {
                offer: true,
                node: node.into(),
                ..hold()
            });
        }
        assert_eq!(holds.of("h").len(), 2);
        assert!(
            holds.counted(|_| pending(), |_| true).is_empty(),
            "offers wait"
        );
        let counted = holds.counted(|_| Preemptor::Pending(Some("n2".into())), |_| true);
        assert_eq!(counted.len(), 1);
        assert_eq!(counted[0].1.node, "n2");
        assert_eq!(holds.of("h").len(), 1, "the offer on n1 ended");
        holds.insert(Hold {
            node: "n3".into(),
            ..hold()
        });
        let left: Vec<String> = holds.of("h").into_iter().map(|h| h.node).collect();
        assert_eq!(left, vec!["n3".to_owned()]);
    }
}
