//! The service's synchronous decisions, without tonic: what a handler runs once its call holds
//! a decision slot, and what the load tester, the fuzz targets and the benches call to decide
//! exactly as the service does.
//!
//! A decision takes the [`State`] (settings, caches), the decoded request, a [`Record`] it
//! fills (for the span, the metrics and the log line) and a [`Cancel`] it asks before each
//! node; it answers the response message or a [`ServiceError`](crate::ServiceError), which
//! the one table of `error.rs` maps to a gRPC status. [`inputs`] and [`Inputs`] are the first
//! and the last step of Filter, Score and Allocate on their own, for callers that time the
//! engine between them; [`snapshot`] and [`workload`] convert nodes and a workload as the
//! service does.

mod inputs;
pub(crate) mod limits;
pub(crate) mod resolve;

pub use crate::call::{Cancel, Record, State};
pub use crate::inventory::normalize as normalize_inventory;
pub use crate::placement::{
    decide_allocate as allocate, decide_batch as allocate_batch, decide_filter as filter,
    decide_score as score, decide_validate as validate_workload,
};
pub(crate) use inputs::workload_in;
pub use inputs::{Inputs, inputs, snapshot, workload};
