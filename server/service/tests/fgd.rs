//! Fragmentation-aware placement over gRPC (`docs/placement-semantics.md` section 12): the
//! mix from the request or the server's `policy.workload_mix`, its validation and limits, the
//! fragmentation in answers, host resources through a batch.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::io::Write as _;

use common::{TestServer, allocate_req, card, node, pod, reasons, used};
use gpusched_api::v1;
use gpusched_service::{FileConfig, SPEC, Settings};

const FGD: [(&str, &str); 2] = [
    ("hami.io/node-scheduler-policy", "fgd"),
    ("hami.io/gpu-scheduler-policy", "fgd"),
];

fn shape(p: f64, cores: u32) -> v1::WorkloadMixShape {
    v1::WorkloadMixShape {
        probability: p,
        gpu_count: 1,
        gpucores_percent: cores,
        gpumem_percent: cores,
        ..Default::default()
    }
}

fn with_mix(mut r: v1::AllocateRequest, shapes: Vec<v1::WorkloadMixShape>) -> v1::AllocateRequest {
    r.options = Some(v1::PlacementOptions {
        workload_mix: Some(v1::WorkloadMix { shapes }),
        ..Default::default()
    });
    r
}

/// Two one-card nodes holding 50 and 60 cores: binpack would take m2 and leave 30 cores that
/// the 40-core shape cannot use (contract 12.7 example 3).
fn sliver_nodes() -> Vec<v1::Node> {
    let one = |name: &str, cores: u32| v1::Node {
        name: name.into(),
        cards: vec![used(
            card(&format!("{name}-0"), 0, 16_384),
            1,
            16_384 * u64::from(cores) / 100,
            cores,
        )],
        ..v1::Node::default()
    };
    vec![one("m1", 50), one("m2", 60)]
}

fn small_pod(annotations: &[(&str, &str)]) -> v1::Workload {
    pod(
        annotations,
        &[&[
            ("nvidia.com/gpu", "1"),
            ("nvidia.com/gpucores", "10"),
            ("nvidia.com/gpumem-percentage", "10"),
        ]],
    )
}

/// Settings from a TOML file on top of the embedded defaults (ports 0).
fn settings_from(toml: &str) -> Result<Settings, gpusched_service::ConfigError> {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    f.write_all(toml.as_bytes()).unwrap();
    let flags = [
        ("listen", "127.0.0.1:0"),
        ("metrics.listen", "127.0.0.1:0"),
        ("limits.shutdown_grace", "0s"),
    ];
    SPEC.load_pairs::<FileConfig>(Some(f.path()), &[], &flags)
        .and_then(|c| c.validate(&BTreeMap::new()))
}

#[tokio::test]
async fn the_request_mix_decides_and_the_answer_reports_fragmentation() {
    let s = TestServer::start(&[]).await;
    let mut c = s.placement();
    let r = with_mix(
        allocate_req(sliver_nodes(), small_pod(&FGD)),
        vec![shape(1.0, 40)],
    );
    let a = c.allocate(r).await.unwrap().into_inner().result.unwrap();
    assert_eq!(a.node_name, "m1");
    let f = a.node_score.unwrap().fragmentation.unwrap();
    assert_eq!((f.before, f.after, f.delta), (0.0, 0.0, 0.0));
    let eff = a.effective_policy.unwrap();
    assert_eq!(eff.node_policy, v1::NodePolicy::Fgd as i32);
    assert_eq!(eff.gpu_policy, vec![v1::GpuPolicy::Fgd as i32]);
    // The same nodes under binpack: m2, and no fragmentation in the score.
    let r = with_mix(
        allocate_req(sliver_nodes(), small_pod(&[])),
        vec![shape(1.0, 40)],
    );
    let a = c.allocate(r).await.unwrap().into_inner().result.unwrap();
    assert_eq!(a.node_name, "m2");
    assert!(a.node_score.unwrap().fragmentation.is_none());
    // Score lists every feasible node's fragmentation.
    let mut r = v1::ScoreRequest {
        nodes: sliver_nodes(),
        workload: Some(small_pod(&FGD)),
        options: with_mix(allocate_req(vec![], small_pod(&[])), vec![shape(1.0, 40)]).options,
        ..Default::default()
    };
    r.options.as_mut().unwrap().explain = true;
    let scores = c.score(r).await.unwrap().into_inner();
    let after: Vec<(String, f64)> = scores
        .scores
        .iter()
        .map(|s| (s.node_name.clone(), s.fragmentation.unwrap().after))
        .collect();
    assert_eq!(after, vec![("m1".into(), 0.0), ("m2".into(), 30.0)]);
    let ex = scores.explanations[1].fragmentation.clone().unwrap();
    assert_eq!(ex.after.unwrap().shapes[0].fragmented_cores, 30);
}

