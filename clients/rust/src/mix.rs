//! Workload mixes for the fgd policies (`docs/placement-semantics.md` section 12.1): derive one
//! from the GPU requests a caller has seen, the way the paper's artifact does (the most popular
//! shapes covering a share of them), and keep only the card types a request's nodes have.

use std::collections::BTreeMap;

use gpusched_api::v1;

/// A shape as counted: the fields of [`v1::WorkloadMixShape`] without the probability (card
/// types sorted and deduplicated, so the same request counts as one shape).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ShapeKey {
    /// Cards.
    pub gpu_count: u32,
    /// Cores per card, percent.
    pub gpucores_percent: u32,
    /// Memory per card, MiB (0 = not set).
    pub gpumem_mib: u64,
    /// Memory per card, percent (0 = not set).
    pub gpumem_percent: u32,
    /// Card types accepted (empty = any).
    pub gpu_types: Vec<String>,
    /// Host CPU, millicores.
    pub cpu_milli: u64,
    /// Host memory, MiB.
    pub host_mem_mib: u64,
}

impl ShapeKey {
    /// The shape with its card types sorted and deduplicated (blank entries dropped).
    pub fn normalized(mut self) -> ShapeKey {
        self.gpu_types = self
            .gpu_types
            .into_iter()
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .collect();
        self.gpu_types.sort();
        self.gpu_types.dedup();
        self
    }

    fn with_probability(&self, probability: f64) -> v1::WorkloadMixShape {
        v1::WorkloadMixShape {
            probability,
            gpu_count: self.gpu_count,
            gpucores_percent: self.gpucores_percent,
            gpumem_mib: self.gpumem_mib,
            gpumem_percent: self.gpumem_percent,
            gpu_types: self.gpu_types.clone(),
            cpu_milli: self.cpu_milli,
            host_mem_mib: self.host_mem_mib,
        }
    }
}

/// Counts of the shapes seen (bounded by the caller: see [`MixCounter::with_capacity_limit`]).
#[derive(Clone, Debug, Default)]
pub struct MixCounter {
    counts: BTreeMap<ShapeKey, u64>,
    limit: Option<usize>,
    /// Observations of shapes not counted because the counter was full.
    pub dropped: u64,
}

impl MixCounter {
    /// An empty counter without a bound on distinct shapes.
    pub fn new() -> Self {
        MixCounter::default()
    }

    /// An empty counter that keeps at most `limit` distinct shapes: a new shape seen when it
    /// is full is counted in [`MixCounter::dropped`] only (memory stays bounded).
    pub fn with_capacity_limit(limit: usize) -> Self {
        MixCounter {
            limit: Some(limit),
            ..MixCounter::default()
        }
    }

    /// Counts `n` observations of `shape`.
    pub fn add(&mut self, shape: ShapeKey, n: u64) {
        let shape = shape.normalized();
        if shape.gpu_count == 0 || n == 0 {
            return;
        }
        let full = self.limit.is_some_and(|l| self.counts.len() >= l);
        match self.counts.get_mut(&shape) {
            Some(c) => *c = c.saturating_add(n),
            None if full => self.dropped = self.dropped.saturating_add(n),
            None => {
                self.counts.insert(shape, n);
            }
        }
    }

    /// Distinct shapes counted.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// The mix of the most popular shapes (ties: the smaller shape first) that together
    /// cover at least `coverage` (0..=1) of the observations, at most `max_shapes` of them,
    /// with probabilities renormalised over the shapes taken (the artifact takes 95 %).
    /// `None` when nothing was counted.
    pub fn mix(&self, coverage: f64, max_shapes: usize) -> Option<v1::WorkloadMix> {
        let total: u64 = self.counts.values().sum();
        if total == 0 || max_shapes == 0 {
            return None;
        }
        let mut ranked: Vec<(&ShapeKey, u64)> = self.counts.iter().map(|(k, &c)| (k, c)).collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let want = coverage.clamp(0.0, 1.0) * total as f64;
        let mut taken = Vec::new();
        let mut covered = 0u64;
        for (k, c) in ranked {
            if taken.len() >= max_shapes || (covered as f64 >= want && !taken.is_empty()) {
                break;
            }
            covered += c;
            taken.push((k, c));
        }
        Some(v1::WorkloadMix {
            shapes: taken
                .into_iter()
                .map(|(k, c)| k.with_probability(c as f64 / covered as f64))
                .collect(),
        })
    }
}

