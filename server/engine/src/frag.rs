//! The fragmentation measure (`docs/placement-semantics.md` section 12.2): how much of a
//! node's free compute the target workload mix could not use, exactly, in integers.
//!
//! A node's measure is `F = Σ_m w_m · frag_m`, where `frag_m` is the node's free compute when
//! it cannot host shape `m` and else the free compute of the counted cards that do not fit `m`.
//! With `Free` the node's free compute, `S_m` the free compute of the cards that fit `m` and
//! `H` the shapes the node can host: `F = W · Free − Σ_{m ∈ H} w_m · S_m
//! = W · Free − Σ_c free_c · Σ_{m ∈ fits(c) ∩ H} w_m`. Each card's fits are one bit per shape
//! (at most 64 shapes), found with a few table look-ups instead of a test per shape, and the
//! weight of a set of shapes is summed a byte at a time from tables made once per decision.

use crate::host::{HostRequest, HostResources};
use crate::mix::WorkloadMix;
use crate::model::{Card, CardMode, CardUsage, Node};

/// A node's fragmentation before and after a tentative placement (section 12.2), exact:
/// `Σ_m w_m · frag_m` in weight × cores. [`Fragmentation::before`] and
/// [`Fragmentation::after`] give the expectation in cores (percent of a card).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fragmentation {
    /// Weighted sum before the placement.
    pub weighted_before: u128,
    /// Weighted sum after the placement.
    pub weighted_after: u128,
    /// The mix's total weight (the denominator of the expectation).
    pub total_weight: u64,
}

impl Fragmentation {
    /// Expected fragmented compute before, cores (percent of a card).
    pub fn before(&self) -> f64 {
        expectation(self.weighted_before, self.total_weight)
    }

    /// Expected fragmented compute after, cores.
    pub fn after(&self) -> f64 {
        expectation(self.weighted_after, self.total_weight)
    }

    /// `after - before`, exact (weight × cores).
    pub fn weighted_delta(&self) -> i128 {
        signed(self.weighted_after) - signed(self.weighted_before)
    }

    /// `after - before`, cores.
    pub fn delta(&self) -> f64 {
        self.after() - self.before()
    }
}

fn signed(v: u128) -> i128 {
    i128::try_from(v).unwrap_or(i128::MAX)
}

fn expectation(weighted: u128, total: u64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    // Whole part and remainder separately, so that large sums keep their precision.
    let t = u128::from(total);
    (weighted / t) as f64 + (weighted % t) as f64 / total as f64
}

/// One shape's part of a node's measure, for explanations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShapeFragmentation {
    /// Position of the shape in the mix.
    pub shape: usize,
    /// Its fragmented compute on the node, cores (`frag_m`).
    pub cores: u64,
    /// Whether the node can host the shape (enough fitting cards and host resources).
    pub hostable: bool,
}

/// A node's measure in detail, for explanations: the total and every shape's part.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeFragmentation {
    /// The node's free compute on counted cards, cores.
    pub free_cores: u64,
    /// `Σ_m w_m · frag_m`.
    pub weighted: u128,
    /// Every shape, in mix order.
    pub shapes: Vec<ShapeFragmentation>,
}

/// A shape's memory need on a card: fixed MiB, or a percentage of the card.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MemNeed {
    Mib(u64),
    Percent(u32),
}

/// The mix made ready for one decision: masks by threshold, weight tables.
#[derive(Debug)]
pub(crate) struct PreparedMix<'m> {
    mix: &'m WorkloadMix,
    total_weight: u64,
    all: u64,
    /// Shapes of one card.
    single: u64,
    /// Shapes of several cards: (bit, cards), and their mask.
    multi: Vec<(u32, u32)>,
    multi_mask: u64,
    /// Shapes whose cores are at most `k`, for `k` in `0..=100`.
    core_le: Vec<u64>,
    /// Shapes asking 100 cores (check 10) and 0 cores (check 11).
    c100: u64,
    c0: u64,
    /// Fixed-MiB shapes by need, ascending, with the mask of all shapes up to each.
    fixed_mem: Vec<(u64, u64)>,
    /// Percentage shapes whose percentage is at most `p`, for `p` in `0..=100`.
    pct_le: Vec<u64>,
    /// Shapes that name no card type.
    untyped: u64,
    /// Shapes with host CPU / memory, by need ascending, with prefix masks; shapes without
    /// such a need are in `host_free`.
    host_cpu: Vec<(u64, u64)>,
    host_mem: Vec<(u64, u64)>,
    cpu_free_shapes: u64,
    mem_free_shapes: u64,
    /// `weights[k][b]`: the weight of the shapes of byte value `b` at byte `k` of a mask.
    weights: Vec<[u64; 256]>,
}

