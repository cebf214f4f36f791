//! The stories, one module each; [`crate`] runs them in order (filtered by `E2E_FILTER`).

pub mod admission;
pub mod bad_nodes;
pub mod burst;
pub mod failclosed;
pub mod fgd;
pub mod forgery;
pub mod mig;
pub mod mutex;
pub mod opview;
pub mod preempt;
pub mod quota;
pub mod replicas;
pub mod restart;
pub mod seed;
pub mod traces;
pub mod weights;
