//! Device and node scores.
//!
//! Arithmetic: each ratio is an `f64` division of two integers (exact inputs below 2^53), summed
//! in a fixed order, so the same input gives the same bits on every platform. Scores are
//! *compared* through a key: the score (computed with the weights normalised to sum 1, which
//! does not change the order) multiplied by 10^9 and rounded to an integer. Two scores closer
//! than [`SCORE_RESOLUTION`] are therefore a tie, and ties go to the explicit tie-breaks
//! (NUMA, index, id for cards; name for nodes). Integer keys make every comparison a total
//! order.

use std::cmp::Ordering;

use crate::frag::Fragmentation;
use crate::model::{Card, CardUsage, NodeSums};
use crate::policy::NodePolicy;
use crate::weights::ScoringWeights;
use crate::workload::ContainerRequest;

/// Scores closer than this are equal.
pub const SCORE_RESOLUTION: f64 = 1e-9;

/// Integer comparison key of a score.
pub(crate) fn quantize(score: f64) -> i64 {
    // Scores are never negative or NaN (denominators are checked): adding one half and
    // truncating rounds half up; `as` saturates at the i64 range.
    (score / SCORE_RESOLUTION + 0.5) as i64
}

/// The three terms of a device score, weights and the factor 10 applied.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub struct ScoreTerms {
    /// `10 * w_slot * (used + 1) / count`.
    pub slot: f64,
    /// `10 * w_core * (used_cores + cores) / total_cores`.
    pub core: f64,
    /// `10 * w_mem * (used_mem + mem) / total_mem`.
    pub memory: f64,
}

impl ScoreTerms {
    /// The device score.
    pub fn total(&self) -> f64 {
        self.slot + self.core + self.memory
    }
}

/// Predicted utilisations of a card after placing one container on it: slot, core, memory.
/// All zero when the card has no slots, cores or memory (such a card scores 0).
fn ratios(card: &Card, usage: CardUsage, req: &ContainerRequest) -> [f64; 3] {
    ratios_after(card, usage, req.cores, req.score_mem(card))
}

/// The ratios after one more slot, `cores` and `mem` on the card.
fn ratios_after(card: &Card, usage: CardUsage, cores: u32, mem: u64) -> [f64; 3] {
    if card.count == 0 || card.total_cores == 0 || card.total_mem_mib == 0 {
        return [0.0; 3];
    }
    let slot = (f64::from(usage.used) + 1.0) / f64::from(card.count);
    let core = (f64::from(usage.used_cores) + f64::from(cores)) / f64::from(card.total_cores);
    let mem = (usage.used_mem_mib as f64 + mem as f64) / card.total_mem_mib as f64;
    [slot, core, mem]
}

/// The device score terms of a card that books `booked` (a MIG instance's slices, section 11.5)
/// instead of a request's cores and memory.
pub(crate) fn booking_score(
    card: &Card,
    usage: CardUsage,
    booked: CardUsage,
    w: ScoringWeights,
) -> ScoreTerms {
    let [s, c, m] = ratios_after(card, usage, booked.used_cores, booked.used_mem_mib);
    ScoreTerms {
        slot: 10.0 * w.slot as f64 * s,
        core: 10.0 * w.core as f64 * c,
        memory: 10.0 * w.memory as f64 * m,
    }
}

/// Comparison key of [`booking_score`], from weights normalised to sum 1.
pub(crate) fn booking_key(card: &Card, usage: CardUsage, booked: CardUsage, norm: [f64; 3]) -> i64 {
    let [s, c, m] = ratios_after(card, usage, booked.used_cores, booked.used_mem_mib);
    quantize(10.0 * (norm[0] * s + norm[1] * c + norm[2] * m))
}

