//! The shared vectors of `proto/testdata/` against a live server (real gRPC on 127.0.0.1).
//! `GPUSCHED_UPDATE_VECTORS=1` rewrites the expected answers (review the diff!).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use gpusched_api::json::{from_json, to_json};
use gpusched_client::{Client, ClientBuilder, Error, v1};
use serde_json::Value;

async fn server() -> (gpusched_service::Running, Client) {
    let running = gpusched_service::testing::start_server(&[("metrics.enabled", "false")]).await;
    let client = ClientBuilder::new(format!("http://{}", running.grpc_addr))
        .connect()
        .await
        .unwrap();
    (running, client)
}

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../proto/testdata")
}

/// Calls `method` with the request JSON; returns the response JSON or the error JSON.
async fn call(client: &Client, method: &str, request: &Value) -> Result<Value, Value> {
    let req = request.to_string();
    let parse = |v: String| serde_json::from_str::<Value>(&v).unwrap();
    let out: Result<String, Error> = match method {
        "/gpusched.v1.PlacementService/Filter" => client
            .filter_request(from_json("gpusched.v1.FilterRequest", &req).unwrap())
            .await
            .map(|r| to_json("gpusched.v1.FilterResponse", &r, false).unwrap()),
        "/gpusched.v1.PlacementService/Score" => client
            .score_request(from_json("gpusched.v1.ScoreRequest", &req).unwrap())
            .await
            .map(|r| to_json("gpusched.v1.ScoreResponse", &r, false).unwrap()),
        "/gpusched.v1.PlacementService/Allocate" => client
            .allocate_request(from_json("gpusched.v1.AllocateRequest", &req).unwrap())
            .await
            .map(|r| {
                to_json(
                    "gpusched.v1.AllocateResponse",
                    &v1::AllocateResponse { result: Some(r) },
                    false,
                )
                .unwrap()
            }),
        "/gpusched.v1.PlacementService/AllocateBatch" => client
            .allocate_batch(from_json("gpusched.v1.AllocateBatchRequest", &req).unwrap())
            .await
            .map(|r| to_json("gpusched.v1.AllocateBatchResponse", &r, false).unwrap()),
        "/gpusched.v1.PlacementService/ValidateWorkload" => {
            let r: v1::ValidateWorkloadRequest =
                from_json("gpusched.v1.ValidateWorkloadRequest", &req).unwrap();
            client
                .validate_workload(r.workload.unwrap())
                .await
                .map(|r| to_json("gpusched.v1.ValidateWorkloadResponse", &r, false).unwrap())
        }
        "/gpusched.v1.PlacementService/Preempt" => client
            .preempt_request(from_json("gpusched.v1.PreemptRequest", &req).unwrap())
            .await
            .map(|r| to_json("gpusched.v1.PreemptResponse", &r, false).unwrap()),
        "/gpusched.v1.InventoryService/NormalizeInventory" => client
            .normalize_inventory(from_json("gpusched.v1.NormalizeInventoryRequest", &req).unwrap())
            .await
            .map(|r| to_json("gpusched.v1.NormalizeInventoryResponse", &r, false).unwrap()),
        other => panic!("unknown method {other}"),
    };
    match out {
        Ok(json) => Ok(parse(json)),
        Err(Error::Api(e)) => {
            let code = format!("{:?}", e.code);
            // tonic's Debug names are CamelCase; the vectors use the canonical SNAKE_CASE.
            let mut snake = String::new();
            for (i, ch) in code.chars().enumerate() {
                if ch.is_uppercase() && i > 0 {
                    snake.push('_');
                }
                snake.push(ch.to_ascii_uppercase());
            }
            let mut error = serde_json::json!({
                "code": snake,
                "fieldViolations": e.field_violations.iter().map(|v| serde_json::json!({"field": v.field, "description": v.description, "reason": v.reason})).collect::<Vec<_>>(),
            });
            if let Some(info) = &e.error_info {
                error["errorInfo"] = serde_json::json!({
                    "reason": info.reason,
                    "domain": info.domain,
                    "metadata": info.metadata,
                });
            }
            if !e.missing_digests.is_empty() {
                let mut m = e.missing_digests.clone();
                m.sort();
                error["missingDigests"] = serde_json::json!(m);
            }
            Err(error)
        }
        Err(e) => panic!("{method}: {e}"),
    }
}

