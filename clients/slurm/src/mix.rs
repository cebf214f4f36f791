//! The fgd policies under Slurm (`docs/placement-semantics.md` section 12): a job asks for them
//! with `--gpusched node-scheduler-policy=fgd` / `gpu-scheduler-policy=fgd` (or the site's
//! default, `GPUSCHED_NODE_SCHEDULER_POLICY` / `GPUSCHED_GPU_SCHEDULER_POLICY`), and the wrapper
//! sends the service the target workload mix with every request of such a job (`Allocate`, the
//! held job's re-check, `Preempt`).
//!
//! The mix is, by `--gpusched-mix` / `GPUSCHED_MIX`:
//! - `observed` (default): derived from the decisions recorded on the jobs that hold cards now
//!   (the same `squeue --json` read that gives the usage): the newest [`WINDOW`] of them by job
//!   id, each one observation of its shape (its card count, and the cores and MiB it booked per
//!   card), weighed by its demand (cards × cores, at least 1 per card; the simulator's default);
//!   the most popular shapes covering [`COVERAGE`] of the weight, at most [`MAX_SHAPES`]
//!   (`gpusched_client::mix::MixCounter`). With no job holding cards, the job's own request is
//!   the mix.
//! - a file: a `gpusched.v1.WorkloadMix` in proto3 JSON (`{"shapes": [{"probability": 0.6,
//!   "gpuCount": 1, "gpucoresPercent": 50, "gpumemPercent": 50}, ...]}`), checked by the service
//!   (a bad one is refused naming the field, nothing queued).
//! - `service`: none sent; the service's `policy.workload_mix` applies.
//!
//! Card types no candidate node has are dropped from the shapes (section 12.1: that changes no
//! decision).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gpusched_client::mix::{MixCounter, ShapeKey, for_card_types};
use gpusched_client::v1;

use crate::decision::Decision;
use crate::request::{GpuRequest, USE_GPUTYPE};

/// The newest jobs holding cards that the observed mix counts.
pub const WINDOW: usize = 1000;
/// The most shapes the observed mix keeps (the service's default limit is 64).
pub const MAX_SHAPES: usize = 32;
/// The share of the observed weight the mix's shapes cover (the paper's artifact: 95 %).
pub const COVERAGE: f64 = 0.95;

/// HAMi's node policy annotation.
pub const NODE_POLICY: &str = "hami.io/node-scheduler-policy";
/// HAMi's GPU policy annotation.
pub const GPU_POLICY: &str = "hami.io/gpu-scheduler-policy";

/// Where the mix comes from (`--gpusched-mix`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum MixSource {
    /// Derived from the jobs holding cards.
    #[default]
    Observed,
    /// None sent: the service's own.
    Service,
    /// A `gpusched.v1.WorkloadMix` in proto3 JSON.
    File(PathBuf),
}

impl MixSource {
    /// `observed`, `service`, or a file's path.
    pub fn parse(v: &str) -> MixSource {
        match v.trim() {
            "observed" | "" => MixSource::Observed,
            "service" => MixSource::Service,
            p => MixSource::File(PathBuf::from(p)),
        }
    }
}

/// Whether the job runs under fgd (node or GPU policy).
pub fn uses_fgd(request: &GpuRequest) -> bool {
    request
        .annotations
        .get(NODE_POLICY)
        .is_some_and(|v| v.trim() == "fgd")
        || request
            .annotations
            .get(GPU_POLICY)
            .is_some_and(|v| v.split(',').any(|t| t.trim() == "fgd"))
}

/// Reads a mix file (proto3 JSON of `gpusched.v1.WorkloadMix`).
pub fn load(path: &Path) -> Result<v1::WorkloadMix, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    gpusched_api::json::from_json::<v1::WorkloadMix>("gpusched.v1.WorkloadMix", &text)
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn weight(s: &ShapeKey) -> u64 {
    u64::from(s.gpu_count) * u64::from(s.gpucores_percent.max(1))
}

