//! The submission: read the cluster from Slurm, ask gpusched, submit held and pinned with the
//! decision in the comment, re-check the decision against every earlier job, release.
//!
//! Correctness does not depend on the lock: slurmctld numbers jobs in submission order, and a
//! held job is released only when its decision still fits after the bookings of **every job
//! with a smaller id** (the later job yields). Two wrappers racing on different hosts can both
//! choose the same card; the one with the larger id sees the other at its check, is cancelled
//! and placed again. The lock file only serialises the wrappers of one host so that they
//! rarely have to retry.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpusched_client::{ClientBuilder, Error as ClientError, RetryPolicy, v1};

use crate::args::SubmitArgs;
use crate::cluster::{UsageError, candidate_nodes, decisions};
use crate::decision::Decision;
use crate::inventory::{InventoryError, NodeInventory, read_dir};
use crate::mix::{self, MixSource};
use crate::preempt::{self, Plan, Tiers};
use crate::quota;
use crate::request::{GpuRequest, USE_GPUTYPE, option_of_field};
use crate::slurm::{self, SlurmError};

/// How often a decision that lost a race is placed again.
pub const MAX_ATTEMPTS: u32 = 5;
/// How long a wrapper waits for the lock of another one.
pub const LOCK_WAIT: Duration = Duration::from_secs(120);

/// Why a job was not submitted.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// Inventories cannot be read.
    #[error(transparent)]
    Inventory(#[from] InventoryError),
    /// A Slurm command failed.
    #[error(transparent)]
    Slurm(#[from] SlurmError),
    /// A job's recorded decision cannot be read.
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// The service refused an option.
    #[error("invalid {option}{value}: {why}")]
    Invalid {
        /// The option (annotation or resource name), or `request`.
        option: String,
        /// `=value` as given, when known.
        value: String,
        /// The service's description.
        why: String,
    },
    /// A GPU type that no node has.
    #[error(
        "invalid {USE_GPUTYPE}={value}: no card in the cluster has such a type (known types: {known})"
    )]
    UnknownGpuType {
        /// The value.
        value: String,
        /// The types the inventories hold.
        known: String,
    },
    /// The service cannot be reached or failed.
    #[error("gpusched service at {address}: {why}")]
    Service {
        /// Its address.
        address: String,
        /// What happened.
        why: String,
    },
    /// No node can take the job now.
    #[error("no node can take the job now: {0}")]
    NoFit(String),
    /// Who submits is not known (no `USER`, `LOGNAME` nor `id -un`).
    #[error("cannot tell who submits (USER, LOGNAME, id -un): {0}")]
    User(String),
    /// The decision kept losing races with concurrent submissions.
    #[error(
        "gave up after {MAX_ATTEMPTS} attempts: concurrent submissions kept taking the chosen cards"
    )]
    Conflict,
    /// The lock file is held too long.
    #[error("lock {0}: held by another gpusched-sbatch for over {LOCK_WAIT:?}")]
    Lock(PathBuf),
    /// Slurm refused to requeue a victim of the preemption (the job was cancelled again).
    #[error(
        "preemption: requeueing job {job}: {why} (only root and Slurm operators may requeue \
         other users' jobs)"
    )]
    Preempt {
        /// The victim.
        job: u64,
        /// Slurm's answer.
        why: String,
    },
}

/// The outcome of a submission.
#[derive(Clone, Debug)]
pub struct Submitted {
    /// Job id (0 for a dry run).
    pub job_id: u64,
    /// The decision.
    pub decision: Decision,
    /// The sbatch arguments used.
    pub sbatch_args: Vec<String>,
    /// Time to the decision (read Slurm and inventories, Allocate), last attempt.
    pub decide: Duration,
    /// Time of sbatch, last attempt.
    pub sbatch: Duration,
    /// Time of the re-check and release, last attempt.
    pub check: Duration,
    /// Attempts used.
    pub attempts: u32,
    /// The jobs requeued to make room (`--gpusched-preempt`), most important first.
    pub preempted: Vec<u64>,
    /// Victims still running when the job was released (they did not stop in time).
    pub still_running: Vec<u64>,
}

