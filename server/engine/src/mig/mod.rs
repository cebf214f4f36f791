//! MIG cards (`docs/placement-semantics.md` section 9): the layout of a card in mode `mig`
//! (profiles, placements, instances) and its validation ([`layout`]), HAMi's choice of a
//! profile and placement for one container on one card ([`choose`]), and booking the chosen
//! instances ([`book`]). The per-card checks, the evaluation and the decisions call in through
//! a few hooks in `fit.rs`, `evaluate.rs`, `decide.rs` and `model.rs`.

pub(crate) mod book;
pub(crate) mod choose;
pub(crate) mod layout;

pub use book::MigAssignment;
pub use choose::{MigExplanation, MigOutcome, MigProfileConsidered};
pub use layout::{
    MAX_MIG_INSTANCES, MAX_MIG_PROFILES, MAX_MIG_SLICES, MigInstance, MigLayout, MigPlacement,
    MigProfile,
};
