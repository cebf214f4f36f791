//! MIG cards in the cluster view (`docs/hami-protocol.md`, "MIG"; `docs/placement-semantics.md`
//! section 11.8): where a MIG card's layout comes from (the node agent's
//! `gpusched.io/node-mig-layouts`, else derived from HAMi's `migProfiles`), how a pod's MIG
//! reservations (`hami.io/vgpu-mig-allocations`) pair with its devices, and how they become
//! the card's instances in use. No policy: which instance a pod gets is the service's.
//!
//! Bad data is a named node problem, never a panic: an unreadable layout annotation, a layout
//! for a card the node does not have in MIG mode, a reservation that matches no device of its
//! pod, of a profile or at a placement the card does not offer, or overlapping another.

use std::collections::BTreeMap;

use gpusched_client::v1;
use gpusched_hami::{Booking, MigAllocation};

use crate::config::Names;
use crate::inventory_check::Problem;

/// One MIG instance a pod holds: on which card, of which profile, where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// The card's id (GPU UUID).
    pub card: String,
    /// The profile's name.
    pub profile: String,
    /// First memory slice.
    pub start: u32,
    /// Memory slices.
    pub size: u32,
    /// What its device books in `hami.io/vgpu-devices-allocated` (the profile's MiB): what the
    /// instance consumes against a quota (contract 10.2, 11.4).
    pub mem_mib: u64,
    /// Its device's cores there (the profile's).
    pub cores: u32,
}

/// Puts a MIG layout on every card in mode `mig`: the node agent's, from `layouts` (the
/// `gpusched.io/node-mig-layouts` value) when it has one for the card, else the one derived
/// from the card's HAMi `migProfiles` in `register` (the `hami.io/node-nvidia-register`
/// value), else none (the card then takes no MIG work). Returns the problems: the layout
/// annotation naming a card the node does not have or has in another mode, or HAMi profiles
/// that cannot be read; an unreadable layout annotation is the error.
pub fn attach_layouts(
    cards: &mut [v1::Card],
    register: &str,
    layouts: Option<&str>,
    names: &Names,
) -> Result<Vec<Problem>, gpusched_hami::HamiError> {
    let mig_card = |c: &v1::Card| c.mode == v1::CardMode::Mig as i32;
    if layouts.is_none() && !cards.iter().any(mig_card) {
        // No MIG card: the register is not read twice (every node is decoded on each change).
        return Ok(Vec::new());
    }
    let a = &names.annotations;
    let mut problems = Vec::new();
    let mut ours = match layouts {
        None => BTreeMap::new(),
        Some(v) => gpusched_hami::decode_node_mig_layouts(v)?,
    };
    let hami: BTreeMap<String, Vec<gpusched_hami::MigProfile>> =
        gpusched_hami::decode_registered(register)
            .map(|r| r.into_iter().map(|c| (c.id, c.mig_profiles)).collect())
            .unwrap_or_default();
    for (j, card) in cards.iter_mut().enumerate() {
        let from_agent = ours.remove(&card.id);
        if !mig_card(card) {
            if from_agent.is_some() {
                problems.push(Problem {
                    field: format!("{}[{}]", a.node_mig_layouts, card.id),
                    reason: "OUT_OF_RANGE",
                    description: format!(
                        "a MIG layout for card {:?}, which {} registers in mode {}",
                        card.id,
                        a.node_register,
                        mode_name(card.mode)
                    ),
                });
            }
            continue;
        }
        card.mig = match from_agent {
            Some(l) => Some(l),
            None => match gpusched_hami::layout_from_profiles(
                hami.get(&card.id).map_or(&[][..], Vec::as_slice),
            ) {
                Ok(l) => l,
                Err(e) => {
                    problems.push(Problem {
                        field: format!("{}[{j}].migProfiles", a.node_register),
                        reason: "OUT_OF_RANGE",
                        description: e,
                    });
                    None
                }
            },
        };
    }
    for id in ours.into_keys() {
        problems.push(Problem {
            field: format!("{}[{id}]", a.node_mig_layouts),
            reason: "UNKNOWN_REFERENCE",
            description: format!(
                "a MIG layout for card {id:?}, which {} does not list",
                a.node_register
            ),
        });
    }
    Ok(problems)
}