/// Prefix masks of `(threshold, bit)` pairs sorted by threshold.
fn prefix_masks<T: Ord + Copy>(mut items: Vec<(T, u32)>) -> Vec<(T, u64)> {
    items.sort_by_key(|&(t, bit)| (t, bit));
    let mut acc = 0u64;
    items
        .into_iter()
        .map(|(t, bit)| {
            acc |= 1u64 << bit;
            (t, acc)
        })
        .collect()
}

/// The prefix mask of the last entry whose threshold passes `ok` (thresholds ascending, `ok`
/// true up to some point), or 0.
fn mask_up_to<T: Copy>(items: &[(T, u64)], ok: impl Fn(T) -> bool) -> u64 {
    let n = items.partition_point(|&(t, _)| ok(t));
    n.checked_sub(1)
        .and_then(|i| items.get(i))
        .map_or(0, |&(_, m)| m)
}

/// Whether a card counts in the measure: it can take work (healthy, not cordoned, every
/// capacity above zero) and is shared by HAMi-core or MPS (a MIG card is cut into instances,
/// not shares).
pub(crate) fn counted(card: &Card, cordoned: bool) -> bool {
    card.healthy
        && !cordoned
        && card.count > 0
        && card.total_mem_mib > 0
        && card.total_cores > 0
        && card.mode != CardMode::Mig
}

/// Free compute of a card, cores.
fn free_cores(card: &Card, u: CardUsage) -> u64 {
    u64::from(card.total_cores.saturating_sub(u.used_cores))
}

impl<'m> PreparedMix<'m> {
    pub(crate) fn new(mix: &'m WorkloadMix) -> Self {
        let shapes = mix.shapes();
        let mut single = 0u64;
        let mut multi = Vec::new();
        let mut c100 = 0u64;
        let mut c0 = 0u64;
        let mut fixed = Vec::new();
        let mut untyped = 0u64;
        let mut cpu = Vec::new();
        let mut mem = Vec::new();
        let mut cpu_free_shapes = 0u64;
        let mut mem_free_shapes = 0u64;
        let mut core_le = vec![0u64; 101];
        let mut pct_le = vec![0u64; 101];
        let mut all = 0u64;
        for (i, s) in shapes.iter().enumerate() {
            let Ok(bit) = u32::try_from(i) else { continue };
            let b = 1u64 << bit;
            all |= b;
            if s.gpus == 1 {
                single |= b;
            } else {
                multi.push((bit, s.gpus));
            }
            for (k, slot) in core_le.iter_mut().enumerate() {
                if u64::from(s.cores) <= k as u64 {
                    *slot |= b;
                }
            }
            if s.cores == 100 {
                c100 |= b;
            }
            if s.cores == 0 {
                c0 |= b;
            }
            match need(s.mem_mib, s.mem_percent) {
                MemNeed::Mib(m) => fixed.push((m, bit)),
                MemNeed::Percent(p) => {
                    for slot in pct_le.iter_mut().skip(p as usize) {
                        *slot |= b;
                    }
                }
            }
            if s.card_types.is_empty() {
                untyped |= b;
            }
            if s.cpu_milli == 0 {
                cpu_free_shapes |= b;
            } else {
                cpu.push((s.cpu_milli, bit));
            }
            if s.host_mem_mib == 0 {
                mem_free_shapes |= b;
            } else {
                mem.push((s.host_mem_mib, bit));
            }
        }
        // Each byte value's weight from the value without its lowest bit: 256 sums per byte.
        let bytes = shapes.len().div_ceil(8);
        let mut weights = vec![[0u64; 256]; bytes];
        for (k, table) in weights.iter_mut().enumerate() {
            for value in 1..256usize {
                let low = value.trailing_zeros() as usize;
                let w = shapes.get(8 * k + low).map_or(0, |s| s.weight);
                let rest = table.get(value & (value - 1)).copied().unwrap_or(0);
                if let Some(slot) = table.get_mut(value) {
                    *slot = rest.saturating_add(w);
                }
            }
        }
        PreparedMix {
            mix,
            total_weight: mix.total_weight(),
            all,
            single,
            multi_mask: all & !single,
            multi,
            core_le,
            c100,
            c0,
            fixed_mem: prefix_masks(fixed),
            pct_le,
            untyped,
            host_cpu: prefix_masks(cpu),
            host_mem: prefix_masks(mem),
            cpu_free_shapes,
            mem_free_shapes,
            weights,
        }
    }

    pub(crate) fn total_weight(&self) -> u64 {
        self.total_weight
    }

    /// The weight of a set of shapes: one table look-up per byte of the mask.
    #[inline]
    fn weight_of(&self, mask: u64) -> u64 {
        let mut sum = 0u64;
        let mut rest = mask;
        for table in &self.weights {
            // A byte indexes a table of 256: never out of bounds.
            sum += table[(rest & 0xff) as usize];
            rest >>= 8;
        }
        sum
    }

