//! The synchronous decision of `Preempt` (docs/placement-semantics.md section 9): the inputs
//! as for Allocate, the placed workloads validated against the candidates, the engine's
//! preemption, the answer with the invalid nodes merged in.

use gpusched_api::v1;
use gpusched_engine as engine;
use gpusched_engine::{Occupancy, PreemptChoice, PreemptOptions};

use crate::convert::preempt::{placed_in, preemption_out};
use crate::error::ServiceError;
use crate::pipeline::inputs::inputs;
use crate::pipeline::limits;
use crate::pipeline::{Cancel, Record};
use crate::state::State;

/// The synchronous decision of `Preempt`.
pub fn preempt(
    state: &State,
    req: v1::PreemptRequest,
    record: &mut Record,
    cancel: &Cancel,
) -> Result<v1::PreemptResponse, ServiceError> {
    let v1::PreemptRequest {
        nodes,
        workload,
        options,
        priority,
        placed,
        node_refs,
        node_set,
    } = req;
    let i = inputs(state, nodes, node_refs, node_set, workload, options)?;
    let c = &i.candidates;
    let mut placed = placed_in(placed, c);
    let entries = std::mem::take(&mut placed.entries);
    let occupancy =
        Occupancy::new(&c.snapshot, entries, &state.settings.limits.preempt).map_err(|e| {
            ServiceError::InvalidArgument(
                e.violations
                    .into_iter()
                    .map(|v| placed.renamed(v))
                    .collect(),
            )
        })?;
    super::decide::describe(record, &i.workload, c);
    let options = PreemptOptions {
        explain: i.options.decide.explain,
    };
    let p = engine::preempt_until(&occupancy, &i.workload, priority, options, &|| {
        cancel.stopped()
    })
    .map_err(|_| cancel.abandoned())?;
    record.add_rejections(
        p.nodes
            .iter()
            .filter_map(|n| match &n.verdict {
                engine::PreemptVerdict::NotCandidate(x) => Some(&x.failure),
                _ => None,
            })
            .chain(c.invalid_failures()),
    );
    record.result = match (p.requests_gpu, p.choice) {
        (false, _) => "no_gpu",
        (true, PreemptChoice::NotNeeded) => "not_needed",
        (true, PreemptChoice::Evict(_)) => "evict",
        (true, PreemptChoice::NoCandidate) => "no_candidate",
    };
    if let Some(v) = p.chosen() {
        record.victims = Some(v.ids.len());
    }
    record.decision = true;
    let answer = preemption_out(c, &i.workload, &p);
    record.chosen = (!answer.node_name.is_empty()).then(|| answer.node_name.clone());
    limits::answer(answer, state.settings.limits.max_message_bytes)
}
