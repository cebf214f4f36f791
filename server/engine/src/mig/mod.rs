//! MIG cards (`docs/placement-semantics.md` section 11): HAMi's choice of a profile and
//! placement for one container on one card ([`choose`]) and booking the chosen instances
//! ([`book`]), over the card's layout (`mig_layout.rs`: profiles, placements, instances, their
//! validation; a leaf the model holds). The per-card checks, the evaluation and the decisions
//! call in through a few hooks in `fit.rs`, `evaluate.rs`, `decide.rs` and `model.rs`.

pub(crate) mod book;
pub(crate) mod choose;

pub use book::MigAssignment;
pub use choose::{MigExplanation, MigOutcome, MigProfileConsidered};
