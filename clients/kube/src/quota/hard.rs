//! A namespace's hard limits from its ResourceQuota objects: the keys `limits.<memory
//! resource>` (MiB, `limits.nvidia.com/gpumem`) and `limits.<cores resource>` (percent of a
//! card, `limits.nvidia.com/gpucores`), as HAMi reads them. Several quotas setting one key: the
//! smallest wins. A value that is not a whole count (see [`super::quantity`]) fails closed: it
//! counts as a limit of 0, which blocks the namespace's GPU pods for that resource until it is
//! fixed, and it is reported as a [`Finding`] naming the quota and the key.

use k8s_openapi::api::core::v1::ResourceQuota;

use super::quantity::{self, ValueError};
use crate::config::Names;

/// The ResourceQuota keys gpusched reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    /// `limits.nvidia.com/gpumem`.
    pub memory: String,
    /// `limits.nvidia.com/gpucores`.
    pub cores: String,
}

impl Keys {
    /// `limits.` + the configured memory and cores resource names.
    pub fn of(names: &Names) -> Keys {
        Keys {
            memory: format!("limits.{}", names.resources.memory),
            cores: format!("limits.{}", names.resources.cores),
        }
    }
}

/// One hard limit and where it comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// MiB or percent (0 for an unreadable value: fail closed).
    pub value: u64,
    /// The ResourceQuota's name.
    pub quota: String,
    /// The key.
    pub key: String,
    /// Why the value could not be read (it then counts as 0).
    pub invalid: Option<ValueError>,
}

impl Limit {
    /// Which of two limits on one key wins: the smaller; on a tie an unreadable one (its
    /// message is the one to show), then the first quota by name.
    fn wins_over(&self, other: &Limit) -> bool {
        (self.value, self.invalid.is_none(), &self.quota)
            < (other.value, other.invalid.is_none(), &other.quota)
    }
}

/// A namespace's hard limits; None: no quota of the namespace sets the key (unlimited).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// `limits.nvidia.com/gpumem`.
    pub memory: Option<Limit>,
    /// `limits.nvidia.com/gpucores`.
    pub cores: Option<Limit>,
}

impl Limits {
    /// Whether any quota of the namespace limits GPU memory or cores.
    pub fn any(&self) -> bool {
        self.memory.is_some() || self.cores.is_some()
    }

    fn keep(slot: &mut Option<Limit>, l: Limit) {
        if slot.as_ref().is_none_or(|old| l.wins_over(old)) {
            *slot = Some(l);
        }
    }
}

/// Something about a quota an operator must hear of (a log line, an Event on the quota, the
/// `gpusched_kube_quotas_invalid` gauge when `blocking`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// The key, or `spec.scopes` / `spec.scopeSelector`.
    pub key: String,
    /// What is wrong and what gpusched does about it.
    pub text: String,
    /// The value fails closed (the namespace's GPU pods are blocked for that resource).
    pub blocking: bool,
}

/// The GPU limits one quota sets, and what is wrong with it.
pub fn read(quota: &ResourceQuota, keys: &Keys) -> (Limits, Vec<Finding>) {
    let name = quota.metadata.name.clone().unwrap_or_default();
    let mut limits = Limits::default();
    let mut findings = Vec::new();
    let hard = quota.spec.as_ref().and_then(|s| s.hard.as_ref());
    for (key, q) in hard.into_iter().flatten() {
        let memory = *key == keys.memory;
        if !memory && *key != keys.cores {
            continue;
        }
        let (value, invalid) = match quantity::parse(&q.0, memory) {
            Ok(v) => (v, None),
            Err(e) => {
                findings.push(Finding {
                    key: key.clone(),
                    text: format!(
                        "{key}: {e}; gpusched counts it as 0 (the namespace's GPU pods wait) \
                         until it is fixed"
                    ),
                    blocking: true,
                });
                (0, Some(e))
            }
        };
        let l = Limit {
            value,
            quota: name.clone(),
            key: key.clone(),
            invalid,
        };
        if memory {
            limits.memory = Some(l);
        } else {
            limits.cores = Some(l);
        }
    }
    let spec = quota.spec.as_ref();
    let scoped = [
        (
            "spec.scopes",
            spec.is_some_and(|s| s.scopes.as_ref().is_some_and(|v| !v.is_empty())),
        ),
        (
            "spec.scopeSelector",
            spec.is_some_and(|s| s.scope_selector.is_some()),
        ),
    ];
    for (field, set) in scoped {
        if set && limits.any() {
            findings.push(Finding {
                key: field.to_owned(),
                text: format!(
                    "{field} is not evaluated for {} and {}: gpusched applies them to every GPU \
                     pod of the namespace",
                    keys.memory, keys.cores
                ),
                blocking: false,
            });
        }
    }
    (limits, findings)
}

