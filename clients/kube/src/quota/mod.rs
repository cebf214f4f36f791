//! GPU quotas per namespace, as HAMi users write them (contract section 10; the Kubernetes side
//! is clients/kube/README.md, "Quotas"): ResourceQuota keys `limits.nvidia.com/gpumem` (MiB) and
//! `limits.nvidia.com/gpucores` (percent of a card). The shim sends each pod the budget its
//! namespace has left (hard limit minus what the namespace's pods hold, counted from the same
//! unforgeable decisions as node usage), and the admission webhook refuses a pod that can never
//! fit the hard limit.
//!
//! - `quantity.rs`: a key's value as a whole count;
//! - `hard.rs`: a namespace's limits from its quotas (the smallest wins; unreadable fails closed);
//! - `consume.rs`: what a decision consumes (section 10.2);
//! - `report.rs`: logs and Events about quotas that cannot be read as written;
//! - here: the budget, and the texts that name it (filter answers, admission denials).

mod consume;
mod hard;
mod quantity;
mod report;

pub use consume::{Use, consumed};
pub use hard::{Finding, Keys, Limit, Limits, limits, read};
pub use quantity::{MAX_BUDGET, ValueError};
pub use report::QuotaReporter;

use gpusched_client::v1;

/// A namespace's GPU quota at one moment: its hard limits and what it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceQuota {
    /// The namespace.
    pub namespace: String,
    /// Its limits (at least one is set).
    pub limits: Limits,
    /// What its pods hold (bound by our decisions, assumed and reserved), the pod being placed
    /// left out.
    pub used: Use,
}

impl NamespaceQuota {
    /// The budget to send with the namespace's pods: per limited resource, the hard limit minus
    /// what the namespace holds (0 when it holds more: the quota was lowered).
    pub fn budget(&self) -> v1::QuotaBudget {
        let left = |l: &Option<Limit>, used: u64| {
            l.as_ref()
                .map(|l| l.value.saturating_sub(used).min(MAX_BUDGET))
        };
        v1::QuotaBudget {
            mem_mib: left(&self.limits.memory, self.used.mem_mib),
            cores: left(&self.limits.cores, self.used.cores),
        }
    }

    /// What a failure by quota says after the service's reasons: each limit, its quota, what
    /// is used and what is left, e.g. `quota of namespace team-a: limits.nvidia.com/gpumem 20000
    /// (ResourceQuota gpu), 16384 used, 3616 left`.
    pub fn note(&self) -> String {
        let part = |l: &Option<Limit>, used: u64| -> Option<String> {
            let l = l.as_ref()?;
            Some(match &l.invalid {
                Some(e) => format!(
                    "{} of ResourceQuota {} is unreadable ({e}) and counts as 0",
                    l.key, l.quota
                ),
                None => format!(
                    "{} {} (ResourceQuota {}), {used} used, {} left",
                    l.key,
                    l.value,
                    l.quota,
                    l.value.saturating_sub(used)
                ),
            })
        };
        let parts: Vec<String> = [
            part(&self.limits.memory, self.used.mem_mib),
            part(&self.limits.cores, self.used.cores),
        ]
        .into_iter()
        .flatten()
        .collect();
        format!(
            "quota of namespace {}: {}",
            self.namespace,
            parts.join("; ")
        )
    }
}

