//! HAMi's MIG choice on one card (`docs/placement-semantics.md` sections 11.3 and 11.4): the
//! smallest covering allowed profile with a free place, a free instance of it first, else a
//! placement that overlaps nothing, scanned from the top for 1- and 3-compute-slice profiles
//! and from the bottom for the others.

use std::cmp::Ordering;

use crate::mig_layout::{MigLayout, MigPlacement, MigProfile};
use crate::model::{Card, CardUsage};
use crate::reason::Reason;
use crate::workload::ContainerRequest;

/// What one container gets on one MIG card.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MigChoice {
    /// Position of the profile in the card's layout.
    pub(crate) profile: usize,
    /// Where the instance sits.
    pub(crate) placement: MigPlacement,
    /// A free instance reused (nothing to create).
    pub(crate) reused: bool,
    /// What it books on the card (11.5).
    pub(crate) booked: CardUsage,
}

/// An instance chosen earlier in the same evaluation (for another container of the workload).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MigTaken {
    /// Card position on the node.
    pub(crate) card: usize,
    /// The choice.
    pub(crate) choice: MigChoice,
}

/// What happened to one profile in a choice (explanations, 11.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigOutcome {
    /// Its memory, memory slices or cores do not cover the request.
    TooSmall,
    /// It covers the request but is not in the node's allowlist.
    NotAllowed,
    /// It covers the request, is allowed, and has no free instance or placement.
    NoFreePlace,
    /// Chosen.
    Chosen {
        /// Where.
        placement: MigPlacement,
        /// A free instance reused.
        reused: bool,
    },
    /// Not looked at: a smaller profile was chosen.
    NotReached,
}

/// One profile as the choice met it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigProfileConsidered {
    /// Profile name.
    pub profile: String,
    /// What happened to it.
    pub outcome: MigOutcome,
}

/// A MIG card's choice for one container: every profile, in the order of 11.4.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MigExplanation {
    /// The profiles in choice order.
    pub profiles: Vec<MigProfileConsidered>,
}

/// The order of 11.4: smaller memory, fewer compute slices, fewer memory slices, then name.
fn profile_order(a: &MigProfile, b: &MigProfile) -> Ordering {
    a.mem_mib
        .cmp(&b.mem_mib)
        .then(a.compute_slices.cmp(&b.compute_slices))
        .then(a.memory_slices.cmp(&b.memory_slices))
        .then_with(|| a.name.cmp(&b.name))
}

/// HAMi's `preferHighMigPlacement`: 1g and 3g profiles are placed from the highest start down.
fn high_first(p: &MigProfile) -> bool {
    p.compute_slices == 1 || p.compute_slices == 3
}

/// Whether `p` covers the request on a card of `layout` (11.3).
fn covers(layout: &MigLayout, p: &MigProfile, req: &ContainerRequest) -> bool {
    let memory = match (req.mem_mib, req.mem_percent) {
        (Some(mib), _) => p.mem_mib >= mib,
        (None, Some(pct)) => {
            u64::from(p.memory_slices) * 100 >= u64::from(pct) * u64::from(layout.memory_slices)
        }
        (None, None) => true,
    };
    memory && p.cores >= req.cores
}

/// The view of a card's instances the choice works on.
struct View<'a> {
    layout: &'a MigLayout,
    /// Every card idle: no instance at all (the unresolvable test).
    idle: bool,
    /// Chosen before on this card in this evaluation.
    taken: &'a [MigTaken],
    card: usize,
}