/// The limits of a namespace's quotas: per key the smallest.
pub fn limits<'a>(quotas: impl IntoIterator<Item = &'a ResourceQuota>, keys: &Keys) -> Limits {
    let mut out = Limits::default();
    for q in quotas {
        let (l, _) = read(q, keys);
        if let Some(m) = l.memory {
            Limits::keep(&mut out.memory, m);
        }
        if let Some(c) = l.cores {
            Limits::keep(&mut out.cores, c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn quota(name: &str, hard: serde_json::Value) -> ResourceQuota {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"hard": hard}
        }))
        .unwrap()
    }

    fn keys() -> Keys {
        Keys::of(&Names::default())
    }

    /// (quotas, memory limit and its quota, cores limit and its quota).
    #[test]
    fn the_smallest_limit_of_each_key_wins() {
        type Want = Option<(u64, &'static str)>;
        let cases: Vec<(Vec<ResourceQuota>, Want, Want, &str)> = vec![
            (vec![], None, None, "no quota"),
            (
                vec![quota(
                    "cpu",
                    json!({"limits.cpu": "8", "requests.nvidia.com/gpu": "4"}),
                )],
                None,
                None,
                "other keys are the API server's",
            ),
            (
                vec![quota("gpu", json!({"limits.nvidia.com/gpumem": "20k"}))],
                Some((20_000, "gpu")),
                None,
                "memory only, canonical form",
            ),
            (
                vec![
                    quota(
                        "a",
                        json!({"limits.nvidia.com/gpumem": "20000", "limits.nvidia.com/gpucores": "300"}),
                    ),
                    quota(
                        "b",
                        json!({"limits.nvidia.com/gpumem": "24000", "limits.nvidia.com/gpucores": "200"}),
                    ),
                ],
                Some((20_000, "a")),
                Some((200, "b")),
                "two quotas: each key's smallest, from either",
            ),
            (
                vec![
                    quota("b", json!({"limits.nvidia.com/gpumem": "0"})),
                    quota("a", json!({"limits.nvidia.com/gpumem": "0"})),
                ],
                Some((0, "a")),
                None,
                "ties go to the first name",
            ),
            (
                vec![
                    quota("a", json!({"limits.nvidia.com/gpumem": "0"})),
                    quota("z", json!({"limits.nvidia.com/gpumem": "16Gi"})),
                ],
                Some((0, "z")),
                None,
                "an unreadable value fails closed, and its message wins a tie",
            ),
        ];
        for (quotas, mem, cores, why) in cases {
            let l = limits(&quotas, &keys());
            let got = |l: &Option<Limit>| l.as_ref().map(|l| (l.value, l.quota.clone()));
            assert_eq!(got(&l.memory), mem.map(|(v, q)| (v, q.to_owned())), "{why}");
            assert_eq!(
                got(&l.cores),
                cores.map(|(v, q)| (v, q.to_owned())),
                "{why}"
            );
            assert_eq!(l.any(), mem.is_some() || cores.is_some(), "{why}");
        }
    }

    #[test]
    fn unreadable_values_and_scopes_are_findings() {
        let mut q = quota(
            "gpu",
            json!({"limits.nvidia.com/gpumem": "16Gi", "limits.nvidia.com/gpucores": "1.5"}),
        );
        q.spec.as_mut().unwrap().scopes = Some(vec!["NotBestEffort".into()]);
        let (l, findings) = read(&q, &keys());
        assert_eq!(l.memory.as_ref().unwrap().value, 0);
        assert_eq!(l.cores.as_ref().unwrap().value, 0);
        let texts: Vec<(&str, bool)> = findings
            .iter()
            .map(|f| (f.text.as_str(), f.blocking))
            .collect();
        assert_eq!(
            texts,
            [
                (
                    "limits.nvidia.com/gpucores: \"1.5\" is not a whole number; gpusched counts it \
                     as 0 (the namespace's GPU pods wait) until it is fixed",
                    true
                ),
                (
                    "limits.nvidia.com/gpumem: \"16Gi\" has the binary suffix \"Gi\", a multiple \
                     of bytes; the key counts MiB (write a plain number, e.g. 16384 for 16Gi of \
                     memory); gpusched counts it as 0 (the namespace's GPU pods wait) until it is \
                     fixed",
                    true
                ),
                (
                    "spec.scopes is not evaluated for limits.nvidia.com/gpumem and \
                     limits.nvidia.com/gpucores: gpusched applies them to every GPU pod of the \
                     namespace",
                    false
                ),
            ]
        );
        // Configured resource names give other keys.
        let mut names = Names::default();
        names.resources.memory = "example.com/vmem".into();
        let k = Keys::of(&names);
        assert_eq!(k.memory, "limits.example.com/vmem");
        let (l, f) = read(&quota("x", json!({"limits.example.com/vmem": "100"})), &k);
        assert_eq!((l.memory.unwrap().value, f.len()), (100, 0));
        // A scoped quota without GPU keys is nobody's business here.
        let mut cpu = quota("cpu", json!({"limits.cpu": "1"}));
        cpu.spec.as_mut().unwrap().scopes = Some(vec!["BestEffort".into()]);
        assert_eq!(read(&cpu, &keys()).1, vec![]);
    }
}
