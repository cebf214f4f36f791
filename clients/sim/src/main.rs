//! `gpusched-sim`: see `gpusched-sim --help` and the crate README.

use clap::Parser as _;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = gpusched_sim::app::Args::parse();
    match gpusched_sim::app::run(&args).await {
        Ok(o) => {
            print!("{}", gpusched_sim::report::markdown(&o.report));
            if let Some(p) = &o.report.paper {
                print!("{}", gpusched_sim::report::paper_markdown(p));
            }
            eprint!("{}", gpusched_sim::report::timing_table(&o.timing));
            eprintln!("wrote {} in {}", o.files.join(", "), args.out.display());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpusched-sim: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
