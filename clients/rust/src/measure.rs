//! Cluster measures over nodes with their usage: card states, allocation and expected
//! fragmentation. One piece of code for every tool that reports them: the simulator
//! (`gpusched-sim`, over its replayed cluster) and the Kubernetes shim's operator view
//! (`gpusched-kube`, over the cluster it sees), so that the same cluster gives the same numbers
//! in both.
//!
//! These are measures, not decisions: [`card_may_fit`] is a necessary condition of the service's
//! fit rules (free slot, cores and memory), used to classify free capacity; where a workload goes
//! is always the service's answer. Nodes are taken as anything that borrows a `v1::Node` (the
//! nodes themselves, or the `Arc`s a cluster view shares).

use std::borrow::Borrow;
use std::collections::BTreeMap;

use gpusched_api::v1;
use serde::{Deserialize, Serialize};

/// What one container asks of each of its cards, as far as a measure needs to know it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Need {
    /// Cards wanted.
    pub count: u32,
    /// Cores per card, percent (0 = not known).
    pub cores: u32,
    /// Memory per card, MiB (0 = not fixed).
    pub mem_mib: u64,
    /// Memory per card, percent of the card (0 = not given).
    pub mem_percent: u32,
}

/// Counts of cards by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CardStates {
    /// Cards with nothing booked.
    pub idle: usize,
    /// Cards with something booked that can still take more.
    pub partial: usize,
    /// Cards with all cores, all memory or all slots booked.
    pub full: usize,
}

fn usage(c: &v1::Card) -> v1::CardUsage {
    c.usage.unwrap_or_default()
}

/// Memory a need books on a card: its MiB, else its percentage of the card (floored, as HAMi
/// does).
pub fn need_mem(n: &Need, c: &v1::Card) -> u64 {
    if n.mem_mib > 0 {
        n.mem_mib
    } else {
        c.total_mem_mib.saturating_mul(u64::from(n.mem_percent)) / 100
    }
}

/// Whether a card could take one card of `n` right now: healthy, a free slot, enough free cores
/// and memory. A necessary condition of the service's fit rules (the service decides).
pub fn card_may_fit(c: &v1::Card, n: &Need) -> bool {
    let u = usage(c);
    if c.health != v1::CardHealth::Healthy as i32 || u.used_slots >= c.slots {
        return false;
    }
    let free_cores = c.total_cores.saturating_sub(u.used_cores);
    let free_mem = c.total_mem_mib.saturating_sub(u.used_mem_mib);
    free_cores >= n.cores && free_mem >= need_mem(n, c)
}

/// Every card of `nodes` with whether it takes new work at all (a card cordoned on its node
/// takes none, like an unhealthy one).
fn cards<N: Borrow<v1::Node>>(nodes: &[N]) -> impl Iterator<Item = (&v1::Card, bool)> {
    nodes.iter().map(Borrow::borrow).flat_map(|n: &v1::Node| {
        n.cards
            .iter()
            .map(move |c| (c, !n.cordoned_card_ids.iter().any(|id| id == &c.id)))
    })
}

/// Cards by state (cordoned and unhealthy cards included: a state is about what is booked).
pub fn card_states<N: Borrow<v1::Node>>(nodes: &[N]) -> CardStates {
    let mut s = CardStates::default();
    for (c, _) in cards(nodes) {
        let u = usage(c);
        if u.used_slots == 0 && u.used_cores == 0 && u.used_mem_mib == 0 {
            s.idle += 1;
        } else if u.used_cores >= c.total_cores
            || u.used_mem_mib >= c.total_mem_mib
            || u.used_slots >= c.slots
        {
            s.full += 1;
        } else {
            s.partial += 1;
        }
    }
    s
}

/// Booked compute over all compute (cores percent summed), 0..1; 0 without cards.
pub fn allocation_ratio<N: Borrow<v1::Node>>(nodes: &[N]) -> f64 {
    let (used, total) = cards(nodes).fold((0u64, 0u64), |(u, t), (c, _)| {
        (
            u + u64::from(usage(c).used_cores.min(c.total_cores)),
            t + u64::from(c.total_cores),
        )
    });
    if total == 0 {
        0.0
    } else {
        used as f64 / total as f64
    }
}

/// Expected fragmentation (the card-level form of Weng et al.'s measure): of the free compute,
/// the share that sits on cards where a request drawn from `classes` (per-card needs with their
/// popularity, see [`request_classes`]) could not fit. 0..1; 0 when nothing is free. A cordoned
/// card fits nothing, so all of its free compute counts as fragmented.
pub fn fragmentation<N: Borrow<v1::Node>>(nodes: &[N], classes: &[(Need, f64)]) -> f64 {
    let mut free_total = 0.0;
    let mut frag = 0.0;
    for (c, takes_work) in cards(nodes) {
        let free = f64::from(c.total_cores.saturating_sub(usage(c).used_cores));
        if free <= 0.0 {
            continue;
        }
        free_total += free;
        let miss: f64 = classes
            .iter()
            .filter(|(n, _)| !takes_work || !card_may_fit(c, n))
            .map(|(_, p)| p)
            .sum();
        frag += free * miss;
    }
    if free_total > 0.0 {
        frag / free_total
    } else {
        0.0
    }
}

