//! `gpusched-loadtest`: load, latency and scaling measurements of gpusched (see README.md).

use clap::Parser as _;

// As in gpusched-server: the in-process pipeline allocates like the server does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = gpusched_loadtest::app::Cli::parse();
    match gpusched_loadtest::app::main(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gpusched-loadtest: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
