//! Preemption for a job that fits nowhere (README, "Preemption"): its priority and every booked
//! job's are their partitions' `PriorityTier` (the rank Slurm's own partition-based preemption
//! uses); the service's `Preempt` names who must leave which node, card-exact; with
//! `--gpusched-preempt` the wrapper requeues exactly those jobs, held, their comment saying they
//! were preempted (so they hold nothing), and submits the job on the cards they free. Without
//! it, or when Slurm refuses the requeue (only root and Slurm operators may requeue other users'
//! jobs), the refusal names the jobs and the cards.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use gpusched_client::v1;

use crate::decision::{Decision, preempted_comment};
use crate::slurm::{self, Job, Partition, SlurmError};

/// The priority tier of each partition, and the default partition's name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tiers {
    by_name: BTreeMap<String, i32>,
    default: Option<String>,
}

impl Tiers {
    /// From `scontrol show partition`.
    pub fn new(partitions: &[Partition]) -> Tiers {
        Tiers {
            by_name: partitions
                .iter()
                .map(|p| (p.name.clone(), p.priority_tier))
                .collect(),
            default: partitions
                .iter()
                .find(|p| p.default)
                .map(|p| p.name.clone()),
        }
    }

    /// The priority of a job in `partition` (a comma-separated list: the highest tier; empty:
    /// the default partition; an unknown name: 0).
    pub fn priority(&self, partition: &str) -> i32 {
        let names: Vec<&str> = partition.split(',').filter(|s| !s.is_empty()).collect();
        let names = if names.is_empty() {
            self.default.as_deref().into_iter().collect()
        } else {
            names
        };
        names
            .iter()
            .filter_map(|n| self.by_name.get(*n).copied())
            .max()
            .unwrap_or(0)
    }
}

/// The placed workloads of the candidate `nodes`: every job whose decision books cards there,
/// its id, its partition's tier, its start (`now_ms` when it has not started) and one booking
/// per card (one container per job).
pub fn placed(
    nodes: &[v1::Node],
    jobs: &[Job],
    booked: &BTreeMap<u64, Decision>,
    tiers: &Tiers,
    now_ms: i64,
) -> Vec<v1::NodePlaced> {
    let by_id: BTreeMap<u64, &Job> = jobs.iter().map(|j| (j.id, j)).collect();
    nodes
        .iter()
        .map(|n| {
            let workloads = booked
                .iter()
                .filter(|(_, d)| d.node == n.name)
                .map(|(id, d)| {
                    let job = by_id.get(id);
                    let mut cards: BTreeMap<&str, v1::Booking> = BTreeMap::new();
                    for c in d
                        .cards
                        .iter()
                        .filter(|c| n.cards.iter().any(|k| k.id == c.uuid))
                    {
                        let b = cards.entry(c.uuid.as_str()).or_insert_with(|| v1::Booking {
                            card_id: c.uuid.clone(),
                            ..v1::Booking::default()
                        });
                        b.slots += 1;
                        b.mem_mib += c.mem_mib;
                        b.cores += c.cores;
                    }
                    v1::PlacedWorkload {
                        id: id.to_string(),
                        priority: job.map_or(0, |j| tiers.priority(&j.partition)),
                        violates_budget: false,
                        start_time_ms: job
                            .map(|j| j.start_time)
                            .filter(|s| *s > 0)
                            .map_or(now_ms, |s| s.saturating_mul(1000)),
                        bookings: cards.into_values().collect(),
                    }
                })
                .collect();
            v1::NodePlaced {
                node: n.name.clone(),
                workloads,
            }
        })
        .collect()
}

/// An eviction the service decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The decision for the job once the victims are gone.
    pub decision: Decision,
    /// The jobs to requeue, most important first.
    pub victims: Vec<u64>,
}

