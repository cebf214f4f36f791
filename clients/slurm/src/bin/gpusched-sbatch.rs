//! `gpusched-sbatch`: sbatch with the node and GPUs chosen by gpusched.
//!
//! Exit codes: 0 submitted; 1 not submitted (service down, Slurm error, no node fits now);
//! 2 invalid request (names the option).

use std::process::ExitCode;

use gpusched_slurm::args::{self, Env};
use gpusched_slurm::submit::{SubmitError, submit};

const USAGE: &str = "usage: gpusched-sbatch --gres=gpu:<n> [--gpusched KEY=VALUE]... \
[--gpusched-address URL] [--gpusched-inventory DIR] [--gpusched-timeout SECS] \
[--gpusched-lock FILE|none] [--gpusched-dry-run] [sbatch options] script [args]";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().is_some_and(|a| a == "--help" || a == "-h") {
        println!("{USAGE}\nSee clients/slurm/README.md.");
        return ExitCode::SUCCESS;
    }
    let parsed = match args::parse(&argv, &Env::from_process()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("gpusched-sbatch: {e}\nnothing was submitted\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match submit(&parsed).await {
        Ok(s) => {
            let d = &s.decision;
            if parsed.settings.dry_run {
                println!("{}", d.encode());
                println!("sbatch {}", shell_words(&s.sbatch_args));
                if !s.preempted.is_empty() {
                    let ids: Vec<String> = s.preempted.iter().map(u64::to_string).collect();
                    println!("would requeue {}", ids.join(" "));
                }
                return ExitCode::SUCCESS;
            }
            if parsed.parsable {
                println!("{}", s.job_id);
            } else {
                println!("Submitted batch job {}", s.job_id);
            }
            let gpus: Vec<String> = d.cards.iter().map(|c| c.index.to_string()).collect();
            eprintln!(
                "gpusched: job {} -> {} gpus={} (decide {} ms, sbatch {} ms, check+release {} ms, attempt {})",
                s.job_id,
                d.node,
                gpus.join(","),
                s.decide.as_millis(),
                s.sbatch.as_millis(),
                s.check.as_millis(),
                s.attempts
            );
            if !s.preempted.is_empty() {
                let ids: Vec<String> = s.preempted.iter().map(u64::to_string).collect();
                let late: Vec<String> = s.still_running.iter().map(u64::to_string).collect();
                eprintln!(
                    "gpusched: preempted job(s) {}: requeued and held (resubmit them with \
                     gpusched-sbatch){}",
                    ids.join(", "),
                    if late.is_empty() {
                        String::new()
                    } else {
                        format!("; still stopping: {}", late.join(", "))
                    }
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpusched-sbatch: {e}\nnothing was submitted");
            match e {
                SubmitError::Invalid { .. } | SubmitError::UnknownGpuType { .. } => {
                    ExitCode::from(2)
                }
                _ => ExitCode::FAILURE,
            }
        }
    }
}

fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_=:,./".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
