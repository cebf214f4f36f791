//! The GPU request of a Slurm job, as its user writes it, parsed into typed form.
//!
//! Users ask with Slurm's own `--gres=gpu:<n>` and add HAMi's options with
//! `--gpusched KEY=VALUE`, where KEY is the Kubernetes annotation or resource name
//! (`hami.io/gpu-scheduler-policy`, `nvidia.com/gpucores`, ...) or the same name without its
//! prefix (`gpu-scheduler-policy`, `gpucores`). Values are checked by the gpusched service
//! exactly as for a Kubernetes pod; this module only checks the shape.

use std::collections::BTreeMap;

use gpusched_client::v1;

/// Keys that are container resources (`resources.limits` of the pod).
const RESOURCE_KEYS: &[&str] = &[
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
];

/// Keys that are pod annotations.
const ANNOTATION_KEYS: &[&str] = &[
    "hami.io/node-scheduler-policy",
    "hami.io/gpu-scheduler-policy",
    "hami.io/device-scoring-weights",
    "nvidia.com/use-gputype",
    "nvidia.com/nouse-gputype",
    "nvidia.com/use-gpuuuid",
    "nvidia.com/nouse-gpuuuid",
    "nvidia.com/numa-bind",
    "nvidia.com/vgpu-mode",
];

/// The annotation that restricts the cards (used to re-check a decision).
pub const USE_GPUUUID: &str = "nvidia.com/use-gpuuuid";
/// The annotation that restricts the card types.
pub const USE_GPUTYPE: &str = "nvidia.com/use-gputype";

/// A request that cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    /// `--gpusched` without `KEY=VALUE`.
    #[error("--gpusched {0:?}: expected KEY=VALUE (e.g. --gpusched gpucores=20)")]
    NotKeyValue(String),
    /// A key gpusched does not know.
    #[error("--gpusched {key}: unknown option; accepted: {accepted}")]
    UnknownKey {
        /// The key as given.
        key: String,
        /// The accepted keys.
        accepted: String,
    },
    /// The same key twice.
    #[error("--gpusched {0}: given more than once")]
    Duplicate(String),
    /// An invalid `--gres` gpu entry.
    #[error("--gres={0}: {1}")]
    Gres(String, String),
    /// No GPU asked for.
    #[error("no GPU requested: add --gres=gpu:<count> (gpusched-sbatch only places GPU jobs)")]
    NoGpu,
    /// A MIG instance asked for (`vgpu-mode` naming `mig`): not placed under Slurm.
    #[error(
        "--gpusched vgpu-mode={0}: gpusched-sbatch does not place MIG instances. A MIG decision \
         names a profile and a placement that must exist as a GPU instance on the card before \
         the job starts (in Kubernetes HAMi's device plugin creates it from \
         hami.io/vgpu-mig-allocations); on a Slurm node nothing creates it (gpusched-agent only \
         reads NVML, Slurm 22.05 has no dynamic MIG) and a job could not name it \
         (CUDA_VISIBLE_DEVICES needs the instance's MIG UUID, known only once it exists). Run \
         MIG jobs through Slurm's own gres/gpu on MIG cards (instances made beforehand, \
         AutoDetect=nvml); gpusched jobs take hami-core cards only, never a MIG card"
    )]
    Mig(String),
}

/// The typed GPU request of one job (one node, one task group: one "container").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuRequest {
    /// Cards wanted on the node.
    pub gpus: u32,
    /// Resource limits (`nvidia.com/gpumem` ...), full key -> value.
    pub limits: BTreeMap<String, String>,
    /// Annotations (`hami.io/...`, `nvidia.com/use-gputype` ...), full key -> value.
    pub annotations: BTreeMap<String, String>,
}

fn accepted() -> String {
    RESOURCE_KEYS
        .iter()
        .chain(ANNOTATION_KEYS)
        .copied()
        .collect::<Vec<_>>()
        .join(", ")
}

/// The full key of `key` (`gpucores` -> `nvidia.com/gpucores`), when gpusched knows it.
pub fn full_key(key: &str) -> Option<&'static str> {
    RESOURCE_KEYS
        .iter()
        .chain(ANNOTATION_KEYS)
        .copied()
        .find(|k| *k == key || k.split_once('/').is_some_and(|(_, short)| short == key))
}