impl Plan {
    /// `jobs 12, 15 on node1 (GPU 0, GPU 2)`.
    pub fn describe(&self, booked: &BTreeMap<u64, Decision>) -> String {
        let ids: Vec<String> = self.victims.iter().map(u64::to_string).collect();
        let mut cards: Vec<String> = self
            .victims
            .iter()
            .filter_map(|v| booked.get(v))
            .flat_map(|d| d.cards.iter().map(|c| format!("GPU {}", c.index)))
            .collect();
        cards.sort();
        cards.dedup();
        format!(
            "job(s) {} on {} ({})",
            ids.join(", "),
            self.decision.node,
            cards.join(", ")
        )
    }
}

/// What the service's answer says: an eviction, or why there is none.
pub fn plan(resp: &v1::PreemptResponse) -> Result<Plan, String> {
    match v1::PreemptChoiceKind::try_from(resp.choice) {
        Ok(v1::PreemptChoiceKind::Evict) => {}
        Ok(v1::PreemptChoiceKind::NotNeeded) => {
            return Err("a node fits it now after all; submit again".to_owned());
        }
        _ => {
            return Err(
                "no job of a lower partition PriorityTier can make room (preemption)".to_owned(),
            );
        }
    }
    let v = gpusched_client::chosen_victims(resp)
        .ok_or_else(|| format!("the service chose {} without victims", resp.node_name))?;
    let victims = v
        .ids
        .iter()
        .map(|id| {
            id.parse::<u64>()
                .map_err(|_| format!("the service named {id:?}, not a job id"))
        })
        .collect::<Result<Vec<u64>, String>>()?;
    let decision = Decision::from_result(&v1::AllocationResult {
        placed: true,
        requests_gpu: true,
        node_name: resp.node_name.clone(),
        containers: v.containers.clone(),
        ..v1::AllocationResult::default()
    })
    .ok_or_else(|| "the service's placement is empty".to_owned())?;
    Ok(Plan { decision, victims })
}

/// Requeues the victims held, each with a comment saying it was preempted for `by` (it then
/// holds nothing). Stops at the first refusal (Slurm's message: e.g. a user may not requeue
/// another user's job).
pub async fn requeue(
    victims: &[u64],
    booked: &BTreeMap<u64, Decision>,
    by: u64,
    t: Duration,
) -> Result<(), (u64, SlurmError)> {
    for &v in victims {
        let id = v.to_string();
        slurm::run("scontrol", ["requeuehold", &id], t)
            .await
            .map_err(|e| (v, e))?;
        let comment = match booked.get(&v) {
            Some(d) => preempted_comment(by, d),
            None => format!("{} preempted by={by}", crate::decision::MARKER),
        };
        slurm::run(
            "scontrol",
            [
                "update".to_owned(),
                format!("JobId={id}"),
                format!("Comment={comment}"),
            ],
            t,
        )
        .await
        .map_err(|e| (v, e))?;
    }
    Ok(())
}

