//! `gpusched-slurm`: the admin side of the Slurm adapter.
//!
//! - `conf --inventory DIR`: gres.conf and slurm.conf lines from the agents' inventories;
//! - `task-prolog`: Slurm's TaskProlog (exports the job's GPUs from its recorded decision);
//! - `usage --inventory DIR [--json]`: per-card usage rebuilt from Slurm's jobs.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use gpusched_slurm::cluster::{decisions, usage_table};
use gpusched_slurm::decision::Decision;
use gpusched_slurm::inventory::read_dir;
use gpusched_slurm::{conf, prolog, slurm};

#[derive(Debug, Parser)]
#[command(version, about = "Admin side of the gpusched Slurm adapter")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Print gres.conf and slurm.conf lines for the nodes of the inventory directory.
    Conf {
        /// Directory of `gpusched-agent inventory --format json` files.
        #[arg(
            long,
            env = "GPUSCHED_INVENTORY_DIR",
            default_value = "/etc/gpusched/inventory"
        )]
        inventory: PathBuf,
        /// Only `gres` or only `slurm` lines.
        #[arg(long, value_parser = ["gres", "slurm", "both"], default_value = "both")]
        only: String,
    },
    /// Slurm TaskProlog: print `export` lines for the job in SLURM_JOB_ID on SLURMD_NODENAME.
    TaskProlog {
        /// Deadline of the squeue call, seconds.
        #[arg(long, default_value_t = 10)]
        timeout: u64,
    },
    /// Per-card usage rebuilt from the jobs' recorded decisions.
    Usage {
        /// Directory of inventories.
        #[arg(
            long,
            env = "GPUSCHED_INVENTORY_DIR",
            default_value = "/etc/gpusched/inventory"
        )]
        inventory: PathBuf,
        /// Proto3-style JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Conf { inventory, only } => {
            let invs = read_dir(&inventory)?;
            if invs.is_empty() {
                bail!("inventory {}: no *.json files", inventory.display());
            }
            if only != "slurm" {
                print!("{}", conf::gres_conf(&invs));
            }
            if only != "gres" {
                print!("{}", conf::slurm_conf(&invs));
            }
        }
        Cmd::TaskProlog { timeout } => {
            if let Err(e) = task_prolog(timeout).await {
                // The task still starts (slurmstepd only logs a failed TaskProlog): give it no
                // card rather than every card, and say why in its output.
                println!("print gpusched TaskProlog: {e:#}; no GPU given");
                println!("export CUDA_VISIBLE_DEVICES=");
                return Err(e);
            }
        }
        Cmd::Usage { inventory, json } => {
            let invs = read_dir(&inventory)?;
            let jobs = slurm::jobs(Duration::from_secs(10)).await?;
            let booked = decisions(&jobs)?;
            for n in usage_table(&invs, booked.values()) {
                for c in &n.cards {
                    let u = c.usage.unwrap_or_default();
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({
                                "node": n.name, "index": c.index, "id": c.id,
                                "usedSlots": u.used_slots, "slots": c.slots,
                                "usedMemMib": u.used_mem_mib, "totalMemMib": c.total_mem_mib,
                                "usedCores": u.used_cores, "totalCores": c.total_cores,
                            })
                        );
                    } else {
                        println!(
                            "{} gpu{} {} slots {}/{} mem {}/{} MiB cores {}/{}",
                            n.name,
                            c.index,
                            c.id,
                            u.used_slots,
                            c.slots,
                            u.used_mem_mib,
                            c.total_mem_mib,
                            u.used_cores,
                            c.total_cores
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

async fn task_prolog(timeout: u64) -> Result<()> {
    let job: u64 = std::env::var("SLURM_JOB_ID")
        .context("SLURM_JOB_ID is not set (run as Slurm's TaskProlog)")?
        .parse()
        .context("SLURM_JOB_ID")?;
    let node = std::env::var("SLURMD_NODENAME")
        .context("SLURMD_NODENAME is not set (run as Slurm's TaskProlog)")?;
    let jobs = slurm::jobs(Duration::from_secs(timeout)).await?;
    let comment = jobs
        .iter()
        .find(|j| j.id == job)
        .map(|j| j.comment.clone())
        .unwrap_or_default();
    let decision = Decision::parse(&comment)?;
    print!("{}", prolog::task_env(&node, decision.as_ref()));
    Ok(())
}