    /// The shapes that accept a card of this type.
    fn type_mask(&self, card_type: &str) -> u64 {
        if self.untyped == self.all || !self.mix.has_types() {
            return self.all;
        }
        let mut m = self.untyped;
        for i in 0..self.mix.shapes().len() {
            if m >> i & 1 == 0 && self.mix.accepts_type(i, card_type) {
                m |= 1u64 << i;
            }
        }
        m
    }

    /// The shapes one counted card with usage `u` fits (checks 6, 8-11 of section 5.4 for a
    /// container of the shape; `types`: the shapes that accept its type, check 3).
    #[inline]
    fn card_mask(&self, card: &Card, u: CardUsage, types: u64) -> u64 {
        if u.used >= card.count || u.used_cores > card.total_cores {
            return 0;
        }
        let Some(free_mem) = card.total_mem_mib.checked_sub(u.used_mem_mib) else {
            return 0;
        };
        let free = (card.total_cores - u.used_cores).min(100) as usize;
        let mut m = self.core_le.get(free).copied().unwrap_or(0) & types;
        if card.total_cores == 100 && u.used > 0 {
            m &= !self.c100;
        }
        if u.used_cores == card.total_cores {
            m &= !self.c0;
        }
        let fixed = mask_up_to(&self.fixed_mem, |mib| mib <= free_mem);
        // floor(total * p / 100) <= free  <=>  total * p < 100 * (free + 1): the largest such
        // p is floor((100 * (free + 1) - 1) / total) (free <= total <= 2^24: no overflow).
        let p = (free_mem.saturating_add(1).saturating_mul(100) - 1) / card.total_mem_mib;
        let pct = self.pct_le.get(p.min(100) as usize).copied().unwrap_or(0);
        m & (fixed | pct)
    }

    /// The shapes whose host CPU and memory the node has free (all when it carries none).
    fn host_mask(&self, host: Option<HostResources>) -> u64 {
        let Some(h) = host else {
            return self.all;
        };
        let cpu = u64::try_from(h.free_cpu_milli.max(0)).unwrap_or(0);
        let mem = u64::try_from(h.free_mem_mib.max(0)).unwrap_or(0);
        let cpu_ok = self.cpu_free_shapes | mask_up_to(&self.host_cpu, |need| need <= cpu);
        let mem_ok = self.mem_free_shapes | mask_up_to(&self.host_mem, |need| need <= mem);
        cpu_ok & mem_ok
    }

    /// Measures a node with `usage` (per card, in card order) and `host`. Fills `scratch`
    /// with the cards' masks for [`PreparedMix::card_deltas`].
    pub(crate) fn measure(
        &self,
        node: &Node,
        usage: &[CardUsage],
        host: Option<HostResources>,
        scratch: &mut FragScratch,
    ) -> u128 {
        scratch.masks.clear();
        scratch.free.clear();
        scratch.types.clear();
        let mut free_total = 0u64;
        let mut once = 0u64;
        let mut last_type: Option<(&str, u64)> = None;
        for (pos, (card, &u)) in node.cards.iter().zip(usage).enumerate() {
            if !counted(card, node.is_cordoned(pos)) {
                scratch.masks.push(0);
                scratch.free.push(0);
                scratch.types.push(0);
                continue;
            }
            let types = match last_type {
                Some((t, m)) if t == card.card_type => m,
                _ => {
                    let m = self.type_mask(&card.card_type);
                    last_type = Some((&card.card_type, m));
                    m
                }
            };
            let mask = self.card_mask(card, u, types);
            let free = free_cores(card, u);
            once |= mask;
            free_total += free;
            scratch.masks.push(mask);
            scratch.free.push(free);
            scratch.types.push(types);
        }
        let mut hostable = once & self.single;
        for &(bit, gpus) in &self.multi {
            if once >> bit & 1 == 1 {
                let count = scratch.masks.iter().filter(|&&m| m >> bit & 1 == 1).count();
                if count >= gpus as usize {
                    hostable |= 1u64 << bit;
                }
            }
        }
        hostable &= self.host_mask(host);
        let mut usable: u128 = 0;
        for (&mask, &free) in scratch.masks.iter().zip(&scratch.free) {
            if free > 0 && mask & hostable != 0 {
                usable += u128::from(free) * u128::from(self.weight_of(mask & hostable));
            }
        }
        scratch.hostable = hostable;
        scratch.free_total = free_total;
        u128::from(self.total_weight) * u128::from(free_total) - usable
    }

