//! `gpusched.v1.PlacementService` over the pipeline: each RPC's request size observed, its
//! estimated work read from the intake's `Admission`, its decision run by [`run`], and the
//! `gpusched-node-refs` and `gpusched-node-sets` headers on every answer.

use std::sync::Arc;

use gpusched_api::v1;
use gpusched_api::v1::placement_service_server::PlacementService;
use gpusched_api::{NODE_REFS_HEADER, NODE_SETS_HEADER};
use tonic::{Request, Response, Status};

use crate::handlers::call::{estimated_work, run};
use crate::pipeline::{self, ASSUMED_CARDS_PER_REF};
use crate::rpc::Rpc;
use crate::state::State;

/// The placement service.
#[derive(Debug, Clone)]
pub struct PlacementApi {
    state: Arc<State>,
}

impl PlacementApi {
    /// The service over shared state.
    pub fn new(state: Arc<State>) -> Self {
        PlacementApi { state }
    }
}

/// Cards of a request, for choosing inline or blocking-pool decisions (references estimated).
fn card_count(nodes: &[v1::Node], refs: &[v1::NodeRef]) -> usize {
    nodes.iter().map(|n| n.cards.len()).sum::<usize>() + refs.len() * ASSUMED_CARDS_PER_REF
}

/// Adds [`NODE_REFS_HEADER`] and [`NODE_SETS_HEADER`] to a response or a status.
fn advertised<M: Advertise>(mut m: M) -> M {
    m.metadata_mut().insert(
        NODE_REFS_HEADER,
        tonic::metadata::MetadataValue::from_static("1"),
    );
    m.metadata_mut().insert(
        NODE_SETS_HEADER,
        tonic::metadata::MetadataValue::from_static("1"),
    );
    m
}

trait Advertise {
    fn metadata_mut(&mut self) -> &mut tonic::metadata::MetadataMap;
}

impl<T> Advertise for Response<T> {
    fn metadata_mut(&mut self) -> &mut tonic::metadata::MetadataMap {
        Response::metadata_mut(self)
    }
}

impl Advertise for Status {
    fn metadata_mut(&mut self) -> &mut tonic::metadata::MetadataMap {
        Status::metadata_mut(self)
    }
}

#[tonic::async_trait]
impl PlacementService for PlacementApi {
    async fn filter(
        &self,
        request: Request<v1::FilterRequest>,
    ) -> Result<Response<v1::FilterResponse>, Status> {
        let (metadata, extensions, msg) = request.into_parts();
        self.state
            .metrics
            .observe_request_bytes(Rpc::Filter.method(), prost::Message::encoded_len(&msg));
        let work = estimated_work(&extensions, || card_count(&msg.nodes, &msg.node_refs));
        run(
            Arc::clone(&self.state),
            Rpc::Filter,
            &metadata,
            work,
            move |st, r, c| pipeline::filter(st, msg, r, c),
        )
        .await
        .map_or_else(|e| Err(advertised(e)), |r| Ok(advertised(r)))
    }

    async fn score(
        &self,
        request: Request<v1::ScoreRequest>,
    ) -> Result<Response<v1::ScoreResponse>, Status> {
        let (metadata, extensions, msg) = request.into_parts();
        self.state
            .metrics
            .observe_request_bytes(Rpc::Score.method(), prost::Message::encoded_len(&msg));
        let work = estimated_work(&extensions, || card_count(&msg.nodes, &msg.node_refs));
        run(
            Arc::clone(&self.state),
            Rpc::Score,
            &metadata,
            work,
            move |st, r, c| pipeline::score(st, msg, r, c),
        )
        .await
        .map_or_else(|e| Err(advertised(e)), |r| Ok(advertised(r)))
    }

    async fn allocate(
        &self,
        request: Request<v1::AllocateRequest>,
    ) -> Result<Response<v1::AllocateResponse>, Status> {
        let (metadata, extensions, msg) = request.into_parts();
        self.state
            .metrics
            .observe_request_bytes(Rpc::Allocate.method(), prost::Message::encoded_len(&msg));
        let work = estimated_work(&extensions, || card_count(&msg.nodes, &msg.node_refs));
        run(
            Arc::clone(&self.state),
            Rpc::Allocate,
            &metadata,
            work,
            move |st, r, c| pipeline::allocate(st, msg, r, c),
        )
        .await
        .map_or_else(|e| Err(advertised(e)), |r| Ok(advertised(r)))
    }

    async fn allocate_batch(
        &self,
        request: Request<v1::AllocateBatchRequest>,
    ) -> Result<Response<v1::AllocateBatchResponse>, Status> {
        let (metadata, extensions, msg) = request.into_parts();
        self.state.metrics.observe_request_bytes(
            Rpc::AllocateBatch.method(),
            prost::Message::encoded_len(&msg),
        );
        let work = estimated_work(&extensions, || {
            card_count(&msg.nodes, &msg.node_refs).saturating_mul(msg.workloads.len().max(1))
        });
        run(
            Arc::clone(&self.state),
            Rpc::AllocateBatch,
            &metadata,
            work,
            move |st, r, c| pipeline::allocate_batch(st, msg, r, c),
        )
        .await
        .map_or_else(|e| Err(advertised(e)), |r| Ok(advertised(r)))
    }

    async fn validate_workload(
        &self,
        request: Request<v1::ValidateWorkloadRequest>,
    ) -> Result<Response<v1::ValidateWorkloadResponse>, Status> {
        let (metadata, extensions, msg) = request.into_parts();
        self.state.metrics.observe_request_bytes(
            Rpc::ValidateWorkload.method(),
            prost::Message::encoded_len(&msg),
        );
        run(
            Arc::clone(&self.state),
            Rpc::ValidateWorkload,
            &metadata,
            estimated_work(&extensions, || 0),
            move |st, r, c| pipeline::validate_workload(st, msg, r, c),
        )
        .await
        .map_or_else(|e| Err(advertised(e)), |r| Ok(advertised(r)))
    }

    async fn preempt(
        &self,
        request: Request<v1::PreemptRequest>,
    ) -> Result<Response<v1::PreemptResponse>, Status> {
        let (metadata, extensions, msg) = request.into_parts();
        self.state
            .metrics
            .observe_request_bytes(Rpc::Preempt.method(), prost::Message::encoded_len(&msg));
        // Each placed workload may cost one more evaluation of its node.
        let work = estimated_work(&extensions, || {
            let placed: usize = msg.placed.iter().map(|p| p.workloads.len()).sum();
            card_count(&msg.nodes, &msg.node_refs).saturating_mul(placed.max(1))
        });
        run(
            Arc::clone(&self.state),
            Rpc::Preempt,
            &metadata,
            work,
            move |st, r, c| pipeline::preempt(st, msg, r, c),
        )
        .await
        .map_or_else(|e| Err(advertised(e)), |r| Ok(advertised(r)))
    }
}
