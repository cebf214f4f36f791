//! `gpusched.v1.InventoryService` over the engine's normalisation.

use std::sync::Arc;

use gpusched_api::v1;
use gpusched_api::v1::inventory_service_server::InventoryService;
use gpusched_engine as engine;
use tonic::{Request, Response, Status};

use crate::call::{Cancel, Record, State, run};
use crate::convert::{inventory, node};
use crate::error::ServiceError;
use crate::rpc::Rpc;

/// The inventory service.
#[derive(Debug, Clone)]
pub struct InventoryApi {
    state: Arc<State>,
}

impl InventoryApi {
    /// The service over shared state.
    pub fn new(state: Arc<State>) -> Self {
        InventoryApi { state }
    }
}

/// The synchronous work of `NormalizeInventory` (public for the fuzz targets).
pub fn normalize(
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
    crate::pipeline::limits::inventory_cards(cards.len(), limits)?;
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
    crate::pipeline::limits::answer(
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

#[tonic::async_trait]
impl InventoryService for InventoryApi {
    async fn normalize_inventory(
        &self,
        request: Request<v1::NormalizeInventoryRequest>,
    ) -> Result<Response<v1::NormalizeInventoryResponse>, Status> {
        let (metadata, extensions, msg) = request.into_parts();
        self.state.metrics.observe_request_bytes(
            Rpc::NormalizeInventory.method(),
            prost::Message::encoded_len(&msg),
        );
        let work = crate::placement::estimated_work(&extensions, || msg.cards.len());
        run(
            Arc::clone(&self.state),
            Rpc::NormalizeInventory,
            &metadata,
            work,
            move |st, r, c| normalize(st, msg, r, c),
        )
        .await
    }
}
