//! The bodies of gpusched's fuzz targets (`fuzz_targets/*.rs` call them; see README.md). Each
//! takes arbitrary bytes and must never panic, hang or allocate without bound; where a
//! property holds for every input (a codec's round trip, an error answer's size), it is
//! asserted.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use gpusched_api::v1;
use gpusched_engine::{CardMode, GpuPolicy, NodePolicy, ScoringWeights, split_list};
use gpusched_service::pipeline::{self, Cancel, Record, State};
use gpusched_service::{FileConfig, MAX_MESSAGE, Metrics, SPEC, ServiceError, Settings};
use prost::Message as _;

/// The service's state for every input: the embedded defaults with limits small enough for
/// one input to stay fast (the limits themselves are part of what is fuzzed). Built once per
/// process; read-only but for the node cache, which is bounded.
fn state() -> &'static State {
    static STATE: OnceLock<State> = OnceLock::new();
    STATE.get_or_init(|| {
        let settings: Settings = SPEC
            .load_pairs::<FileConfig>(
                None,
                &[],
                &[
                    ("limits.max_nodes", "64"),
                    ("limits.max_cards", "1024"),
                    ("limits.max_workloads", "16"),
                    ("limits.max_message_bytes", "1048576"),
                    ("node_cache.max_entries", "1024"),
                    ("node_cache.max_bytes", "16777216"),
                ],
            )
            .and_then(|c| c.validate(&BTreeMap::new()))
            .expect("fuzz settings");
        State::new(settings, Arc::new(Metrics::new()))
    })
}

/// An error answer stays bounded whatever the input: message, details and headers.
fn check_error(e: ServiceError) {
    let status: tonic::Status = e.into();
    assert!(
        status.message().len() <= MAX_MESSAGE,
        "{}",
        status.message()
    );
    let mut headers = http::HeaderMap::new();
    status.add_header(&mut headers).unwrap();
    let bytes: usize = headers
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum();
    assert!(bytes < 8 * 1024, "{bytes} bytes of trailers");
}

fn check<T: prost::Message>(r: Result<T, ServiceError>) {
    match r {
        Ok(m) => assert!(m.encoded_len() <= state().settings.limits.max_message_bytes),
        Err(e) => check_error(e),
    }
}

/// The HAMi annotation codecs (`gpusched-hami`, MIG reservations and gpusched's MIG layouts
/// included): any text decodes or fails cleanly, and what decodes re-encodes to a value that
/// decodes to the same thing; HAMi's MIG profiles derive a layout or fail cleanly.
pub fn hami_codecs(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(cards) = gpusched_hami::decode_register(text) {
        let again = gpusched_hami::encode_register(&cards);
        assert_eq!(gpusched_hami::decode_register(&again).unwrap(), cards);
    }
    if let Ok(pairs) = gpusched_hami::decode_pair_scores(text) {
        let again = gpusched_hami::encode_pair_scores(&pairs);
        assert_eq!(gpusched_hami::decode_pair_scores(&again).unwrap(), pairs);
    }
    if let Ok(bookings) = gpusched_hami::decode_pod_devices(text) {
        let again = gpusched_hami::encode_pod_devices(&bookings);
        assert_eq!(gpusched_hami::decode_pod_devices(&again).unwrap(), bookings);
    }
    if let Ok(reservations) = gpusched_hami::decode_mig_allocations(text) {
        let again = gpusched_hami::encode_mig_allocations(&reservations);
        assert_eq!(
            gpusched_hami::decode_mig_allocations(&again).unwrap(),
            reservations
        );
    }
    if let Ok(layouts) = gpusched_hami::decode_node_mig_layouts(text) {
        let again = gpusched_hami::encode_node_mig_layouts(&layouts);
        assert_eq!(
            gpusched_hami::decode_node_mig_layouts(&again).unwrap(),
            layouts
        );
    }
    if let Ok(cards) = gpusched_hami::decode_registered(text) {
        for c in &cards {
            let _ = gpusched_hami::layout_from_profiles(&c.mig_profiles);
        }
    }
}