/// Waits (at most `within`) until no victim is running or completing any more; the ids still
/// running when the time is up.
pub async fn wait_stopped(victims: &[u64], t: Duration, within: Duration) -> Vec<u64> {
    let deadline = Instant::now() + within;
    loop {
        let still: Vec<u64> = match slurm::jobs(t).await {
            Ok(jobs) => jobs
                .iter()
                .filter(|j| victims.contains(&j.id))
                .filter(|j| matches!(j.state.as_str(), "RUNNING" | "COMPLETING" | "SUSPENDED"))
                .map(|j| j.id)
                .collect(),
            Err(_) => victims.to_vec(),
        };
        if still.is_empty() || Instant::now() >= deadline {
            return still;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::BookedCard;

    fn part(name: &str, tier: i32, default: bool) -> Partition {
        Partition {
            name: name.into(),
            priority_tier: tier,
            default,
        }
    }

    #[test]
    fn a_jobs_priority_is_its_partitions_tier() {
        let t = Tiers::new(&[
            part("gpu", 1, true),
            part("low", 2, false),
            part("high", 10, false),
        ]);
        let cases = [
            ("high", 10),
            ("low,high", 10),
            ("", 1),
            ("gone", 0),
            ("low", 2),
        ];
        for (p, want) in cases {
            assert_eq!(t.priority(p), want, "{p:?}");
        }
    }

    #[test]
    fn placed_jobs_carry_tier_start_and_cards_of_the_node_only() {
        let n = gpusched_client::node("node1", 2, 16384, "T4");
        let card = |i: usize| n.cards[i].id.clone();
        let d = |cards: &[(usize, u64, u32)]| Decision {
            node: "node1".into(),
            cards: cards
                .iter()
                .map(|&(i, mem_mib, cores)| BookedCard {
                    index: i as u32,
                    uuid: card(i),
                    mem_mib,
                    cores,
                })
                .collect(),
        };
        let booked: BTreeMap<u64, Decision> = [
            (7, d(&[(0, 8000, 50)])),
            (9, d(&[(0, 1000, 10), (1, 2000, 20)])),
            (
                11,
                Decision {
                    node: "node2".into(),
                    cards: vec![],
                },
            ),
        ]
        .into_iter()
        .collect();
        let jobs = vec![
            Job {
                id: 7,
                state: "RUNNING".into(),
                partition: "low".into(),
                start_time: 100,
                ..Job::default()
            },
            Job {
                id: 9,
                state: "PENDING".into(),
                partition: "high".into(),
                ..Job::default()
            },
        ];
        let tiers = Tiers::new(&[part("low", 1, true), part("high", 10, false)]);
        let p = placed(std::slice::from_ref(&n), &jobs, &booked, &tiers, 5_000);
        assert_eq!(p.len(), 1);
        let w: Vec<(&str, i32, i64, usize)> = p[0]
            .workloads
            .iter()
            .map(|w| (w.id.as_str(), w.priority, w.start_time_ms, w.bookings.len()))
            .collect();
        assert_eq!(w, [("7", 1, 100_000, 1), ("9", 10, 5_000, 2)]);
        assert_eq!(p[0].workloads[0].bookings[0].mem_mib, 8000);
        assert_eq!(p[0].workloads[0].bookings[0].slots, 1);
    }

    #[test]
    fn the_answer_becomes_a_plan_or_a_reason() {
        let victims = v1::Victims {
            ids: vec!["15".into(), "12".into()],
            containers: vec![v1::ContainerAssignment {
                cards: vec![v1::CardAssignment {
                    card_id: "GPU-x".into(),
                    card_index: 3,
                    mem_mib: 8000,
                    cores_percent: 50,
                    ..v1::CardAssignment::default()
                }],
                ..v1::ContainerAssignment::default()
            }],
            ..v1::Victims::default()
        };
        let resp = |choice: v1::PreemptChoiceKind, ids: Option<v1::Victims>| v1::PreemptResponse {
            requests_gpu: true,
            nodes: vec![v1::NodePreemption {
                node_name: "node1".into(),
                verdict: ids.map(v1::node_preemption::Verdict::Victims),
                ..v1::NodePreemption::default()
            }],
            choice: choice as i32,
            node_name: "node1".into(),
            effective_policy: None,
        };
        let p = plan(&resp(v1::PreemptChoiceKind::Evict, Some(victims.clone()))).unwrap();
        assert_eq!(p.victims, vec![15, 12]);
        assert_eq!(
            p.decision.encode(),
            "gpusched/v1 node=node1 gpus=3 devices=GPU-x,NVIDIA,8000,50:;"
        );
        let e = plan(&resp(v1::PreemptChoiceKind::NoCandidate, None)).unwrap_err();
        assert!(e.contains("PriorityTier"), "{e}");
        let mut bad = victims;
        bad.ids = vec!["x".into()];
        let e = plan(&resp(v1::PreemptChoiceKind::Evict, Some(bad))).unwrap_err();
        assert!(e.contains("\"x\""), "{e}");
    }
}
