//! What holds each card of each node: the placed workloads of a preemption, their validation
//! and the resolved form the victim search works from (`docs/placement-semantics.md` sections
//! 9.1 and 9.2).

use std::collections::HashMap;

use crate::error::{InvalidInput, Violation, ViolationKind};
use crate::mig_layout::MigLayout;
use crate::model::{Card, CardUsage, Node, NodeId, Snapshot};

/// What a placed workload holds on one card of its node.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Booking {
    /// The card (its id, a card of the node).
    pub card_id: String,
    /// Slots: the number of the workload's containers on the card (at least 1).
    pub slots: u32,
    /// Memory, MiB.
    pub mem_mib: u64,
    /// Cores, percent.
    pub cores: u32,
    /// On a MIG card: the first memory slice of the instance the workload holds (then `slots`,
    /// `mem_mib` and `cores` are 0: the instance says what it holds, section 9.1).
    pub mig_instance_start: Option<u32>,
}

/// A workload placed on a node, as a preemption sees it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PlacedWorkload {
    /// Its id, unique on the node (a pod UID, a job id).
    pub id: String,
    /// Its priority (higher is more important).
    pub priority: i32,
    /// Whether evicting it would violate a disruption budget (the caller decides).
    pub violates_budget: bool,
    /// When it started, milliseconds since the Unix epoch (UTC); a workload that has not
    /// started yet is given the caller's current time.
    pub start_time_ms: i64,
    /// What it holds, at most one booking per card.
    pub bookings: Vec<Booking>,
}

/// The placed workloads of one node.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NodeWorkloads {
    /// The node's name (a node of the snapshot).
    pub node: String,
    /// Its placed workloads.
    pub workloads: Vec<PlacedWorkload>,
}

/// Bounds on the placed workloads of one preemption (a caller's config usually sets them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PreemptLimits {
    /// Placed workloads on one node.
    pub max_workloads_per_node: usize,
    /// Placed workloads over all nodes.
    pub max_workloads: usize,
    /// Bytes of a workload id.
    pub max_id_bytes: usize,
}

impl Default for PreemptLimits {
    /// 256 per node, 100,000 in all, ids of 512 bytes.
    fn default() -> Self {
        PreemptLimits {
            max_workloads_per_node: 256,
            max_workloads: 100_000,
            max_id_bytes: 512,
        }
    }
}

/// A placed workload with its bookings resolved to card positions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Resident {
    pub(crate) workload: PlacedWorkload,
    /// `(card position, what it holds there)`, one per booking.
    pub(crate) holds: Vec<(usize, CardUsage)>,
    /// `(card position, instance start)` of the MIG instances it holds.
    pub(crate) instances: Vec<(usize, u32)>,
}

/// A snapshot with what each placed workload holds on each card, validated
/// (`docs/placement-semantics.md` section 9.2): the input of [`crate::preempt`].
///
/// It borrows the snapshot it was validated against, so it cannot be used with another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Occupancy<'s> {
    pub(crate) snapshot: &'s Snapshot,
    /// Per node, in the snapshot's order: its placed workloads, in input order.
    pub(crate) residents: Vec<Vec<Resident>>,
}

