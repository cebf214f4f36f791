//! The cluster at a glance: every GPU node in scope with its cards as the service sees them
//! (capacity and usage of the view's snapshot: the same nodes the extender sends), who books
//! each card, and the totals, allocation and fragmentation, measured by the simulator's code
//! (`gpusched_client::measure`).

use std::collections::{BTreeMap, HashMap};

use gpusched_client::measure::{self, Need};
use gpusched_client::v1;
use kube::ResourceExt;

use crate::quota::{Limit, NamespaceQuota};
use crate::view::{ClusterView, Holder};
use crate::web::ask::Ask;
use crate::web::model::{
    Board, CardBooking, CardCell, Extra, NamespaceUse, NodeRow, RequestClass, Totals, UnusableNode,
    Used,
};
use crate::web::selector::Selector;
use crate::web::units::thousands;

fn mode_name(m: i32) -> String {
    match v1::CardMode::try_from(m) {
        Ok(v1::CardMode::Mig) => "mig",
        Ok(v1::CardMode::Mps) => "mps",
        _ => "hami-core",
    }
    .to_owned()
}

/// What each pod books per card: (node, card id) → (namespace, name) → (slots, MiB, cores).
type Bookings<'a> = HashMap<(&'a str, &'a str), BTreeMap<(&'a str, &'a str), (u32, u64, u32)>>;

fn bookings_by_card(holders: &[Holder]) -> Bookings<'_> {
    let mut out: Bookings<'_> = HashMap::new();
    for h in holders {
        for b in h.usage.bookings.iter().flatten() {
            let e = out
                .entry((h.usage.node.as_str(), b.uuid.as_str()))
                .or_default()
                .entry((h.namespace.as_str(), h.name.as_str()))
                .or_default();
            e.0 += 1;
            e.1 += b.mem_mib;
            e.2 += b.cores;
        }
    }
    out
}

/// What a MIG card holds: its instances (profile at start slice, and who holds each) and how
/// many of its memory slices they occupy.
pub fn mig_extras(m: &v1::MigLayout) -> Vec<Extra> {
    let mut instances: Vec<&v1::MigInstance> = m.instances.iter().collect();
    instances.sort_by_key(|i| i.start);
    let used: u32 = instances.iter().map(|i| i.size).sum();
    let list: Vec<String> = instances
        .iter()
        .map(|i| {
            let who = if i.in_use_by.is_empty() {
                "free"
            } else {
                i.in_use_by.as_str()
            };
            format!("{}@{} {who}", i.profile, i.start)
        })
        .collect();
    vec![
        Extra {
            label: "MIG slices".into(),
            value: format!("{used}/{} memory", m.memory_slices),
        },
        Extra {
            label: "MIG".into(),
            value: if list.is_empty() {
                "no instance".into()
            } else {
                list.join(", ")
            },
        },
    ]
}

/// One card's cell.
fn cell(node: &v1::Node, c: &v1::Card, bookings: &Bookings<'_>) -> CardCell {
    let u = c.usage.unwrap_or_default();
    let pods = bookings
        .get(&(node.name.as_str(), c.id.as_str()))
        .map(|m| {
            m.iter()
                .map(|(&(ns, name), &(slots, mem_mib, cores))| CardBooking {
                    pod: format!("{ns}/{name}"),
                    slots,
                    mem_mib,
                    cores,
                })
                .collect()
        })
        .unwrap_or_default();
    CardCell {
        id: c.id.clone(),
        index: c.index,
        model: c.r#type.clone(),
        mode: mode_name(c.mode),
        healthy: c.health == v1::CardHealth::Healthy as i32,
        cordoned: node.cordoned_card_ids.iter().any(|id| id == &c.id),
        slots: Used {
            used: u64::from(u.used_slots),
            total: u64::from(c.slots),
        },
        mem_mib: Used {
            used: u.used_mem_mib,
            total: c.total_mem_mib,
        },
        cores: Used {
            used: u64::from(u.used_cores),
            total: u64::from(c.total_cores),
        },
        pods,
        extras: c.mig.as_ref().map(mig_extras).unwrap_or_default(),
    }
}

/// The per-card need of every GPU container holding cards (its first card's booking stands for
/// each of its cards).
fn holder_needs(holders: &[Holder]) -> Vec<Need> {
    holders
        .iter()
        .flat_map(|h| h.usage.bookings.iter())
        .filter_map(|c| {
            let first = c.first()?;
            Some(Need {
                count: u32::try_from(c.len()).unwrap_or(u32::MAX),
                cores: first.cores,
                mem_mib: first.mem_mib,
                mem_percent: 0,
            })
        })
        .collect()
}

/// The board of the GPU nodes in scope; `pending_needs` are the per-card needs of the pending
/// pods analysed (added to the fragmentation measure's classes), `pending` their number.
pub fn board(ask: &Ask<'_>, pending_needs: &[Need], pending: usize) -> Board {
    let names = ask.node_names(&Selector::default());
    let snap = ask.view.snapshot(&names, "");
    let unschedulable: HashMap<String, bool> = ask
        .view
        .nodes()
        .iter()
        .map(|n| {
            (
                n.name_any(),
                n.spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false),
            )
        })
        .collect();
    let in_scope: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    let holders: Vec<Holder> = ask
        .view
        .holders()
        .into_iter()
        .filter(|h| in_scope.contains(h.usage.node.as_str()))
        .collect();
    let bookings = bookings_by_card(&holders);
    let rows: Vec<NodeRow> = snap
        .nodes
        .iter()
        .map(|n| {
            let mut cards: Vec<&v1::Card> = n.cards.iter().collect();
            cards.sort_by(|a, b| a.index.cmp(&b.index).then(a.id.cmp(&b.id)));
            NodeRow {
                name: n.name.clone(),
                unschedulable: unschedulable.get(&n.name).copied().unwrap_or(false),
                cards: cards.into_iter().map(|c| cell(n, c, &bookings)).collect(),
            }
        })
        .collect();
    let classes = measure::request_classes(
        holder_needs(&holders)
            .into_iter()
            .chain(pending_needs.iter().copied()),
    );
    let totals = totals(&rows, &snap.nodes, &classes, &holders, pending);
    Board {
        selector: ask.scope.text(),
        totals,
        nodes: rows,
        unusable: snap
            .unusable
            .iter()
            .map(|(name, reason, _)| UnusableNode {
                name: name.clone(),
                reason: reason.clone(),
            })
            .collect(),
        namespaces: namespaces(ask.view, &holders),
    }
}