/// Holds the local lock (released on drop, when the file is closed).
#[derive(Debug)]
struct LockGuard {
    _file: Option<File>,
}

async fn lock(path: Option<&Path>) -> Result<LockGuard, SubmitError> {
    let Some(path) = path else {
        return Ok(LockGuard { _file: None });
    };
    let file = match OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o666)
        .open(path)
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "gpusched: warning: lock {}: {e}; submitting without it (the re-check still \
                 prevents double booking)",
                path.display()
            );
            return Ok(LockGuard { _file: None });
        }
    };
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(LockGuard { _file: Some(file) }),
            Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(SubmitError::Lock(path.to_owned()));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                eprintln!(
                    "gpusched: warning: lock {}: {e}; submitting without it",
                    path.display()
                );
                return Ok(LockGuard { _file: None });
            }
        }
    }
}

/// The submission error for a failed service call: INVALID_ARGUMENT names the option and its
/// value as the user wrote them; anything else is a service error.
pub fn service_error(address: &str, e: ClientError, request: &GpuRequest) -> SubmitError {
    if let Some(api) = e.api().filter(|a| a.is_invalid_argument()) {
        if let Some(v) = api.field_violations.first() {
            let option = option_of_field(&v.field).unwrap_or(&v.field).to_owned();
            let value = request
                .limits
                .get(&option)
                .or_else(|| request.annotations.get(&option))
                .map(|v| format!("={v}"))
                .unwrap_or_default();
            return SubmitError::Invalid {
                option,
                value,
                why: v.description.clone(),
            };
        }
        return SubmitError::Invalid {
            option: "request".to_owned(),
            value: String::new(),
            why: api.message.clone(),
        };
    }
    SubmitError::Service {
        address: address.to_owned(),
        why: format!("{e}; nothing was submitted"),
    }
}

