//! Booking MIG assignments on a node (`docs/placement-semantics.md` section 11.5): apply marks a
//! reused instance in use or adds the new one; release is the exact inverse. Checked before
//! anything changes.

use crate::mig::choose::MigChoice;
use crate::mig_layout::{MigInstance, MigLayout, MigPlacement};
use crate::model::Node;

/// The instance one container holds on one MIG card, as the answer reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigAssignment {
    /// The profile's name.
    pub profile: String,
    /// Where the instance sits.
    pub placement: MigPlacement,
    /// A free instance at that placement is reused; otherwise the instance is to be created.
    pub reused: bool,
    /// Who will hold it (the workload, `namespace/name`; its uid when it has no name).
    pub owner: String,
}

/// The assignment of `choice` on card `card` of `node`, held by `owner`.
pub(crate) fn assignment(
    node: &Node,
    card: usize,
    choice: &MigChoice,
    owner: &str,
) -> Option<MigAssignment> {
    let layout = node.cards.get(card)?.mig.as_deref()?;
    let profile = layout.profiles.get(choice.profile)?;
    Some(MigAssignment {
        profile: profile.name.clone(),
        placement: choice.placement,
        reused: choice.reused,
        owner: owner.to_owned(),
    })
}

/// Which way a booking goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    Apply,
    Release,
}

/// An assignment that does not fit the node as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Problem {
    /// Card position.
    pub(crate) card: usize,
    /// The instance's first slice.
    pub(crate) start: u32,
    /// What is wrong.
    pub(crate) problem: &'static str,
}

/// The layouts that `assignments` (card position, assignment) change, computed on copies:
/// `(card position, new layout)`; the first assignment that does not fit is the error.
pub(crate) fn plan<'a>(
    node: &Node,
    assignments: impl Iterator<Item = (usize, &'a MigAssignment)>,
    way: Way,
) -> Result<Vec<(usize, MigLayout)>, Problem> {
    let mut changed: Vec<(usize, MigLayout)> = Vec::new();
    for (card, m) in assignments {
        let fail = |problem: &'static str| Problem {
            card,
            start: m.placement.start,
            problem,
        };
        let at = match changed.iter().position(|(p, _)| *p == card) {
            Some(at) => at,
            None => {
                let layout = node
                    .cards
                    .get(card)
                    .and_then(|c| c.mig.as_deref())
                    .ok_or_else(|| fail("the card has no MIG layout"))?;
                changed.push((card, layout.clone()));
                changed.len() - 1
            }
        };
        let Some((_, layout)) = changed.get_mut(at) else {
            continue;
        };
        let known = layout.profile(&m.profile).is_some_and(|p| {
            p.memory_slices == m.placement.size && p.placements.contains(&m.placement.start)
        });
        if !known {
            return Err(fail("not a placement of a profile of the card"));
        }
        let holder = layout
            .instances
            .iter()
            .position(|i| i.placement == m.placement && i.profile == m.profile);
        match (way, m.reused) {
            (Way::Apply, true) => {
                let inst = holder
                    .and_then(|k| layout.instances.get_mut(k))
                    .filter(|i| !i.is_in_use())
                    .ok_or_else(|| fail("no free instance to reuse there"))?;
                inst.in_use_by = Some(m.owner.clone());
            }
            (Way::Apply, false) => {
                if layout
                    .instances
                    .iter()
                    .any(|i| i.placement.overlaps(m.placement))
                {
                    return Err(fail("an instance is there already"));
                }
                layout.instances.push(MigInstance::in_use(
                    m.profile.clone(),
                    m.placement,
                    m.owner.clone(),
                ));
                layout.sort_instances();
            }
            (Way::Release, reused) => {
                let k = holder
                    .filter(|&k| {
                        layout.instances.get(k).and_then(|i| i.in_use_by.as_deref())
                            == Some(m.owner.as_str())
                    })
                    .ok_or_else(|| fail("the workload does not hold an instance there"))?;
                if reused {
                    if let Some(i) = layout.instances.get_mut(k) {
                        i.in_use_by = None;
                    }
                } else {
                    layout.instances.remove(k);
                }
            }
        }
    }
    Ok(changed)
}

/// Writes planned layouts into `node`.
pub(crate) fn commit(node: &mut Node, changed: Vec<(usize, MigLayout)>) {
    for (pos, layout) in changed {
        if let Some(card) = node.cards.get_mut(pos) {
            card.mig = Some(Box::new(layout));
        }
    }
}
