//! The `gpusched-sbatch` command line: sbatch's own arguments with `--gres=gpu:<n>` read,
//! `--gpusched KEY=VALUE` options taken out, a few options refused, and the rest passed to
//! `sbatch` unchanged.
//!
//! Arguments are read up to the batch script (the first word that is neither an option nor
//! an option's value); the script and its arguments are passed on untouched.

use std::path::PathBuf;
use std::time::Duration;

use crate::mix::{GPU_POLICY, MixSource, NODE_POLICY};
use crate::request::{GpuRequest, RequestError};

/// sbatch short options that take a value.
const SHORT_WITH_VALUE: &str = "ABabcCdDeFGiJLmMnNopqStTwx";

/// sbatch long options that take a value (and may give it as the next word).
const LONG_WITH_VALUE: &[&str] = &[
    "account",
    "acctg-freq",
    "array",
    "batch",
    "bb",
    "bbf",
    "begin",
    "chdir",
    "cluster-constraint",
    "clusters",
    "comment",
    "constraint",
    "container",
    "core-spec",
    "cores-per-socket",
    "cpu-freq",
    "cpus-per-gpu",
    "cpus-per-task",
    "deadline",
    "delay-boot",
    "dependency",
    "distribution",
    "error",
    "exclude",
    "export",
    "export-file",
    "extra-node-info",
    "gid",
    "gpu-bind",
    "gpu-freq",
    "gpus",
    "gpus-per-node",
    "gpus-per-socket",
    "gpus-per-task",
    "gres",
    "gres-flags",
    "hint",
    "input",
    "job-name",
    "licenses",
    "mail-type",
    "mail-user",
    "mcs-label",
    "mem",
    "mem-bind",
    "mem-per-cpu",
    "mem-per-gpu",
    "mincpus",
    "network",
    "nodefile",
    "nodelist",
    "nodes",
    "ntasks",
    "ntasks-per-core",
    "ntasks-per-gpu",
    "ntasks-per-node",
    "ntasks-per-socket",
    "open-mode",
    "output",
    "partition",
    "power",
    "prefer",
    "priority",
    "profile",
    "qos",
    "reservation",
    "signal",
    "sockets-per-node",
    "switches",
    "thread-spec",
    "threads-per-core",
    "time",
    "time-min",
    "tmp",
    "uid",
    "wait-all-nodes",
    "wckey",
    "wrap",
];

/// Defaults of the wrapper's own options.
pub const DEFAULT_ADDRESS: &str = "http://127.0.0.1:50051";
/// Where the agents' inventories are read by default.
pub const DEFAULT_INVENTORY: &str = "/etc/gpusched/inventory";
/// The lock file that serialises submissions of one host by default.
pub const DEFAULT_LOCK: &str = "/tmp/gpusched-sbatch.lock";

/// The wrapper's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// gpusched-server address.
    pub address: String,
    /// Directory of agent inventories.
    pub inventory_dir: PathBuf,
    /// Deadline of each service call and each Slurm command.
    pub timeout: Duration,
    /// Lock file; `None` = no local serialisation (the re-check still guards correctness).
    pub lock_file: Option<PathBuf>,
    /// Print the decision and the sbatch command; submit nothing.
    pub dry_run: bool,
    /// When nothing fits, requeue the jobs the service names (`--gpusched-preempt`; needs root
    /// or a Slurm operator: other users' jobs).
    pub preempt: bool,
    /// Where the workload mix of jobs under fgd comes from (`--gpusched-mix`, `GPUSCHED_MIX`).
    pub mix: MixSource,
}

/// A parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubmitArgs {
    /// The GPU request.
    pub request: GpuRequest,
    /// Partitions named with `-p/--partition` (candidate nodes are limited to them).
    pub partitions: Vec<String>,
    /// `-A/--account` (whose GPU limits apply; default: the user's default account).
    pub account: Option<String>,
    /// `-q/--qos` (default: the association's default QOS).
    pub qos: Option<String>,
    /// Arguments for sbatch, in order, without the gpu gres and the wrapper's options.
    pub sbatch_args: Vec<String>,
    /// `--gres` entries other than gpu, to pass on with gpusched's own.
    pub other_gres: Vec<String>,
    /// The user asked for `--hold`: the job is not released after the check.
    pub user_hold: bool,
    /// The user asked for `--parsable`.
    pub parsable: bool,
    /// The job name, for the service's logs.
    pub job_name: String,
    /// The wrapper's settings.
    pub settings: Settings,
}