/// The shape a recorded decision booked: its cards, the cores and MiB of its first card (one
/// container: every card books the same).
pub fn decision_shape(d: &Decision) -> Option<ShapeKey> {
    let first = d.cards.first()?;
    Some(ShapeKey {
        gpu_count: u32::try_from(d.cards.len()).ok()?,
        gpucores_percent: first.cores.min(100),
        gpumem_mib: first.mem_mib,
        ..ShapeKey::default()
    })
}

/// The job's own shape as it asks (None: a value that is not a plain whole number).
pub fn request_shape(r: &GpuRequest) -> Option<ShapeKey> {
    let num = |k: &str| -> Option<Option<u64>> {
        match r.limits.get(k) {
            None => Some(None),
            Some(v) => v.trim().parse::<u64>().ok().map(Some),
        }
    };
    let cores = num("nvidia.com/gpucores")?.unwrap_or(0);
    let pct = num("nvidia.com/gpumem-percentage")?.unwrap_or(0);
    let mem = num("nvidia.com/gpumem")?.unwrap_or(0);
    // Beyond a mix's ranges (section 12.1): the service names the job's own value instead.
    if r.gpus == 0 || cores > 100 || pct > 100 || mem > 16 << 20 {
        return None;
    }
    Some(ShapeKey {
        gpu_count: r.gpus,
        gpucores_percent: u32::try_from(cores).ok()?,
        gpumem_mib: mem,
        gpumem_percent: u32::try_from(pct).ok()?,
        gpu_types: r
            .annotations
            .get(USE_GPUTYPE)
            .map(|v| v.split(',').map(|t| t.trim().to_owned()).collect())
            .unwrap_or_default(),
        ..ShapeKey::default()
    })
}

/// The observed mix: the newest [`WINDOW`] booked jobs' shapes (see the module's
/// documentation), else the job's own.
pub fn observed(booked: &BTreeMap<u64, Decision>, request: &GpuRequest) -> Option<v1::WorkloadMix> {
    let mut c = MixCounter::new();
    for d in booked.values().rev().take(WINDOW) {
        if let Some(s) = decision_shape(d) {
            let w = weight(&s);
            c.add(s, w);
        }
    }
    if c.is_empty()
        && let Some(s) = request_shape(request)
    {
        c.add(s, 1);
    }
    c.mix(COVERAGE, MAX_SHAPES)
}