impl<'s> Occupancy<'s> {
    /// Validates `placed` against `snapshot`: every node named once and a node of the
    /// snapshot; ids not blank, unique on their node and within the limits; bookings on cards
    /// of the node, one per card and workload, of at least one slot, and on each card summing
    /// to at most its usage. Every problem is reported, fields relative to `placed`
    /// (`placed[i].workloads[k].bookings[b].card_id`). Linear in the input (maps of names, ids
    /// and cards).
    pub fn new(
        snapshot: &'s Snapshot,
        placed: Vec<NodeWorkloads>,
        limits: &PreemptLimits,
    ) -> Result<Occupancy<'s>, InvalidInput> {
        let total = placed
            .iter()
            .fold(0usize, |n, p| n.saturating_add(p.workloads.len()));
        if total > limits.max_workloads {
            return Err(InvalidInput::single(
                ViolationKind::LimitExceeded,
                "placed",
                format!(
                    "{total} placed workloads exceed the limit of {}",
                    limits.max_workloads
                ),
            ));
        }
        let mut violations = Vec::new();
        let mut residents: Vec<Vec<Resident>> = vec![Vec::new(); snapshot.len()];
        let mut seen: HashMap<&str, usize> = HashMap::with_capacity(placed.len());
        let mut resolved: Vec<(usize, NodeId)> = Vec::with_capacity(placed.len());
        for (i, entry) in placed.iter().enumerate() {
            // Field paths are built only for a violation: most input is valid.
            let field = || format!("placed[{i}].node");
            if entry.node.is_empty() {
                violations.push(Violation::new(
                    ViolationKind::MissingField,
                    field(),
                    "node name must not be empty",
                ));
                continue;
            }
            if let Some(first) = seen.get(entry.node.as_str()) {
                violations.push(Violation::new(
                    ViolationKind::DuplicateId,
                    field(),
                    format!(
                        "node {:?} is listed twice (also placed[{first}])",
                        entry.node
                    ),
                ));
                continue;
            }
            seen.insert(entry.node.as_str(), i);
            let Some(id) = snapshot.id_of(&entry.node) else {
                violations.push(Violation::new(
                    ViolationKind::UnknownReference,
                    field(),
                    format!("node {:?} is not a candidate node", entry.node),
                ));
                continue;
            };
            if entry.workloads.len() > limits.max_workloads_per_node {
                violations.push(Violation::new(
                    ViolationKind::LimitExceeded,
                    format!("placed[{i}].workloads"),
                    format!(
                        "{} placed workloads on node {:?} exceed the limit of {}",
                        entry.workloads.len(),
                        entry.node,
                        limits.max_workloads_per_node
                    ),
                ));
                continue;
            }
            resolved.push((i, id));
        }
        drop(seen);
        // Only the nodes that passed are looked into; `placed` is consumed in input order.
        let mut next = resolved.into_iter().peekable();
        for (i, entry) in placed.into_iter().enumerate() {
            if next.peek().is_none_or(|&(at, _)| at != i) {
                continue;
            }
            let Some((_, id)) = next.next() else { break };
            let node = &snapshot[id];
            let before = violations.len();
            let node_residents = resolve_node(i, node, entry, limits, &mut violations);
            if violations.len() == before
                && let Some(slot) = residents.get_mut(id.index())
            {
                *slot = node_residents;
            }
        }
        if !violations.is_empty() {
            // In input order: node-level problems were found first, in one pass.
            violations.sort_by_key(|v| entry_position(&v.field));
            return Err(InvalidInput { violations });
        }
        Ok(Occupancy {
            snapshot,
            residents,
        })
    }

    /// The snapshot it was validated against.
    pub fn snapshot(&self) -> &'s Snapshot {
        self.snapshot
    }

    /// The placed workloads of a node, in the order given (none for a handle of another
    /// snapshot).
    pub fn placed(&self, node: NodeId) -> impl ExactSizeIterator<Item = &PlacedWorkload> {
        self.residents
            .get(node.index())
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(|r| &r.workload)
    }

    pub(crate) fn residents(&self, node: NodeId) -> &[Resident] {
        self.residents
            .get(node.index())
            .map_or(&[][..], Vec::as_slice)
    }
}