/// Refuses a `use-gputype` that no card of any inventory matches (a typo would otherwise read
/// as "no capacity").
pub fn check_gpu_types(
    request: &GpuRequest,
    inventories: &BTreeMap<String, NodeInventory>,
) -> Result<(), SubmitError> {
    let Some(value) = request.annotations.get(USE_GPUTYPE) else {
        return Ok(());
    };
    let mut types: Vec<String> = inventories
        .values()
        .flat_map(|i| i.cards.iter().map(|c| c.r#type.clone()))
        .collect();
    types.sort();
    types.dedup();
    let wanted: Vec<String> = value
        .split(',')
        .map(|t| t.trim().to_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    let known = types
        .iter()
        .any(|t| wanted.iter().any(|w| t.to_lowercase().contains(w)));
    if known {
        return Ok(());
    }
    Err(SubmitError::UnknownGpuType {
        value: value.clone(),
        known: if types.is_empty() {
            "none".to_owned()
        } else {
            types.join(", ")
        },
    })
}

fn no_fit(nodes: &[v1::Node], r: &v1::AllocationResult, quota_note: &str) -> SubmitError {
    if nodes.is_empty() {
        return SubmitError::NoFit(
            "no usable Slurm node has a gpusched inventory (check sinfo and the inventory \
             directory)"
                .to_owned(),
        );
    }
    let reasons: Vec<String> = r
        .failed_nodes
        .iter()
        .map(|f| format!("{}: {}", f.node_name, f.message))
        .collect();
    let by_quota = r.failed_nodes.iter().any(|f| {
        f.reasons.iter().any(|c| {
            c.reason == v1::Reason::QuotaMemoryExceeded as i32
                || c.reason == v1::Reason::QuotaCoresExceeded as i32
        })
    });
    let mut text = reasons.join("; ");
    if by_quota && !quota_note.is_empty() {
        text = format!("{text} ({quota_note})");
    }
    SubmitError::NoFit(text)
}

/// Who submits: `USER`, else `LOGNAME`, else `id -un`.
async fn submitting_user(t: Duration) -> Result<String, SubmitError> {
    for k in ["USER", "LOGNAME"] {
        if let Some(u) = std::env::var(k).ok().filter(|u| !u.is_empty()) {
            return Ok(u);
        }
    }
    let u = slurm::run("id", ["-un"], t).await?;
    Some(u.trim().to_owned())
        .filter(|u| !u.is_empty())
        .ok_or_else(|| SubmitError::User("id -un printed nothing".to_owned()))
}

fn same_cards(a: &Decision, b: &Decision) -> bool {
    let key = |d: &Decision| {
        let mut v: Vec<(String, u64, u32)> = d
            .cards
            .iter()
            .map(|c| (c.uuid.clone(), c.mem_mib, c.cores))
            .collect();
        v.sort();
        v
    };
    a.node == b.node && key(a) == key(b)
}

/// The preemption that would make room for the job when nothing fits (section "Preemption"
/// of the README): Ok(plan) or why there is none.
async fn preemption(
    args: &SubmitArgs,
    client: &gpusched_client::Client,
    workload: &v1::Workload,
    nodes: &[v1::Node],
    jobs: &[slurm::Job],
    booked: &BTreeMap<u64, Decision>,
    workload_mix: Option<v1::WorkloadMix>,
) -> Result<Result<Plan, String>, SubmitError> {
    let s = &args.settings;
    let tiers = Tiers::new(&slurm::partitions(s.timeout).await?);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let req = v1::PreemptRequest {
        nodes: nodes.to_vec(),
        workload: Some(workload.clone()),
        options: workload_mix.map(|m| v1::PlacementOptions {
            workload_mix: Some(m),
            ..v1::PlacementOptions::default()
        }),
        priority: tiers.priority(&args.partitions.join(",")),
        placed: preempt::placed(nodes, jobs, booked, &tiers, now_ms),
        node_refs: vec![],
        node_set: None,
    };
    let resp = match tokio::time::timeout(s.timeout * 3, client.preempt_request(req)).await {
        Ok(r) => r.map_err(|e| service_error(&s.address, e, &args.request))?,
        Err(_) => {
            return Err(SubmitError::Service {
                address: s.address.clone(),
                why: format!(
                    "no answer within {:?}; nothing was submitted",
                    s.timeout * 3
                ),
            });
        }
    };
    Ok(preempt::plan(&resp))
}

/// Places and submits one job.
pub async fn submit(args: &SubmitArgs) -> Result<Submitted, SubmitError> {
    let s = &args.settings;
    let t = s.timeout;
    let inventories = read_dir(&s.inventory_dir)?;
    check_gpu_types(&args.request, &inventories)?;
    let mix_file = match &s.mix {
        MixSource::File(path) if mix::uses_fgd(&args.request) => {
            Some(mix::load(path).map_err(|why| SubmitError::Invalid {
                option: "--gpusched-mix".to_owned(),
                value: format!("={}", path.display()),
                why,
            })?)
        }
        _ => None,
    };
    let workload = args.request.workload(&args.job_name);
    let client = ClientBuilder::new(s.address.clone())
        .timeout(Some(t))
        .connect_timeout(t)
        .retry(RetryPolicy {
            max_attempts: 2,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(500),
        })
        .connect_lazy()
        .map_err(|e| service_error(&s.address, e, &args.request))?;
    let call = |req: v1::AllocateRequest| {
        let client = client.clone();
        async move {
            // A hard bound on top of the client's deadline (connect + retries included).
            match tokio::time::timeout(t * 3, client.allocate_request(req)).await {
                Ok(r) => r.map_err(|e| service_error(&s.address, e, &args.request)),
                Err(_) => Err(SubmitError::Service {
                    address: s.address.clone(),
                    why: format!("no answer within {:?}; nothing was submitted", t * 3),
                }),
            }
        }
    };

    let user = submitting_user(t).await?;
    let limits = quota::limits(&user, args.account.as_deref(), args.qos.as_deref(), t).await?;
    let _guard = lock(s.lock_file.as_deref()).await?;
    for attempt in 1..=MAX_ATTEMPTS {
        let t0 = Instant::now();
        let (slurm_nodes, jobs) = tokio::try_join!(slurm::nodes(t), slurm::jobs(t))?;
        let booked = decisions(&jobs)?;
        let (budget, quota_note) = quota::budget(&limits, &jobs, &booked, None);
        let mut workload = workload.clone();
        workload.quota = (!limits.is_empty()).then_some(budget);
        let nodes = candidate_nodes(
            &inventories,
            &slurm_nodes,
            &args.partitions,
            booked.values(),
        );
        let workload_mix =
            mix::for_request(&s.mix, mix_file.as_ref(), &args.request, &booked, &nodes);
        let result = call(v1::AllocateRequest {
            node_set: None,
            nodes: nodes.clone(),
            workload: Some(workload.clone()),
            // The reasons are read only when nothing fits.
            options: Some(v1::PlacementOptions {
                failed_nodes: v1::FailedNodes::WhenUnplaced as i32,
                workload_mix: workload_mix.clone(),
                ..v1::PlacementOptions::default()
            }),
            restrict_to_node_names: vec![],
            node_refs: vec![],
        })
        .await?;
        let (decision, victims) = match Decision::from_result(&result) {
            Some(d) => (d, Vec::new()),
            None => {
                let SubmitError::NoFit(why) = no_fit(&nodes, &result, &quota_note) else {
                    return Err(no_fit(&nodes, &result, &quota_note));
                };
                if nodes.is_empty() {
                    return Err(SubmitError::NoFit(why));
                }
                let plan = preemption(
                    args,
                    &client,
                    &workload,
                    &nodes,
                    &jobs,
                    &booked,
                    workload_mix.clone(),
                )
                .await?;
                match plan {
                    Ok(plan) if s.preempt => (plan.decision, plan.victims),
                    Ok(plan) => {
                        return Err(SubmitError::NoFit(format!(
                            "{why}; preemption: requeueing {} would make room \
                             (gpusched-sbatch --gpusched-preempt, as root or a Slurm operator)",
                            plan.describe(&booked)
                        )));
                    }
                    Err(reason) => {
                        return Err(SubmitError::NoFit(format!("{why}; {reason}")));
                    }
                }
            }
        };
        let decide = t0.elapsed();

        let mut gres = args.other_gres.clone();
        gres.push(decision.gres());
        let mut sbatch_args = vec![
            "--parsable".to_owned(),
            "--hold".to_owned(),
            format!("--nodelist={}", decision.node),
            format!("--gres={}", gres.join(",")),
            format!("--comment={}", decision.encode()),
        ];
        sbatch_args.extend(args.sbatch_args.iter().cloned());
        if s.dry_run {
            return Ok(Submitted {
                job_id: 0,
                decision,
                sbatch_args,
                decide,
                sbatch: Duration::ZERO,
                check: Duration::ZERO,
                attempts: attempt,
                preempted: victims,
                still_running: vec![],
            });
        }
        let t1 = Instant::now();
        let out = slurm::run("sbatch", &sbatch_args, t).await?;
        let job_id = out
            .trim()
            .split(';')
            .next()
            .and_then(|id| id.parse::<u64>().ok())
            .ok_or_else(|| SlurmError::Output {
                cmd: "sbatch --parsable".to_owned(),
                why: format!("no job id in {out:?}"),
            })?;
        let sbatch = t1.elapsed();

        let t2 = Instant::now();
        // The victims are requeued held and hold nothing from now on; the re-check below then
        // finds their cards free.
        if let Err((job, e)) = preempt::requeue(&victims, &booked, job_id, t).await {
            cancel(job_id, t).await;
            return Err(SubmitError::Preempt {
                job,
                why: e.to_string(),
            });
        }
        let checked = recheck(
            args,
            &inventories,
            &limits,
            &decision,
            job_id,
            workload_mix.as_ref(),
            &call,
        );
        let fits = match checked.await {
            Ok(fits) => fits,
            Err(e) => {
                cancel(job_id, t).await;
                return Err(e);
            }
        };
        if !fits {
            cancel(job_id, t).await;
            continue;
        }
        // Released once the victims have stopped (their resources back in Slurm's sums), so
        // that Slurm never has to make room for it by its own means.
        let still_running = if victims.is_empty() {
            Vec::new()
        } else {
            preempt::wait_stopped(&victims, t, t * 12).await
        };
        if !args.user_hold
            && let Err(e) = slurm::run("scontrol", ["release", &job_id.to_string()], t).await
        {
            cancel(job_id, t).await;
            return Err(e.into());
        }
        return Ok(Submitted {
            job_id,
            decision,
            sbatch_args,
            decide,
            sbatch,
            check: t2.elapsed(),
            attempts: attempt,
            preempted: victims,
            still_running,
        });
    }
    Err(SubmitError::Conflict)
}

/// Whether `decision` still fits with the bookings of every job submitted before `job_id`
/// (on its cards, and within the GPU limits that apply to it).
async fn recheck<F, Fut>(
    args: &SubmitArgs,
    inventories: &BTreeMap<String, NodeInventory>,
    limits: &[quota::Limit],
    decision: &Decision,
    job_id: u64,
    workload_mix: Option<&v1::WorkloadMix>,
    call: &F,
) -> Result<bool, SubmitError>
where
    F: Fn(v1::AllocateRequest) -> Fut,
    Fut: std::future::Future<Output = Result<v1::AllocationResult, SubmitError>>,
{
    let t = args.settings.timeout;
    let (slurm_nodes, jobs) = tokio::try_join!(slurm::nodes(t), slurm::jobs(t))?;
    let booked = decisions(&jobs)?;
    let earlier = booked.range(..job_id).map(|(_, d)| d);
    let nodes = candidate_nodes(inventories, &slurm_nodes, &args.partitions, earlier);
    let pinned = args.request.pinned_to(&decision.uuids());
    let mut workload = pinned.workload(&args.job_name);
    workload.quota =
        (!limits.is_empty()).then(|| quota::budget(limits, &jobs, &booked, Some(job_id)).0);
    let result = call(v1::AllocateRequest {
        node_set: None,
        nodes,
        workload: Some(workload),
        // Only the placement is compared; the same mix as the decision (the cards are pinned).
        options: Some(v1::PlacementOptions {
            failed_nodes: v1::FailedNodes::None as i32,
            workload_mix: workload_mix.cloned(),
            ..v1::PlacementOptions::default()
        }),
        restrict_to_node_names: vec![decision.node.clone()],
        node_refs: vec![],
    })
    .await?;
    Ok(Decision::from_result(&result).is_some_and(|d| same_cards(&d, decision)))
}

async fn cancel(job_id: u64, t: Duration) {
    if let Err(e) = slurm::run("scancel", [job_id.to_string()], t).await {
        eprintln!("gpusched: warning: scancel {job_id}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invs() -> BTreeMap<String, NodeInventory> {
        let n = gpusched_client::node("n1", 2, 8000, "NVIDIA H100 80GB HBM3");
        [(
            "n1".to_owned(),
            NodeInventory {
                node: "n1".into(),
                cards: n.cards,
                pair_scores: vec![],
            },
        )]
        .into_iter()
        .collect()
    }

    #[test]
    fn unknown_gpu_types_are_refused_by_name() {
        let mut r = GpuRequest::default();
        r.add_gres("gpu:1").unwrap();
        assert!(check_gpu_types(&r, &invs()).is_ok());
        r.add_option("use-gputype=h100").unwrap();
        assert!(check_gpu_types(&r, &invs()).is_ok());
        let mut r = GpuRequest::default();
        r.add_option("use-gputype=K80").unwrap();
        let e = check_gpu_types(&r, &invs()).unwrap_err().to_string();
        assert!(
            e.contains("nvidia.com/use-gputype=K80") && e.contains("NVIDIA H100 80GB HBM3"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn the_lock_is_exclusive_and_released_on_drop() {
        let path = std::env::temp_dir().join(format!("gpusched-lock-{}", std::process::id()));
        let g = lock(Some(&path)).await.unwrap();
        let other = File::open(&path).unwrap();
        assert!(other.try_lock().is_err(), "held");
        drop(g);
        assert!(other.try_lock().is_ok(), "released");
        std::fs::remove_file(&path).unwrap();
    }
}
