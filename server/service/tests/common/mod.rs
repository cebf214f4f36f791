//! An in-process server on 127.0.0.1 port 0, and builders for requests.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeMap;

use gpusched_api::v1;
use gpusched_api::v1::inventory_service_client::InventoryServiceClient;
use gpusched_api::v1::placement_service_client::PlacementServiceClient;
use gpusched_service::{Running, Settings};

pub mod raw;
pub mod refs;
use tonic::transport::Channel;

/// Settings from the embedded defaults, ports 0, with dotted-key overrides
/// (`("limits.max_nodes", "3")`).
pub fn settings(overrides: &[(&str, &str)]) -> Settings {
    gpusched_service::testing::settings(overrides)
}

pub struct TestServer {
    pub running: Running,
    pub channel: Channel,
}

impl TestServer {
    pub async fn start(overrides: &[(&str, &str)]) -> TestServer {
        Self::start_with(settings(overrides)).await
    }

    pub async fn start_with(settings: Settings) -> TestServer {
        let running = gpusched_service::testing::start_with(settings).await;
        let channel = Channel::from_shared(format!("http://{}", running.grpc_addr))
            .unwrap()
            .connect()
            .await
            .unwrap();
        TestServer { running, channel }
    }

    pub fn placement(&self) -> PlacementServiceClient<Channel> {
        PlacementServiceClient::new(self.channel.clone())
            .max_decoding_message_size(256 << 20)
            .max_encoding_message_size(256 << 20)
    }

    pub fn inventory(&self) -> InventoryServiceClient<Channel> {
        InventoryServiceClient::new(self.channel.clone())
    }
}

pub fn card(id: &str, index: u32, mem: u64) -> v1::Card {
    v1::Card {
        mig: None,
        id: id.into(),
        index,
        r#type: "NVIDIA-A100-SXM4-40GB".into(),
        slots: 10,
        total_mem_mib: mem,
        total_cores: 100,
        numa: 0,
        health: v1::CardHealth::Healthy as i32,
        mode: v1::CardMode::HamiCore as i32,
        usage: None,
    }
}

pub fn used(mut c: v1::Card, slots: u32, mem: u64, cores: u32) -> v1::Card {
    c.usage = Some(v1::CardUsage {
        used_slots: slots,
        used_mem_mib: mem,
        used_cores: cores,
    });
    c
}

pub fn node(name: &str, n: u32, mem: u64) -> v1::Node {
    v1::Node {
        name: name.into(),
        cards: (0..n)
            .map(|i| card(&format!("{name}-gpu{i}"), i, mem))
            .collect(),
        ..v1::Node::default()
    }
}

pub fn node_with(name: &str, cards: Vec<v1::Card>) -> v1::Node {
    v1::Node {
        name: name.into(),
        cards,
        ..v1::Node::default()
    }
}

/// A Kubernetes-form workload: annotations and one container's limits per entry.
pub fn pod(annotations: &[(&str, &str)], containers: &[&[(&str, &str)]]) -> v1::Workload {
    let map = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    v1::Workload {
        quota: None,
        namespace: "default".into(),
        name: "pod".into(),
        uid: "uid-1".into(),
        spec: Some(v1::workload::Spec::Kubernetes(v1::KubernetesWorkloadSpec {
            annotations: map(annotations),
            init_containers: vec![],
            containers: containers
                .iter()
                .enumerate()
                .map(|(i, c)| v1::KubernetesContainer {
                    name: format!("c{i}"),
                    limits: map(c),
                    requests: BTreeMap::new(),
                })
                .collect(),
        })),
    }
}

pub fn allocate_req(nodes: Vec<v1::Node>, w: v1::Workload) -> v1::AllocateRequest {
    v1::AllocateRequest {
        node_set: None,
        nodes,
        workload: Some(w),
        options: None,
        restrict_to_node_names: vec![],
        node_refs: Vec::new(),
    }
}

/// The BadRequest field violations of a status as (field, reason).
pub fn reasons(s: &tonic::Status) -> Vec<(String, String)> {
    use tonic_types::StatusExt;
    s.get_error_details()
        .bad_request()
        .map(|b| {
            b.field_violations
                .iter()
                .map(|v| (v.field.clone(), v.reason.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The google.rpc.ErrorInfo reason of a status (checking its domain), or "" without one.
pub fn error_info_reason(s: &tonic::Status) -> String {
    use tonic_types::StatusExt;
    s.get_error_details()
        .error_info()
        .map(|i| {
            assert_eq!(i.domain, "gpusched.io");
            i.reason.clone()
        })
        .unwrap_or_default()
}

/// The BadRequest field violations of a status.
pub fn violations(s: &tonic::Status) -> Vec<(String, String)> {
    use tonic_types::StatusExt;
    s.get_error_details()
        .bad_request()
        .map(|b| {
            b.field_violations
                .iter()
                .map(|v| (v.field.clone(), v.description.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The first line a `gpusched-server` child (stdout piped) prints:
/// `gpusched-server listening grpc=ADDR metrics=ADDR`.
pub fn listening_line(child: &mut std::process::Child) -> String {
    use std::io::{BufRead as _, BufReader};
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout piped"))
        .read_line(&mut line)
        .unwrap();
    line
}

/// The address after `key=` (`grpc` or `metrics`) in [`listening_line`]'s line.
pub fn listening_on(line: &str, key: &str) -> String {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
        .to_owned()
}
