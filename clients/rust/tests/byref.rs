//! The client's automatic nodes-by-reference mode against live servers: two clients sharing a
//! server, a server restart between calls, replicas behind one channel, the switch to turn it
//! off.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use gpusched_client::{Client, ClientBuilder, PodBuilder, node, v1};
use gpusched_service::{Metrics, Running};

async fn start_at(listen: &str) -> (Running, Arc<Metrics>) {
    let settings =
        gpusched_service::testing::settings(&[("listen", listen), ("metrics.enabled", "false")]);
    let metrics = Arc::new(Metrics::new());
    let running = gpusched_service::start(settings, Arc::clone(&metrics))
        .await
        .unwrap();
    (running, metrics)
}

fn cluster(n: usize) -> Vec<v1::Node> {
    (0..n)
        .map(|i| node(&format!("node-{i:03}"), 4, 40960, "NVIDIA-A100"))
        .collect()
}

fn pod() -> v1::Workload {
    PodBuilder::new("default", "trainer")
        .container(
            "main",
            &[("nvidia.com/gpu", "1"), ("nvidia.com/gpumem", "10000")],
        )
        .build()
}

/// Books the placement on the cluster, as a scheduler's view would.
fn book(nodes: &mut [v1::Node], r: &v1::AllocationResult) {
    let n = nodes.iter_mut().find(|n| n.name == r.node_name).unwrap();
    for a in r.containers.iter().flat_map(|c| &c.cards) {
        let c = n.cards.iter_mut().find(|c| c.id == a.card_id).unwrap();
        let u = c.usage.get_or_insert_with(Default::default);
        u.used_slots += 1;
        u.used_mem_mib += a.mem_mib;
        u.used_cores += a.cores_percent;
    }
}

async fn whole(addr: &str) -> Client {
    ClientBuilder::new(addr)
        .by_reference(false)
        .connect()
        .await
        .unwrap()
}

/// Places `rounds` pods one after another with `client`, checking each answer against a
/// whole-node client, booking each placement.
async fn rounds(client: &Client, reference: &Client, nodes: &mut [v1::Node], rounds: usize) {
    for _ in 0..rounds {
        let want = reference.allocate(nodes.to_vec(), pod()).await.unwrap();
        let got = client.allocate(nodes.to_vec(), pod()).await.unwrap();
        assert_eq!(got, want);
        assert!(got.placed);
        book(nodes, &got);
    }
}

#[tokio::test]
async fn sends_references_after_the_first_call_and_answers_the_same() {
    let (server, metrics) = start_at("127.0.0.1:0").await;
    let addr = server.grpc_addr.to_string();
    let client = ClientBuilder::new(&addr).connect().await.unwrap();
    assert!(client.by_reference());
    let reference = whole(&addr).await;
    let mut nodes = cluster(20);
    rounds(&client, &reference, &mut nodes, 10).await;
    let m = &metrics.node_cache;
    // First call inline (20 inventories), then one usage part per placement: by reference.
    assert_eq!(m.inserts[0].get(), 20, "inventories converted once");
    assert!(
        m.hits[0].get() >= 9 * 20,
        "{} inventory hits",
        m.hits[0].get()
    );
    assert_eq!(m.misses[0].get(), 0);
    assert!(client.acknowledged_parts() >= 20);
    // Off: whole nodes, nothing cached.
    assert!(!reference.by_reference());
    assert_eq!(reference.acknowledged_parts(), 0);
}

#[tokio::test]
async fn two_clients_share_one_server() {
    let (server, metrics) = start_at("127.0.0.1:0").await;
    let addr = server.grpc_addr.to_string();
    let a = ClientBuilder::new(&addr).connect().await.unwrap();
    let b = ClientBuilder::new(&addr).connect().await.unwrap();
    let reference = whole(&addr).await;
    let mut nodes = cluster(10);
    rounds(&a, &reference, &mut nodes, 3).await;
    // b has acknowledged nothing: it sends inline once (the server already holds the parts),
    // then by reference; both keep answering the same.
    rounds(&b, &reference, &mut nodes, 3).await;
    rounds(&a, &reference, &mut nodes, 3).await;
    assert_eq!(metrics.node_cache.misses[0].get(), 0);
}

#[tokio::test]
async fn a_server_restart_between_calls_is_transparent() {
    let (server, _) = start_at("127.0.0.1:0").await;
    let addr = server.grpc_addr;
    let client = ClientBuilder::new(addr.to_string())
        .connect()
        .await
        .unwrap();
    let mut nodes = cluster(8);
    let first = client.allocate(nodes.to_vec(), pod()).await.unwrap();
    book(&mut nodes, &first);
    server.shutdown().await.unwrap();
    let (server, metrics) = start_at(&addr.to_string()).await;
    // The client still believes the server holds its parts: the new one answers
    // FAILED_PRECONDITION, the client resends inline, the caller sees an answer.
    let reference = whole(&addr.to_string()).await;
    let want = reference.allocate(nodes.to_vec(), pod()).await.unwrap();
    let got = client.allocate(nodes.to_vec(), pod()).await.unwrap();
    assert_eq!(got, want);
    assert!(
        metrics.node_cache.misses[0].get() >= 8,
        "the restart was noticed"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn replicas_behind_one_channel_each_warm_on_their_own() {
    let (r1, m1) = start_at("127.0.0.1:0").await;
    let (r2, m2) = start_at("127.0.0.1:0").await;
    let endpoints = [r1.grpc_addr, r2.grpc_addr]
        .map(|a| tonic::transport::Endpoint::from_shared(format!("http://{a}")).unwrap());
    let channel = tonic::transport::Channel::balance_list(endpoints.into_iter());
    let client = ClientBuilder::new("unused").with_channel(channel);
    let reference = whole(&r1.grpc_addr.to_string()).await;
    let mut nodes = cluster(12);
    rounds(&client, &reference, &mut nodes, 30).await;
    // Both replicas were asked and each converted the inventories itself.
    for m in [&m1, &m2] {
        assert!(m.node_cache.inserts[0].get() >= 12, "every replica warmed");
    }
}