impl View<'_> {
    fn taken(&self) -> impl Iterator<Item = &MigChoice> {
        self.taken
            .iter()
            .filter(|t| t.card == self.card)
            .map(|t| &t.choice)
    }

    /// A free instance of `p` (profile position `k`) not taken yet, in scan order.
    fn free_instance(&self, k: usize, p: &MigProfile) -> Option<MigPlacement> {
        if self.idle {
            return None;
        }
        let free = self
            .layout
            .instances
            .iter()
            .filter(|i| i.profile == p.name && !i.is_in_use())
            .map(|i| i.placement)
            .filter(|pl| {
                !self
                    .taken()
                    .any(|t| t.profile == k && t.reused && t.placement == *pl)
            });
        if high_first(p) {
            free.max_by_key(|pl| pl.start)
        } else {
            free.min_by_key(|pl| pl.start)
        }
    }

    /// A placement of `p` that overlaps no instance and nothing taken, while `p` has fewer
    /// than `max_instances` instances.
    fn new_placement(&self, k: usize, p: &MigProfile) -> Option<MigPlacement> {
        let existing = if self.idle {
            0
        } else {
            self.layout
                .instances
                .iter()
                .filter(|i| i.profile == p.name)
                .count()
        };
        let created = self.taken().filter(|t| t.profile == k && !t.reused).count();
        if existing + created >= p.max_instances as usize {
            return None;
        }
        let free = |start: &u32| {
            let pl = p.placement(*start);
            let instances = !self.idle
                && self
                    .layout
                    .instances
                    .iter()
                    .any(|i| i.placement.overlaps(pl));
            !instances && !self.taken().any(|t| t.placement.overlaps(pl))
        };
        let start = if high_first(p) {
            p.placements.iter().filter(|s| free(s)).max()
        } else {
            p.placements.iter().filter(|s| free(s)).min()
        };
        start.map(|s| p.placement(*s))
    }
}

/// The choice for `req` on `card` (position `pos`, layout `layout`), given what this
/// evaluation took before (`taken`) and whether every card counts as idle; with `explain`, every
/// profile's outcome in choice order.
pub(crate) fn choose(
    card: &Card,
    layout: &MigLayout,
    pos: usize,
    req: &ContainerRequest,
    taken: &[MigTaken],
    idle: bool,
    mut explain: Option<&mut MigExplanation>,
) -> Result<MigChoice, Reason> {
    let mut order: Vec<usize> = (0..layout.profiles.len()).collect();
    order.sort_by(
        |&a, &b| match (layout.profiles.get(a), layout.profiles.get(b)) {
            (Some(x), Some(y)) => profile_order(x, y),
            _ => a.cmp(&b),
        },
    );
    let view = View {
        layout,
        idle,
        taken,
        card: pos,
    };
    let (mut covering, mut allowed) = (false, false);
    let mut chosen: Option<MigChoice> = None;
    for k in order {
        let Some(p) = layout.profiles.get(k) else {
            continue;
        };
        let outcome = if chosen.is_some() {
            MigOutcome::NotReached
        } else if !covers(layout, p, req) {
            MigOutcome::TooSmall
        } else if !p.allowed {
            covering = true;
            MigOutcome::NotAllowed
        } else {
            covering = true;
            allowed = true;
            let found = view
                .free_instance(k, p)
                .map(|pl| (pl, true))
                .or_else(|| view.new_placement(k, p).map(|pl| (pl, false)));
            match found {
                Some((placement, reused)) => {
                    let (mem, cores) = layout.share(p, card.total_mem_mib, card.total_cores);
                    chosen = Some(MigChoice {
                        profile: k,
                        placement,
                        reused,
                        booked: CardUsage {
                            used: 1,
                            used_mem_mib: mem,
                            used_cores: cores,
                        },
                    });
                    MigOutcome::Chosen { placement, reused }
                }
                None => MigOutcome::NoFreePlace,
            }
        };
        match explain.as_deref_mut() {
            Some(ex) => ex.profiles.push(MigProfileConsidered {
                profile: p.name.clone(),
                outcome,
            }),
            None if chosen.is_some() => break,
            None => {}
        }
    }
    chosen.ok_or(if !covering {
        Reason::MigNoProfileLargeEnough
    } else if !allowed {
        Reason::MigProfileNotAllowed
    } else {
        Reason::MigNoFreePlacement
    })
}
