//! The assume cache: bind decisions (and reservations) this instance wrote that the informer
//! has not shown yet, and the rule deciding when each stops counting.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpusched_hami::Booking;

use crate::mig::Reservation;
use crate::translate::PodUsage;

/// A bind decision written by this instance and not yet confirmed by the informer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assumed {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod uid.
    pub uid: String,
    /// Chosen node.
    pub node: String,
    /// Per container hami-core bookings.
    pub bookings: Vec<Vec<Booking>>,
    /// The MIG instances it holds.
    pub mig: Vec<Reservation>,
    /// How many of the first `bookings` are init containers' (for the namespace's quota).
    pub init: usize,
    /// The `-allocated` annotation written.
    pub annotation: String,
    /// When it was assumed.
    pub at: Instant,
    /// Whether the informer has shown the pod since.
    pub seen: bool,
    /// A reservation made when kube-scheduler was told the preferred node (prioritize), before
    /// its bind: it makes the next pods' filter see the capacity kube-scheduler has already
    /// assumed taken. Replaced by the real decision at bind; expires after the reservation TTL.
    pub tentative: bool,
}

/// How the informer currently shows an assumed pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    /// Not in the store (not seen yet, or deleted).
    Absent,
    /// In the store; with the usage it counts for (None: counts nothing, e.g. finished or its
    /// annotation is not written yet).
    Present(Option<PodUsage>),
}

/// Decides what happens to an assumed entry given what the informer shows:
/// `Some(true)` = keep counting the assumed bookings, `Some(false)` = the store already counts
/// the same decision (drop the entry), `None` = the decision is void (pod gone/finished/expired;
/// drop the entry).
pub fn assumed_fate(
    a: &mut Assumed,
    observed: &Observed,
    now: Instant,
    ttl: Duration,
) -> Option<bool> {
    match observed {
        Observed::Present(Some(u)) if u.annotation == a.annotation && u.node == a.node => {
            Some(false)
        }
        // A reservation is void once the store shows a real decision for the pod.
        Observed::Present(Some(_)) if a.tentative => None,
        Observed::Present(_) => {
            a.seen = true;
            if now.duration_since(a.at) > ttl {
                None
            } else {
                Some(true)
            }
        }
        Observed::Absent if a.seen => None,
        Observed::Absent => {
            if now.duration_since(a.at) > ttl {
                None
            } else {
                Some(true)
            }
        }
    }
}

/// The assumed decisions by pod uid, their TTLs, and the usage each counts for.
#[derive(Debug)]
pub(super) struct AssumeCache {
    ttl: Duration,
    reservation_ttl: Duration,
    entries: Mutex<HashMap<String, Assumed>>,
    /// The usage of each assumed decision by uid, kept while the decision is unchanged (so that
    /// a node's prepared form is reused while nothing on it changes).
    usages: Mutex<HashMap<String, Arc<PodUsage>>>,
}

impl AssumeCache {
    /// Decisions live `ttl` without the informer showing them, reservations 10 s.
    pub(super) fn new(ttl: Duration) -> Self {
        AssumeCache {
            ttl,
            reservation_ttl: Duration::from_secs(10),
            entries: Mutex::new(HashMap::new()),
            usages: Mutex::new(HashMap::new()),
        }
    }

    /// Sets how long a reservation lives without its bind.
    pub(super) fn set_reservation_ttl(&mut self, ttl: Duration) {
        self.reservation_ttl = ttl;
    }

    /// Number of assumed decisions.
    pub(super) fn len(&self) -> usize {
        self.entries.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Records a bind decision.
    pub(super) fn assume(&self, a: Assumed) {
        if let Ok(mut m) = self.entries.lock() {
            m.insert(a.uid.clone(), a);
        }
    }

    /// Records a reservation (tentative decision), unless a real decision exists for the pod.
    pub(super) fn reserve(&self, a: Assumed) {
        if let Ok(mut m) = self.entries.lock() {
            if m.get(&a.uid).is_some_and(|old| !old.tentative) {
                return;
            }
            m.insert(
                a.uid.clone(),
                Assumed {
                    tentative: true,
                    ..a
                },
            );
        }
    }

    /// Drops the pod's reservation, if it has one.
    pub(super) fn forget_reservation(&self, uid: &str) {
        if let Ok(mut m) = self.entries.lock()
            && m.get(uid).is_some_and(|a| a.tentative)
        {
            m.remove(uid);
        }
    }

    /// Drops a decision.
    pub(super) fn forget(&self, uid: &str) {
        if let Ok(mut m) = self.entries.lock() {
            m.remove(uid);
        }
    }

    /// Judges every entry against what the informer shows of its pod (`observed`, by uid; see
    /// [`assumed_fate`]), drops those that no longer count, and returns the usage of those that
    /// do, by uid (the same `Arc` as last time while a decision is unchanged).
    pub(super) fn counted(
        &self,
        observed: impl Fn(&str) -> Observed,
    ) -> HashMap<String, Arc<PodUsage>> {
        let now = Instant::now();
        let mut assumed_usage: HashMap<String, Arc<PodUsage>> = HashMap::new();
        let mut old_arcs = match self.usages.lock() {
            Ok(mut m) => std::mem::take(&mut *m),
            Err(p) => std::mem::take(&mut *p.into_inner()),
        };
        if let Ok(mut assumed) = self.entries.lock() {
            assumed.retain(|uid, a| {
                let observed = observed(uid);
                let ttl = if a.tentative {
                    self.reservation_ttl
                } else {
                    self.ttl
                };
                match assumed_fate(a, &observed, now, ttl) {
                    Some(true) => {
                        let u = match old_arcs.remove(uid) {
                            Some(u)
                                if u.node == a.node
                                    && u.annotation == a.annotation
                                    && u.bookings == a.bookings
                                    && u.mig == a.mig =>
                            {
                                u
                            }
                            _ => Arc::new(PodUsage {
                                node: a.node.clone(),
                                namespace: a.namespace.clone(),
                                bookings: a.bookings.clone(),
                                mig: a.mig.clone(),
                                owner: format!("{}/{}", a.namespace, a.name),
                                init: a.init,
                                annotation: a.annotation.clone(),
                                problem: None,
                            }),
                        };
                        assumed_usage.insert(uid.clone(), u);
                        true
                    }
                    Some(false) | None => false,
                }
            });
        }
        if let Ok(mut m) = self.usages.lock() {
            m.clone_from(&assumed_usage);
        }
        assumed_usage
    }
}
