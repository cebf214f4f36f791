//! The workload mix of the fgd policies (`docs/placement-semantics.md` section 12.1) given to
//! the workloads that read it, and a request's mix checked against its candidates.

use gpusched_engine::{Snapshot, Violation, ViolationKind, Workload};

use crate::convert::mix::unknown_types;
use crate::convert::options::Options;
use crate::error::ServiceError;

/// The workload with the request's (or the server's) mix when its node or GPU policy is fgd;
/// without a mix that is INVALID_ARGUMENT naming `options.workload_mix` (`at` names the
/// workload in the description). Other workloads are returned as they are.
pub fn attach(w: Workload, o: &Options, at: &str) -> Result<Workload, Violation> {
    if !w.requests_gpu() || !w.uses_fragmentation() {
        return Ok(w);
    }
    match &o.mix {
        Some(m) => Ok(w.with_mix(m.mix.clone())),
        None => Err(Violation::new(
            ViolationKind::MissingField,
            "options.workload_mix",
            format!(
                "{at} uses the fgd policy ({}/{}), which needs a workload mix: send \
                 options.workload_mix or configure policy.workload_mix",
                w.node_policy, w.gpu_policy
            ),
        )),
    }
}

/// A mix sent with the request must name only card types that the candidates have.
pub fn check_types(o: &Options, snapshot: &Snapshot) -> Result<(), ServiceError> {
    let Some(m) = o.mix.as_ref().filter(|m| m.from_request) else {
        return Ok(());
    };
    let v = unknown_types(&m.mix, snapshot, "options.workload_mix");
    if v.is_empty() {
        Ok(())
    } else {
        Err(ServiceError::InvalidArgument(v))
    }
}