/// The device score of `card` for `req` against `usage` (`docs/placement-semantics.md` section 4).
pub fn device_score(
    card: &Card,
    usage: CardUsage,
    req: &ContainerRequest,
    w: ScoringWeights,
) -> ScoreTerms {
    let [s, c, m] = ratios(card, usage, req);
    ScoreTerms {
        slot: 10.0 * w.slot as f64 * s,
        core: 10.0 * w.core as f64 * c,
        memory: 10.0 * w.memory as f64 * m,
    }
}

/// Comparison key of the device score, from weights normalised to sum 1.
pub(crate) fn device_key(
    card: &Card,
    usage: CardUsage,
    req: &ContainerRequest,
    norm: [f64; 3],
) -> i64 {
    let [s, c, m] = ratios(card, usage, req);
    quantize(10.0 * (norm[0] * s + norm[1] * c + norm[2] * m))
}

/// The resolution of node policy `fgd`, in cores of expected fragmentation (percent of a
/// card): changes of fragmentation that fall in the same step of this many cores tie, and the
/// host match then the node score decide (section 12.3). About the artifact's score resolution
/// (one point of `sigmoid(Δ/1000) × 100` is about 40 milli-GPU near 0).
pub const FRAG_STEP_CORES: u64 = 4;

/// A node score with its comparison key.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeScore {
    /// `10 * (Σused/Σcount + Σused_cores/Σtotal_cores + Σused_mem/Σtotal_mem)`.
    pub raw: f64,
    pub(crate) key: i64,
    /// Under node policy `fgd`: the node's fragmentation before and after the placement
    /// (section 12.3); `None` under the other policies.
    pub fragmentation: Option<Fragmentation>,
    /// Under node policy `fgd` on a node with host resources: how far the workload's host CPU
    /// per booked GPU compute is from the node's free CPU per free GPU compute before the
    /// placement, as the fraction `|c·G − C·g| / (g·G)` (numerator, denominator); section 12.3.
    pub(crate) host_match: Option<(u128, u128)>,
}

impl NodeScore {
    /// The same score with the host match of `node_host` for a workload asking `cpu_milli`
    /// and booking `booked` cores on a node with `free_gpu` free cores before.
    pub(crate) fn with_host_match(
        self,
        node_host: Option<crate::host::HostResources>,
        cpu_milli: u64,
        free_gpu: u64,
        booked: u64,
    ) -> NodeScore {
        let host_match = node_host.and_then(|h| {
            if cpu_milli == 0 || free_gpu == 0 || booked == 0 {
                return None;
            }
            let big_c = u128::try_from(h.free_cpu_milli.max(0)).unwrap_or(0);
            let (c, g, big_g) = (
                u128::from(cpu_milli),
                u128::from(booked),
                u128::from(free_gpu),
            );
            let num = (c * big_g).abs_diff(big_c * g);
            Some((num, g * big_g))
        });
        NodeScore { host_match, ..self }
    }

    /// The same score with the node's fragmentation before and after.
    pub(crate) fn with_fragmentation(self, f: Fragmentation) -> NodeScore {
        NodeScore {
            fragmentation: Some(f),
            ..self
        }
    }

    /// `after - before` of the fragmentation, exact; 0 without one.
    fn frag_delta(&self) -> i128 {
        self.fragmentation.map_or(0, |f| f.weighted_delta())
    }

    /// `Δ` in whole steps of [`FRAG_STEP_CORES`] cores of expected fragmentation, rounded down
    /// (`floor(Δ / (Σw · step))`, exact): the node policy compares these (section 12.3).
    fn frag_step(&self) -> i128 {
        self.fragmentation.map_or(0, |f| {
            let unit = i128::from(f.total_weight.max(1)) * i128::from(FRAG_STEP_CORES);
            f.weighted_delta().div_euclid(unit)
        })
    }
}

