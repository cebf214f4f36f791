//! GPU quotas per namespace in a replay (contract section 10): a JSON Lines trace may declare a
//! namespace's hard limits, `{"quota": {"namespace": "ml", "memMib": 40000, "cores": 300}}`
//! (either limit may be left out: unlimited). Each workload of such a namespace is sent the
//! budget its namespace has left (hard minus what its placed workloads consume, section 10.2;
//! an AllocateBatch shares it among the batch's workloads of one namespace, section 10.5), and
//! the report says per namespace what the quota cost: workloads refused by it, placed, and the
//! peak use against the limit.

use std::collections::{BTreeMap, HashMap};

use gpusched_api::v1;
use serde::Serialize;

/// A namespace's hard limits; None: unlimited.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Hard {
    /// MiB.
    pub mem_mib: Option<u64>,
    /// Percent of a card.
    pub cores: Option<u64>,
}

/// A trace line declaring a quota: None when the line is not one (no top-level `quota`),
/// else the namespace and its limits, or what is wrong with them.
pub fn line(text: &str) -> Option<Result<(String, Hard), String>> {
    if !text.contains("\"quota\"") {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let q = v.get("quota")?;
    Some(read(q))
}

fn read(q: &serde_json::Value) -> Result<(String, Hard), String> {
    let namespace = q
        .get("namespace")
        .and_then(|n| n.as_str())
        .filter(|n| !n.is_empty())
        .ok_or("`quota.namespace` must be a non-empty string")?;
    let limit = |key: &str| -> Result<Option<u64>, String> {
        match q.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .filter(|n| *n < 1 << 53)
                .map(Some)
                .ok_or_else(|| format!("`quota.{key}` must be a whole number below 2^53, got {v}")),
        }
    };
    if let Some(k) = q
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .find(|k| !matches!(k.as_str(), "namespace" | "memMib" | "cores"))
    {
        return Err(format!(
            "`quota.{k}` is not a quota field (namespace, memMib, cores)"
        ));
    }
    Ok((
        namespace.to_owned(),
        Hard {
            mem_mib: limit("memMib")?,
            cores: limit("cores")?,
        },
    ))
}

/// MiB and cores a placement consumes (section 10.2): per card the larger of the init
/// containers' peak and the app containers' sum.
pub fn consumed(r: &v1::AllocationResult) -> (u64, u64) {
    let mut cards: BTreeMap<&str, [u64; 4]> = BTreeMap::new(); // init mem, init cores, app mem, app cores
    for c in &r.containers {
        for a in &c.cards {
            let e = cards.entry(a.card_id.as_str()).or_default();
            let cores = u64::from(a.cores_percent);
            if c.init {
                e[0] = e[0].max(a.mem_mib);
                e[1] = e[1].max(cores);
            } else {
                e[2] += a.mem_mib;
                e[3] += cores;
            }
        }
    }
    cards
        .values()
        .fold((0, 0), |(m, c), e| (m + e[0].max(e[2]), c + e[1].max(e[3])))
}

/// What a namespace's quota cost in one set-up.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NamespaceReport {
    /// The limits.
    pub hard: Hard,
    /// Workloads of the namespace placed.
    pub placed: usize,
    /// Workloads not placed with a quota reason on at least one node.
    pub refused_by_quota: usize,
    /// Most MiB the namespace held at once.
    pub peak_mem_mib: u64,
    /// Most cores the namespace held at once.
    pub peak_cores: u64,
}

/// The namespaces' use during a replay.
#[derive(Debug, Default)]
pub struct Ledger {
    hard: BTreeMap<String, Hard>,
    used: BTreeMap<String, (u64, u64)>,
    by_job: HashMap<usize, (String, u64, u64)>,
    report: BTreeMap<String, NamespaceReport>,
}

impl Ledger {
    /// A ledger for these limits.
    pub fn new(hard: &BTreeMap<String, Hard>) -> Ledger {
        Ledger {
            hard: hard.clone(),
            report: hard
                .iter()
                .map(|(ns, h)| {
                    (
                        ns.clone(),
                        NamespaceReport {
                            hard: *h,
                            ..NamespaceReport::default()
                        },
                    )
                })
                .collect(),
            ..Ledger::default()
        }
    }

    /// The budget the namespace has left; None without a quota.
    pub fn budget(&self, namespace: &str) -> Option<v1::QuotaBudget> {
        let h = self.hard.get(namespace)?;
        let (mem, cores) = self.used.get(namespace).copied().unwrap_or_default();
        Some(v1::QuotaBudget {
            mem_mib: h.mem_mib.map(|l| l.saturating_sub(mem)),
            cores: h.cores.map(|l| l.saturating_sub(cores)),
        })
    }

    /// Workload `job` of `namespace` was placed with `r`.
    pub fn book(&mut self, job: usize, namespace: &str, r: &v1::AllocationResult) {
        let Some(rep) = self.report.get_mut(namespace) else {
            return;
        };
        let (mem, cores) = consumed(r);
        let u = self.used.entry(namespace.to_owned()).or_default();
        *u = (u.0 + mem, u.1 + cores);
        rep.placed += 1;
        rep.peak_mem_mib = rep.peak_mem_mib.max(u.0);
        rep.peak_cores = rep.peak_cores.max(u.1);
        self.by_job.insert(job, (namespace.to_owned(), mem, cores));
    }