impl GpuRequest {
    /// Adds one `--gpusched KEY=VALUE` option.
    pub fn add_option(&mut self, kv: &str) -> Result<(), RequestError> {
        let (key, value) = kv
            .split_once('=')
            .ok_or_else(|| RequestError::NotKeyValue(kv.to_owned()))?;
        let key = key.trim();
        let full = full_key(key).ok_or_else(|| RequestError::UnknownKey {
            key: key.to_owned(),
            accepted: accepted(),
        })?;
        let map = if RESOURCE_KEYS.contains(&full) {
            &mut self.limits
        } else {
            &mut self.annotations
        };
        if full == "nvidia.com/vgpu-mode" && value.split(',').any(|m| m.trim() == "mig") {
            return Err(RequestError::Mig(value.to_owned()));
        }
        if map.insert(full.to_owned(), value.to_owned()).is_some() {
            return Err(RequestError::Duplicate(full.to_owned()));
        }
        Ok(())
    }

    /// Reads the gpu entries of one `--gres` list; returns the other entries unchanged.
    pub fn add_gres(&mut self, list: &str) -> Result<Vec<String>, RequestError> {
        let mut others = Vec::new();
        for entry in list.split(',').filter(|e| !e.is_empty()) {
            let parts: Vec<&str> = entry.split(':').collect();
            match parts.as_slice() {
                ["gpu"] => self.set_gpus(list, 1)?,
                ["gpu", n] => {
                    let n = n.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                        RequestError::Gres(
                            list.to_owned(),
                            format!("gpu count {n:?} is not a positive integer"),
                        )
                    })?;
                    self.set_gpus(list, n)?;
                }
                ["gpu", ty, _] => {
                    return Err(RequestError::Gres(
                        list.to_owned(),
                        format!(
                            "typed gpu requests are not read; use --gres=gpu:<count> \
                             --gpusched use-gputype={ty}"
                        ),
                    ));
                }
                ["gpu", ..] => {
                    return Err(RequestError::Gres(
                        list.to_owned(),
                        "expected gpu:<count>".to_owned(),
                    ));
                }
                [name, ..] if ["gpuslot", "gpumem", "gpucore"].contains(name) => {
                    return Err(RequestError::Gres(
                        list.to_owned(),
                        format!("{name} is booked by gpusched-sbatch itself; do not ask for it"),
                    ));
                }
                _ => others.push(entry.to_owned()),
            }
        }
        Ok(others)
    }

    fn set_gpus(&mut self, list: &str, n: u32) -> Result<(), RequestError> {
        if self.gpus != 0 {
            return Err(RequestError::Gres(
                list.to_owned(),
                "gpu given more than once".to_owned(),
            ));
        }
        self.gpus = n;
        Ok(())
    }

    /// Checks that a GPU was asked for.
    pub fn check(&self) -> Result<(), RequestError> {
        if self.gpus == 0 {
            return Err(RequestError::NoGpu);
        }
        Ok(())
    }

    /// The workload in the Kubernetes form the service parses (one container named `job`).
    pub fn workload(&self, name: &str) -> v1::Workload {
        let mut limits: BTreeMap<String, String> = self.limits.clone();
        limits.insert("nvidia.com/gpu".to_owned(), self.gpus.to_string());
        v1::Workload {
            quota: None,
            namespace: "slurm".to_owned(),
            name: name.to_owned(),
            uid: String::new(),
            spec: Some(v1::workload::Spec::Kubernetes(v1::KubernetesWorkloadSpec {
                annotations: self.annotations.clone().into_iter().collect(),
                init_containers: vec![],
                containers: vec![v1::KubernetesContainer {
                    name: "job".to_owned(),
                    limits: limits.into_iter().collect(),
                    requests: Default::default(),
                }],
            })),
        }
    }

    /// The same request pinned to exactly these cards (to re-check a decision).
    pub fn pinned_to(&self, card_ids: &[String]) -> GpuRequest {
        let mut r = self.clone();
        r.annotations
            .insert(USE_GPUUUID.to_owned(), card_ids.join(","));
        r.annotations.remove("nvidia.com/nouse-gpuuuid");
        r
    }
}

