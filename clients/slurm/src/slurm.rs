//! Slurm's own commands (`squeue --json`, `sinfo --json`, `sbatch`, `scontrol`, `scancel`),
//! each bounded by a timeout, and their answers in typed form.

use std::ffi::OsStr;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

/// A Slurm command that failed.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// The command could not be started.
    #[error("{cmd}: cannot run: {source} (is Slurm installed and on PATH?)")]
    Spawn {
        /// The command.
        cmd: String,
        /// Why.
        source: std::io::Error,
    },
    /// The command did not finish in time (it was killed).
    #[error("{cmd}: no answer within {timeout:?} (is slurmctld up?)")]
    Timeout {
        /// The command.
        cmd: String,
        /// The limit.
        timeout: Duration,
    },
    /// The command exited with an error.
    #[error("{cmd}: {stderr}")]
    Failed {
        /// The command.
        cmd: String,
        /// Its error output.
        stderr: String,
    },
    /// The output was not what this Slurm version writes.
    #[error("{cmd}: unexpected output: {why}")]
    Output {
        /// The command.
        cmd: String,
        /// Why.
        why: String,
    },
}

/// Runs `program args...` with a time limit; returns stdout. stdin is inherited (sbatch reads
/// a script from it when none is named).
pub async fn run<I, S>(program: &str, args: I, timeout: Duration) -> Result<String, SlurmError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().map_err(|source| SlurmError::Spawn {
        cmd: program.to_owned(),
        source,
    })?;
    let out = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(r) => r.map_err(|source| SlurmError::Spawn {
            cmd: program.to_owned(),
            source,
        })?,
        Err(_) => {
            return Err(SlurmError::Timeout {
                cmd: program.to_owned(),
                timeout,
            });
        }
    };
    if !out.status.success() {
        return Err(SlurmError::Failed {
            cmd: program.to_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One job as `squeue --json` shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Job {
    /// Job id.
    pub id: u64,
    /// `job_state` (`PENDING`, `RUNNING`, ...).
    pub state: String,
    /// The job's comment (where gpusched records its decision).
    pub comment: String,
    /// Its partition (a pending job submitted to several lists them, comma-separated).
    pub partition: String,
    /// When it started, seconds since the epoch (0: not started).
    pub start_time: i64,
    /// Its account, QOS and user (whose GPU limits its booking counts against).
    pub owner: Owner,
}

/// Whose limits a job's booking counts against (`squeue --json`'s `account`, `qos`,
/// `user_name`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Owner {
    /// Account.
    pub account: String,
    /// QOS.
    pub qos: String,
    /// User name.
    pub user: String,
}

/// States in which a job holds nothing any more.
const FINISHED: &[&str] = &[
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
];

impl Job {
    /// Whether the job still holds its booking: every state but the finished ones (a pending,
    /// held, running, suspended, completing or requeued job keeps its cards).
    pub fn holds_booking(&self) -> bool {
        !FINISHED.contains(&self.state.as_str())
    }
}

fn output(cmd: &str, why: impl Into<String>) -> SlurmError {
    SlurmError::Output {
        cmd: cmd.to_owned(),
        why: why.into(),
    }
}

/// Parses `squeue --json` (Slurm 22.05: `jobs[]` with `job_id`, `job_state`, `comment`).
pub fn parse_jobs(text: &str) -> Result<Vec<Job>, SlurmError> {
    let v: Value = serde_json::from_str(text).map_err(|e| output("squeue", e.to_string()))?;
    let jobs = v
        .get("jobs")
        .and_then(Value::as_array)
        .ok_or_else(|| output("squeue", "no jobs array"))?;
    jobs.iter()
        .map(|j| {
            let id = j
                .get("job_id")
                .and_then(Value::as_u64)
                .ok_or_else(|| output("squeue", "a job without job_id"))?;
            let state = match j.get("job_state") {
                Some(Value::String(s)) => s.clone(),
                // Newer Slurm writes a list of state names.
                Some(Value::Array(a)) => a
                    .first()
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                _ => return Err(output("squeue", format!("job {id} without job_state"))),
            };
            let comment = j
                .get("comment")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let partition = j
                .get("partition")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            // 22.05: a number; newer Slurm: {"set": bool, "number": n}.
            let start_time = match j.get("start_time") {
                Some(Value::Object(o)) => o.get("number").and_then(Value::as_i64),
                Some(v) => v.as_i64(),
                None => None,
            }
            .unwrap_or(0);
            let text = |k: &str| {
                j.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            Ok(Job {
                id,
                state,
                comment,
                partition,
                start_time,
                owner: Owner {
                    account: text("account"),
                    qos: text("qos"),
                    user: text("user_name"),
                },
            })
        })
        .collect()
}

/// The jobs slurmctld knows.
pub async fn jobs(timeout: Duration) -> Result<Vec<Job>, SlurmError> {
    parse_jobs(&run("squeue", ["--json"], timeout).await?)
}

/// One node as `sinfo --json` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlurmNode {
    /// Node name.
    pub name: String,
    /// Base state (`idle`, `mixed`, `allocated`, `down`, ...).
    pub state: String,
    /// State flags (`DRAIN`, `NOT_RESPONDING`, ...).
    pub flags: Vec<String>,
    /// Partitions of the node.
    pub partitions: Vec<String>,
}

impl SlurmNode {
    /// Whether new jobs can start on the node.
    pub fn usable(&self) -> bool {
        let state_ok = matches!(
            self.state.to_ascii_lowercase().as_str(),
            "idle" | "mixed" | "allocated" | "completing"
        );
        let bad_flag = self.flags.iter().any(|f| {
            matches!(
                f.to_ascii_uppercase().as_str(),
                "DRAIN"
                    | "DRAINED"
                    | "DRAINING"
                    | "FAIL"
                    | "NOT_RESPONDING"
                    | "POWERED_DOWN"
                    | "POWERING_DOWN"
                    | "MAINTENANCE"
                    | "REBOOT_REQUESTED"
                    | "REBOOT_ISSUED"
            )
        });
        state_ok && !bad_flag
    }
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Parses `sinfo --json` (Slurm 22.05: `nodes[]` with `name`, `state`, `state_flags`,
/// `partitions`).
pub fn parse_nodes(text: &str) -> Result<Vec<SlurmNode>, SlurmError> {
    let v: Value = serde_json::from_str(text).map_err(|e| output("sinfo", e.to_string()))?;
    let nodes = v
        .get("nodes")
        .and_then(Value::as_array)
        .ok_or_else(|| output("sinfo", "no nodes array"))?;
    nodes
        .iter()
        .map(|n| {
            let name = n
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| output("sinfo", "a node without name"))?
                .to_owned();
            let (state, mut flags) = match n.get("state") {
                Some(Value::String(s)) => (s.clone(), vec![]),
                Some(Value::Array(a)) => {
                    let all = strings(Some(&Value::Array(a.clone())));
                    (all.first().cloned().unwrap_or_default(), all)
                }
                _ => return Err(output("sinfo", format!("node {name} without state"))),
            };
            flags.extend(strings(n.get("state_flags")));
            Ok(SlurmNode {
                name,
                state,
                flags,
                partitions: strings(n.get("partitions")),
            })
        })
        .collect()
}

/// The nodes slurmctld knows.
pub async fn nodes(timeout: Duration) -> Result<Vec<SlurmNode>, SlurmError> {
    parse_nodes(&run("sinfo", ["--json"], timeout).await?)
}

/// One partition as `scontrol show partition -o` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// Its name.
    pub name: String,
    /// `PriorityTier` (Slurm's partition-based preemption ranks partitions by it).
    pub priority_tier: i32,
    /// `Default=YES`.
    pub default: bool,
}

/// Parses `scontrol show partition -o` (one partition per line, `Key=Value` words).
pub fn parse_partitions(text: &str) -> Result<Vec<Partition>, SlurmError> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let get = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
            };
            let name = get("PartitionName")
                .ok_or_else(|| output("scontrol show partition", "a line without PartitionName"))?;
            let tier = get("PriorityTier").unwrap_or("1");
            let priority_tier = tier.parse().map_err(|_| {
                output(
                    "scontrol show partition",
                    format!("partition {name}: PriorityTier={tier} is not a number"),
                )
            })?;
            Ok(Partition {
                name: name.to_owned(),
                priority_tier,
                default: get("Default") == Some("YES"),
            })
        })
        .collect()
}

