//! The inputs of a Filter, Score or Allocate converted as the service does (nodes whole, by
//! reference or as a node set; options; the workload), and their answers.

use gpusched_api::v1;
use gpusched_engine::{
    Allocation, DecideOptions, Defaults, Evaluation, KubeNames, Snapshot, Workload,
};

use crate::cache::spare::Changed;
use crate::config::{Limits, Settings};
use crate::convert::answer;
use crate::convert::options::{Options, options_in};
use crate::convert::workload::{Spec, spec_in};
use crate::error::ServiceError;
use crate::pipeline::limits;
use crate::pipeline::mix;
use crate::pipeline::resolve::sets;
use crate::pipeline::resolve::whole;
use crate::state::State;

/// The converted inputs of a Filter, Score or Allocate: the candidate nodes, the workload and
/// the request's options.
#[derive(Debug)]
pub struct Inputs {
    pub(crate) candidates: Changed,
    pub(crate) workload: Workload,
    pub(crate) options: Options,
}

impl Inputs {
    /// The valid candidate nodes, as the engine decides on them.
    pub fn snapshot(&self) -> &Snapshot {
        &self.candidates.snapshot
    }

    /// The workload, resolved.
    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    /// The engine's options the request asks for.
    pub fn decide_options(&self) -> DecideOptions {
        self.options.decide
    }

    /// The answer of an allocation on these inputs (invalid nodes and the failed nodes the
    /// options ask for included).
    pub fn allocation(&self, a: &Allocation) -> v1::AllocationResult {
        answer::allocation_out(
            &self.candidates,
            self.snapshot(),
            &self.workload,
            a,
            false,
            self.options.failed_nodes,
        )
    }

    /// The Filter answer of an evaluation on these inputs.
    pub fn filter(&self, e: &Evaluation) -> v1::FilterResponse {
        answer::filter_out(&self.candidates, &self.workload, e)
    }

    /// The Score answer of an evaluation on these inputs.
    pub fn score(&self, e: &Evaluation) -> v1::ScoreResponse {
        answer::scores_out(&self.candidates, &self.workload, e)
    }
}

/// Converts the common parts of Filter, Score and Allocate: the request limits, options,
/// workload, then nodes (whole, by reference, as a node set).
pub fn inputs(
    state: &State,
    nodes: Vec<v1::Node>,
    node_refs: Vec<v1::NodeRef>,
    node_set: Option<v1::NodeSetRef>,
    workload: Option<v1::Workload>,
    options: Option<v1::PlacementOptions>,
) -> Result<Inputs, ServiceError> {
    let settings = &state.settings;
    limits::nodes(&nodes, &node_refs, &settings.limits)?;
    let o = options_in(options, &settings.defaults, &settings.mix)?;
    // Workload problems are reported before node problems: an invalid workload is rejected
    // "before any node is looked at".
    let w = workload_in(
        workload,
        "workload",
        &o.defaults,
        &settings.names,
        &settings.limits,
    )?;
    let w =
        mix::attach(w, &o, "the workload").map_err(|v| ServiceError::InvalidArgument(vec![v]))?;
    let c = sets::candidates(state, nodes, node_refs, node_set)?;
    mix::check_types(&o, &c.snapshot)?;
    Ok(Inputs {
        candidates: c,
        workload: w,
        options: o,
    })
}

/// Nodes sent whole, converted and validated as the service does (no request limits), when
/// every one is valid; else INVALID_ARGUMENT listing every problem (named
/// `<node name>: <field>`): for tools that build clusters that must all be usable.
pub fn snapshot(settings: &Settings, nodes: Vec<v1::Node>) -> Result<Snapshot, ServiceError> {
    whole::candidates_in(nodes, &settings.names, &settings.limits)?
        .all_valid()
        .map_err(ServiceError::InvalidArgument)
}

/// A workload converted, validated and resolved as the service does with the server's
/// defaults (violations named `workload...`).
pub fn workload(settings: &Settings, w: v1::Workload) -> Result<Workload, ServiceError> {
    workload_in(
        Some(w),
        "workload",
        &settings.defaults,
        &settings.names,
        &settings.limits,
    )
}

/// Converts, validates and resolves a workload within the limits; violations are prefixed with
/// `prefix` (e.g. `workload` or `workloads[2]`): the containers are counted before the spec's
/// field problems are reported, the filter lists once the annotations are parsed.
pub fn workload_in(
    w: Option<v1::Workload>,
    prefix: &str,
    defaults: &Defaults,
    names: &KubeNames,
    l: &Limits,
) -> Result<Workload, ServiceError> {
    let Spec {
        meta,
        spec,
        prefix: spec_prefix,
        quota,
        violations,
    } = spec_in(w, prefix)?;
    limits::containers(&spec, &spec_prefix, l)?;
    if !violations.is_empty() {
        return Err(ServiceError::InvalidArgument(violations));
    }
    let mut w = Workload::parse(meta, &spec, defaults, names)
        .map_err(|e| ServiceError::from(e.prefixed(&spec_prefix)))?;
    if let Some(budget) = quota {
        // Validated with the spec's problems above.
        w = w
            .with_quota(budget)
            .map_err(|e| ServiceError::from(e.prefixed(prefix)))?;
    }
    limits::filter_lists(&w, &spec, &spec_prefix, names, l)?;
    Ok(w)
}
