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
    // First call whole (the server's headers not yet seen), the second inline (20
    // inventories) and kept as a node set, then each call names that set and sends only the
    // node whose usage changed: one inventory hit and one new usage part per call.
    assert_eq!(m.inserts[0].get(), 20, "inventories converted once");
    assert_eq!(m.misses[0].get(), 0);
    let sets = &metrics.node_sets;
    assert_eq!(sets.inserts.get(), 1, "one set kept");
    assert_eq!(
        sets.hits.get(),
        8,
        "the eight later calls sent changes only"
    );
    assert_eq!(m.hits[0].get(), 8, "one changed node per call");
    assert!(client.acknowledged_parts() >= 20);
    assert!(client.node_set_base().unwrap().starts_with("sha256/"));
    // Off: whole nodes, nothing cached.
    assert!(!reference.by_reference());
    assert_eq!(reference.acknowledged_parts(), 0);
}

#[tokio::test]
async fn prepared_nodes_go_as_node_set_changes_and_answer_the_same() {
    use gpusched_client::PreparedNode;
    let (server, metrics) = start_at("127.0.0.1:0").await;
    let addr = server.grpc_addr.to_string();
    let client = ClientBuilder::new(&addr).connect().await.unwrap();
    let reference = whole(&addr).await;
    let mut nodes = cluster(20);
    // Prepared once, as a cluster view keeps them; only the node that changed is rebuilt.
    let mut prepared: Vec<Arc<PreparedNode>> = nodes
        .iter()
        .map(|n| Arc::new(PreparedNode::new(n)))
        .collect();
    for _ in 0..10 {
        let want = reference.allocate(nodes.to_vec(), pod()).await.unwrap();
        let req = v1::AllocateRequest {
            workload: Some(pod()),
            ..Default::default()
        };
        let got = client.allocate_prepared(req, &prepared).await.unwrap();
        assert_eq!(got, want);
        book(&mut nodes, &got);
        let i = nodes.iter().position(|n| n.name == got.node_name).unwrap();
        prepared[i] = Arc::new(PreparedNode::new(&nodes[i]));
    }
    // As with whole nodes: the first call whole (converted back from the prepared form), the
    // second kept as a set, the eight later ones changes only.
    assert_eq!(metrics.node_sets.inserts.get(), 1);
    assert_eq!(metrics.node_sets.hits.get(), 8);
    assert_eq!(
        metrics.node_cache.hits[0].get(),
        8,
        "one changed node per call"
    );
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

/// A client that placed `calls` pods on `n` nodes (booking each) against a server that then
/// stopped; a new server is started at the same address. The client still believes the old
/// one's parts and set are held.
async fn restarted(n: usize, calls: usize) -> (Client, Vec<v1::Node>, Running, Arc<Metrics>) {
    let (server, _) = start_at("127.0.0.1:0").await;
    let addr = server.grpc_addr;
    let client = ClientBuilder::new(addr.to_string())
        .connect()
        .await
        .unwrap();
    let mut nodes = cluster(n);
    for _ in 0..calls {
        let r = client.allocate(nodes.to_vec(), pod()).await.unwrap();
        book(&mut nodes, &r);
    }
    assert!(client.acknowledged_parts() >= n);
    server.shutdown().await.unwrap();
    let (server, metrics) = start_at(&addr.to_string()).await;
    (client, nodes, server, metrics)
}

#[tokio::test]
async fn a_server_restart_between_calls_is_transparent() {
    // The first call goes whole (the header not yet seen), the second inline by reference
    // (kept as a set), the third as a change to that set.
    let (client, mut nodes, server, metrics) = restarted(20, 3).await;
    let addr = server.grpc_addr;
    assert!(client.node_set_base().is_some());
    // The client still believes the server holds its set and parts: the new one answers
    // FAILED_PRECONDITION naming the set, the client sends everything by reference (missing
    // again), then inline; the caller sees an answer.
    let reference = whole(&addr.to_string()).await;
    let want = reference.allocate(nodes.to_vec(), pod()).await.unwrap();
    let got = client.allocate(nodes.to_vec(), pod()).await.unwrap();
    assert_eq!(got, want);
    assert_eq!(
        metrics.node_sets.misses.get(),
        1,
        "the lost set was noticed"
    );
    assert!(
        metrics.node_cache.misses[0].get() >= 20,
        "the lost parts were noticed"
    );
    assert_eq!(metrics.node_sets.inserts.get(), 1, "the set was kept again");
    book(&mut nodes, &got);
    let again = client.allocate(nodes.to_vec(), pod()).await.unwrap();
    assert_eq!(
        again,
        reference.allocate(nodes.to_vec(), pod()).await.unwrap()
    );
    assert_eq!(metrics.node_sets.hits.get(), 1, "changes only again");
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
    let mut nodes = cluster(20);
    rounds(&client, &reference, &mut nodes, 30).await;
    // Both replicas were asked and each converted the inventories and kept the set itself.
    for m in [&m1, &m2] {
        assert!(m.node_cache.inserts[0].get() >= 20, "every replica warmed");
        assert!(m.node_sets.inserts.get() >= 1, "every replica kept a set");
    }
    // Changes are answered by whichever replica holds the client's current set (the picker is
    // random: which one, and how often, varies from run to run).
    assert!(
        m1.node_sets.hits.get() + m2.node_sets.hits.get() >= 1,
        "changes were answered"
    );
}

/// A server that predates `node_refs`: it decodes only `nodes` (the references are an unknown
/// field to it) and sets no `gpusched-node-refs` header. Here a front that drops `node_refs`,
/// records whether any came, and asks a real server with whole nodes.
#[derive(Clone)]
struct OldServer {
    behind: Client,
    refs_seen: Arc<std::sync::atomic::AtomicU32>,
}

#[tonic::async_trait]
impl v1::placement_service_server::PlacementService for OldServer {
    async fn filter(
        &self,
        _: tonic::Request<v1::FilterRequest>,
    ) -> Result<tonic::Response<v1::FilterResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("filter"))
    }
    async fn score(
        &self,
        _: tonic::Request<v1::ScoreRequest>,
    ) -> Result<tonic::Response<v1::ScoreResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("score"))
    }
    async fn allocate(
        &self,
        req: tonic::Request<v1::AllocateRequest>,
    ) -> Result<tonic::Response<v1::AllocateResponse>, tonic::Status> {
        let mut req = req.into_inner();
        if !req.node_refs.is_empty() {
            self.refs_seen
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        req.node_refs.clear();
        let result = self
            .behind
            .allocate_request(req)
            .await
            .map_err(|e| tonic::Status::internal(e.to_string()))?;
        Ok(tonic::Response::new(v1::AllocateResponse {
            result: Some(result),
        }))
    }
    async fn allocate_batch(
        &self,
        _: tonic::Request<v1::AllocateBatchRequest>,
    ) -> Result<tonic::Response<v1::AllocateBatchResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("batch"))
    }
    async fn validate_workload(
        &self,
        _: tonic::Request<v1::ValidateWorkloadRequest>,
    ) -> Result<tonic::Response<v1::ValidateWorkloadResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("validate"))
    }
    async fn preempt(
        &self,
        _: tonic::Request<v1::PreemptRequest>,
    ) -> Result<tonic::Response<v1::PreemptResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("preempt"))
    }
}