/// A command line that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArgsError {
    /// A bad GPU request.
    #[error(transparent)]
    Request(#[from] RequestError),
    /// An option without its value.
    #[error("{0}: missing value")]
    MissingValue(String),
    /// An option gpusched-sbatch sets itself or cannot honour.
    #[error("{option}: {why}")]
    Refused {
        /// The option.
        option: String,
        /// Why, and what to do instead.
        why: String,
    },
    /// A bad value of a wrapper option.
    #[error("{option}={value}: {why}")]
    BadValue {
        /// The option.
        option: String,
        /// The value.
        value: String,
        /// Why.
        why: String,
    },
}

fn refused(option: &str, why: &str) -> ArgsError {
    ArgsError::Refused {
        option: option.to_owned(),
        why: why.to_owned(),
    }
}

/// The environment variables the wrapper reads (so tests can pass their own).
#[derive(Clone, Debug, Default)]
pub struct Env {
    /// `GPUSCHED_ADDRESS`.
    pub address: Option<String>,
    /// `GPUSCHED_INVENTORY_DIR`.
    pub inventory_dir: Option<String>,
    /// `GPUSCHED_LOCK_FILE`.
    pub lock_file: Option<String>,
    /// `GPUSCHED_MIX`: `observed`, `service` or a mix file.
    pub mix: Option<String>,
    /// `GPUSCHED_NODE_SCHEDULER_POLICY`: the site's default node policy (a job's own
    /// `--gpusched node-scheduler-policy` wins).
    pub node_policy: Option<String>,
    /// `GPUSCHED_GPU_SCHEDULER_POLICY`: the site's default GPU policy.
    pub gpu_policy: Option<String>,
}

impl Env {
    /// From the process environment.
    pub fn from_process() -> Env {
        Env {
            address: std::env::var("GPUSCHED_ADDRESS").ok(),
            inventory_dir: std::env::var("GPUSCHED_INVENTORY_DIR").ok(),
            lock_file: std::env::var("GPUSCHED_LOCK_FILE").ok(),
            mix: std::env::var("GPUSCHED_MIX").ok(),
            node_policy: std::env::var("GPUSCHED_NODE_SCHEDULER_POLICY").ok(),
            gpu_policy: std::env::var("GPUSCHED_GPU_SCHEDULER_POLICY").ok(),
        }
    }
}