    /// Workload `job` left.
    pub fn release(&mut self, job: usize) {
        if let Some((ns, mem, cores)) = self.by_job.remove(&job)
            && let Some(u) = self.used.get_mut(&ns)
        {
            *u = (u.0.saturating_sub(mem), u.1.saturating_sub(cores));
        }
    }

    /// A workload of `namespace` was not placed (`r`, its answer against every node).
    pub fn unplaced(&mut self, namespace: &str, r: &v1::AllocationResult) {
        let quota = [
            v1::Reason::QuotaMemoryExceeded as i32,
            v1::Reason::QuotaCoresExceeded as i32,
        ];
        let by_quota = r
            .failed_nodes
            .iter()
            .any(|f| f.reasons.iter().any(|c| quota.contains(&c.reason)));
        if let (true, Some(rep)) = (by_quota, self.report.get_mut(namespace)) {
            rep.refused_by_quota += 1;
        }
    }

    /// The report (None when the trace declares no quota).
    pub fn report(self) -> Option<BTreeMap<String, NamespaceReport>> {
        (!self.report.is_empty()).then_some(self.report)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn quota_lines_are_read_or_refused_with_the_field() {
        let hard = |m, c| Hard {
            mem_mib: m,
            cores: c,
        };
        for (text, want) in [
            (r#"{"arrive": 1, "workload": {"name": "x"}}"#, None),
            (
                r#"{"arrive": 1, "workload": {"name": "x", "quota": {"memMib": 5}}}"#,
                None,
            ),
            (
                r#"{"quota": {"namespace": "ml", "memMib": 40000, "cores": 300}}"#,
                Some(Ok(("ml".to_owned(), hard(Some(40000), Some(300))))),
            ),
            (
                r#"{"quota": {"namespace": "ml", "cores": 0}}"#,
                Some(Ok(("ml".to_owned(), hard(None, Some(0))))),
            ),
            (
                r#"{"quota": {"memMib": 1}}"#,
                Some(Err(
                    "`quota.namespace` must be a non-empty string".to_owned()
                )),
            ),
            (
                r#"{"quota": {"namespace": "ml", "memMib": -1}}"#,
                Some(Err(
                    "`quota.memMib` must be a whole number below 2^53, got -1".to_owned(),
                )),
            ),
            (
                r#"{"quota": {"namespace": "ml", "memMib": "16Gi"}}"#,
                Some(Err(
                    "`quota.memMib` must be a whole number below 2^53, got \"16Gi\"".to_owned(),
                )),
            ),
            (
                r#"{"quota": {"namespace": "ml", "gpumem": 1}}"#,
                Some(Err(
                    "`quota.gpumem` is not a quota field (namespace, memMib, cores)".to_owned(),
                )),
            ),
        ] {
            assert_eq!(line(text), want, "{text}");
        }
    }

    /// (card id, MiB, cores) of one container.
    type Cards<'a> = &'a [(&'a str, u64, u32)];

    fn result(containers: &[(bool, Cards)]) -> v1::AllocationResult {
        v1::AllocationResult {
            placed: true,
            containers: containers
                .iter()
                .map(|(init, cards)| v1::ContainerAssignment {
                    init: *init,
                    cards: cards
                        .iter()
                        .map(|(id, mem, cores)| v1::CardAssignment {
                            card_id: (*id).into(),
                            mem_mib: *mem,
                            cores_percent: *cores,
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_budget_follows_placements_and_departures() {
        let hard = BTreeMap::from([(
            "ml".to_owned(),
            Hard {
                mem_mib: Some(40000),
                cores: None,
            },
        )]);
        let mut l = Ledger::new(&hard);
        assert_eq!(l.budget("other"), None);
        assert_eq!(l.budget("ml").unwrap().mem_mib, Some(40000));
        // Contract 10.7.4: init 30,000 on card 0, app 10,000 on cards 0 and 1: 40,000.
        let r = result(&[
            (true, &[("c0", 30000, 0)]),
            (false, &[("c0", 10000, 10), ("c1", 10000, 10)]),
        ]);
        assert_eq!(consumed(&r), (40000, 20));
        l.book(7, "ml", &r);
        l.book(8, "other", &r);
        assert_eq!(
            l.budget("ml"),
            Some(v1::QuotaBudget {
                mem_mib: Some(0),
                cores: None
            })
        );
        l.release(7);
        l.release(8);
        assert_eq!(l.budget("ml").unwrap().mem_mib, Some(40000));
        let refused = v1::AllocationResult {
            failed_nodes: vec![v1::FailedNode {
                reasons: vec![v1::ReasonCount {
                    reason: v1::Reason::QuotaMemoryExceeded as i32,
                    count: 1,
                    name: "QuotaMemoryExceeded".into(),
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        l.unplaced("ml", &refused);
        l.unplaced("ml", &v1::AllocationResult::default());
        let rep = l.report().unwrap();
        assert_eq!(
            rep["ml"],
            NamespaceReport {
                hard: hard["ml"],
                placed: 1,
                refused_by_quota: 1,
                peak_mem_mib: 40000,
                peak_cores: 20,
            }
        );
        assert!(Ledger::new(&BTreeMap::new()).report().is_none());
    }
}