#[tokio::test]
async fn a_server_without_the_header_is_only_ever_sent_whole_nodes() {
    let (server, _) = start_at("127.0.0.1:0").await;
    let real = server.grpc_addr.to_string();
    let reference = whole(&real).await;
    let old = OldServer {
        behind: whole(&real).await,
        refs_seen: Arc::default(),
    };
    let refs_seen = Arc::clone(&old.refs_seen);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(v1::placement_service_server::PlacementServiceServer::new(
                old,
            ))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let client = ClientBuilder::new(addr.to_string())
        .connect()
        .await
        .unwrap();
    assert!(client.by_reference());
    let mut nodes = cluster(20);
    rounds(&client, &reference, &mut nodes, 5).await;
    assert_eq!(refs_seen.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert!(!client.server_reads_refs());
    assert_eq!(client.acknowledged_parts(), 0);
    // The real server sets the header: a client of it switches after its first answer.
    let direct = ClientBuilder::new(&real).connect().await.unwrap();
    assert!(!direct.server_reads_refs());
    direct.allocate(nodes.to_vec(), pod()).await.unwrap();
    assert!(direct.server_reads_refs());
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_repeated_node_name_is_reported_even_against_a_kept_set() {
    let (server, _) = start_at("127.0.0.1:0").await;
    let addr = server.grpc_addr.to_string();
    let client = ClientBuilder::new(&addr).connect().await.unwrap();
    let reference = whole(&addr).await;
    let mut nodes = cluster(20);
    rounds(&client, &reference, &mut nodes, 3).await;
    assert!(client.node_set_base().is_some());
    // An unchanged node listed twice would be an empty change: it must go in full and fail.
    let mut twice = nodes.clone();
    twice.push(nodes[4].clone());
    let want = reference.allocate(twice.clone(), pod()).await.unwrap_err();
    let got = client.allocate(twice, pod()).await.unwrap_err();
    let fields = |e: &gpusched_client::Error| match e {
        gpusched_client::Error::Api(a) => a
            .field_violations
            .iter()
            .map(|v| v.field.clone())
            .collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(fields(&got), fields(&want));
    assert_eq!(fields(&got), vec!["nodes[20].name".to_owned()]);
}

#[tokio::test]
async fn a_truncated_missing_list_makes_the_client_send_everything_inline_once() {
    let (client, nodes, server, metrics) = restarted(60, 2).await;
    let addr = server.grpc_addr;
    // The new replica holds nothing: the full call by digest misses 60+ parts, of which the
    // answer lists at most 20 (plus a MORE entry); the client then sends every part inline at
    // once instead of paging through the list (which would miss the rest again and again).
    let reference = whole(&addr.to_string()).await;
    let want = reference.allocate(nodes.to_vec(), pod()).await.unwrap();
    let got = client.allocate(nodes.to_vec(), pod()).await.unwrap();
    assert_eq!(got, want);
    let misses = metrics.node_cache.misses[0].get();
    assert_eq!(misses, 60, "each inventory missed once, not once per page");
    server.shutdown().await.unwrap();
}
