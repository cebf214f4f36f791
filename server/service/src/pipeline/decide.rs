//! The synchronous decisions of `PlacementService`: Filter, Score, Allocate, AllocateBatch and
//! ValidateWorkload, each from its decoded request to its answer (or error), filling the
//! call's [`Record`] and stopping when its [`Cancel`] says so.

use gpusched_api::v1;
use gpusched_engine as engine;
use gpusched_engine::{BatchMode, Workload};

use crate::candidates::Candidates;
use crate::convert::options::options_in;
use crate::convert::{answer, node};
use crate::error::ServiceError;
use crate::pipeline::inputs::{Inputs, inputs, workload_in};
use crate::pipeline::limits;
use crate::pipeline::mix;
use crate::pipeline::resolve::sets;
use crate::pipeline::{Cancel, Record};
use crate::state::State;

fn workload_label(w: &Workload) -> String {
    if w.meta.namespace.is_empty() {
        w.meta.name.clone()
    } else {
        format!("{}/{}", w.meta.namespace, w.meta.name)
    }
}

pub(super) fn describe(record: &mut Record, w: &Workload, c: &Candidates) {
    record.workload = workload_label(w);
    record.nodes = c.len();
    record.cards = c.snapshot.card_count();
    record.node_policy = w.node_policy.as_str();
    record.gpu_policy = w.gpu_policy.to_string();
}

/// The part Filter and Score share: the inputs converted, every node evaluated, the record.
#[allow(clippy::too_many_arguments)]
fn evaluated(
    state: &State,
    nodes: Vec<v1::Node>,
    node_refs: Vec<v1::NodeRef>,
    node_set: Option<v1::NodeSetRef>,
    workload: Option<v1::Workload>,
    options: Option<v1::PlacementOptions>,
    record: &mut Record,
    cancel: &Cancel,
) -> Result<(Inputs, engine::Evaluation), ServiceError> {
    let i = inputs(state, nodes, node_refs, node_set, workload, options)?;
    let c: &Candidates = &i.candidates;
    describe(record, &i.workload, c);
    let e = engine::evaluate_until(&c.snapshot, &i.workload, i.options.decide, &|| {
        cancel.stopped()
    })
    .map_err(|_| cancel.abandoned())?;
    record.add_rejections(
        e.failed
            .iter()
            .map(|f| &f.failure)
            .chain(c.invalid_failures()),
    );
    record.result = if !e.requests_gpu {
        "no_gpu"
    } else if e.feasible.is_empty() {
        "unschedulable"
    } else {
        "feasible"
    };
    record.decision = true;
    Ok((i, e))
}

/// The synchronous decision of `Filter`.
pub fn filter(
    state: &State,
    req: v1::FilterRequest,
    record: &mut Record,
    cancel: &Cancel,
) -> Result<v1::FilterResponse, ServiceError> {
    let v1::FilterRequest {
        nodes,
        workload,
        options,
        node_refs,
        node_set,
    } = req;
    let (i, e) = evaluated(
        state, nodes, node_refs, node_set, workload, options, record, cancel,
    )?;
    limits::answer(i.filter(&e), state.settings.limits.max_message_bytes)
}

/// The synchronous decision of `Score`.
pub fn score(
    state: &State,
    req: v1::ScoreRequest,
    record: &mut Record,
    cancel: &Cancel,
) -> Result<v1::ScoreResponse, ServiceError> {
    let v1::ScoreRequest {
        nodes,
        workload,
        options,
        node_refs,
        node_set,
    } = req;
    let (i, e) = evaluated(
        state, nodes, node_refs, node_set, workload, options, record, cancel,
    )?;
    limits::answer(i.score(&e), state.settings.limits.max_message_bytes)
}

fn allocation_result(a: &engine::Allocation) -> &'static str {
    match (a.requests_gpu, a.placement.is_some()) {
        (false, _) => "no_gpu",
        (true, true) => "placed",
        (true, false) => "unschedulable",
    }
}

/// The synchronous decision of `Allocate`.
pub fn allocate(
    state: &State,
    req: v1::AllocateRequest,
    record: &mut Record,
    cancel: &Cancel,
) -> Result<v1::AllocateResponse, ServiceError> {
    let v1::AllocateRequest {
        nodes,
        workload,
        options,
        restrict_to_node_names,
        node_refs,
        node_set,
    } = req;
    let mut i = inputs(state, nodes, node_refs, node_set, workload, options)?;
    if !restrict_to_node_names.is_empty() {
        let missing = i.candidates.retain_names(&restrict_to_node_names);
        if !missing.is_empty() {
            return Err(ServiceError::InvalidArgument(vec![engine::Violation::new(
                engine::ViolationKind::UnknownReference,
                "restrict_to_node_names",
                format!("not among the request's nodes: {}", missing.join(", ")),
            )]));
        }
    }
    let c: &Candidates = &i.candidates;
    describe(record, &i.workload, c);
    let a = engine::allocate_until(&c.snapshot, &i.workload, i.options.decide, &|| {
        cancel.stopped()
    })
    .map_err(|_| cancel.abandoned())?;
    record.add_rejections(
        a.failed
            .iter()
            .map(|f| &f.failure)
            .chain(c.invalid_failures()),
    );
    record.result = allocation_result(&a);
    record.decision = true;
    let result = i.allocation(&a);
    record.chosen = (!result.node_name.is_empty()).then(|| result.node_name.clone());
    limits::answer(
        v1::AllocateResponse {
            result: Some(result),
        },
        state.settings.limits.max_message_bytes,
    )
}

