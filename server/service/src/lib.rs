//! # gpusched-server
//!
//! The stateless gRPC placement service: `PlacementService` and `InventoryService` over
//! [`gpusched_engine`], with health, reflection, limits, metrics, traces and TLS. This crate is
//! the only Rust code that knows protobuf and the engine at once.

pub mod accept;
pub mod call;
pub mod config;
pub mod convert;
pub mod edge;
pub mod error;
pub mod intake;
pub mod invalid_node;
pub mod inventory;
pub mod metrics;
pub mod node_cache;
pub mod noderef;
pub mod nodeset;
pub mod placement;
pub mod prescan;
pub mod server;
pub mod set_cache;
pub mod spare;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;

pub use config::{FileConfig, Settings};
pub use error::ServiceError;
pub use gpusched_runtime::ConfigError;
pub use metrics::Metrics;
pub use server::{Running, ServeError, start};
