//! The command line: `run`, `sweep` and `profile`, one file each, over the arguments
//! (`cli.rs`), what the commands set up (`setup.rs`: request pool, server, runtime,
//! connections) and what they print (`output.rs`: the JSON reports).

mod cli;
mod output;
mod profile;
mod run;
mod setup;
mod sweep;

pub use cli::{
    Cli, ClientArgs, ClusterArgs, Command, FailedNodesArg, ProfileArgs, RunArgs, RunTarget, Secs,
    ServerArgs, SweepArgs, WorkloadArgs,
};
pub use output::{ClusterInfo, Machine, Peak, RunOutput, ServerInfo, SweepOutput, SweepPoint};

/// Runs a command.
pub fn main(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run(a) => run::run(a),
        Command::Sweep(a) => sweep::sweep(a),
        Command::Profile(a) => profile::profile(a),
    }
}