/// The per-card request classes of a set of container needs with their popularity (each need
/// counted once per container, as one card of it; shares sum to 1), sorted by need.
pub fn request_classes(needs: impl IntoIterator<Item = Need>) -> Vec<(Need, f64)> {
    let mut counts: BTreeMap<Need, usize> = BTreeMap::new();
    let mut n = 0usize;
    for need in needs {
        *counts.entry(Need { count: 1, ..need }).or_default() += 1;
        n += 1;
    }
    counts
        .into_iter()
        .map(|(k, c)| (k, c as f64 / n.max(1) as f64))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(id: &str, used_cores: u32, used_mem: u64, used_slots: u32) -> v1::Card {
        v1::Card {
            id: id.into(),
            slots: 10,
            total_mem_mib: 16384,
            total_cores: 100,
            health: v1::CardHealth::Healthy as i32,
            usage: (used_slots > 0).then_some(v1::CardUsage {
                used_slots,
                used_mem_mib: used_mem,
                used_cores,
            }),
            ..v1::Card::default()
        }
    }

    fn need(cores: u32) -> Need {
        Need {
            count: 1,
            cores,
            mem_mib: 0,
            mem_percent: cores,
        }
    }

    fn node(name: &str, cards: Vec<v1::Card>, cordoned: &[&str]) -> v1::Node {
        v1::Node {
            name: name.into(),
            cards,
            cordoned_card_ids: cordoned.iter().map(|s| (*s).to_owned()).collect(),
            ..v1::Node::default()
        }
    }

    /// Each row: the cards' (used cores, used MiB, used slots), cordoned card ids, the request
    /// classes, then the expected states, allocation and fragmentation.
    #[test]
    fn measures_over_nodes() {
        struct Case {
            used: &'static [(u32, u64, u32)],
            cordoned: &'static [&'static str],
            classes: Vec<(Need, f64)>,
            states: CardStates,
            allocation: f64,
            fragmentation: f64,
        }
        let cases = [
            // Free: 50 on the used card, 100 on the idle one. A 30% request fits both; an 80%
            // request misses the used card: 0.5 * 50 / 150.
            Case {
                used: &[(50, 8192, 1), (0, 0, 0)],
                cordoned: &[],
                classes: vec![(need(30), 0.5), (need(80), 0.5)],
                states: CardStates {
                    idle: 1,
                    partial: 1,
                    full: 0,
                },
                allocation: 50.0 / 200.0,
                fragmentation: 25.0 / 150.0,
            },
            // The same with the idle card cordoned: its 100 free count as missed by both.
            Case {
                used: &[(50, 8192, 1), (0, 0, 0)],
                cordoned: &["g1"],
                classes: vec![(need(30), 0.5), (need(80), 0.5)],
                states: CardStates {
                    idle: 1,
                    partial: 1,
                    full: 0,
                },
                allocation: 50.0 / 200.0,
                fragmentation: (25.0 + 100.0) / 150.0,
            },
            // Full by slots, by memory; nothing free at all: fragmentation 0.
            Case {
                used: &[(100, 100, 1), (10, 16384, 10)],
                cordoned: &[],
                classes: vec![(need(10), 1.0)],
                states: CardStates {
                    idle: 0,
                    partial: 0,
                    full: 2,
                },
                allocation: 110.0 / 200.0,
                fragmentation: 1.0,
            },
            // No classes: nothing is missed.
            Case {
                used: &[(0, 0, 0)],
                cordoned: &[],
                classes: vec![],
                states: CardStates {
                    idle: 1,
                    partial: 0,
                    full: 0,
                },
                allocation: 0.0,
                fragmentation: 0.0,
            },
        ];
        for (i, c) in cases.iter().enumerate() {
            let cards = c
                .used
                .iter()
                .enumerate()
                .map(|(k, &(co, m, s))| card(&format!("g{k}"), co, m, s))
                .collect();
            let nodes = [node("n", cards, c.cordoned)];
            assert_eq!(card_states(&nodes), c.states, "case {i}");
            assert!(
                (allocation_ratio(&nodes) - c.allocation).abs() < 1e-12,
                "case {i}"
            );
            let f = fragmentation(&nodes, &c.classes);
            assert!((f - c.fragmentation).abs() < 1e-12, "case {i}: {f}");
        }
        assert_eq!(allocation_ratio::<v1::Node>(&[]), 0.0);
    }

    #[test]
    fn a_card_fits_a_need_by_slot_cores_memory_and_health() {
        let mut sick = card("s", 0, 0, 0);
        sick.health = v1::CardHealth::Unhealthy as i32;
        let mib = Need {
            mem_mib: 8193,
            ..need(10)
        };
        // (card, need, fits)
        let rows = [
            (card("a", 0, 0, 0), need(100), true),
            (card("a", 1, 0, 1), need(100), false),
            (card("a", 50, 8192, 1), need(50), true),
            (card("a", 50, 8192, 1), mib, false),
            (card("a", 0, 0, 10), need(1), false),
            (sick, need(1), false),
        ];
        for (c, n, fits) in rows {
            assert_eq!(card_may_fit(&c, &n), fits, "{c:?} {n:?}");
        }
    }

    #[test]
    fn classes_are_shares_of_one_card_needs() {
        let two = Need {
            count: 2,
            ..need(30)
        };
        let got = request_classes([two, need(30), need(80), need(80)]);
        assert_eq!(got, vec![(need(30), 0.5), (need(80), 0.5)]);
        assert!(request_classes([]).is_empty());
    }
}