fn mode_name(mode: i32) -> &'static str {
    match v1::CardMode::try_from(mode) {
        Ok(v1::CardMode::Mig) => "mig",
        Ok(v1::CardMode::Mps) => "mps",
        _ => "hami-core",
    }
}

/// Pairs a pod's MIG reservations with its devices, as HAMi's device plugin does: the
/// reservation `(containerIndex, deviceIndex)` is the device at that position of
/// `hami.io/vgpu-devices-allocated` (`bookings`, per container, init containers first) and
/// names its card. Returns the bookings that are no MIG instance (the hami-core shares, in
/// their containers) and the instances held; a reservation without its device, or naming
/// another card, is the error.
pub fn pair(
    mut bookings: Vec<Vec<Booking>>,
    reservations: &[MigAllocation],
) -> Result<(Vec<Vec<Booking>>, Vec<Reservation>), String> {
    let mut held = Vec::with_capacity(reservations.len());
    let mut taken: Vec<(usize, usize)> = Vec::with_capacity(reservations.len());
    for r in reservations {
        let (c, d) = (r.container_index as usize, r.device_index as usize);
        let device = bookings.get(c).and_then(|cards| cards.get(d));
        let (mem_mib, cores) = match device {
            Some(b) if b.uuid == r.gpu_uuid => (b.mem_mib, b.cores),
            Some(b) => {
                return Err(format!(
                    "the reservation of container {c} device {d} names card {:?}, but that \
                     device is card {:?}",
                    r.gpu_uuid, b.uuid
                ));
            }
            None => {
                return Err(format!(
                    "the reservation of container {c} device {d} (card {:?}) has no such device",
                    r.gpu_uuid
                ));
            }
        };
        taken.push((c, d));
        held.push(Reservation {
            card: r.gpu_uuid.clone(),
            profile: r.profile.clone(),
            start: r.placement.start,
            size: r.placement.size,
            mem_mib,
            cores,
        });
    }
    taken.sort_unstable();
    for &(c, d) in taken.iter().rev() {
        if let Some(cards) = bookings.get_mut(c) {
            cards.remove(d);
        }
    }
    Ok((bookings, held))
}

/// A pod's hami-core bookings that land on a card with a MIG layout: such a card takes no
/// hami-core share, so the pod's decision contradicts the node (HAMi marks the card unhealthy).
pub fn booking_on_mig_card(cards: &[v1::Card], bookings: &[Vec<Booking>]) -> Option<String> {
    bookings.iter().flatten().find_map(|b| {
        cards
            .iter()
            .any(|c| c.id == b.uuid && c.mig.is_some())
            .then(|| {
                format!(
                    "books MIG card {:?} as a hami-core share, without a MIG reservation",
                    b.uuid
                )
            })
    })
}

/// Marks the instances `held` by `owner` in use on `cards`: an instance the node reported at
/// the same profile and placement becomes the pod's, otherwise the instance is added. A
/// reservation on a card the node does not list is ignored (the card is gone), as is one on a
/// MIG card without a layout (it takes no MIG work). Errors, in words naming the card: a card
/// that is not in MIG mode, a profile the card does not have, a placement it does not allow, an
/// overlap with an instance of the node or of another pod.
pub fn hold(cards: &mut [v1::Card], owner: &str, held: &[Reservation]) -> Result<(), String> {
    for r in held {
        let Some(card) = cards.iter_mut().find(|c| c.id == r.card) else {
            continue;
        };
        if card.mode != v1::CardMode::Mig as i32 {
            return Err(format!(
                "reserves a MIG instance on card {:?}, which is in mode {}",
                r.card,
                mode_name(card.mode)
            ));
        }
        let Some(layout) = card.mig.as_mut() else {
            continue;
        };
        let what = format!("{} at {} on card {:?}", r.profile, r.start, r.card);
        let Some(profile) = layout.profiles.iter().find(|p| p.name == r.profile) else {
            return Err(format!(
                "reserves {what}: the card has no profile {:?}",
                r.profile
            ));
        };
        if r.size != profile.memory_slices || !profile.placements.contains(&r.start) {
            return Err(format!(
                "reserves {what} of size {}: not a placement of {} (starts {:?}, size {})",
                r.size, r.profile, profile.placements, profile.memory_slices
            ));
        }
        let end = r.start.saturating_add(r.size);
        let mut same = None;
        for (k, i) in layout.instances.iter().enumerate() {
            let overlaps = r.start < i.start.saturating_add(i.size) && i.start < end;
            if !overlaps {
                continue;
            }
            let identical = i.profile == r.profile && i.start == r.start && i.size == r.size;
            if identical && i.in_use_by.is_empty() {
                same = Some(k);
                continue;
            }
            let whose = if i.in_use_by.is_empty() {
                "the node reports".to_owned()
            } else {
                format!("pod {} holds", i.in_use_by)
            };
            return Err(format!(
                "reserves {what}, overlapping the instance {} at {} that {whose}",
                i.profile, i.start
            ));
        }
        match same {
            Some(k) => layout.instances[k].in_use_by = owner.to_owned(),
            None => layout.instances.push(v1::MigInstance {
                profile: r.profile.clone(),
                start: r.start,
                size: r.size,
                in_use_by: owner.to_owned(),
            }),
        }
    }
    Ok(())
}

