//! Wiring: the gRPC server (placement, inventory, health, reflection v1 and v1alpha, TLS,
//! message limits), the metrics endpoint, and graceful shutdown.
//!
//! A call passes, in this order: the listener (`transport::accept`), TLS, tonic's HTTP/2 server,
//! the `transport::edge` layer (outermost: content-type, deadline, codes, counting), the
//! `transport::intake` layer (prefix, memory budget, body timeout, `prescan`, offload), tonic's
//! router and decoder, then the service (`handlers::placement` or `handlers::inventory`). A
//! layer added first is outermost: `.layer(edge).layer(intake)` below.

use std::net::SocketAddr;
use std::sync::Arc;

use gpusched_api::v1::inventory_service_server::InventoryServiceServer;
use gpusched_api::v1::placement_service_server::PlacementServiceServer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::Server;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::config::Settings;
use crate::handlers::inventory::InventoryApi;
use crate::handlers::placement::PlacementApi;
use crate::metrics::Metrics;
use crate::state::State;

/// The server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// TLS files could not be read or used.
    #[error(transparent)]
    Tls(#[from] gpusched_runtime::tls::TlsError),
    /// The metrics endpoint could not start.
    #[error(transparent)]
    Metrics(#[from] gpusched_runtime::metrics::MetricsError),
    /// tonic refused the TLS configuration.
    #[error("TLS: {0}")]
    TlsConfig(String),
    /// Reflection could not be built.
    #[error("reflection: {0}")]
    Reflection(String),
    /// The transport failed.
    #[error("gRPC transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// A server task failed.
    #[error("server task: {0}")]
    Task(String),
}

/// Names the health service reports.
pub const HEALTH_SERVICES: [&str; 3] = [
    "",
    "gpusched.v1.PlacementService",
    "gpusched.v1.InventoryService",
];

/// A running server.
#[derive(Debug)]
pub struct Running {
    /// Where gRPC listens.
    pub grpc_addr: SocketAddr,
    /// Where metrics listen, when enabled.
    pub metrics_addr: Option<SocketAddr>,
    health: HealthReporter,
    drain_timeout: std::time::Duration,
    shutdown_grace: std::time::Duration,
    stop: watch::Sender<bool>,
    grpc: JoinHandle<Result<(), tonic::transport::Error>>,
    metrics: Option<JoinHandle<std::io::Result<()>>>,
}

impl Running {
    /// Graceful stop: health turns NOT_SERVING first and stays so for `limits.shutdown_grace`
    /// while calls are still served (load balancers and readiness probes notice), then the
    /// listener closes and in-flight calls drain (at most `limits.drain_timeout`).
    pub async fn shutdown(self) -> Result<(), ServeError> {
        for name in HEALTH_SERVICES {
            self.health
                .set_service_status(name, ServingStatus::NotServing)
                .await;
        }
        if !self.shutdown_grace.is_zero() {
            tracing::info!(grace = ?self.shutdown_grace, "health NOT_SERVING; still serving calls until the grace period ends");
            tokio::time::sleep(self.shutdown_grace).await;
        }
        let _ = self.stop.send(true);
        let mut grpc = self.grpc;
        let drained = tokio::time::timeout(self.drain_timeout, &mut grpc).await;
        let result = match drained {
            Ok(joined) => joined
                .map_err(|e| ServeError::Task(e.to_string()))?
                .map_err(ServeError::from),
            Err(_) => {
                tracing::warn!(after = ?self.drain_timeout, "drain timeout: cutting the remaining calls and streams");
                grpc.abort();
                Ok(())
            }
        };
        if let Some(m) = self.metrics {
            let _ = tokio::time::timeout(self.drain_timeout, m).await;
        }
        result
    }

    /// Sets the health of every service (tests and operators).
    pub async fn set_serving(&self, serving: bool) {
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for name in HEALTH_SERVICES {
            self.health.set_service_status(name, status).await;
        }
    }
}

/// Binds and starts serving. Returns once both listeners are bound.
pub async fn start(settings: Settings, metrics: Arc<Metrics>) -> Result<Running, ServeError> {
    let listener = TcpListener::bind(settings.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: settings.listen,
            source,
        })?;
    let grpc_addr = listener.local_addr().map_err(|source| ServeError::Bind {
        addr: settings.listen,
        source,
    })?;
    // Per connection: streams at once (advertised in SETTINGS); per call: the intake layer
    // (declared sizes, memory budget, limits on the wire, body timeout).
    let mut builder =
        Server::builder().max_concurrent_streams(settings.limits.max_concurrent_streams);
    let intake = crate::transport::intake::IntakeLayer::new(&settings.limits);
    if let Some(tls) = &settings.tls {
        builder = builder
            .tls_config(tls.load()?)
            .map_err(|e| ServeError::TlsConfig(e.to_string()))?;
    }
    let (stop, stop_rx) = watch::channel(false);
    let wait_stop = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let metrics_server = match settings.metrics_listen {
        Some(addr) => Some(
            gpusched_runtime::metrics::serve(addr, metrics.registry(), wait_stop(stop_rx.clone()))
                .await?,
        ),
        None => None,
    };

    let max = settings.limits.max_message_bytes;
    // Deadlines are enforced in `edge` (DEADLINE_EXCEEDED) before tonic's timer for the
    // caller's grpc-timeout; tonic's server-wide timeout would answer CANCELLED, so it is not
    // set.
    let edge = crate::transport::edge::EdgeLayer::new(crate::transport::edge::EdgeConfig {
        metrics: Arc::clone(&metrics),
        request_timeout: settings.limits.request_timeout,
    });
    let accept_errors = metrics.accept_errors.clone();

    let (health, health_service) = tonic_health::server::health_reporter();
    for name in HEALTH_SERVICES {
        health
            .set_service_status(name, ServingStatus::Serving)
            .await;
    }
    let reflection = |v1: bool| {
        let b = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(gpusched_api::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            // google.rpc.Status and the error details (BadRequest, ErrorInfo...) that error
            // statuses carry: generic tools (grpcurl) print them instead of "not recognized".
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET);
        if v1 {
            b.build_v1().map(|s| (Some(s), None))
        } else {
            b.build_v1alpha().map(|s| (None, Some(s)))
        }
    };
    let (Some(reflection_v1), _) =
        reflection(true).map_err(|e| ServeError::Reflection(e.to_string()))?
    else {
        return Err(ServeError::Reflection("v1".into()));
    };
    let (_, Some(reflection_v1alpha)) =
        reflection(false).map_err(|e| ServeError::Reflection(e.to_string()))?
    else {
        return Err(ServeError::Reflection("v1alpha".into()));
    };

    let drain_timeout = settings.limits.drain_timeout;
    let shutdown_grace = settings.limits.shutdown_grace;
    let state = Arc::new(State::new(settings, Arc::clone(&metrics)));
    let placement = PlacementServiceServer::new(PlacementApi::new(Arc::clone(&state)))
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    let inventory = InventoryServiceServer::new(InventoryApi::new(Arc::clone(&state)))
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);

    let router = builder
        .layer(edge)
        .layer(intake)
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(placement)
        .add_service(inventory);
    let grpc = tokio::spawn(router.serve_with_incoming_shutdown(
        crate::transport::accept::Incoming::new(listener, accept_errors),
        wait_stop(stop_rx.clone()),
    ));
    Ok(Running {
        grpc_addr,
        metrics_addr: metrics_server.as_ref().map(|m| m.addr),
        health,
        drain_timeout,
        shutdown_grace,
        stop,
        grpc,
        metrics: metrics_server.map(|m| m.task),
    })
}