fn response_type(method: &str) -> &'static str {
    match method.rsplit('/').next().unwrap_or("") {
        "Filter" => "gpusched.v1.FilterResponse",
        "Score" => "gpusched.v1.ScoreResponse",
        "Allocate" => "gpusched.v1.AllocateResponse",
        "AllocateBatch" => "gpusched.v1.AllocateBatchResponse",
        "ValidateWorkload" => "gpusched.v1.ValidateWorkloadResponse",
        "Preempt" => "gpusched.v1.PreemptResponse",
        _ => "gpusched.v1.NormalizeInventoryResponse",
    }
}

/// Canonical form of a response JSON (parse into the message and print again).
fn canonical(method: &str, v: &Value) -> Value {
    let t = response_type(method);
    let json = v.to_string();
    let text = match t {
        "gpusched.v1.FilterResponse" => to_json(
            t,
            &from_json::<v1::FilterResponse>(t, &json).unwrap(),
            false,
        ),
        "gpusched.v1.ScoreResponse" => {
            to_json(t, &from_json::<v1::ScoreResponse>(t, &json).unwrap(), false)
        }
        "gpusched.v1.AllocateResponse" => to_json(
            t,
            &from_json::<v1::AllocateResponse>(t, &json).unwrap(),
            false,
        ),
        "gpusched.v1.AllocateBatchResponse" => to_json(
            t,
            &from_json::<v1::AllocateBatchResponse>(t, &json).unwrap(),
            false,
        ),
        "gpusched.v1.ValidateWorkloadResponse" => to_json(
            t,
            &from_json::<v1::ValidateWorkloadResponse>(t, &json).unwrap(),
            false,
        ),
        "gpusched.v1.PreemptResponse" => to_json(
            t,
            &from_json::<v1::PreemptResponse>(t, &json).unwrap(),
            false,
        ),
        _ => to_json(
            t,
            &from_json::<v1::NormalizeInventoryResponse>(t, &json).unwrap(),
            false,
        ),
    };
    serde_json::from_str(&text.unwrap()).unwrap()
}