/// How two nodes' scores compare under `policy`: `Less` when `a` is preferred (sections 6
/// and 12.3). binpack: the higher key; spread: the lower; fgd: the smaller increase of
/// fragmentation in steps of [`FRAG_STEP_CORES`], then the closer host match, then the higher
/// key (binpack's preference). `Equal` leaves the choice to
/// the caller's tie-break (the smaller name).
pub(crate) fn prefer(policy: NodePolicy, a: &NodeScore, b: &NodeScore) -> Ordering {
    match policy {
        NodePolicy::Binpack => b.key.cmp(&a.key),
        NodePolicy::Spread => a.key.cmp(&b.key),
        NodePolicy::Fgd => a
            .frag_step()
            .cmp(&b.frag_step())
            .then_with(|| host_match_cmp(a.host_match, b.host_match))
            .then(b.key.cmp(&a.key)),
    }
}

/// The closer host match first; a node without one after those with one.
fn host_match_cmp(a: Option<(u128, u128)>, b: Option<(u128, u128)>) -> Ordering {
    match (a, b) {
        (Some((an, ad)), Some((bn, bd))) => an.saturating_mul(bd).cmp(&bn.saturating_mul(ad)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// The value the normalised preference is linear in (higher = preferred): binpack the key,
/// spread minus the key, fgd minus the fragmentation's increase.
pub(crate) fn preference_value(policy: NodePolicy, s: &NodeScore) -> i128 {
    match policy {
        NodePolicy::Binpack => i128::from(s.key),
        NodePolicy::Spread => -i128::from(s.key),
        NodePolicy::Fgd => -s.frag_delta(),
    }
}

/// The node score over all cards of a node (unhealthy included) with `usage` (section 6).
/// 0 when the node has no slots, cores or memory at all.
pub fn node_score(cards: &[Card], usage: &[CardUsage]) -> NodeScore {
    score_from_sums(&NodeSums::of(cards, usage.iter()))
}

/// The node score from capacity and usage sums.
pub(crate) fn score_from_sums(s: &NodeSums) -> NodeScore {
    if s.count == 0 || s.total_cores == 0 || s.total_mem == 0 {
        return NodeScore {
            raw: 0.0,
            key: 0,
            fragmentation: None,
            host_match: None,
        };
    }
    let raw = 10.0
        * (s.used as f64 / s.count as f64
            + s.used_cores as f64 / s.total_cores as f64
            + s.used_mem as f64 / s.total_mem as f64);
    NodeScore {
        raw,
        key: quantize(raw),
        fragmentation: None,
        host_match: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Card;

    fn req(cores: u32, mem_mib: Option<u64>, pct: Option<u32>) -> ContainerRequest {
        ContainerRequest {
            name: "c".into(),
            init: false,
            gpus: 1,
            mem_mib,
            mem_percent: pct,
            cores,
        }
    }

    #[test]
    fn seed_example_english() {
        // 10 slots, none used; GPU1 10 cores + 2000 MiB used, GPU2 70 + 6000; request 20 cores, 1000 MiB.
        let card = Card::new("GPU1", 0, "NVIDIA", 8000);
        let r = req(20, Some(1000), None);
        let u1 = CardUsage {
            used: 0,
            used_mem_mib: 2000,
            used_cores: 10,
        };
        let u2 = CardUsage {
            used: 0,
            used_mem_mib: 6000,
            used_cores: 70,
        };
        let s1 = device_score(&card, u1, &r, ScoringWeights::default()).total();
        let s2 = device_score(&card, u2, &r, ScoringWeights::default()).total();
        assert!((s1 - 7.75).abs() < 1e-12, "{s1}");
        assert!((s2 - 18.75).abs() < 1e-12, "{s2}");
    }

    #[test]
    fn zero_capacity_scores_zero() {
        let mut card = Card::new("G", 0, "NVIDIA", 8000);
        card.count = 0;
        let t = device_score(
            &card,
            CardUsage::default(),
            &req(0, None, Some(100)),
            ScoringWeights::default(),
        );
        assert_eq!(t.total(), 0.0);
    }
}
