//! # gpusched-client
//!
//! A Rust client of the gpusched v1 API. Connect with [`ClientBuilder`] (address, TLS or mutual
//! TLS, a default deadline per call, retry with backoff on `UNAVAILABLE` only), call the typed
//! RPCs, and read errors as [`ApiError`] with the server's field violations. The caller's
//! trace context is propagated as W3C `traceparent` metadata: the current `tracing` span's when
//! it carries an OpenTelemetry context, else OpenTelemetry's current context (a span made with
//! the OpenTelemetry API and attached to the call's future).
//!
//! ```no_run
//! # async fn demo() -> Result<(), gpusched_client::Error> {
//! use gpusched_client::{ClientBuilder, PodBuilder};
//! let client = ClientBuilder::new("http://127.0.0.1:50051").connect().await?;
//! let pod = PodBuilder::new("default", "trainer").container("main", &[("nvidia.com/gpu", "1")]).build();
//! let nodes = vec![]; // nodes with their cards and usage
//! let result = client.allocate(nodes, pod).await?;
//! println!("placed: {}", result.placed);
//! # Ok(()) }
//! ```

mod builder;
pub mod byref;
mod client;
mod error;
pub mod measure;
pub mod mix;
mod pod;
mod preempt;
mod retry;

pub use builder::{ClientBuilder, TlsOptions};
pub use byref::PreparedNode;
pub use client::Client;
pub use error::{
    ApiError, Error, ErrorInfo, FieldViolation, violation_reason, violation_reason_str,
};
pub use gpusched_api::v1;
pub use pod::{PodBuilder, node, node_from_cards};
pub use preempt::chosen_victims;
pub use retry::RetryPolicy;
