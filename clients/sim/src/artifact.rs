//! The paper artifact's fragmentation measure, for the report only (the decisions are the
//! service's): `pkg/utils/frag.go` `NodeGpuShareFragAmount` with the artifact's "typical pods"
//! (`GetTypicalPods`: the most popular (CPU, GPU share, GPU count, GPU model) shapes covering 95%
//! of all pods, pods without GPU included). For each typical pod `m` with probability `p`, a
//! node's free GPU compute counts as fragmented, times `p`, when `m` asks no GPU, cannot use the
//! node's GPU model, finds fewer cards with enough free compute than it needs, or lacks host CPU;
//! otherwise only the free compute of its cards that are too small counts. Compute in cores
//! (the artifact's milli-GPU / 10); host CPU only when the simulator tracks it (`--host`).

use std::collections::BTreeMap;

use crate::cluster::Cluster;
use crate::trace::Job;

/// One typical pod of the artifact's mix.
#[derive(Clone, Debug, PartialEq)]
pub struct TypicalPod {
    /// Host CPU, millicores.
    pub cpu_milli: u64,
    /// Cores per card (the share of a card, percent; 0 for a pod without GPU).
    pub cores: u32,
    /// Cards.
    pub num_gpu: u32,
    /// Allowed models (empty = any).
    pub models: Vec<String>,
    /// Probability.
    pub p: f64,
}

/// The artifact's typical pods of a trace (openb rows; other rows are ignored): shapes sorted
/// by count (ties: the smaller shape), taken one by one until they cover `coverage` of the
/// pods, probabilities renormalised over those taken.
pub fn typical_pods(jobs: &[Job], coverage: f64) -> Vec<TypicalPod> {
    let mut counts: BTreeMap<(u64, u32, u32, Vec<String>), u64> = BTreeMap::new();
    for o in jobs.iter().filter_map(|j| j.openb.as_ref()) {
        let cores = o.gpu_milli.div_ceil(10);
        *counts
            .entry((o.cpu_milli, cores, o.num_gpu, o.gpu_spec.clone()))
            .or_default() += 1;
    }
    let total: u64 = counts.values().sum();
    if total == 0 {
        return Vec::new();
    }
    let mut ranked: Vec<_> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let want = coverage * total as f64;
    let mut covered = 0u64;
    let mut taken = Vec::new();
    for (k, c) in ranked {
        if covered as f64 >= want && !taken.is_empty() {
            break;
        }
        covered += c;
        taken.push((k, c));
    }
    taken
        .into_iter()
        .map(|((cpu_milli, cores, num_gpu, models), c)| TypicalPod {
            cpu_milli,
            cores,
            num_gpu,
            models,
            p: c as f64 / covered as f64,
        })
        .collect()
}

/// The measure over a cluster, kept node by node (a booking changes one node).
#[derive(Clone, Debug)]
pub struct ArtifactFrag {
    mix: Vec<TypicalPod>,
    per_node: Vec<f64>,
}

impl ArtifactFrag {
    /// The measure of every node of `c`.
    pub fn new(mix: Vec<TypicalPod>, c: &Cluster) -> ArtifactFrag {
        let mut f = ArtifactFrag {
            mix,
            per_node: vec![0.0; c.nodes.len()],
        };
        for i in 0..c.nodes.len() {
            f.update(c, i);
        }
        f
    }

    /// Measures node `i` again (after its usage changed).
    pub fn update(&mut self, c: &Cluster, i: usize) {
        let Some(n) = c.nodes.get(i) else { return };
        let free: Vec<u64> = n
            .cards
            .iter()
            .map(|k| {
                let used = k.usage.map_or(0, |u| u.used_cores);
                u64::from(k.total_cores.saturating_sub(used))
            })
            .collect();
        let total: u64 = free.iter().sum();
        let model = n.cards.first().map_or("", |k| k.r#type.as_str());
        let cpu_free = c.host_free(i).map(|h| h.0);
        let mut frag = 0.0;
        for m in &self.mix {
            let all = m.p * total as f64;
            if m.num_gpu == 0 {
                frag += all;
                continue;
            }
            let access = m.models.is_empty() || m.models.iter().any(|x| x == model);
            let fitting = free.iter().filter(|&&f| f >= u64::from(m.cores)).count();
            let cpu_ok = cpu_free.is_none_or(|f| f >= m.cpu_milli);
            if !access || fitting < m.num_gpu as usize || !cpu_ok {
                frag += all;
            } else {
                let small: u64 = free.iter().filter(|&&f| f < u64::from(m.cores)).sum();
                frag += m.p * small as f64;
            }
        }
        if let Some(slot) = self.per_node.get_mut(i) {
            *slot = frag;
        }
    }

    /// The cluster's fragmented compute, cores.
    pub fn total(&self) -> f64 {
        self.per_node.iter().sum()
    }
}
