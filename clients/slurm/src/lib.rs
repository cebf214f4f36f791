//! # gpusched-slurm
//!
//! The Slurm adapter of gpusched. Slurm jobs get their node and GPUs from the same placement
//! engine as Kubernetes pods:
//!
//! - `gpusched-sbatch` ([`args`], [`submit`]): reads the cluster from Slurm (`sinfo --json`,
//!   `squeue --json`) and the node agents' inventories ([`inventory`]), rebuilds the usage from
//!   the decisions recorded on the jobs ([`cluster`], [`decision`]), asks the service
//!   (`Allocate`), and submits the job held, pinned to the chosen node with `--nodelist`,
//!   holding count-only GRES that match the booking, with the decision in its comment; then
//!   re-checks the decision against every earlier job and releases it.
//!   An account's, a user's or a QOS's `GrpTRES` on `gres/gpumem` / `gres/gpucore` is sent
//!   as the job's quota budget ([`quota`]).
//! - preemption ([`preempt`]): when nothing fits, the service's `Preempt` over the booked jobs
//!   (their partitions' `PriorityTier`); with `--gpusched-preempt` the named jobs are requeued.
//! - the fgd policies ([`mix`]): the workload mix sent with the requests of jobs under `fgd`,
//!   derived from the jobs holding cards, or read from a file.
//! - `gpusched-slurm task-prolog` ([`prolog`]): the TaskProlog that exports
//!   `CUDA_VISIBLE_DEVICES` and HAMi-core's limits from the recorded decision.
//! - `gpusched-slurm conf` ([`conf`]): `gres.conf` / `slurm.conf` lines from the inventories.
//! - `gpusched-slurm usage`: the per-card usage rebuilt from Slurm.

pub mod args;
pub mod cluster;
pub mod conf;
pub mod decision;
pub mod inventory;
pub mod mix;
pub mod preempt;
pub mod prolog;
pub mod quota;
pub mod request;
pub mod slurm;
pub mod submit;
