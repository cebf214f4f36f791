//! Test support (feature `testing`): an in-process server on 127.0.0.1 port 0 with the embedded
//! defaults and dotted-key overrides, for the integration tests of every crate.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{FileConfig, SPEC, Settings};
use crate::metrics::Metrics;
use crate::server::{Running, start};

/// Settings from the embedded defaults with gRPC and metrics on 127.0.0.1 port 0 and the
/// given overrides by dotted key (`("limits.max_nodes", "3")`, `("metrics.enabled",
/// "false")`), as flags would set them. Panics on an invalid configuration.
pub fn settings(overrides: &[(&str, &str)]) -> Settings {
    // No NOT_SERVING grace on shutdown unless a test asks for one.
    let mut flags = vec![
        ("listen", "127.0.0.1:0"),
        ("metrics.listen", "127.0.0.1:0"),
        ("limits.shutdown_grace", "0s"),
    ];
    flags.extend_from_slice(overrides);
    SPEC.load_pairs::<FileConfig>(None, &[], &flags)
        .and_then(|c| c.validate(&BTreeMap::new()))
        .expect("test server configuration")
}

/// Starts a server with [`settings`]; its address is `grpc_addr`, and `shutdown()` stops it.
pub async fn start_server(overrides: &[(&str, &str)]) -> Running {
    start_with(settings(overrides)).await
}

/// Starts a server with these settings.
pub async fn start_with(settings: Settings) -> Running {
    start(settings, Arc::new(Metrics::new()))
        .await
        .expect("test server start")
}

/// The server's gRPC URL (`http://127.0.0.1:PORT`).
pub fn url(running: &Running) -> String {
    format!("http://{}", running.grpc_addr)
}

/// The `PlacementService` of a server with these settings and metrics, in process (no
/// transport: its methods are called directly, as tonic would).
pub fn placement(
    settings: Settings,
    metrics: Arc<Metrics>,
) -> impl gpusched_api::v1::placement_service_server::PlacementService {
    crate::handlers::placement::PlacementApi::new(Arc::new(crate::state::State::new(
        settings, metrics,
    )))
}

/// The `outcome` label the metrics count an answer of this code under (its name in snake
/// case).
pub fn outcome(code: tonic::Code) -> &'static str {
    crate::transport::edge::outcome(code)
}