/// Sorts each MIG card's instances by placement, so that a node's form does not depend on the
/// order its pods were read in.
pub fn sort_instances(cards: &mut [v1::Card]) {
    for l in cards.iter_mut().filter_map(|c| c.mig.as_mut()) {
        l.instances.sort_by(|a, b| {
            (a.start, &a.profile, &a.in_use_by).cmp(&(b.start, &b.profile, &b.in_use_by))
        });
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn names() -> Names {
        Names::default()
    }

    fn h100_profiles() -> Vec<gpusched_hami::MigProfile> {
        let p = |name: &str, mem: i32, core: i32, slices: u32, size: u32, starts: &[u32]| {
            gpusched_hami::MigProfile {
                name: name.into(),
                memory_mb: mem,
                core,
                slice_count: slices,
                placements: starts
                    .iter()
                    .map(|&start| gpusched_hami::MigPlacement { start, size })
                    .collect(),
            }
        };
        vec![
            p("1g.10gb", 9984, 13, 1, 1, &[0, 1, 2, 3, 4, 5, 6]),
            p("2g.20gb", 20096, 25, 2, 2, &[0, 2, 4]),
            p("3g.40gb", 40448, 46, 3, 4, &[0, 4]),
            p("7g.80gb", 81152, 100, 7, 8, &[0]),
        ]
    }

    /// A node's register: card A (MIG, HAMi profiles), card B (hami-core).
    fn register() -> (Vec<v1::Card>, String) {
        let mut cards = gpusched_client::node("n", 2, 81920, "NVIDIA H100 80GB HBM3").cards;
        cards[0].id = "GPU-a".into();
        cards[0].mode = v1::CardMode::Mig as i32;
        cards[0].slots = 7;
        cards[1].id = "GPU-b".into();
        let mut reg: Vec<gpusched_hami::RegisteredCard> = cards
            .iter()
            .map(gpusched_hami::RegisteredCard::from_card)
            .collect();
        reg[0].mig_profiles = h100_profiles();
        (cards, gpusched_hami::encode_registered(&reg))
    }

    fn agent_layout() -> v1::MigLayout {
        let mut l = gpusched_hami::layout_from_profiles(&h100_profiles())
            .unwrap()
            .unwrap();
        l.profiles.push(v1::MigProfile {
            name: "4g.40gb".into(),
            mem_mib: 40448,
            compute_slices: 4,
            memory_slices: 4,
            cores: 49,
            max_instances: 1,
            placements: vec![0],
            not_allowed: true,
        });
        l.instances.push(v1::MigInstance {
            profile: "1g.10gb".into(),
            start: 6,
            size: 1,
            in_use_by: String::new(),
        });
        l
    }

    fn fields(p: &[Problem]) -> Vec<(String, &'static str)> {
        p.iter().map(|p| (p.field.clone(), p.reason)).collect()
    }

    #[test]
    fn layouts_come_from_the_agent_else_from_hamis_profiles() {
        let (cards, reg) = register();
        // HAMi's profiles alone: the derived layout, no instance.
        let mut c = cards.clone();
        assert!(
            attach_layouts(&mut c, &reg, None, &names())
                .unwrap()
                .is_empty()
        );
        let l = c[0].mig.as_ref().unwrap();
        assert_eq!(
            (l.compute_slices, l.memory_slices, l.profiles.len()),
            (7, 8, 4)
        );
        assert!(l.instances.is_empty());
        assert!(c[1].mig.is_none(), "a hami-core card has no layout");
        // The agent's annotation wins: every profile, its instances.
        let ours = gpusched_hami::encode_node_mig_layouts(&BTreeMap::from([(
            "GPU-a".to_owned(),
            agent_layout(),
        )]));
        let mut c = cards.clone();
        assert!(
            attach_layouts(&mut c, &reg, Some(&ours), &names())
                .unwrap()
                .is_empty()
        );
        assert_eq!(c[0].mig, Some(agent_layout()));
        // A MIG card without profiles anywhere has no layout (it takes no MIG work).
        let mut bare = cards.clone();
        let plain_reg = gpusched_hami::encode_register(&cards);
        assert!(
            attach_layouts(&mut bare, &plain_reg, None, &names())
                .unwrap()
                .is_empty()
        );
        assert!(bare[0].mig.is_none());
    }

    #[test]
    fn bad_layout_data_is_a_named_problem() {
        let (cards, reg) = register();
        let layouts = |pairs: &[(&str, v1::MigLayout)]| {
            gpusched_hami::encode_node_mig_layouts(
                &pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), v.clone()))
                    .collect(),
            )
        };
        type Case = (String, String, Vec<(String, &'static str)>);
        let cases: Vec<Case> = vec![
            (
                reg.clone(),
                layouts(&[("GPU-b", agent_layout())]),
                vec![("gpusched.io/node-mig-layouts[GPU-b]".into(), "OUT_OF_RANGE")],
            ),
            (
                reg.clone(),
                layouts(&[("GPU-x", agent_layout())]),
                vec![(
                    "gpusched.io/node-mig-layouts[GPU-x]".into(),
                    "UNKNOWN_REFERENCE",
                )],
            ),
            (
                reg.replace("\"memoryMB\":9984", "\"memoryMB\":-1"),
                "{}".into(),
                vec![(
                    "hami.io/node-nvidia-register[0].migProfiles".into(),
                    "OUT_OF_RANGE",
                )],
            ),
        ];
        let e = attach_layouts(&mut cards.clone(), &reg, Some("{nonsense"), &names()).unwrap_err();
        assert_eq!(e.annotation, "gpusched.io/node-mig-layouts");
        for (reg, ours, want) in cases {
            let mut c = cards.clone();
            let p = attach_layouts(&mut c, &reg, Some(&ours), &names()).unwrap();
            assert_eq!(fields(&p), want, "{ours}");
            assert!(!p[0].description.is_empty());
        }
    }

    fn booking(uuid: &str) -> Booking {
        Booking {
            uuid: uuid.into(),
            device_type: "NVIDIA".into(),
            mem_mib: 9984,
            cores: 13,
        }
    }

    fn reservation(
        c: u32,
        d: u32,
        gpu: &str,
        profile: &str,
        start: u32,
        size: u32,
    ) -> MigAllocation {
        MigAllocation {
            container_index: c,
            device_index: d,
            gpu_uuid: gpu.into(),
            profile: profile.into(),
            placement: gpusched_hami::MigPlacement { start, size },
            runtime: None,
        }
    }

    #[test]
    fn reservations_pair_with_the_devices_they_name() {
        // init: MIG on A; no-GPU container; main: hami-core on B, MIG on A.
        let bookings = vec![
            vec![booking("GPU-a")],
            vec![],
            vec![booking("GPU-b"), booking("GPU-a")],
        ];
        let (rest, held) = pair(
            bookings.clone(),
            &[
                reservation(2, 1, "GPU-a", "3g.40gb", 4, 4),
                reservation(0, 0, "GPU-a", "1g.10gb", 3, 1),
            ],
        )
        .unwrap();
        assert_eq!(rest, vec![vec![], vec![], vec![booking("GPU-b")]]);
        assert_eq!(
            held.iter()
                .map(|r| (r.profile.as_str(), r.start))
                .collect::<Vec<_>>(),
            vec![("3g.40gb", 4), ("1g.10gb", 3)]
        );
        assert_eq!(pair(bookings.clone(), &[]).unwrap().0, bookings);
        for (r, why) in [
            (
                reservation(2, 0, "GPU-a", "1g.10gb", 3, 1),
                "but that device is card \"GPU-b\"",
            ),
            (
                reservation(1, 0, "GPU-a", "1g.10gb", 3, 1),
                "has no such device",
            ),
            (
                reservation(7, 0, "GPU-a", "1g.10gb", 3, 1),
                "has no such device",
            ),
        ] {
            let e = pair(bookings.clone(), &[r]).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
    }

    fn held(card: &str, profile: &str, start: u32, size: u32) -> Reservation {
        Reservation {
            card: card.into(),
            profile: profile.into(),
            start,
            size,
            mem_mib: 0,
            cores: 0,
        }
    }

    #[test]
    fn reservations_become_instances_in_use() {
        let (mut cards, reg) = register();
        let ours = gpusched_hami::encode_node_mig_layouts(&BTreeMap::from([(
            "GPU-a".to_owned(),
            agent_layout(),
        )]));
        attach_layouts(&mut cards, &reg, Some(&ours), &names()).unwrap();
        // The node's free 1g at 6 becomes p1's; p2's 3g at 0 is added; a card the node does
        // not list is ignored.
        hold(&mut cards, "ns/p1", &[held("GPU-a", "1g.10gb", 6, 1)]).unwrap();
        hold(
            &mut cards,
            "ns/p2",
            &[
                held("GPU-a", "3g.40gb", 0, 4),
                held("GPU-gone", "1g.10gb", 0, 1),
            ],
        )
        .unwrap();
        sort_instances(&mut cards);
        let got: Vec<(&str, u32, &str)> = cards[0]
            .mig
            .as_ref()
            .unwrap()
            .instances
            .iter()
            .map(|i| (i.profile.as_str(), i.start, i.in_use_by.as_str()))
            .collect();
        assert_eq!(got, vec![("3g.40gb", 0, "ns/p2"), ("1g.10gb", 6, "ns/p1")]);
        // What a pod may not hold.
        for (r, why) in [
            (held("GPU-b", "1g.10gb", 0, 1), "which is in mode hami-core"),
            (held("GPU-a", "9g.99gb", 0, 1), "no profile \"9g.99gb\""),
            (held("GPU-a", "2g.20gb", 1, 2), "not a placement of 2g.20gb"),
            (held("GPU-a", "2g.20gb", 4, 1), "not a placement of 2g.20gb"),
            (
                held("GPU-a", "1g.10gb", 2, 1),
                "the instance 3g.40gb at 0 that pod ns/p2 holds",
            ),
            (
                held("GPU-a", "1g.10gb", 6, 1),
                "the instance 1g.10gb at 6 that pod ns/p1 holds",
            ),
        ] {
            let mut c = cards.clone();
            let e = hold(&mut c, "ns/p3", &[r]).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
        // An instance the node reports blocks a different reservation over it.
        let (mut fresh, _) = register();
        attach_layouts(&mut fresh, &reg, Some(&ours), &names()).unwrap();
        let e = hold(&mut fresh, "ns/p", &[held("GPU-a", "3g.40gb", 4, 4)]).unwrap_err();
        assert!(
            e.contains("overlapping the instance 1g.10gb at 6 that the node reports"),
            "{e}"
        );
        // A MIG card without a layout takes no MIG work: its reservations are not instances.
        let (mut bare, _) = register();
        hold(&mut bare, "ns/p", &[held("GPU-a", "3g.40gb", 4, 4)]).unwrap();
        assert!(bare[0].mig.is_none());
    }

    #[test]
    fn hami_core_bookings_on_a_mig_card_are_found() {
        let (mut cards, reg) = register();
        attach_layouts(&mut cards, &reg, None, &names()).unwrap();
        assert_eq!(booking_on_mig_card(&cards, &[vec![booking("GPU-b")]]), None);
        let e = booking_on_mig_card(&cards, &[vec![], vec![booking("GPU-a")]]).unwrap();
        assert!(e.contains("MIG card \"GPU-a\""), "{e}");
    }
}
