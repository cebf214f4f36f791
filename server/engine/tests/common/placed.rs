//! Builders for preemption tests: placed workloads and nodes whose usage is what they hold.

use gpusched_engine::{Booking, Card, CardUsage, NodeSpec, NodeWorkloads, PlacedWorkload};

/// A placed workload `id` of `priority`, started at 0 ms, holding nothing yet.
pub fn held(id: &str, priority: i32) -> PlacedWorkload {
    PlacedWorkload {
        id: id.to_owned(),
        priority,
        violates_budget: false,
        start_time_ms: 0,
        bookings: Vec::new(),
    }
}

/// Placed-workload builder helpers.
pub trait PlacedExt {
    /// Books `slots`, `mem` MiB and `cores` on card `card`.
    fn on(self, card: &str, slots: u32, mem: u64, cores: u32) -> PlacedWorkload;
    /// Holds the MIG instance starting at `start` on card `card`.
    fn instance(self, card: &str, start: u32) -> PlacedWorkload;
    /// Evicting it violates a budget.
    fn budget(self) -> PlacedWorkload;
    /// Started at `ms`.
    fn started(self, ms: i64) -> PlacedWorkload;
}

impl PlacedExt for PlacedWorkload {
    fn on(mut self, card: &str, slots: u32, mem: u64, cores: u32) -> PlacedWorkload {
        self.bookings.push(Booking {
            mig_instance_start: None,
            card_id: card.to_owned(),
            slots,
            mem_mib: mem,
            cores,
        });
        self
    }
    fn instance(mut self, card: &str, start: u32) -> PlacedWorkload {
        self.bookings.push(Booking {
            card_id: card.to_owned(),
            slots: 0,
            mem_mib: 0,
            cores: 0,
            mig_instance_start: Some(start),
        });
        self
    }
    fn budget(mut self) -> PlacedWorkload {
        self.violates_budget = true;
        self
    }
    fn started(mut self, ms: i64) -> PlacedWorkload {
        self.start_time_ms = ms;
        self
    }
}

/// Node `name` with `cards`, each card's usage set to what `workloads` hold on it plus its
/// usage as given (unaccounted), and the placed-workload entry for it.
pub fn occupied(
    name: &str,
    mut cards: Vec<Card>,
    workloads: Vec<PlacedWorkload>,
) -> (NodeSpec, NodeWorkloads) {
    for card in &mut cards {
        for w in &workloads {
            for b in w.bookings.iter().filter(|b| b.card_id == card.id) {
                card.usage = CardUsage {
                    used: card.usage.used + b.slots,
                    used_mem_mib: card.usage.used_mem_mib + b.mem_mib,
                    used_cores: card.usage.used_cores + b.cores,
                };
            }
        }
    }
    (
        NodeSpec::new(name, cards),
        NodeWorkloads {
            node: name.to_owned(),
            workloads,
        },
    )
}