/// Why admission refuses a GPU pod whose least consumption on any node is `floor` (the
/// service's `ValidateWorkloadResponse.quota_floor`) in a namespace with these limits: it can
/// never fit (contract 10.6): a limit of 0 (or an unreadable one, which counts as 0), or a
/// floor above the limit. None: admitted (it may have to wait for the namespace's usage to
/// drop or its quota to rise).
pub fn admission_refusal(namespace: &str, limits: &Limits, floor: Use) -> Option<String> {
    let why = |l: &Option<Limit>, need: u64, unit: &str| -> Option<String> {
        let l = l.as_ref()?;
        let quota = format!("ResourceQuota {namespace}/{}", l.quota);
        if let Some(e) = &l.invalid {
            return Some(format!(
                "{quota} {}: {e}; an unreadable limit counts as 0 and blocks every GPU pod of \
                 the namespace until it is fixed",
                l.key
            ));
        }
        if l.value == 0 {
            return Some(format!(
                "{quota} sets {} to 0, which blocks every GPU pod of the namespace",
                l.key
            ));
        }
        (need > l.value).then(|| {
            format!(
                "{quota} sets {} to {}{unit} and the pod needs at least {need}{unit} on any node",
                l.key, l.value
            )
        })
    };
    let reasons: Vec<String> = [
        why(&limits.memory, floor.mem_mib, " MiB"),
        why(&limits.cores, floor.cores, ""),
    ]
    .into_iter()
    .flatten()
    .collect();
    (!reasons.is_empty()).then(|| {
        format!(
            "exceeding resource quota: the pod can never fit: {}",
            reasons.join("; ")
        )
    })
}

/// Whether a service failure reason is a quota check's (7q).
fn is_quota_reason(reason: i32) -> bool {
    reason == v1::Reason::QuotaMemoryExceeded as i32
        || reason == v1::Reason::QuotaCoresExceeded as i32
}