/// The entry position of a `placed[i]...` field (stable sorting keeps each entry's order).
fn entry_position(field: &str) -> usize {
    field
        .strip_prefix("placed[")
        .and_then(|r| r.split(']').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
}

/// Running sums of the bookings on one card, with the dimensions already reported.
#[derive(Clone, Copy, Debug, Default)]
struct CardSums {
    slots: u64,
    mem: u128,
    cores: u64,
    reported: [bool; 3],
}

/// Validates and resolves the workloads of node `placed[i]`.
fn resolve_node(
    i: usize,
    node: &Node,
    entry: NodeWorkloads,
    limits: &PreemptLimits,
    violations: &mut Vec<Violation>,
) -> Vec<Resident> {
    let positions: HashMap<&str, usize> = node
        .cards
        .iter()
        .enumerate()
        .map(|(j, c)| (c.id.as_str(), j))
        .collect();
    let mut ids: HashMap<&str, usize> = HashMap::with_capacity(entry.workloads.len());
    let mut sums = vec![CardSums::default(); node.cards.len()];
    // The last workload (position + 1) that booked each card: a repeat within one workload.
    let mut booked_by = vec![0usize; node.cards.len()];
    let mut resolved = Vec::with_capacity(entry.workloads.len());
    // MIG instances named so far on the node: (card, start) -> the workload that named it.
    let mut taken: HashMap<(usize, u32), String> = HashMap::new();
    for (k, w) in entry.workloads.iter().enumerate() {
        let id_field = || format!("placed[{i}].workloads[{k}].id");
        if w.id.chars().all(char::is_whitespace) {
            violations.push(Violation::new(
                ViolationKind::MissingField,
                id_field(),
                if w.id.is_empty() {
                    "workload id must not be empty"
                } else {
                    "workload id must not be blank"
                },
            ));
        } else if w.id.len() > limits.max_id_bytes {
            violations.push(Violation::new(
                ViolationKind::LimitExceeded,
                id_field(),
                format!(
                    "workload id of {} bytes exceeds the limit of {}",
                    w.id.len(),
                    limits.max_id_bytes
                ),
            ));
        } else if let Some(first) = ids.get(w.id.as_str()) {
            violations.push(Violation::new(
                ViolationKind::DuplicateId,
                id_field(),
                format!(
                    "workload id {:?} is repeated on node {:?} (also workloads[{first}])",
                    w.id, entry.node
                ),
            ));
        } else {
            ids.insert(w.id.as_str(), k);
        }
        let mut holds = Vec::with_capacity(w.bookings.len());
        let mut instances = Vec::new();
        for (b, booking) in w.bookings.iter().enumerate() {
            let field = |name: &str| format!("placed[{i}].workloads[{k}].bookings[{b}].{name}");
            let Some(&pos) = positions.get(booking.card_id.as_str()) else {
                violations.push(Violation::new(
                    ViolationKind::UnknownReference,
                    field("card_id"),
                    format!(
                        "card {:?} is not a card of node {:?}",
                        booking.card_id, entry.node
                    ),
                ));
                continue;
            };
            if booked_by.get(pos) == Some(&(k + 1)) {
                violations.push(Violation::new(
                    ViolationKind::DuplicateId,
                    field("card_id"),
                    format!(
                        "workload {:?} books card {:?} twice (one booking per card)",
                        w.id, booking.card_id
                    ),
                ));
                continue;
            }
            if let Some(mark) = booked_by.get_mut(pos) {
                *mark = k + 1;
            }
            let card = node.cards.get(pos);
            match (
                card.and_then(|c| c.mig.as_deref()),
                booking.mig_instance_start,
            ) {
                (Some(layout), start) => {
                    let held = mig_booking(
                        (pos, layout, card),
                        &w.id,
                        booking,
                        start,
                        &mut taken,
                        &field,
                        violations,
                    );
                    if let Some((start, usage)) = held {
                        holds.push((pos, usage));
                        instances.push((pos, start));
                    }
                    continue;
                }
                (None, Some(_)) => {
                    violations.push(Violation::new(
                        ViolationKind::UnknownReference,
                        field("mig_instance_start"),
                        format!(
                            "card {:?} has no MIG layout: book slots, MiB and cores on it",
                            booking.card_id
                        ),
                    ));
                    continue;
                }
                (None, None) => {}
            }
            if booking.slots == 0 {
                violations.push(Violation::new(
                    ViolationKind::OutOfRange,
                    field("slots"),
                    "a booking holds at least 1 slot (each container on a card takes one)",
                ));
                continue;
            }
            if let (Some(card), Some(sum)) = (card, sums.get_mut(pos)) {
                add_to_card(sum, booking, card.usage, &card.id, &field, violations);
            }
            holds.push((
                pos,
                CardUsage {
                    used: booking.slots,
                    used_mem_mib: booking.mem_mib,
                    used_cores: booking.cores,
                },
            ));
        }
        resolved.push((holds, instances));
    }
    drop(ids);
    entry
        .workloads
        .into_iter()
        .zip(resolved)
        .map(|(workload, (holds, instances))| Resident {
            workload,
            holds,
            instances,
        })
        .collect()
}

/// A booking on a MIG card (section 9.1): the instance it names, in use and named by no other
/// booking of the node, with slots, MiB and cores left 0; what it holds is the instance's share
/// (11.5). `None` (with violations) when it is not such a booking.
fn mig_booking(
    card: (usize, &MigLayout, Option<&Card>),
    owner: &str,
    booking: &Booking,
    start: Option<u32>,
    taken: &mut HashMap<(usize, u32), String>,
    field: &dyn Fn(&str) -> String,
    violations: &mut Vec<Violation>,
) -> Option<(u32, CardUsage)> {
    let (pos, layout, card) = card;
    let Some(start) = start else {
        violations.push(Violation::new(
            ViolationKind::MissingField,
            field("mig_instance_start"),
            format!(
                "card {:?} is a MIG card: name the instance the workload holds (its first \
                 memory slice)",
                booking.card_id
            ),
        ));
        return None;
    };
    let before = violations.len();
    for (name, v) in [
        ("slots", u64::from(booking.slots)),
        ("mem_mib", booking.mem_mib),
        ("cores", u64::from(booking.cores)),
    ] {
        if v != 0 {
            violations.push(Violation::new(
                ViolationKind::OutOfRange,
                field(name),
                format!(
                    "a booking on MIG card {:?} names its instance and leaves {name} 0 (the \
                     instance holds its profile's share), got {v}",
                    booking.card_id
                ),
            ));
        }
    }
    let instance = layout
        .instances
        .iter()
        .find(|i| i.placement.start == start && i.is_in_use());
    let (Some(instance), Some(card)) = (instance, card) else {
        violations.push(Violation::new(
            ViolationKind::UnknownReference,
            field("mig_instance_start"),
            format!(
                "no instance in use starts at memory slice {start} on MIG card {:?}",
                booking.card_id
            ),
        ));
        return None;
    };
    if let Some(other) = taken.get(&(pos, start)) {
        violations.push(Violation::new(
            ViolationKind::DuplicateId,
            field("mig_instance_start"),
            format!(
                "the instance at {start} on card {:?} is already booked by workload {other:?}",
                booking.card_id
            ),
        ));
        return None;
    }
    taken.insert((pos, start), owner.to_owned());
    if violations.len() > before {
        return None;
    }
    let (mem, cores) = layout.profile(&instance.profile).map_or((0, 0), |p| {
        layout.share(p, card.total_mem_mib, card.total_cores)
    });
    Some((
        start,
        CardUsage {
            used: 1,
            used_mem_mib: mem,
            used_cores: cores,
        },
    ))
}

/// Adds one booking to its card's sums; reports each dimension once, at the booking where the
/// sum first goes above the card's usage.
fn add_to_card(
    sum: &mut CardSums,
    booking: &Booking,
    usage: CardUsage,
    card_id: &str,
    field: &dyn Fn(&str) -> String,
    violations: &mut Vec<Violation>,
) {
    sum.slots += u64::from(booking.slots);
    sum.mem += u128::from(booking.mem_mib);
    sum.cores += u64::from(booking.cores);
    let dims: [(&str, u128, u128, &str); 3] = [
        (
            "slots",
            u128::from(sum.slots),
            u128::from(usage.used),
            "used",
        ),
        (
            "mem_mib",
            sum.mem,
            u128::from(usage.used_mem_mib),
            "used_mem_mib",
        ),
        (
            "cores",
            u128::from(sum.cores),
            u128::from(usage.used_cores),
            "used_cores",
        ),
    ];
    for (d, (name, total, limit, usage_name)) in dims.into_iter().enumerate() {
        if total > limit && !sum.reported[d] {
            sum.reported[d] = true;
            violations.push(Violation::new(
                ViolationKind::OutOfRange,
                field(name),
                format!(
                    "bookings on card {card_id:?} sum to {total} {name}, above its {usage_name} \
                     of {limit}"
                ),
            ));
        }
    }
}
