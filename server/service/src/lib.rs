//! # gpusched-server
//!
//! The stateless gRPC placement service: `PlacementService` and `InventoryService` over
//! [`gpusched_engine`], with health, reflection, limits, metrics, traces and TLS. This crate is
//! the only Rust code that knows protobuf and the engine at once.
//!
//! The library's surface: [`start`] a server with [`Settings`] (validated from a
//! [`FileConfig`] loaded by [`SPEC`], or [`default_settings`]) and [`Metrics`], getting a
//! [`Running`] server or a [`ServeError`]; the [`pipeline`], the synchronous decisions the
//! handlers make, for in-process callers; [`Rpc`], the table of the RPCs; and, with the
//! `testing` feature, `testing` (an in-process server on port 0 for integration tests).
//! Everything else is private: `ARCHITECTURE.md` (docs/) walks the request path through it.

mod cache;
mod candidates;
mod config;
mod convert;
mod error;
mod handlers;
mod metrics;
pub mod pipeline;
mod rpc;
mod server;
mod state;
mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
mod transport;

pub use config::{FileConfig, SPEC, Settings, default_settings};
pub use error::{MAX_MESSAGE, ServiceError};
pub use gpusched_runtime::ConfigError;
pub use metrics::Metrics;
pub use rpc::Rpc;
pub use server::{Running, ServeError, start};
