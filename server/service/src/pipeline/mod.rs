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
//!
//! Inside, in call order: `decide` (or `normalize`) takes `inputs` (options and workloads:
//! `crate::convert` within `limits`), `resolve`s the candidate nodes (`sets`, `refs`, `whole`,
//! one `build`er of `Candidates`, through `crate::cache`), gives fgd workloads their `mix`
//! (checked against the candidates), asks the engine, and writes the answer (`crate::convert::answer`) within `limits`.

mod cancel;
mod decide;
mod inputs;
pub(crate) mod limits;
mod mix;
mod normalize;
mod preempt;
mod record;
pub(crate) mod resolve;

pub use crate::state::State;
pub use cancel::Cancel;
pub use decide::{allocate, allocate_batch, filter, score, validate_workload};
pub use inputs::{Inputs, inputs, snapshot, workload};
pub use normalize::normalize_inventory;
pub use preempt::preempt;
pub use record::Record;
pub(crate) use resolve::refs::ASSUMED_CARDS_PER_REF;