fn totals(
    rows: &[NodeRow],
    nodes: &[std::sync::Arc<v1::Node>],
    classes: &[(Need, f64)],
    holders: &[Holder],
    pending: usize,
) -> Totals {
    let cards = rows.iter().flat_map(|r| &r.cards);
    let sum = |f: fn(&CardCell) -> Used| {
        cards.clone().map(f).fold(Used::default(), |a, b| Used {
            used: a.used + b.used,
            total: a.total + b.total,
        })
    };
    let mut pods: Vec<(&str, &str)> = holders
        .iter()
        .map(|h| (h.namespace.as_str(), h.name.as_str()))
        .collect();
    pods.sort_unstable();
    pods.dedup();
    Totals {
        nodes: rows.len(),
        cards: cards.clone().count(),
        unhealthy_cards: cards.clone().filter(|c| !c.healthy).count(),
        cordoned_cards: cards.clone().filter(|c| c.cordoned).count(),
        unschedulable_nodes: rows.iter().filter(|r| r.unschedulable).count(),
        states: measure::card_states(nodes),
        slots: sum(|c| c.slots),
        mem_mib: sum(|c| c.mem_mib),
        cores: sum(|c| c.cores),
        allocation_pct: measure::allocation_ratio(nodes) * 100.0,
        fragmentation_pct: measure::fragmentation(nodes, classes) * 100.0,
        request_classes: classes
            .iter()
            .map(|(n, share)| RequestClass {
                mem_mib: n.mem_mib,
                mem_percent: n.mem_percent,
                cores: n.cores,
                share: *share,
            })
            .collect(),
        pods_bound: pods.len(),
        pods_pending: pending,
    }
}

/// A namespace's GPU quota as extras: per limited resource, what it holds against the limit.
pub fn quota_extras(q: &NamespaceQuota) -> Vec<Extra> {
    let part = |what: &str, unit: &str, l: &Option<Limit>, used: u64| -> Option<Extra> {
        let l = l.as_ref()?;
        let value = match &l.invalid {
            Some(e) => format!(
                "{} of ResourceQuota {} unreadable ({e}): counts as 0",
                l.key, l.quota
            ),
            None => format!(
                "{} / {}{unit} ({}, ResourceQuota {})",
                thousands(used),
                thousands(l.value),
                l.key,
                l.quota
            ),
        };
        Some(Extra {
            label: format!("quota {what}"),
            value,
        })
    };
    [
        part("memory", " MiB", &q.limits.memory, q.used.mem_mib),
        part("cores", "%", &q.limits.cores, q.used.cores),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Bookings per namespace, with its GPU quota when one applies.
fn namespaces(view: &ClusterView, holders: &[Holder]) -> Vec<NamespaceUse> {
    let mut by_ns: BTreeMap<&str, (std::collections::BTreeSet<&str>, NamespaceUse)> =
        BTreeMap::new();
    for h in holders {
        let (pods, u) = by_ns.entry(h.namespace.as_str()).or_insert_with(|| {
            (
                Default::default(),
                NamespaceUse {
                    namespace: h.namespace.clone(),
                    ..NamespaceUse::default()
                },
            )
        });
        pods.insert(h.name.as_str());
        let mut cards = std::collections::BTreeSet::new();
        for b in h.usage.bookings.iter().flatten() {
            cards.insert(b.uuid.as_str());
            u.mem_mib += b.mem_mib;
            u.cores += u64::from(b.cores);
        }
        u.cards += cards.len();
    }
    by_ns
        .into_values()
        .map(|(pods, mut u)| {
            u.pods = pods.len();
            if let Some(q) = view.quota(&u.namespace, "") {
                u.extras = quota_extras(&q);
            }
            u
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mig_instances_read_as_extras() {
        let inst = |profile: &str, start: u32, size: u32, by: &str| v1::MigInstance {
            profile: profile.into(),
            start,
            size,
            in_use_by: by.into(),
        };
        let m = v1::MigLayout {
            compute_slices: 7,
            memory_slices: 8,
            profiles: vec![],
            instances: vec![inst("1g.10gb", 6, 1, ""), inst("3g.40gb", 0, 4, "ns/a")],
        };
        let got: Vec<(String, String)> = mig_extras(&m)
            .into_iter()
            .map(|e| (e.label, e.value))
            .collect();
        assert_eq!(
            got,
            [
                ("MIG slices".to_owned(), "5/8 memory".to_owned()),
                (
                    "MIG".to_owned(),
                    "3g.40gb@0 ns/a, 1g.10gb@6 free".to_owned()
                )
            ]
        );
        let empty = v1::MigLayout {
            memory_slices: 8,
            ..v1::MigLayout::default()
        };
        assert_eq!(mig_extras(&empty)[1].value, "no instance");
    }
}
