//! The operator's view: a read-only web page and JSON API on the shim's own state (the cluster
//! view and the service's answers; no store of its own), behind a bearer token.
//!
//! Layers, each importing only those above it: `model.rs` (the answers, serde), `units.rs`,
//! `selector.rs` ← `reasons.rs`, `nearest.rs` (pure functions over the service's answers) ←
//! `ask.rs` (the service asked about one pod on the view) ← `pending.rs`, `board.rs`,
//! `decision.rs`, `podspec.rs`, `whatif.rs` (the answers) ← `html/` (rendering) and `auth.rs`
//! ← `routes.rs` (HTTP). See README.md in this folder.

mod ask;
mod auth;
mod board;
mod decision;
mod html;
pub mod model;
mod nearest;
mod pending;
mod podspec;
mod reasons;
mod routes;
mod selector;
pub mod units;
mod whatif;

pub use auth::{Auth, COOKIE_NAME};
pub use nearest::short_text;
pub use podspec::{MAX_SPEC_BYTES, SpecError};
pub use routes::{WebState, router};