/// The partitions slurmctld knows.
pub async fn partitions(timeout: Duration) -> Result<Vec<Partition>, SlurmError> {
    parse_partitions(&run("scontrol", ["show", "partition", "-o"], timeout).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeue_json_of_slurm_22_05() {
        let text = r#"{"meta":{},"errors":[],"jobs":[
          {"job_id":7,"job_state":"RUNNING","comment":"gpusched/v1 node=n1 gpus=0 devices=x",
           "account":"team-q","qos":"normal","user_name":"alice"},
          {"job_id":8,"job_state":"COMPLETED","comment":""},
          {"job_id":9,"job_state":["PENDING"]}]}"#;
        let jobs = parse_jobs(text).unwrap();
        assert_eq!(jobs.len(), 3);
        assert!(jobs[0].holds_booking());
        assert!(!jobs[1].holds_booking());
        assert_eq!(jobs[2].state, "PENDING");
        assert_eq!(jobs[2].comment, "");
        assert_eq!(
            jobs[0].owner,
            Owner {
                account: "team-q".into(),
                qos: "normal".into(),
                user: "alice".into()
            }
        );
        assert_eq!(jobs[1].owner, Owner::default());
        assert!(parse_jobs("{}").is_err());
        assert!(parse_jobs(r#"{"jobs":[{"job_state":"RUNNING"}]}"#).is_err());
    }

    #[test]
    fn squeue_partitions_and_start_times() {
        let text = r#"{"jobs":[
          {"job_id":1,"job_state":"RUNNING","partition":"low","start_time":1700000000},
          {"job_id":2,"job_state":"RUNNING","partition":"high","start_time":{"set":true,"number":5}},
          {"job_id":3,"job_state":"PENDING"}]}"#;
        let jobs = parse_jobs(text).unwrap();
        let got: Vec<(&str, i64)> = jobs
            .iter()
            .map(|j| (j.partition.as_str(), j.start_time))
            .collect();
        assert_eq!(got, [("low", 1_700_000_000), ("high", 5), ("", 0)]);
    }

    #[test]
    fn scontrol_partitions() {
        let text = "PartitionName=gpu AllowGroups=ALL Default=YES PriorityJobFactor=1 PriorityTier=1 State=UP\n\
                    PartitionName=high Default=NO PriorityTier=10 State=UP\n\
                    PartitionName=old State=UP\n";
        let p = parse_partitions(text).unwrap();
        let got: Vec<(&str, i32, bool)> = p
            .iter()
            .map(|p| (p.name.as_str(), p.priority_tier, p.default))
            .collect();
        assert_eq!(
            got,
            [("gpu", 1, true), ("high", 10, false), ("old", 1, false)]
        );
        let e = parse_partitions("PartitionName=x PriorityTier=top").unwrap_err();
        assert!(e.to_string().contains("PriorityTier=top"), "{e}");
        assert!(parse_partitions("State=UP").is_err());
    }

    #[test]
    fn sinfo_json_and_usable_nodes() {
        let text = r#"{"nodes":[
          {"name":"node1","state":"idle","state_flags":[],"partitions":["gpu"]},
          {"name":"node2","state":"idle","state_flags":["DRAIN"],"partitions":["gpu"]},
          {"name":"node3","state":"down","state_flags":[],"partitions":[]},
          {"name":"node4","state":["MIXED","NOT_RESPONDING"]}]}"#;
        let nodes = parse_nodes(text).unwrap();
        let usable: Vec<_> = nodes
            .iter()
            .filter(|n| n.usable())
            .map(|n| &n.name)
            .collect();
        assert_eq!(usable, ["node1"]);
        assert_eq!(nodes[0].partitions, ["gpu"]);
    }

    #[tokio::test]
    async fn commands_are_bounded_and_errors_name_them() {
        let e = run("sleep", ["5"], Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(matches!(e, SlurmError::Timeout { .. }), "{e}");
        let e = run("false", Vec::<String>::new(), Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(matches!(e, SlurmError::Failed { .. }), "{e}");
        let e = run(
            "no-such-slurm-command",
            Vec::<String>::new(),
            Duration::from_secs(5),
        )
        .await
        .unwrap_err();
        assert!(e.to_string().contains("no-such-slurm-command"), "{e}");
    }
}