/// The by-reference exchange (`proto/testdata/exchanges/by-reference.json`): its requests, in
/// order (only used to regenerate the file).
fn by_reference_requests() -> Vec<(&'static str, &'static str, v1::AllocateRequest)> {
    use prost::Message;
    use sha2::Digest as _;
    let digest = |b: &[u8]| v1::Digest {
        hash: sha2::Sha256::digest(b).to_vec(),
        size_bytes: b.len() as u64,
        function: 0,
    };
    let card = |id: &str, index: u32| v1::Card {
        mig: None,
        id: id.into(),
        index,
        r#type: "NVIDIA-A100-SXM4-40GB".into(),
        slots: 10,
        total_mem_mib: 40960,
        total_cores: 100,
        numa: 0,
        health: v1::CardHealth::Healthy as i32,
        mode: v1::CardMode::HamiCore as i32,
        usage: None,
    };
    let inv = |name: &str| {
        v1::Node {
            name: name.into(),
            cards: (0..2).map(|i| card(&format!("{name}-gpu{i}"), i)).collect(),
            ..Default::default()
        }
        .encode_to_vec()
    };
    let usage = |name: &str, mem: u64| {
        v1::NodeUsage {
            cards: vec![v1::CardUsageEntry {
                card_id: format!("{name}-gpu0"),
                usage: Some(v1::CardUsage {
                    used_slots: 1,
                    used_mem_mib: mem,
                    used_cores: 10,
                }),
            }],
        }
        .encode_to_vec()
    };
    let (ia, ib) = (inv("exchange-a"), inv("exchange-b"));
    let ub = usage("exchange-b", 20000);
    let ub2 = usage("exchange-b", 30000);
    let r = |inventory: &[u8], usage: &[u8], inline_inv: bool, inline_usage: bool| v1::NodeRef {
        inventory: if inline_inv {
            inventory.to_vec()
        } else {
            vec![]
        },
        inventory_digest: Some(digest(inventory)),
        usage: if inline_usage { usage.to_vec() } else { vec![] },
        usage_digest: (!usage.is_empty()).then(|| digest(usage)),
    };
    let req = |nodes: Vec<v1::Node>, node_refs: Vec<v1::NodeRef>| v1::AllocateRequest {
        node_set: None,
        nodes,
        workload: Some(v1::Workload {
            quota: None,
            namespace: "default".into(),
            name: "exchange".into(),
            uid: String::new(),
            spec: Some(v1::workload::Spec::Typed(v1::TypedWorkloadSpec {
                node_policy: v1::NodePolicy::Binpack as i32,
                containers: vec![v1::ContainerRequest {
                    name: "main".into(),
                    gpu_count: 1,
                    gpumem_mib: 10000,
                    ..Default::default()
                }],
                ..Default::default()
            })),
        }),
        options: None,
        restrict_to_node_names: vec![],
        node_refs,
    };
    let whole = v1::Node {
        name: "exchange-whole".into(),
        cards: vec![card("exchange-whole-gpu0", 0)],
        ..Default::default()
    };
    let mut bad = r(&ia, &[], true, false);
    bad.inventory_digest = Some(digest(&ib));
    // The node set of [a, b with ub2] (types.proto, NodeSetRef): each reference's inventory
    // hash and usage hash (zeros without usage).
    let set = {
        let mut h = sha2::Sha256::new();
        h.update(sha2::Sha256::digest(&ia));
        h.update([0u8; 32]);
        h.update(sha2::Sha256::digest(&ib));
        h.update(sha2::Sha256::digest(&ub2));
        v1::Digest {
            hash: h.finalize().to_vec(),
            size_bytes: 128,
            function: 0,
        }
    };
    let mut lost = set.clone();
    lost.hash[0] ^= 0xff;
    let with_set = |mut r: v1::AllocateRequest, s: v1::NodeSetRef| {
        r.node_set = Some(s);
        r
    };
    let base = |d: &v1::Digest, removed: &[&str]| v1::NodeSetRef {
        base: Some(d.clone()),
        removed_node_names: removed.iter().map(|s| (*s).to_owned()).collect(),
        keep: false,
    };
    let ub3 = usage("exchange-b", 40000);
    vec![
        (
            "by digest before the server holds the parts: FAILED_PRECONDITION listing every missing digest",
            "/gpusched.v1.PlacementService/Allocate",
            req(
                vec![],
                vec![r(&ia, &[], false, false), r(&ib, &ub, false, false)],
            ),
        ),
        (
            "the parts inline (bytes and digests), mixed with a whole node: answered and cached",
            "/gpusched.v1.PlacementService/Allocate",
            req(
                vec![whole.clone()],
                vec![r(&ia, &[], true, false), r(&ib, &ub, true, true)],
            ),
        ),
        (
            "the same by digest only: the same answer",
            "/gpusched.v1.PlacementService/Allocate",
            req(
                vec![whole.clone()],
                vec![r(&ia, &[], false, false), r(&ib, &ub, false, false)],
            ),
        ),
        (
            "after a bind only the touched node's usage is sent inline",
            "/gpusched.v1.PlacementService/Allocate",
            req(
                vec![whole],
                vec![r(&ia, &[], false, false), r(&ib, &ub2, false, true)],
            ),
        ),
        (
            "a digest that does not match its bytes: INVALID_ARGUMENT",
            "/gpusched.v1.PlacementService/Allocate",
            req(vec![], vec![bad]),
        ),
        (
            "the references by digest, kept as a node set (NodeSetRef.keep)",
            "/gpusched.v1.PlacementService/Allocate",
            with_set(
                req(
                    vec![],
                    vec![r(&ia, &[], false, false), r(&ib, &ub2, false, false)],
                ),
                v1::NodeSetRef {
                    keep: true,
                    ..Default::default()
                },
            ),
        ),
        (
            "a change to the kept set: only the node whose usage changed is sent",
            "/gpusched.v1.PlacementService/Allocate",
            with_set(
                req(vec![], vec![r(&ib, &ub3, false, true)]),
                base(&set, &[]),
            ),
        ),
        (
            "a change removing a node of the kept set",
            "/gpusched.v1.PlacementService/Allocate",
            with_set(req(vec![], vec![]), base(&set, &["exchange-a"])),
        ),
        (
            "a base the server does not hold: FAILED_PRECONDITION naming the set",
            "/gpusched.v1.PlacementService/Allocate",
            with_set(req(vec![], vec![]), base(&lost, &[])),
        ),
    ]
}