/// Workload annotations and resource limits (`hami.io/...`, `nvidia.com/...`): the input is
/// split at 0xff bytes into the values of the ten annotations and four resources of the
/// configured names; each value also goes through the policy, weight and list parsers
/// directly (a parsed value prints back to itself); then the workload is converted as the
/// service does and, when valid, placed on a small node.
pub fn annotations(data: &[u8]) {
    let values: Vec<String> = data
        .split(|b| *b == 0xff)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    for v in &values {
        if let Ok(p) = v.parse::<GpuPolicy>() {
            assert_eq!(p.to_string().parse::<GpuPolicy>().unwrap(), p, "{v:?}");
        }
        if let Ok(p) = v.parse::<NodePolicy>() {
            assert_eq!(p.to_string().parse::<NodePolicy>().unwrap(), p, "{v:?}");
        }
        let _ = v.parse::<ScoringWeights>();
        let _ = v.parse::<CardMode>();
        let _ = split_list(v);
    }
    let st = state();
    let a = &st.settings.names.annotations;
    let r = &st.settings.names.resources;
    let annotation_keys = [
        &a.node_scheduler_policy,
        &a.gpu_scheduler_policy,
        &a.device_scoring_weights,
        &a.use_gpu_type,
        &a.nouse_gpu_type,
        &a.use_gpu_uuid,
        &a.nouse_gpu_uuid,
        &a.numa_bind,
        &a.vgpu_mode,
        &a.device_cordon,
    ];
    let resource_keys = [&r.count, &r.memory, &r.memory_percentage, &r.cores];
    let mut it = values.into_iter();
    let annotations: BTreeMap<String, String> = annotation_keys
        .iter()
        .zip(it.by_ref())
        .map(|(k, v)| ((*k).clone(), v))
        .collect();
    let limits: BTreeMap<String, String> = resource_keys
        .iter()
        .zip(it.by_ref())
        .map(|(k, v)| ((*k).clone(), v))
        .collect();
    let workload = v1::Workload {
        namespace: "default".into(),
        name: "fuzz".into(),
        uid: "uid".into(),
        spec: Some(v1::workload::Spec::Kubernetes(v1::KubernetesWorkloadSpec {
            annotations,
            init_containers: vec![],
            containers: vec![v1::KubernetesContainer {
                name: "c".into(),
                limits,
                requests: BTreeMap::new(),
            }],
        })),
        quota: None,
    };
    let card = |i: u32| v1::Card {
        id: format!("GPU-{i}"),
        index: i,
        r#type: "NVIDIA-A100-SXM4-40GB".into(),
        slots: 10,
        total_mem_mib: 40_000,
        total_cores: 100,
        numa: i / 2,
        health: v1::CardHealth::Healthy as i32,
        mode: v1::CardMode::HamiCore as i32,
        usage: None,
        mig: None,
    };
    let req = v1::AllocateRequest {
        nodes: vec![v1::Node {
            name: "n".into(),
            cards: (0..4).map(card).collect(),
            ..v1::Node::default()
        }],
        workload: Some(workload),
        ..Default::default()
    };
    check(pipeline::allocate(
        st,
        req,
        &mut Record::default(),
        &Cancel::never(),
    ));
}

/// Protobuf requests: the first byte picks the RPC, the rest is decoded as its request and
/// decided exactly as the service does (conversion, limits, engine, answer); the answer fits
/// the message limit and an error answer stays bounded.
pub fn proto_requests(data: &[u8]) {
    let Some((&rpc, bytes)) = data.split_first() else {
        return;
    };
    let st = state();
    let mut r = Record::default();
    let c = &Cancel::never();
    match rpc % 6 {
        0 => {
            if let Ok(m) = v1::FilterRequest::decode(bytes) {
                check(pipeline::filter(st, m, &mut r, c));
            }
        }
        1 => {
            if let Ok(m) = v1::ScoreRequest::decode(bytes) {
                check(pipeline::score(st, m, &mut r, c));
            }
        }
        2 => {
            if let Ok(m) = v1::AllocateRequest::decode(bytes) {
                check(pipeline::allocate(st, m, &mut r, c));
            }
        }
        3 => {
            if let Ok(m) = v1::AllocateBatchRequest::decode(bytes) {
                check(pipeline::allocate_batch(st, m, &mut r, c));
            }
        }
        4 => {
            if let Ok(m) = v1::ValidateWorkloadRequest::decode(bytes) {
                check(pipeline::validate_workload(st, m, &mut r, c));
            }
        }
        _ => {
            if let Ok(m) = v1::NormalizeInventoryRequest::decode(bytes) {
                check(pipeline::normalize_inventory(st, m, &mut r, c));
            }
        }
    }
}