#[tokio::test]
async fn fgd_without_a_mix_is_invalid_argument_naming_the_option() {
    let s = TestServer::start(&[]).await;
    let mut c = s.placement();
    let e = c
        .allocate(allocate_req(sliver_nodes(), small_pod(&FGD)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        reasons(&e),
        vec![("options.workload_mix".into(), "MISSING_FIELD".into())]
    );
    // In a batch, each fgd workload says so; a binpack workload needs none.
    let r = v1::AllocateBatchRequest {
        nodes: sliver_nodes(),
        workloads: vec![small_pod(&[]), small_pod(&FGD)],
        ..Default::default()
    };
    let e = c.allocate_batch(r).await.unwrap_err();
    assert_eq!(
        reasons(&e),
        vec![("options.workload_mix".into(), "MISSING_FIELD".into())]
    );
}

#[tokio::test]
async fn the_shape_limit_is_configured() {
    let s = TestServer::start(&[("limits.max_mix_shapes", "2")]).await;
    let mut c = s.placement();
    let r = with_mix(
        allocate_req(sliver_nodes(), small_pod(&FGD)),
        vec![shape(0.5, 40), shape(0.25, 10), shape(0.25, 20)],
    );
    let e = c.allocate(r).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        reasons(&e),
        vec![(
            "options.workload_mix.shapes".into(),
            "LIMIT_EXCEEDED".into()
        )]
    );
}

#[tokio::test]
async fn the_configured_mix_is_the_default() {
    let settings = settings_from(
        "[policy]\nnode_scheduler_policy = \"fgd\"\ngpu_scheduler_policy = \"fgd\"\n\
         [[policy.workload_mix]]\nprobability = 1.0\ngpu_count = 1\ngpucores_percent = 40\n\
         gpumem_percent = 40\n",
    )
    .unwrap();
    assert!(settings.mix.default.is_some());
    let s = TestServer::start_with(settings).await;
    let mut c = s.placement();
    let a = c
        .allocate(allocate_req(sliver_nodes(), small_pod(&[])))
        .await
        .unwrap()
        .into_inner()
        .result
        .unwrap();
    assert_eq!(a.node_name, "m1", "fgd by default with the configured mix");
}

#[test]
fn a_bad_configured_mix_stops_the_server_naming_the_key() {
    let bad = |toml: &str| settings_from(toml).unwrap_err().to_string();
    let e = bad(
        "[[policy.workload_mix]]\nprobability = 0.5\ngpu_count = 1\n\
         [[policy.workload_mix]]\nprobability = 0.6\ngpu_count = 1\n",
    );
    assert!(
        e.contains("policy.workload_mix") && e.contains("1.1"),
        "{e}"
    );
    let e = bad(
        "[[policy.workload_mix]]\nprobability = 1.0\ngpu_count = 1\n\
         [[policy.workload_mix]]\nprobability = -0.0\ngpu_count = 0\n",
    );
    assert!(e.contains("policy.workload_mix[1].gpu_count"), "{e}");
    let e = bad("[limits]\nmax_mix_shapes = 65\n");
    assert!(e.contains("limits.max_mix_shapes"), "{e}");
}

#[tokio::test]
async fn a_batch_books_host_resources_on_its_nodes() {
    let s = TestServer::start(&[]).await;
    let mut c = s.placement();
    let mut n = node("h1", 2, 16_384);
    n.host = Some(v1::HostResources {
        free_cpu_milli: 16_000,
        free_mem_mib: 65_536,
    });
    let mut w = small_pod(&FGD);
    if let Some(v1::workload::Spec::Kubernetes(k)) = w.spec.as_mut() {
        k.containers[0].requests = [("cpu", "2"), ("memory", "4Gi")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
    }
    let r = v1::AllocateBatchRequest {
        nodes: vec![n],
        workloads: vec![w.clone(), w],
        options: with_mix(allocate_req(vec![], small_pod(&[])), vec![shape(1.0, 40)]).options,
        return_updated_nodes: true,
        ..Default::default()
    };
    let out = c.allocate_batch(r).await.unwrap().into_inner();
    assert!(out.all_placed);
    let h = out.updated_nodes[0].host.unwrap();
    assert_eq!((h.free_cpu_milli, h.free_mem_mib), (12_000, 57_344));
}
