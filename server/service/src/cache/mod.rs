//! Optimisations only: what a replica remembers between calls so that clients may send less.
//! No answer depends on it: a reference or a base set a replica does not hold is answered
//! FAILED_PRECONDITION, and the client sends those parts (or its candidates) in full.
//!
//! - `digest`: content addresses (SHA-256) of node parts and node sets; a leaf.
//! - `nodes`: node parts sent by reference, converted, by digest (bounded, sharded LRU).
//! - `sets`: candidate sets kept by their set digest (bounded LRU).
//! - `spare`: a kept set's spare node lists, leased to requests that replace a few nodes.

pub mod digest;
pub mod nodes;
pub mod sets;
pub mod spare;
