//! The inputs of a Filter, Score or Allocate converted as the service does (nodes whole, by
//! reference or as a node set; options; the workload), and their answers.

use gpusched_api::v1;
use gpusched_engine::{Allocation, DecideOptions, Evaluation, Snapshot, Workload};

use crate::cache::spare::Changed;
use crate::call::State;
use crate::config::Settings;
use crate::convert::{self, Options};
use crate::error::ServiceError;
use crate::invalid_node::Candidates;
use crate::{noderef, nodeset};

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
        self.candidates.allocation_out(
            self.snapshot(),
            &self.workload,
            a,
            false,
            self.options.failed_nodes,
        )
    }

    /// The Filter answer of an evaluation on these inputs.
    pub fn filter(&self, e: &Evaluation) -> v1::FilterResponse {
        let c: &Candidates = &self.candidates;
        let (s, w) = (&c.snapshot, &self.workload);
        let mut names: Vec<String> = e
            .feasible
            .iter()
            .filter_map(|f| s.node(f.node).map(|n| n.name().to_owned()))
            .collect();
        names.sort();
        v1::FilterResponse {
            feasible_node_names: names,
            failed_nodes: c.failed_with_invalid(convert::failed_out(s, w, &e.failed)),
            effective_policy: Some(convert::effective_out(w)),
            requests_gpu: e.requests_gpu,
            explanations: convert::explanations_out(s, w, &e.explanations),
        }
    }

    /// The Score answer of an evaluation on these inputs.
    pub fn score(&self, e: &Evaluation) -> v1::ScoreResponse {
        let c: &Candidates = &self.candidates;
        let (s, w) = (&c.snapshot, &self.workload);
        v1::ScoreResponse {
            scores: e
                .feasible
                .iter()
                .map(|f| convert::score_out(s, f))
                .collect(),
            failed_nodes: c.failed_with_invalid(convert::failed_out(s, w, &e.failed)),
            effective_policy: Some(convert::effective_out(w)),
            requests_gpu: e.requests_gpu,
            explanations: convert::explanations_out(s, w, &e.explanations),
        }
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
    noderef::check_limits(&nodes, &node_refs, &settings.limits)?;
    let o = convert::options_in(options, &settings.defaults)?;
    // Workload problems are reported before node problems: an invalid workload is rejected
    // "before any node is looked at".
    let w = convert::workload_in(
        workload,
        "workload",
        &o.defaults,
        &settings.names,
        &settings.limits,
    )?;
    let c = nodeset::candidates(state, nodes, node_refs, node_set)?;
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
    convert::candidates_in(nodes, &settings.names, &settings.limits)?
        .all_valid()
        .map_err(ServiceError::InvalidArgument)
}

/// A workload converted, validated and resolved as the service does with the server's
/// defaults (violations named `workload...`).
pub fn workload(settings: &Settings, w: v1::Workload) -> Result<Workload, ServiceError> {
    convert::workload_in(
        Some(w),
        "workload",
        &settings.defaults,
        &settings.names,
        &settings.limits,
    )
}
