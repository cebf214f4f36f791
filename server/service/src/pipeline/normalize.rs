//! The synchronous work of `InventoryService/NormalizeInventory`: raw cards and settings to
//! normalised cards and pair scores.

use gpusched_api::v1;
use gpusched_engine as engine;

use crate::convert::{inventory, node};
use crate::error::ServiceError;
use crate::pipeline::limits;
use crate::pipeline::{Cancel, Record};
use crate::state::State;

/// The synchronous work of `NormalizeInventory`.
pub fn normalize_inventory(
    state: &State,
    req: v1::NormalizeInventoryRequest,
    record: &mut Record,
    _cancel: &Cancel,
) -> Result<v1::NormalizeInventoryResponse, ServiceError> {
    let v1::NormalizeInventoryRequest {
        node_name,
        cards,
        config,
    } = req;
    let limits = &state.settings.limits;
    limits::inventory_cards(cards.len(), limits)?;
    record.workload = node_name.clone();
    record.cards = cards.len();
    let config = inventory::normalization_in(config, &state.settings.normalization);
    let raw = inventory::raw_cards_in(cards)?;
    let inv = engine::normalize_inventory(&node_name, &raw, &config)?;
    record.result = "normalized";
    let engine::NormalizedInventory {
        cards,
        pair_scores,
        skipped,
    } = inv;
    limits::answer(
        v1::NormalizeInventoryResponse {
            cards: cards.iter().map(node::card_out).collect(),
            pair_scores: node::pairs_out(&pair_scores),
            skipped: skipped
                .into_iter()
                .map(|(uuid, reason)| v1::SkippedCard { uuid, reason })
                .collect(),
            effective_config: Some(inventory::normalization_out(&config)),
        },
        limits.max_message_bytes,
    )
}
