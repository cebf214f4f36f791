//! `profile`: decisions back to back in process, for `valgrind --tool=callgrind` or `perf`.

use super::cli::ProfileArgs;
use super::setup::build_pool;
use crate::inproc;

pub(super) fn profile(a: ProfileArgs) -> anyhow::Result<()> {
    let pool = build_pool(a.nodes, &a.cluster, &a.workload)?;
    let settings = inproc::default_settings()?;
    let mean = inproc::profile(
        a.target,
        &pool,
        &settings,
        a.workload.rpc,
        a.iterations,
        a.decode_from,
    )?;
    eprintln!(
        "{} x {}: {:.1} µs per decision",
        a.iterations,
        a.target.as_str(),
        mean.as_secs_f64() * 1e6
    );
    Ok(())
}