/// The option a service field violation is about, in the user's words: the key inside
/// `...["KEY"]` (`workload.kubernetes.annotations["hami.io/device-scoring-weights"]`).
pub fn option_of_field(field: &str) -> Option<&str> {
    let start = field.rfind("[\"")? + 2;
    let end = field[start..].find("\"]")? + start;
    Some(&field[start..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_full_keys_map_to_limits_or_annotations() {
        let mut r = GpuRequest::default();
        r.add_option("gpucores=20").unwrap();
        r.add_option("hami.io/device-scoring-weights=slot=1,core=1,memory=3")
            .unwrap();
        r.add_option("gpu-scheduler-policy=spread").unwrap();
        assert_eq!(r.limits["nvidia.com/gpucores"], "20");
        assert_eq!(
            r.annotations["hami.io/device-scoring-weights"],
            "slot=1,core=1,memory=3"
        );
        assert_eq!(r.annotations["hami.io/gpu-scheduler-policy"], "spread");
    }

    #[test]
    fn unknown_duplicate_and_shapeless_options_are_refused() {
        let mut r = GpuRequest::default();
        assert!(matches!(
            r.add_option("gpu-policy=spread"),
            Err(RequestError::UnknownKey { .. })
        ));
        assert!(matches!(
            r.add_option("spread"),
            Err(RequestError::NotKeyValue(_))
        ));
        r.add_option("gpumem=3000").unwrap();
        assert_eq!(
            r.add_option("nvidia.com/gpumem=4000"),
            Err(RequestError::Duplicate("nvidia.com/gpumem".into()))
        );
        // MIG is refused, saying why; other modes pass to the service.
        for v in ["mig", "hami-core,mig", " mig "] {
            let e = GpuRequest::default()
                .add_option(&format!("vgpu-mode={v}"))
                .unwrap_err();
            assert_eq!(e, RequestError::Mig(v.to_owned()));
            let text = e.to_string();
            assert!(
                text.contains("does not place MIG instances")
                    && text.contains("nothing creates it"),
                "{text}"
            );
        }
        let mut r = GpuRequest::default();
        r.add_option("nvidia.com/vgpu-mode=hami-core").unwrap();
        assert_eq!(r.annotations["nvidia.com/vgpu-mode"], "hami-core");
    }

    #[test]
    fn gres_gpu_entries_are_read_and_others_kept() {
        let mut r = GpuRequest::default();
        assert_eq!(r.add_gres("gpu:2,nic:1").unwrap(), vec!["nic:1".to_owned()]);
        assert_eq!(r.gpus, 2);
        assert!(r.add_gres("gpu:1").is_err(), "gpu twice");
        let mut r = GpuRequest::default();
        assert!(r.add_gres("gpu:0").is_err());
        assert!(r.add_gres("gpu:a100:1").is_err());
        assert!(r.add_gres("gpuslot:1").is_err());
        assert_eq!(r.check(), Err(RequestError::NoGpu));
        r.add_gres("gpu").unwrap();
        assert_eq!(r.gpus, 1);
    }

    #[test]
    fn workload_and_pinning() {
        let mut r = GpuRequest::default();
        r.add_gres("gpu:2").unwrap();
        r.add_option("nouse-gpuuuid=GPU-x").unwrap();
        let p = r.pinned_to(&["GPU-a".into(), "GPU-b".into()]);
        assert_eq!(p.annotations[USE_GPUUUID], "GPU-a,GPU-b");
        assert!(!p.annotations.contains_key("nvidia.com/nouse-gpuuuid"));
        let Some(v1::workload::Spec::Kubernetes(k)) = p.workload("j").spec else {
            panic!("kubernetes form")
        };
        assert_eq!(k.containers[0].limits["nvidia.com/gpu"], "2");
    }

    #[test]
    fn field_names_give_the_option() {
        assert_eq!(
            option_of_field("workload.kubernetes.containers[0].limits[\"nvidia.com/gpucores\"]"),
            Some("nvidia.com/gpucores")
        );
        assert_eq!(option_of_field("workload"), None);
    }
}