fn exchanges() -> PathBuf {
    testdata().join("exchanges")
}

#[tokio::test]
async fn shared_exchanges() {
    let (_running, client) = server().await;
    let path = exchanges().join("by-reference.json");
    if std::env::var("GPUSCHED_UPDATE_VECTORS").is_ok_and(|v| v == "1") {
        let mut steps = Vec::new();
        for (description, method, req) in by_reference_requests() {
            let request: Value =
                serde_json::from_str(&to_json("gpusched.v1.AllocateRequest", &req, false).unwrap())
                    .unwrap();
            let got = call(&client, method, &request).await;
            let mut step = serde_json::json!({
                "description": description,
                "method": method,
                "request": request,
            });
            match got {
                Ok(r) => step["response"] = r,
                Err(e) => step["error"] = e,
            }
            steps.push(step);
        }
        let file = serde_json::json!({
            "description": "Nodes by reference (NodeRef): a miss, the parts inline, then by digest, then one usage change; then node sets (NodeSetRef): kept, changed, a lost base; replayed in order on one server",
            "steps": steps,
        });
        std::fs::create_dir_all(exchanges()).unwrap();
        std::fs::write(&path, serde_json::to_string_pretty(&file).unwrap() + "\n").unwrap();
        return;
    }
    let file: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for (i, step) in file["steps"].as_array().unwrap().iter().enumerate() {
        let method = step["method"].as_str().unwrap();
        let got = call(&client, method, &step["request"]).await;
        match (got, step.get("response"), step.get("error")) {
            (Ok(r), Some(expected), None) => {
                assert_eq!(
                    canonical(method, &r),
                    canonical(method, expected),
                    "step {i}"
                );
            }
            (Err(e), None, Some(expected)) => assert_eq!(&e, expected, "step {i}"),
            (got, _, _) => panic!("step {i}: unexpected {got:?}"),
        }
    }
}

#[tokio::test]
async fn shared_vectors() {
    let (_running, client) = server().await;
    let update = std::env::var("GPUSCHED_UPDATE_VECTORS").is_ok_and(|v| v == "1");
    let mut files: Vec<PathBuf> = std::fs::read_dir(testdata())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "expected the shared vectors in {}",
        testdata().display()
    );
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let mut vector: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
        let method = vector["method"].as_str().unwrap().to_owned();
        let got = call(&client, &method, &vector["request"]).await;
        if update {
            vector.remove("response");
            vector.remove("error");
            match got {
                Ok(r) => vector.insert("response".into(), r),
                Err(e) => vector.insert("error".into(), e),
            };
            std::fs::write(
                path,
                serde_json::to_string_pretty(&Value::Object(vector)).unwrap() + "\n",
            )
            .unwrap();
            continue;
        }
        match (got, vector.get("response"), vector.get("error")) {
            (Ok(r), Some(expected), None) => {
                assert_eq!(
                    canonical(&method, &r),
                    canonical(&method, expected),
                    "{}",
                    path.display()
                );
            }
            (Err(e), None, Some(expected)) => assert_eq!(&e, expected, "{}", path.display()),
            (got, _, _) => panic!("{}: unexpected {got:?}", path.display()),
        }
    }
}
