//! The tonic services, after the transport layers: `placement` and `inventory` each observe a
//! call's request, then hand its synchronous decision (`crate::pipeline`) to `call::run`
//! (span, deadline, permit, cancellation, inline or blocking pool, metrics, log line).

pub mod call;
pub mod inventory;
pub mod placement;
