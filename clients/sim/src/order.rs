//! The arrival order of the paper's experiment (Weng et al., ATC'23; the artifact's
//! `SortClusterPods` and `tuneUpPods`): the pods sorted by name and shuffled with a seed, then
//! the trace "tuned" up to a share of the cluster's GPUs by appending pods drawn at random
//! (with the same seed) from the original list. Arrivals only, one after another.

use crate::trace::Job;

/// SplitMix64: a small seeded generator, the same numbers on every platform. (The artifact
/// uses Go's `math/rand`; the orders differ, the protocol is the same.)
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0), without modulo bias.
    pub fn below(&mut self, n: usize) -> usize {
        let n = n as u64;
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let x = self.next_u64();
            if x < zone {
                return (x % n) as usize;
            }
        }
    }
}

/// What the order did: pods shuffled, pods appended by the tune-up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct OrderStats {
    /// Pods of the trace, shuffled.
    pub shuffled: usize,
    /// Pods appended by the tune-up.
    pub tuned: usize,
    /// Pods removed by the tune-down (a trace above the target).
    pub removed: usize,
}

/// The experiment's order of `jobs` for `seed`: sorted by name, shuffled (Fisher-Yates), then,
/// with `tune`, pods drawn uniformly from the sorted list appended (named `NAME-tuned-I`) while
/// the total GPU demand stays within `tune` x `cluster_gpus` (the artifact stops at the first
/// draw that would pass it), or, for a trace above that, pods removed at random until it is
/// within (the artifact's `tuneDownPods`). Each job arrives at its position (seconds = index)
/// and never leaves.
pub fn paper_order(
    jobs: &[Job],
    seed: u64,
    tune: Option<f64>,
    cluster_gpus: f64,
) -> (Vec<Job>, OrderStats) {
    let mut sorted: Vec<&Job> = jobs.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut rng = Rng::new(seed);
    let mut out: Vec<Job> = sorted.iter().map(|j| (*j).clone()).collect();
    for i in (1..out.len()).rev() {
        let k = rng.below(i + 1);
        out.swap(i, k);
    }
    let shuffled = out.len();
    let mut removed = 0usize;
    if let Some(ratio) = tune {
        let target = ratio * cluster_gpus;
        let mut demand: f64 = out.iter().map(|j| j.demand).sum();
        while demand > target && !out.is_empty() {
            let k = rng.below(out.len());
            demand -= out.remove(k).demand;
            removed += 1;
        }
    }
    if let Some(ratio) = tune.filter(|_| removed == 0) {
        let target = ratio * cluster_gpus;
        let mut demand: f64 = out.iter().map(|j| j.demand).sum();
        let mut i = 0usize;
        while !sorted.is_empty() && demand < target {
            let pick = sorted[rng.below(sorted.len())];
            if demand + pick.demand > target {
                break;
            }
            let mut j = pick.clone();
            j.name = format!("{}-tuned-{i}", pick.name);
            j.workload.name.clone_from(&j.name);
            demand += j.demand;
            out.push(j);
            i += 1;
        }
    }
    for (i, j) in out.iter_mut().enumerate() {
        j.arrive = i as f64;
        j.leave = None;
    }
    let tuned = (out.len() + removed).saturating_sub(shuffled);
    (
        out,
        OrderStats {
            shuffled,
            tuned,
            removed,
        },
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use gpusched_api::v1;

    fn job(name: &str, demand: f64) -> Job {
        Job {
            name: name.into(),
            arrive: 0.0,
            leave: Some(5.0),
            workload: v1::Workload::default(),
            demand,
            needs: None,
            host: (0, 0),
            cpu_only: false,
            openb: None,
            priority: 0,
        }
    }

    #[test]
    fn the_order_depends_on_the_seed_only() {
        let jobs: Vec<Job> = (0..50).map(|i| job(&format!("p{i:02}"), 0.5)).collect();
        let mut reversed = jobs.clone();
        reversed.reverse();
        let (a, _) = paper_order(&jobs, 42, None, 10.0);
        let (b, _) = paper_order(&reversed, 42, None, 10.0);
        let names = |v: &[Job]| v.iter().map(|j| j.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&a), names(&b), "input order does not matter");
        let (c, _) = paper_order(&jobs, 43, None, 10.0);
        assert_ne!(names(&a), names(&c), "another seed, another order");
        assert!(
            a.iter()
                .enumerate()
                .all(|(i, j)| j.arrive == i as f64 && j.leave.is_none())
        );
    }

    #[test]
    fn the_tune_up_appends_pods_up_to_the_target() {
        let jobs: Vec<Job> = (0..10).map(|i| job(&format!("p{i}"), 1.0)).collect();
        // 10 GPUs of demand on a 10-GPU cluster, tuned to 130%: 3 more pods.
        let (a, stats) = paper_order(&jobs, 7, Some(1.3), 10.0);
        assert_eq!(
            stats,
            OrderStats {
                shuffled: 10,
                tuned: 3,
                removed: 0
            }
        );
        // Above the target: pods removed at random.
        let (b, less) = paper_order(&jobs, 7, Some(0.5), 10.0);
        assert_eq!((b.len(), less.removed, less.tuned), (5, 5, 0));
        assert_eq!(a.len(), 13);
        assert!(a[10].name.contains("-tuned-0"));
        let total: f64 = a.iter().map(|j| j.demand).sum();
        assert!(total <= 13.0);
    }
}