/// Parses the wrapper's arguments (without the program name).
pub fn parse(args: &[String], env: &Env) -> Result<SubmitArgs, ArgsError> {
    let mut request = GpuRequest::default();
    let mut out = SubmitArgs {
        request: GpuRequest::default(),
        partitions: vec![],
        account: None,
        qos: None,
        sbatch_args: vec![],
        other_gres: vec![],
        user_hold: false,
        parsable: false,
        job_name: "sbatch".to_owned(),
        settings: Settings {
            address: env
                .address
                .clone()
                .unwrap_or_else(|| DEFAULT_ADDRESS.to_owned()),
            inventory_dir: PathBuf::from(
                env.inventory_dir
                    .clone()
                    .unwrap_or_else(|| DEFAULT_INVENTORY.to_owned()),
            ),
            timeout: Duration::from_secs(5),
            lock_file: Some(PathBuf::from(
                env.lock_file
                    .clone()
                    .unwrap_or_else(|| DEFAULT_LOCK.to_owned()),
            )),
            dry_run: false,
            preempt: false,
            mix: env.mix.as_deref().map(MixSource::parse).unwrap_or_default(),
        },
    };
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" || !arg.starts_with('-') || arg == "-" {
            // The script (or stdin) and its arguments.
            out.sbatch_args.extend(args[i - 1..].iter().cloned());
            break;
        }
        // Split `--name=value`, `--name value`, `-Xvalue`, `-X value`.
        let (name, inline): (String, Option<String>) = if let Some(long) = arg.strip_prefix("--") {
            match long.split_once('=') {
                Some((n, v)) => (format!("--{n}"), Some(v.to_owned())),
                None => (arg.clone(), None),
            }
        } else {
            let flag = arg.get(..2).unwrap_or(arg).to_owned();
            let rest = arg.get(2..).filter(|r| !r.is_empty()).map(str::to_owned);
            (flag, rest)
        };
        let takes_value = match name.strip_prefix("--") {
            Some(long) => {
                LONG_WITH_VALUE.contains(&long)
                    || long.starts_with("gpusched")
                        && long != "gpusched-dry-run"
                        && long != "gpusched-preempt"
            }
            None => name
                .chars()
                .nth(1)
                .is_some_and(|c| SHORT_WITH_VALUE.contains(c)),
        };
        let value = if takes_value {
            match inline.clone() {
                Some(v) => Some(v),
                None => {
                    let v = args
                        .get(i)
                        .cloned()
                        .ok_or_else(|| ArgsError::MissingValue(name.clone()))?;
                    i += 1;
                    Some(v)
                }
            }
        } else {
            inline.clone()
        };
        let val = value.clone().unwrap_or_default();
        let passthrough = |out: &mut SubmitArgs| match (&value, takes_value) {
            // sbatch accepts `--name=value` and `--name value`, `-Xvalue` and `-X value`.
            (Some(v), true) => out.sbatch_args.extend([name.clone(), v.clone()]),
            _ => out.sbatch_args.push(arg.clone()),
        };
        match name.as_str() {
            "--gpusched" => request.add_option(&val)?,
            "--gpusched-address" => out.settings.address = val,
            "--gpusched-inventory" => out.settings.inventory_dir = PathBuf::from(val),
            "--gpusched-lock" => {
                out.settings.lock_file = (val != "none").then(|| PathBuf::from(&val));
            }
            "--gpusched-timeout" => {
                let secs = val
                    .parse::<f64>()
                    .ok()
                    .filter(|s| s.is_finite() && *s > 0.0 && *s <= 3600.0)
                    .ok_or_else(|| ArgsError::BadValue {
                        option: name.clone(),
                        value: val.clone(),
                        why: "expected seconds, more than 0 and at most 3600".to_owned(),
                    })?;
                out.settings.timeout = Duration::from_secs_f64(secs);
            }
            "--gpusched-dry-run" => out.settings.dry_run = true,
            "--gpusched-preempt" => out.settings.preempt = true,
            "--gpusched-mix" => out.settings.mix = MixSource::parse(&val),
            n if n.starts_with("--gpusched") => {
                return Err(refused(
                    n,
                    "unknown gpusched-sbatch option; known: --gpusched KEY=VALUE, \
                     --gpusched-address, --gpusched-inventory, --gpusched-timeout, \
                     --gpusched-lock, --gpusched-dry-run, --gpusched-preempt, --gpusched-mix",
                ));
            }
            "--gres" => out.other_gres.extend(request.add_gres(&val)?),
            "--comment" => {
                return Err(refused(
                    "--comment",
                    "gpusched-sbatch records its decision in the job's comment; use --job-name \
                     or --wckey for your own notes",
                ));
            }
            "-w" | "--nodelist" | "-x" | "--exclude" | "-F" | "--nodefile" => {
                return Err(refused(
                    &name,
                    "gpusched chooses the node; limit the candidates with -p/--partition or \
                     --gpusched use-gputype=/use-gpuuuid=",
                ));
            }
            "-G" | "--gpus" | "--gpus-per-node" | "--gpus-per-task" | "--gpus-per-socket"
            | "--cpus-per-gpu" | "--mem-per-gpu" | "--ntasks-per-gpu" => {
                return Err(refused(
                    &name,
                    "ask for GPUs with --gres=gpu:<count> (one node per job)",
                ));
            }
            "-a" | "--array" => {
                return Err(refused(
                    &name,
                    "job arrays would share one decision; submit the jobs one by one",
                ));
            }
            "-N" | "--nodes" if val != "1" && val != "1-1" => {
                return Err(refused(&name, "a gpusched job runs on exactly one node"));
            }
            "-A" | "--account" => {
                out.account = Some(val.clone());
                passthrough(&mut out);
            }
            "-q" | "--qos" => {
                out.qos = Some(val.clone());
                passthrough(&mut out);
            }
            "-p" | "--partition" => {
                out.partitions
                    .extend(val.split(',').filter(|p| !p.is_empty()).map(str::to_owned));
                passthrough(&mut out);
            }
            "-J" | "--job-name" => {
                out.job_name = val.clone();
                passthrough(&mut out);
            }
            "-H" | "--hold" => {
                out.user_hold = true;
                passthrough(&mut out);
            }
            "--parsable" => out.parsable = true,
            _ => passthrough(&mut out),
        }
    }
    request.check()?;
    // The site's default policies, where the job names none (the service checks the value).
    for (key, default) in [
        (NODE_POLICY, &env.node_policy),
        (GPU_POLICY, &env.gpu_policy),
    ] {
        if let Some(v) = default.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
            request
                .annotations
                .entry(key.to_owned())
                .or_insert_with(|| v.to_owned());
        }
    }
    out.request = request;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<SubmitArgs, ArgsError> {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        parse(&args, &Env::default())
    }

    #[test]
    fn reads_gres_and_options_and_passes_the_rest() {
        let a = p(&[
            "--gres=gpu:2,nic:1",
            "-J",
            "train",
            "--gpusched",
            "gpucores=20",
            "--gpusched=gpu-scheduler-policy=spread",
            "-p",
            "gpu",
            "--time=10",
            "job.sh",
            "--gres=gpu:9",
        ])
        .unwrap();
        assert_eq!(a.request.gpus, 2);
        assert_eq!(a.request.limits["nvidia.com/gpucores"], "20");
        assert_eq!(a.other_gres, ["nic:1"]);
        assert_eq!(a.partitions, ["gpu"]);
        assert_eq!(a.job_name, "train");
        assert_eq!(
            a.sbatch_args,
            [
                "-J",
                "train",
                "-p",
                "gpu",
                "--time",
                "10",
                "job.sh",
                "--gres=gpu:9"
            ]
        );
    }

    #[test]
    fn wrapper_settings_from_flags_and_env() {
        let env = Env {
            address: Some("http://gs:1".into()),
            inventory_dir: Some("/inv".into()),
            lock_file: None,
            ..Env::default()
        };
        let args: Vec<String> = ["--gres", "gpu:1", "--gpusched-timeout", "0.5", "--wrap=x"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let a = parse(&args, &env).unwrap();
        assert_eq!(a.settings.address, "http://gs:1");
        assert_eq!(a.settings.inventory_dir, PathBuf::from("/inv"));
        assert_eq!(a.settings.timeout, Duration::from_millis(500));
        assert_eq!(a.sbatch_args, ["--wrap", "x"]);
        let a = p(&[
            "--gres=gpu:1",
            "--gpusched-lock",
            "none",
            "--gpusched-dry-run",
            "s",
        ])
        .unwrap();
        assert_eq!(a.settings.lock_file, None);
        assert!(a.settings.dry_run);
    }

    #[test]
    fn refusals_name_the_option() {
        for (args, option) in [
            (vec!["--gres=gpu:1", "--comment=x", "s"], "--comment"),
            (vec!["--gres=gpu:1", "-w", "node1", "s"], "-w"),
            (vec!["--gres=gpu:1", "--gpus=2", "s"], "--gpus"),
            (vec!["--gres=gpu:1", "-N", "2", "s"], "-N"),
            (vec!["--gres=gpu:1", "--array=1-3", "s"], "--array"),
            (
                vec!["--gres=gpu:1", "--gpusched-timeout=0", "s"],
                "--gpusched-timeout",
            ),
            (
                vec!["--gres=gpu:1", "--gpusched-foo=1", "s"],
                "--gpusched-foo",
            ),
        ] {
            let e = p(&args).unwrap_err().to_string();
            assert!(e.starts_with(option), "{args:?}: {e}");
        }
        assert_eq!(
            p(&["s"]).unwrap_err(),
            ArgsError::Request(RequestError::NoGpu)
        );
        assert_eq!(
            p(&["--gres"]).unwrap_err(),
            ArgsError::MissingValue("--gres".into())
        );
        let e = p(&["--gres=gpu:1", "--gpusched", "gpu-policy=spread"]).unwrap_err();
        assert!(e.to_string().contains("gpu-policy"), "{e}");
    }

    #[test]
    fn hold_and_parsable_are_remembered() {
        let a = p(&["--gres=gpu:1", "-H", "--parsable", "-N1", "s"]).unwrap();
        assert!(a.user_hold && a.parsable);
        assert_eq!(a.sbatch_args, ["-H", "-N", "1", "s"]);
    }

    #[test]
    fn the_fgd_mix_source_and_the_site_default_policies() {
        let args = |extra: &[&str]| -> Vec<String> {
            let mut v = vec!["--gres=gpu:1".to_owned()];
            v.extend(extra.iter().map(|s| (*s).to_owned()));
            v.push("job.sh".to_owned());
            v
        };
        let a = parse(&args(&[]), &Env::default()).unwrap();
        assert_eq!(a.settings.mix, MixSource::Observed);
        assert!(!a.request.annotations.contains_key(NODE_POLICY));
        let env = Env {
            mix: Some("service".into()),
            node_policy: Some("fgd".into()),
            gpu_policy: Some("fgd".into()),
            ..Env::default()
        };
        let a = parse(&args(&[]), &env).unwrap();
        assert_eq!(a.settings.mix, MixSource::Service);
        assert_eq!(a.request.annotations[NODE_POLICY], "fgd");
        assert_eq!(a.request.annotations[GPU_POLICY], "fgd");
        // The job's own policy and option win.
        let a = parse(
            &args(&[
                "--gpusched",
                "node-scheduler-policy=binpack",
                "--gpusched-mix",
                "/etc/gpusched/mix.json",
            ]),
            &env,
        )
        .unwrap();
        assert_eq!(a.request.annotations[NODE_POLICY], "binpack");
        assert_eq!(
            a.settings.mix,
            MixSource::File(PathBuf::from("/etc/gpusched/mix.json"))
        );
    }
}