/// Names the budget in the message of every node that failed by quota (the text kube-scheduler
/// puts in the pod's PodScheduled condition and FailedScheduling event), e.g. `1/1
/// ResourceQuotaNotFit; quota of namespace team-a: limits.nvidia.com/gpumem 20000 (ResourceQuota
/// gpu), 16384 used, 3616 left`. True when some node failed by quota.
pub fn explain(failed: &mut [v1::FailedNode], quota: &NamespaceQuota) -> bool {
    let mut any = false;
    let note = quota.note();
    for f in failed {
        if f.reasons.iter().any(|r| is_quota_reason(r.reason)) {
            any = true;
            f.message = format!("{}; {note}", f.message);
        }
    }
    any
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn limit(value: u64, quota: &str, key: &str) -> Option<Limit> {
        Some(Limit {
            value,
            quota: quota.into(),
            key: key.into(),
            invalid: None,
        })
    }

    const MEM: &str = "limits.nvidia.com/gpumem";
    const CORES: &str = "limits.nvidia.com/gpucores";

    #[test]
    fn the_budget_is_what_is_left_and_says_so() {
        let q = |mem: Option<Limit>, cores: Option<Limit>, used: (u64, u64)| NamespaceQuota {
            namespace: "team-a".into(),
            limits: Limits { memory: mem, cores },
            used: Use {
                mem_mib: used.0,
                cores: used.1,
            },
        };
        let both = q(
            limit(20_000, "gpu", MEM),
            limit(300, "gpu", CORES),
            (16_384, 160),
        );
        assert_eq!(
            both.budget(),
            v1::QuotaBudget {
                mem_mib: Some(3_616),
                cores: Some(140)
            }
        );
        assert_eq!(
            both.note(),
            "quota of namespace team-a: limits.nvidia.com/gpumem 20000 (ResourceQuota gpu), \
             16384 used, 3616 left; limits.nvidia.com/gpucores 300 (ResourceQuota gpu), 160 \
             used, 140 left"
        );
        // Lowered below what the namespace holds: 0 left; no cores limit: absent (unlimited).
        let lowered = q(limit(10_000, "gpu", MEM), None, (16_384, 160));
        assert_eq!(
            lowered.budget(),
            v1::QuotaBudget {
                mem_mib: Some(0),
                cores: None
            }
        );
        // A huge limit is capped at what the service accepts.
        let huge = q(None, limit(u64::MAX, "gpu", CORES), (0, 0));
        assert_eq!(huge.budget().cores, Some(MAX_BUDGET));
        let mut bad = limit(0, "gpu", MEM).unwrap();
        bad.invalid = Some(ValueError::NotWhole("1.5".into()));
        let unreadable = q(Some(bad), None, (0, 0));
        assert_eq!(unreadable.budget().mem_mib, Some(0));
        assert_eq!(
            unreadable.note(),
            "quota of namespace team-a: limits.nvidia.com/gpumem of ResourceQuota gpu is \
             unreadable (\"1.5\" is not a whole number) and counts as 0"
        );
    }

    #[test]
    fn only_nodes_failed_by_quota_name_the_budget() {
        let reason = |r: v1::Reason, name: &str| v1::ReasonCount {
            reason: r as i32,
            count: 1,
            name: name.into(),
        };
        let failed = |name: &str, reasons: Vec<v1::ReasonCount>, message: &str| v1::FailedNode {
            node_name: name.into(),
            reasons,
            message: message.into(),
            ..v1::FailedNode::default()
        };
        let q = NamespaceQuota {
            namespace: "team-a".into(),
            limits: Limits {
                memory: limit(10_240, "gpu", MEM),
                cores: None,
            },
            used: Use::default(),
        };
        let mut nodes = vec![
            failed(
                "big",
                vec![reason(
                    v1::Reason::QuotaMemoryExceeded,
                    "QuotaMemoryExceeded",
                )],
                "1/1 ResourceQuotaNotFit",
            ),
            failed(
                "full",
                vec![reason(
                    v1::Reason::CardInsufficientMemory,
                    "CardInsufficientMemory",
                )],
                "1/1 CardInsufficientMemory",
            ),
            failed(
                "both",
                vec![
                    reason(v1::Reason::CardInsufficientMemory, "CardInsufficientMemory"),
                    reason(v1::Reason::QuotaCoresExceeded, "QuotaCoresExceeded"),
                ],
                "1/2 CardInsufficientMemory, 1/2 ResourceQuotaNotFit",
            ),
        ];
        assert!(explain(&mut nodes, &q));
        let note = "quota of namespace team-a: limits.nvidia.com/gpumem 10240 (ResourceQuota \
                    gpu), 0 used, 10240 left";
        let messages: Vec<&str> = nodes.iter().map(|n| n.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                format!("1/1 ResourceQuotaNotFit; {note}"),
                "1/1 CardInsufficientMemory".to_owned(),
                format!("1/2 CardInsufficientMemory, 1/2 ResourceQuotaNotFit; {note}"),
            ]
        );
        assert!(!explain(&mut nodes[1..2], &q));
    }

    /// Contract 10.7.7: (limits, floor MiB and cores, refused with).
    #[test]
    fn admission_refuses_only_what_can_never_fit() {
        let mem20k = Limits {
            memory: limit(20_000, "gpu", MEM),
            cores: None,
        };
        let cores0 = Limits {
            memory: None,
            cores: limit(0, "cores", CORES),
        };
        let mut unreadable = mem20k.clone();
        if let Some(l) = &mut unreadable.memory {
            l.value = 0;
            l.invalid = Some(ValueError::Negative("-1".into()));
        }
        let none = Limits::default();
        let cases: Vec<(&Limits, (u64, u64), Option<&str>)> = vec![
            (
                &mem20k,
                (24_000, 0),
                Some(
                    "exceeding resource quota: the pod can never fit: ResourceQuota team-a/gpu \
                     sets limits.nvidia.com/gpumem to 20000 MiB and the pod needs at least 24000 \
                     MiB on any node",
                ),
            ),
            (&mem20k, (18_000, 60), None),
            (&mem20k, (20_000, 0), None),
            (&mem20k, (0, 0), None),
            (
                &cores0,
                (0, 0),
                Some(
                    "exceeding resource quota: the pod can never fit: ResourceQuota \
                     team-a/cores sets limits.nvidia.com/gpucores to 0, which blocks every GPU \
                     pod of the namespace",
                ),
            ),
            (
                &unreadable,
                (1, 0),
                Some(
                    "exceeding resource quota: the pod can never fit: ResourceQuota team-a/gpu \
                     limits.nvidia.com/gpumem: \"-1\" is negative; an unreadable limit counts \
                     as 0 and blocks every GPU pod of the namespace until it is fixed",
                ),
            ),
            (&none, (u64::MAX, u64::MAX), None),
        ];
        for (limits, (mem, cores), want) in cases {
            let floor = Use {
                mem_mib: mem,
                cores,
            };
            assert_eq!(
                admission_refusal("team-a", limits, floor).as_deref(),
                want,
                "{limits:?} {floor:?}"
            );
        }
    }
}
