//! Admission: invalid annotations and resource values are denied, each naming its key (through
//! kubectl too); a namespace labelled `hami.io/webhook=ignore` is skipped; with the validating
//! webhook configuration deleted the pod is created and stays pending with the key in its
//! condition and event; the configuration is re-applied.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::DeleteParams;

use crate::harness::cluster::H;
use crate::harness::pods::{PodSpec, Shape};

/// A pod the validating webhook denies, and the key its denial must name.
struct Denial {
    name: &'static str,
    key: &'static str,
    annotations: &'static [(&'static str, &'static str)],
    limits: &'static [(&'static str, &'static str)],
}

const DENIALS: [Denial; 3] = [
    Denial {
        name: "bad-numa",
        key: "nvidia.com/numa-bind",
        annotations: &[("nvidia.com/numa-bind", "maybe")],
        limits: &[("nvidia.com/gpu", "1")],
    },
    Denial {
        name: "bad-policy",
        key: "hami.io/gpu-scheduler-policy",
        annotations: &[("hami.io/gpu-scheduler-policy", "Spread")],
        limits: &[("nvidia.com/gpu", "1")],
    },
    Denial {
        name: "bad-pct",
        key: "nvidia.com/gpumem-percentage",
        annotations: &[],
        limits: &[
            ("nvidia.com/gpu", "1"),
            ("nvidia.com/gpumem-percentage", "150"),
        ],
    },
];

pub async fn run(h: &H) {
    let pool = "admission";
    let ns = h.namespace(pool, false).await;
    h.make_node(
        "admission-node1",
        pool,
        Shape {
            cards: 2,
            mem: 16384,
        },
        2,
    )
    .await;
    let bad_weights = |name: &str| {
        PodSpec::new(name, pool)
            .ann("hami.io/device-scoring-weights", "slot=1,core=1")
            .limit("nvidia.com/gpu", "1")
            .build()
    };
    // kubectl shows the webhook's denial naming the key.
    let yaml = serde_json::to_string(&bad_weights("bad-weights")).unwrap();
    let (ok, out) = h
        .kubectl(&["-n", &ns, "create", "-f", "-"], Some(&yaml))
        .await;
    assert!(!ok, "kubectl create of an invalid pod succeeded: {out}");
    assert!(
        out.contains("denied the request") && out.contains("hami.io/device-scoring-weights"),
        "kubectl error does not name the key: {out}"
    );
    h.result(format!(
        "admission: kubectl create (bad weights) -> {}",
        out.trim()
    ));
    // Other keys and resource values.
    for Denial {
        name,
        key,
        annotations,
        limits,
    } in DENIALS
    {
        let mut spec = PodSpec::new(name, pool);
        for &(k, v) in annotations {
            spec = spec.ann(k, v);
        }
        for &(k, v) in limits {
            spec = spec.limit(k, v);
        }
        match h.create(&ns, &spec.build()).await {
            Err(kube::Error::Api(e)) => {
                assert!(
                    e.message.contains(key),
                    "{name}: denial does not name {key}: {}",
                    e.message
                );
            }
            other => panic!("{name}: expected a denial, got {other:?}"),
        }
    }
    h.result("admission: invalid numa-bind, gpu policy and gpumem-percentage denied, each naming its key ✓");
    // Labelled namespaces are skipped: no validation, no schedulerName.
    let ign = h.namespace("admission-ignored", true).await;
    let p = h
        .create(&ign, &bad_weights("skipped"))
        .await
        .expect("ignored namespace is not validated");
    assert_eq!(
        p.spec.unwrap().scheduler_name.as_deref(),
        Some("default-scheduler")
    );
    Api::<Pod>::namespaced(h.client.clone(), &ign)
        .delete(
            "skipped",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();

    // Without the validating webhook, the extender rejects the pod with the same message.
    Api::<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration>::all(
        h.client.clone(),
    )
    .delete("gpusched-kube", &DeleteParams::default())
    .await
    .unwrap();
    let t = Instant::now();
    loop {
        match h.create(&ns, &bad_weights("unvalidated")).await {
            Ok(_) => break,
            Err(_) if t.elapsed() < Duration::from_secs(20) => {
                tokio::time::sleep(Duration::from_millis(200)).await
            }
            Err(e) => {
                panic!("pod still denied 20s after the webhook configuration was removed: {e}")
            }
        }
    }
    let msg = h
        .wait_unschedulable(&ns, "unvalidated", "hami.io/device-scoring-weights")
        .await;
    let t = Instant::now();
    let events = loop {
        let ev = h.events(&ns, "unvalidated").await;
        if ev
            .iter()
            .any(|e| e.contains("hami.io/device-scoring-weights"))
            || t.elapsed() > Duration::from_secs(20)
        {
            break ev;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let ev = events
        .iter()
        .find(|e| e.contains("hami.io/device-scoring-weights"))
        .unwrap_or_else(|| panic!("no event names the key: {events:?}"));
    h.result(format!("webhook removed: pod pending, condition: {msg}"));
    h.result(format!("webhook removed: event {ev}"));
    // Restore the webhook (as deploy/ has it) and wait until it denies again.
    let (ok, out) = h
        .kubectl(
            &["apply", "-f", h.env.webhooks_file.to_str().unwrap()],
            None,
        )
        .await;
    assert!(ok, "re-applying the webhook configuration: {out}");
    let t = Instant::now();
    while h
        .create(
            &ns,
            &bad_weights(&format!("again-{}", t.elapsed().as_millis())),
        )
        .await
        .is_ok()
    {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "webhook not active again"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
