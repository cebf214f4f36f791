//! `cargo bench -p gpusched-service --bench rpc_path`: where the time of one Allocate goes on
//! the server, without the network: protobuf decode, conversion to engine types, the
//! decision, the response encode (through `gpusched_service::pipeline`, as the handlers).

use std::collections::BTreeMap;
use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use gpusched_api::v1;
use gpusched_engine::{DecideOptions, allocate};
use gpusched_service::pipeline::{self, State};
use gpusched_service::{Metrics, default_settings};
use prost::Message;

// As in the gpusched-server binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn request(nodes: usize) -> v1::AllocateRequest {
    let mut x: u64 = 42;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let nodes = (0..nodes)
        .map(|n| v1::Node {
            name: format!("node-{n:05}"),
            cards: (0..8u32)
                .map(|i| v1::Card {
                    mig: None,
                    id: format!("GPU-{n:05}-{i}-0000-0000-000000000000"),
                    index: i,
                    r#type: "NVIDIA-A100-SXM4-80GB".into(),
                    slots: 10,
                    total_mem_mib: 81920,
                    total_cores: 100,
                    numa: i / 4,
                    health: v1::CardHealth::Healthy as i32,
                    mode: v1::CardMode::HamiCore as i32,
                    usage: Some(v1::CardUsage {
                        used_slots: (next() % 6) as u32,
                        used_mem_mib: next() % 60000,
                        used_cores: (next() % 80) as u32,
                    }),
                })
                .collect(),
            ..v1::Node::default()
        })
        .collect();
    let limits: BTreeMap<String, String> = [
        ("nvidia.com/gpu".to_owned(), "1".to_owned()),
        ("nvidia.com/gpumem".to_owned(), "8192".to_owned()),
    ]
    .into();
    v1::AllocateRequest {
        node_set: None,
        nodes,
        workload: Some(v1::Workload {
            quota: None,
            namespace: "default".into(),
            name: "bench".into(),
            uid: "uid".into(),
            spec: Some(v1::workload::Spec::Kubernetes(v1::KubernetesWorkloadSpec {
                annotations: BTreeMap::new(),
                init_containers: vec![],
                containers: vec![v1::KubernetesContainer {
                    name: "main".into(),
                    limits,
                    requests: BTreeMap::new(),
                }],
            })),
        }),
        options: None,
        restrict_to_node_names: vec![],
        node_refs: Vec::new(),
    }
}

fn bench(c: &mut Criterion) {
    let settings = default_settings().expect("default settings");
    let state = State::new(settings.clone(), std::sync::Arc::new(Metrics::new()));
    let mut g = c.benchmark_group("allocate_rpc_path");
    for n in [100usize, 1000] {
        let req = request(n);
        let bytes = req.encode_to_vec();
        g.bench_with_input(BenchmarkId::new("decode", n), &bytes, |b, bytes| {
            b.iter(|| black_box(v1::AllocateRequest::decode(black_box(bytes.as_slice()))))
        });
        g.bench_with_input(BenchmarkId::new("convert", n), &req, |b, req| {
            b.iter(|| {
                let r = req.clone();
                let s = pipeline::snapshot(&settings, r.nodes);
                let w = r.workload.map(|w| pipeline::workload(&settings, w));
                black_box((s.is_ok(), w.is_some_and(|w| w.is_ok())))
            })
        });
        g.bench_with_input(BenchmarkId::new("clone_only", n), &req, |b, req| {
            b.iter(|| black_box(req.clone()))
        });
        g.bench_with_input(BenchmarkId::new("full", n), &bytes, |b, bytes| {
            b.iter(|| {
                let r = v1::AllocateRequest::decode(bytes.as_slice()).expect("decodes");
                let i = pipeline::inputs(&state, r.nodes, r.node_refs, None, r.workload, None)
                    .expect("valid");
                let a = allocate(i.snapshot(), i.workload(), DecideOptions::default());
                let out = v1::AllocateResponse {
                    result: Some(i.allocation(&a)),
                };
                black_box(out.encode_to_vec())
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
