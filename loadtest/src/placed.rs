//! Placed workloads for `--rpc preempt` (docs/placement-semantics.md 9.1): each node's card
//! usage split among `--placed-per-node` workloads, seeded like the rest (stream 2 of the seed,
//! so the cluster and the pending workloads do not change). Every used slot of a card is one
//! container of some workload, holding an equal share of the card's MiB and cores (rounded
//! down, so the bookings never exceed the usage); the slots of a node go to its workloads in
//! turn. Priorities are drawn from 0, 100, 500 and 1000, one workload in ten violates a budget,
//! starts fall in the hour before 2026-01-01.
//!
//! The placed workloads are the same for every request of the pool: they are encoded once with
//! the nodes (fields 1, 4 and 5 of `PreemptRequest`; fields 2 and 3, the workload and options,
//! are Allocate's), so a preempt request costs the client no more than an Allocate.

use std::collections::BTreeMap;

use bytes::Bytes;
use gpusched_api::v1;
use prost::Message as _;
use rand::Rng as _;
use rand::SeedableRng as _;
use rand_chacha::ChaCha8Rng;

use crate::synth::Pool;

/// 2026-01-01T00:00:00Z, ms.
const EPOCH_2026_MS: i64 = 1_767_225_600_000;

/// The placed workloads of every node: `per_node` each (ids `<node>/w<k>`).
pub fn placed(nodes: &[v1::Node], per_node: usize, seed: u64) -> Vec<v1::NodePlaced> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(2);
    let per_node = per_node.max(1);
    nodes
        .iter()
        .map(|n| {
            let mut bookings: Vec<BTreeMap<&str, v1::Booking>> = vec![BTreeMap::new(); per_node];
            let mut next = 0usize;
            for c in &n.cards {
                let Some(u) = &c.usage else { continue };
                let slots = u.used_slots.max(1);
                for _ in 0..u.used_slots {
                    let b = bookings[next % per_node]
                        .entry(c.id.as_str())
                        .or_insert_with(|| v1::Booking {
                            card_id: c.id.clone(),
                            ..v1::Booking::default()
                        });
                    b.slots += 1;
                    b.mem_mib += u.used_mem_mib / u64::from(slots);
                    b.cores += u.used_cores / slots;
                    next += 1;
                }
            }
            let workloads = bookings
                .into_iter()
                .enumerate()
                .map(|(k, b)| v1::PlacedWorkload {
                    id: format!("{}/w{k}", n.name),
                    priority: [0, 100, 500, 1000][rng.random_range(0..4)],
                    violates_budget: rng.random_bool(0.1),
                    start_time_ms: EPOCH_2026_MS - rng.random_range(0..3_600_000),
                    bookings: b.into_values().collect(),
                })
                .collect();
            v1::NodePlaced {
                node: n.name.clone(),
                workloads,
            }
        })
        .collect()
}

/// Turns the pool into `PreemptRequest`s: the pending workloads of `priority` over the nodes
/// with `per_node` placed workloads each.
pub fn apply(pool: &mut Pool, per_node: usize, priority: i32, seed: u64) {
    let nodes = Bytes::from(
        v1::PreemptRequest {
            nodes: pool.nodes.clone(),
            priority,
            placed: placed(&pool.nodes, per_node, seed),
            ..v1::PreemptRequest::default()
        }
        .encode_to_vec(),
    );
    for e in &mut pool.encoded {
        e.nodes = nodes.clone();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::synth::{ClusterSpec, Form, Mix};

    #[test]
    fn bookings_split_each_cards_usage_and_never_exceed_it() {
        let pool = Pool::build(
            &ClusterSpec::new(20, 8),
            &Mix::default(),
            Form::Kubernetes,
            4,
            7,
        );
        let placed = placed(&pool.nodes, 10, 7);
        assert_eq!(placed.len(), 20);
        for (n, p) in pool.nodes.iter().zip(&placed) {
            assert_eq!(p.workloads.len(), 10);
            for c in &n.cards {
                let (mut slots, mut mem, mut cores) = (0, 0, 0);
                for b in p.workloads.iter().flat_map(|w| &w.bookings) {
                    if b.card_id == c.id {
                        assert!(b.slots >= 1);
                        slots += b.slots;
                        mem += b.mem_mib;
                        cores += b.cores;
                    }
                }
                let u = c.usage.unwrap_or_default();
                assert_eq!(slots, u.used_slots, "every used slot is some workload's");
                assert!(mem <= u.used_mem_mib && cores <= u.used_cores);
            }
            let ids: std::collections::HashSet<&str> =
                p.workloads.iter().map(|w| w.id.as_str()).collect();
            assert_eq!(ids.len(), 10, "unique ids");
        }
        assert_eq!(placed, super::placed(&pool.nodes, 10, 7), "seeded");
    }

    #[test]
    fn the_preempt_request_decodes_with_the_pools_workload() {
        let mut pool = Pool::build(
            &ClusterSpec::new(5, 4),
            &Mix::default(),
            Form::Kubernetes,
            2,
            1,
        );
        apply(&mut pool, 3, 800, 1);
        let r = v1::PreemptRequest::decode(pool.encoded[1].to_vec().as_slice()).unwrap();
        assert_eq!(r.nodes.len(), 5);
        assert_eq!(r.priority, 800);
        assert_eq!(r.placed.len(), 5);
        assert_eq!(r.workload, Some(pool.workloads[1].1.clone()));
    }
}