/// The synchronous decision of `AllocateBatch`.
pub fn allocate_batch(
    state: &State,
    req: v1::AllocateBatchRequest,
    record: &mut Record,
    cancel: &Cancel,
) -> Result<v1::AllocateBatchResponse, ServiceError> {
    let v1::AllocateBatchRequest {
        nodes,
        workloads,
        options,
        all_or_nothing,
        return_updated_nodes,
        node_refs,
        node_set,
    } = req;
    let settings = &state.settings;
    limits::workloads(workloads.len(), &settings.limits)?;
    if workloads.is_empty() {
        return Err(ServiceError::InvalidArgument(vec![engine::Violation::new(
            engine::ViolationKind::MissingField,
            "workloads",
            "at least one workload is required",
        )]));
    }
    limits::nodes(&nodes, &node_refs, &settings.limits)?;
    let o = options_in(options, &settings.defaults, &settings.mix)?;
    let mut parsed = Vec::with_capacity(workloads.len());
    let mut violations = Vec::new();
    for (i, w) in workloads.into_iter().enumerate() {
        match workload_in(
            Some(w),
            &format!("workloads[{i}]"),
            &o.defaults,
            &settings.names,
            &settings.limits,
        ) {
            Ok(w) => match mix::attach(w, &o, &format!("workloads[{i}]")) {
                Ok(w) => parsed.push(w),
                Err(v) => violations.push(v),
            },
            Err(ServiceError::InvalidArgument(v)) => violations.extend(v),
            Err(e) => return Err(e),
        }
    }
    if !violations.is_empty() {
        return Err(ServiceError::InvalidArgument(violations));
    }
    let c = sets::candidates(state, nodes, node_refs, node_set)?;
    mix::check_types(&o, &c.snapshot)?;
    record.workload = format!("{} workloads", parsed.len());
    record.nodes = c.len();
    record.cards = c.snapshot.card_count();
    record.node_policy = parsed.first().map_or("", |w| w.node_policy.as_str());
    record.gpu_policy = parsed
        .first()
        .map(|w| w.gpu_policy.to_string())
        .unwrap_or_default();
    let out = engine::allocate_batch_until(
        c.snapshot.clone(),
        &parsed,
        if all_or_nothing {
            BatchMode::AllOrNothing
        } else {
            BatchMode::Independent
        },
        o.decide,
        &|| cancel.stopped(),
    )
    .map_err(|_| cancel.abandoned())?;
    record.add_rejections(
        out.items
            .iter()
            .flat_map(|i| i.allocation.failed.iter().map(|f| &f.failure))
            .chain(out.items.iter().flat_map(|_| c.invalid_failures())),
    );
    record.result = if out.all_placed {
        "placed"
    } else {
        "unschedulable"
    };
    record.decision = true;
    // Converted one result at a time, the size counted as it grows: an answer over the limit
    // stops at the first result that crosses it, not after all of them are built.
    let limit = settings.limits.max_message_bytes;
    let mut bytes = 0usize;
    let mut results = Vec::with_capacity(out.items.len());
    for (item, w) in out.items.iter().zip(&parsed) {
        let r = answer::allocation_out(
            &c,
            &out.snapshot,
            w,
            &item.allocation,
            item.rolled_back,
            o.failed_nodes,
        );
        bytes += prost::encoding::message::encoded_len(1, &r);
        if bytes > limit {
            return Err(limits::answer_too_large(bytes, limit));
        }
        results.push(r);
    }
    let mut updated_nodes = Vec::new();
    if return_updated_nodes {
        for n in out.snapshot.nodes() {
            let n = node::node_out(n);
            bytes += prost::encoding::message::encoded_len(3, &n);
            if bytes > limit {
                return Err(limits::answer_too_large(bytes, limit));
            }
            updated_nodes.push(n);
        }
    }
    limits::answer(
        v1::AllocateBatchResponse {
            results,
            all_placed: out.all_placed,
            updated_nodes,
        },
        limit,
    )
}

/// The synchronous decision of `ValidateWorkload`.
pub fn validate_workload(
    state: &State,
    req: v1::ValidateWorkloadRequest,
    record: &mut Record,
    _cancel: &Cancel,
) -> Result<v1::ValidateWorkloadResponse, ServiceError> {
    let v1::ValidateWorkloadRequest { workload, options } = req;
    let settings = &state.settings;
    let o = options_in(options, &settings.defaults, &settings.mix)?;
    record.workload = workload
        .as_ref()
        .map(|w| w.name.clone())
        .unwrap_or_default();
    match workload_in(
        workload,
        "workload",
        &o.defaults,
        &settings.names,
        &settings.limits,
    ) {
        Ok(w) => {
            record.result = "valid";
            let requests_gpu = w.requests_gpu();
            Ok(v1::ValidateWorkloadResponse {
                valid: true,
                violations: Vec::new(),
                requests_gpu,
                effective_policy: requests_gpu.then(|| answer::effective_out(&w)),
                containers: answer::resolved_out(&w),
                quota_floor: requests_gpu.then(|| answer::quota_use_out(&w.quota_floor())),
            })
        }
        Err(ServiceError::InvalidArgument(v))
            if !v
                .iter()
                .any(|x| x.field == "workload" || x.field == "workload.spec") =>
        {
            record.result = "invalid";
            Ok(v1::ValidateWorkloadResponse {
                valid: false,
                violations: v
                    .into_iter()
                    .map(|x| v1::Violation {
                        reason: answer::violation_reason_out(x.kind) as i32,
                        field: x.field,
                        description: x.description,
                    })
                    .collect(),
                requests_gpu: true,
                effective_policy: None,
                containers: Vec::new(),
                quota_floor: None,
            })
        }
        Err(e) => Err(e),
    }
}