/// The mix to send with a request of this job over `nodes`: None when the job does not run
/// under fgd, the source is the service, or no shape is left for these nodes' card types.
pub fn for_request(
    source: &MixSource,
    file: Option<&v1::WorkloadMix>,
    request: &GpuRequest,
    booked: &BTreeMap<u64, Decision>,
    nodes: &[v1::Node],
) -> Option<v1::WorkloadMix> {
    if !uses_fgd(request) {
        return None;
    }
    let mix = match source {
        MixSource::Service => return None,
        MixSource::File(_) => file.cloned()?,
        MixSource::Observed => observed(booked, request)?,
    };
    let types: Vec<&str> = nodes
        .iter()
        .flat_map(|n| n.cards.iter().map(|c| c.r#type.as_str()))
        .collect();
    for_card_types(&mix, &types)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::BookedCard;

    fn booked(cards: usize, cores: u32, mem: u64) -> Decision {
        Decision {
            node: "n1".into(),
            cards: (0..cards)
                .map(|i| BookedCard {
                    index: u32::try_from(i).unwrap(),
                    uuid: format!("GPU-{i}"),
                    mem_mib: mem,
                    cores,
                })
                .collect(),
        }
    }

    fn fgd_request() -> GpuRequest {
        let mut r = GpuRequest::default();
        r.add_gres("gpu:1").unwrap();
        r.add_option("gpucores=30").unwrap();
        r.add_option("gpumem-percentage=30").unwrap();
        r.add_option("node-scheduler-policy=fgd").unwrap();
        r
    }

    fn nodes() -> Vec<v1::Node> {
        vec![gpusched_client::node("n1", 2, 16384, "NVIDIA-A100")]
    }

    #[test]
    fn the_observed_mix_counts_the_booked_jobs_by_demand() {
        let jobs: BTreeMap<u64, Decision> = [
            (1, booked(1, 20, 3276)),
            (2, booked(1, 20, 3276)),
            (3, booked(2, 60, 9830)),
        ]
        .into_iter()
        .collect();
        let m = for_request(&MixSource::Observed, None, &fgd_request(), &jobs, &nodes()).unwrap();
        let got: Vec<(u32, u32, f64)> = m
            .shapes
            .iter()
            .map(|s| (s.gpu_count, s.gpucores_percent, s.probability))
            .collect();
        // 2 x 60 = 120 against 2 x 20 = 40.
        assert_eq!(got, vec![(2, 60, 0.75), (1, 20, 0.25)]);
        assert_eq!(m.shapes[0].gpumem_mib, 9830);
        // Without booked jobs: the job's own shape.
        let m = for_request(
            &MixSource::Observed,
            None,
            &fgd_request(),
            &BTreeMap::new(),
            &nodes(),
        )
        .unwrap();
        assert_eq!(
            (
                m.shapes.len(),
                m.shapes[0].gpumem_percent,
                m.shapes[0].probability
            ),
            (1, 30, 1.0)
        );
    }

    #[test]
    fn the_window_keeps_the_newest_jobs() {
        let mut jobs: BTreeMap<u64, Decision> = BTreeMap::new();
        for id in 0..(WINDOW as u64 + 5) {
            jobs.insert(id, booked(1, 10, 1000));
        }
        // The 5 oldest are outside the window: a shape only they have is not counted.
        for id in 0..5 {
            jobs.insert(id, booked(1, 90, 9000));
        }
        let m = observed(&jobs, &fgd_request()).unwrap();
        assert_eq!(m.shapes.len(), 1);
        assert_eq!(m.shapes[0].gpucores_percent, 10);
    }

    #[test]
    fn only_fgd_jobs_get_a_mix_and_a_file_mix_wins() {
        let jobs: BTreeMap<u64, Decision> = [(1, booked(1, 20, 3276))].into_iter().collect();
        let mut plain = GpuRequest::default();
        plain.add_gres("gpu:1").unwrap();
        plain.add_option("gpu-scheduler-policy=binpack").unwrap();
        assert!(for_request(&MixSource::Observed, None, &plain, &jobs, &nodes()).is_none());
        let mut gpu = GpuRequest::default();
        gpu.add_gres("gpu:1").unwrap();
        gpu.add_option("gpu-scheduler-policy=numa,fgd").unwrap();
        assert!(uses_fgd(&gpu));
        assert!(for_request(&MixSource::Service, None, &fgd_request(), &jobs, &nodes()).is_none());
        let path = std::env::temp_dir().join(format!("gpusched-mix-{}.json", std::process::id()));
        std::fs::write(
            &path,
            r#"{"shapes": [{"probability": 0.5, "gpuCount": 1, "gpucoresPercent": 50},
                          {"probability": 0.5, "gpuCount": 1, "gpucoresPercent": 40,
                           "gpuTypes": ["H100"]}]}"#,
        )
        .unwrap();
        let file = load(&path).unwrap();
        let m = for_request(
            &MixSource::File(path.clone()),
            Some(&file),
            &fgd_request(),
            &jobs,
            &nodes(),
        )
        .unwrap();
        // The H100 shape: no such card among the nodes.
        assert_eq!(m.shapes.len(), 1);
        assert_eq!(
            (m.shapes[0].gpucores_percent, m.shapes[0].probability),
            (50, 1.0)
        );
        std::fs::write(&path, "{\"shapes\": 3}").unwrap();
        assert!(load(&path).unwrap_err().contains("gpusched-mix-"));
        std::fs::remove_file(&path).unwrap();
    }
}
