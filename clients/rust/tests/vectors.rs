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
        _ => to_json(
            t,
            &from_json::<v1::NormalizeInventoryResponse>(t, &json).unwrap(),
            false,
        ),
    };
    serde_json::from_str(&text.unwrap()).unwrap()
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