/// `mix` for a request whose nodes have cards of `card_types`: the shapes with a type entry
/// that matches no card type (the `use-gputype` rule, case-insensitive substring) lose that
/// entry, shapes left with none are dropped, and the probabilities are renormalised. The
/// service refuses unknown types (section 12.1); such a shape changes no decision, so dropping
/// it is exact. `None` when no shape is left.
pub fn for_card_types<S: AsRef<str>>(
    mix: &v1::WorkloadMix,
    card_types: &[S],
) -> Option<v1::WorkloadMix> {
    let have: Vec<String> = card_types
        .iter()
        .map(|t| t.as_ref().to_uppercase())
        .collect();
    let known = |t: &str| {
        let t = t.trim().to_uppercase();
        have.iter().any(|h| h.contains(t.as_str()))
    };
    let mut kept: Vec<v1::WorkloadMixShape> = Vec::new();
    for s in &mix.shapes {
        let mut s = s.clone();
        if !s.gpu_types.is_empty() {
            s.gpu_types.retain(|t| known(t));
            if s.gpu_types.is_empty() {
                continue;
            }
        }
        kept.push(s);
    }
    let sum: f64 = kept.iter().map(|s| s.probability).sum();
    if kept.is_empty() || sum <= 0.0 {
        return None;
    }
    for s in &mut kept {
        s.probability /= sum;
    }
    Some(v1::WorkloadMix { shapes: kept })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(gpus: u32, cores: u32, types: &[&str]) -> ShapeKey {
        ShapeKey {
            gpu_count: gpus,
            gpucores_percent: cores,
            gpumem_percent: cores,
            gpu_types: types.iter().map(|t| (*t).to_owned()).collect(),
            ..ShapeKey::default()
        }
    }

    #[test]
    fn the_most_popular_shapes_cover_the_share() {
        let mut c = MixCounter::new();
        c.add(shape(1, 100, &[]), 60);
        c.add(shape(1, 50, &[]), 30);
        c.add(shape(2, 100, &[]), 8);
        c.add(shape(1, 10, &[]), 2);
        let m = c.mix(0.95, 64).expect("a mix");
        let p: Vec<(u32, f64)> = m
            .shapes
            .iter()
            .map(|s| (s.gpucores_percent, s.probability))
            .collect();
        assert_eq!(
            p,
            vec![(100, 60.0 / 98.0), (50, 30.0 / 98.0), (100, 8.0 / 98.0)]
        );
        let m = c.mix(1.0, 2).expect("a mix");
        assert_eq!(m.shapes.len(), 2, "at most max_shapes");
        assert!((m.shapes.iter().map(|s| s.probability).sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(MixCounter::new().mix(0.95, 64).is_none());
    }

    #[test]
    fn a_bounded_counter_drops_new_shapes_when_full() {
        let mut c = MixCounter::with_capacity_limit(1);
        c.add(shape(1, 100, &[]), 1);
        c.add(shape(1, 50, &[]), 3);
        c.add(shape(1, 100, &[]), 1);
        assert_eq!((c.len(), c.dropped), (1, 3));
        // Types are normalised: the same request is the same shape.
        let mut c = MixCounter::new();
        c.add(shape(1, 50, &["B", "A", " "]), 1);
        c.add(shape(1, 50, &["A", "B"]), 1);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn unknown_types_are_dropped_and_the_rest_renormalised() {
        let mut c = MixCounter::new();
        c.add(shape(1, 100, &[]), 2);
        c.add(shape(1, 50, &["v100", "A100"]), 1);
        c.add(shape(1, 50, &["H100"]), 1);
        let m = c.mix(1.0, 64).expect("a mix");
        let r = for_card_types(&m, &["NVIDIA-A100-SXM4-40GB", "Tesla-T4"]).expect("kept");
        let kept: Vec<(Vec<String>, f64)> = r
            .shapes
            .iter()
            .map(|s| (s.gpu_types.clone(), s.probability))
            .collect();
        assert_eq!(
            kept,
            vec![(vec![], 2.0 / 3.0), (vec!["A100".to_owned()], 1.0 / 3.0)]
        );
        assert!(for_card_types(&r, &["Tesla-T4"]).is_some_and(|m| m.shapes.len() == 1));
    }
}
