//! `gpusched.v1.InventoryService` over the pipeline.

use std::sync::Arc;

use gpusched_api::v1;
use gpusched_api::v1::inventory_service_server::InventoryService;
use tonic::{Request, Response, Status};

use crate::handlers::call::{estimated_work, run};
use crate::pipeline;
use crate::rpc::Rpc;
use crate::state::State;

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
        let work = estimated_work(&extensions, || msg.cards.len());
        run(
            Arc::clone(&self.state),
            Rpc::NormalizeInventory,
            &metadata,
            work,
            move |st, r, c| pipeline::normalize_inventory(st, msg, r, c),
        )
        .await
    }
}