    /// After [`PreparedMix::measure`] of `node` with `usage` (and the same host): for each
    /// card, how the measure changes when `booking(position, card)` (1 slot, the container's
    /// memory and cores) is booked on it alone; 0 for a card that does not count or that
    /// `booking` skips (`None`). Exact; equal to measuring again with that card's usage
    /// changed (property-tested).
    pub(crate) fn card_deltas(
        &self,
        node: &Node,
        usage: &[CardUsage],
        booking: impl Fn(usize, &Card) -> Option<CardUsage>,
        scratch: &mut FragScratch,
        out: &mut Vec<i128>,
    ) {
        out.clear();
        let w = i128::from(self.total_weight);
        let h = scratch.hostable;
        for (pos, (card, &u)) in node.cards.iter().zip(usage).enumerate() {
            let mask = scratch.masks.get(pos).copied().unwrap_or(0);
            let types = scratch.types.get(pos).copied().unwrap_or(0);
            let b = match booking(pos, card) {
                Some(b) if counted(card, node.is_cordoned(pos)) => b,
                _ => {
                    out.push(0);
                    continue;
                }
            };
            let after = CardUsage {
                used: u.used.saturating_add(b.used),
                used_mem_mib: u.used_mem_mib.saturating_add(b.used_mem_mib),
                used_cores: u.used_cores.saturating_add(b.used_cores),
            };
            let new_mask = self.card_mask(card, after, types);
            let free = scratch.free.get(pos).copied().unwrap_or(0);
            let new_free = free_cores(card, after);
            let gone = mask & !new_mask & h;
            // Shapes of several cards whose count of fitting cards drops below their need: the
            // other cards' free compute becomes fragmented for them. (A one-card shape the card
            // stops fitting loses hostability only when no other card fits it, and then no
            // other card's term changes.)
            let mut lost = 0u64;
            for &(bit, gpus) in self.multi.iter().filter(|_| gone & self.multi_mask != 0) {
                if gone >> bit & 1 == 1 {
                    let count = scratch.masks.iter().filter(|&&m| m >> bit & 1 == 1).count();
                    if count.saturating_sub(1) < gpus as usize {
                        lost |= 1u64 << bit;
                    }
                }
            }
            let new_h = h & !lost;
            let mut delta = -w * (i128::from(free) - i128::from(new_free));
            delta += i128::from(free) * i128::from(self.weight_of(mask & h));
            delta -= i128::from(new_free) * i128::from(self.weight_of(new_mask & new_h));
            if lost != 0 {
                for (other, (&m, &f)) in scratch.masks.iter().zip(&scratch.free).enumerate() {
                    if other != pos && f > 0 && m & lost != 0 {
                        delta += i128::from(f) * i128::from(self.weight_of(m & lost));
                    }
                }
            }
            out.push(delta);
        }
    }

    /// Every shape's part of a node's measure (explanations).
    pub(crate) fn explain(
        &self,
        node: &Node,
        usage: &[CardUsage],
        host: Option<HostResources>,
    ) -> NodeFragmentation {
        let mut scratch = FragScratch::default();
        let weighted = self.measure(node, usage, host, &mut scratch);
        let shapes = (0..self.mix.shapes().len())
            .map(|i| {
                let hostable = scratch.hostable >> i & 1 == 1;
                let usable: u64 = if hostable {
                    scratch
                        .masks
                        .iter()
                        .zip(&scratch.free)
                        .filter(|(m, _)| *m >> i & 1 == 1)
                        .map(|(_, f)| *f)
                        .sum()
                } else {
                    0
                };
                ShapeFragmentation {
                    shape: i,
                    cores: scratch.free_total - usable,
                    hostable,
                }
            })
            .collect();
        NodeFragmentation {
            free_cores: scratch.free_total,
            weighted,
            shapes,
        }
    }
}

/// Reusable buffers of the measure (no allocation per node once warmed up).
#[derive(Debug, Default)]
pub(crate) struct FragScratch {
    masks: Vec<u64>,
    free: Vec<u64>,
    /// The shapes that accept each card's type.
    types: Vec<u64>,
    hostable: u64,
    free_total: u64,
}

impl FragScratch {
    /// The node's free compute on counted cards at the last measure.
    pub(crate) fn free_total(&self) -> u64 {
        self.free_total
    }
}

fn need(mem_mib: u64, mem_percent: u32) -> MemNeed {
    match (mem_mib, mem_percent) {
        (0, 0) => MemNeed::Percent(100),
        (0, p) => MemNeed::Percent(p),
        (m, _) => MemNeed::Mib(m),
    }
}

/// The node's host resources after a workload's host request is booked (section 12.2): `None`
/// for a node that carries none; saturating at the 64-bit range.
pub(crate) fn host_after(host: Option<HostResources>, req: HostRequest) -> Option<HostResources> {
    host.map(|h| {
        h.minus(req).unwrap_or(HostResources {
            free_cpu_milli: i64::MIN,
            free_mem_mib: i64::MIN,
        })
    })
}
