//! Measures by arrived demand, as the paper's artifact bins them
//! (`experiments/analysis/merge_alloc_discrete.py`, `merge_frag_discrete.py`): after every
//! arrival, the arrived GPU demand in % of the cluster's GPUs is rounded to a whole percent
//! (half to even, Python's `round`); a bin's value is the mean over the arrivals in it, or,
//! when none fell in it, over those within one percent. And the median and spread over seeds.

use serde::Serialize;

use crate::replay::DemandPoint;

/// The largest bin (the artifact tunes traces to 130%).
pub const MAX_BIN: usize = 130;

/// One measure by whole percent of arrived demand, `0..=MAX_BIN` (None: no arrival near).
pub type Bins = Vec<Option<f64>>;

/// Which measure of a [`DemandPoint`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// Booked compute, %.
    Allocation,
    /// The artifact's fragmented compute, % of all compute.
    Fragmentation,
    /// The same, % of the free compute.
    FragmentationRatio,
}

impl Measure {
    fn of(self, p: &DemandPoint) -> f64 {
        match self {
            Measure::Allocation => p.allocation_pct,
            Measure::Fragmentation => p.fragmentation_pct,
            Measure::FragmentationRatio => p.fragmentation_ratio_pct,
        }
    }
}

/// Rounds half to even, as Python's `round(x, 0)`.
fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - x.signum()
    } else {
        r
    }
}

/// The bins of one run.
pub fn bins(points: &[DemandPoint], measure: Measure) -> Bins {
    let mut sum = vec![0.0f64; MAX_BIN + 1];
    let mut n = vec![0usize; MAX_BIN + 1];
    let mut keyed = Vec::with_capacity(points.len());
    for p in points {
        let b = round_half_even(p.arrived_pct);
        if b >= 0.0 && b <= MAX_BIN as f64 {
            // The artifact rounds allocation to 2 decimals before averaging.
            let v = (measure.of(p) * 100.0).round() / 100.0;
            let k = b as usize;
            sum[k] += v;
            n[k] += 1;
            keyed.push((k, v));
        }
    }
    (0..=MAX_BIN)
        .map(|k| {
            if n[k] > 0 {
                return Some(sum[k] / n[k] as f64);
            }
            let near: Vec<f64> = keyed
                .iter()
                .filter(|(b, _)| b.abs_diff(k) <= 1)
                .map(|(_, v)| *v)
                .collect();
            (!near.is_empty()).then(|| near.iter().sum::<f64>() / near.len() as f64)
        })
        .map(|v| v.map(|x| (x * 100.0).round() / 100.0))
        .collect()
}

/// Median, smallest and largest of some runs' values.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Spread {
    /// Median (mean of the two middle values for an even count).
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
    /// Mean (the figure the artifact's plots average).
    pub mean: f64,
    /// Runs.
    pub runs: usize,
}

/// The spread of `values` (None when empty).
pub fn spread(values: &[f64]) -> Option<Spread> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    let r = |x: f64| (x * 1000.0).round() / 1000.0;
    Some(Spread {
        median: r(median),
        min: r(v[0]),
        max: r(v[n - 1]),
        mean: r(v.iter().sum::<f64>() / n as f64),
        runs: n,
    })
}

/// Per bin, the median over runs (for the charts).
pub fn median_bins(runs: &[Bins]) -> Bins {
    (0..=MAX_BIN)
        .map(|k| {
            let vals: Vec<f64> = runs
                .iter()
                .filter_map(|b| b.get(k).copied().flatten())
                .collect();
            spread(&vals).map(|s| s.median)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(arrived: f64, alloc: f64) -> DemandPoint {
        DemandPoint {
            arrived_pct: arrived,
            allocation_pct: alloc,
            ..DemandPoint::default()
        }
    }

    #[test]
    fn bins_average_the_arrivals_of_a_whole_percent() {
        let b = bins(
            &[p(99.4, 90.0), p(99.6, 91.0), p(100.4, 93.0), p(102.2, 95.0)],
            Measure::Allocation,
        );
        assert_eq!(b[99], Some(90.0));
        assert_eq!(b[100], Some(92.0));
        // No arrival rounds to 101: those within one percent (100 and 102).
        assert_eq!(b[101], Some((91.0 + 93.0 + 95.0) / 3.0));
        assert_eq!(b[50], None);
        assert_eq!(round_half_even(100.5), 100.0);
        assert_eq!(round_half_even(101.5), 102.0);
    }

    #[test]
    fn spread_is_median_min_max() {
        let s = spread(&[3.0, 1.0, 2.0, 10.0]).unwrap_or_else(|| unreachable!());
        assert_eq!(
            (s.median, s.min, s.max, s.mean, s.runs),
            (2.5, 1.0, 10.0, 4.0, 4)
        );
        assert!(spread(&[]).is_none());
    }
}
