//! Fail closed for GPU pods only (issue 12): pods without GPU resources never reach the
//! webhooks (not even while gpusched-kube hangs), pods with GPU resources are not admitted
//! while it hangs and are never bound without a decision; contradictory requests are denied
//! naming the key; a pod with an invalid annotation is marked unschedulable with the reason and
//! parked, not retried after every backoff. A plain kube-scheduler (profile default-scheduler)
//! runs meanwhile, as in a real cluster. Every failure is collected and reported together.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use crate::harness::cluster::H;
use crate::harness::http::metric_sum;
use crate::harness::pods::{PodSpec, Shape, allocated, node_of, unschedulable_message};
use crate::harness::scheduler::PlainScheduler;
use crate::harness::shim::Shim;
use crate::harness::{ALLOCATED, SCHEDULER};

const REVIEWS: &str = "gpusched_kube_admission_reviews_total{";
const FILTERS: &str = r#"gpusched_kube_extender_requests_total{call="filter""#;
const IGNORE: &str = "hami.io/webhook";

fn reason(p: &Pod) -> Option<String> {
    p.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .and_then(|c| c.reason.clone())
}

/// After an admission that should not have happened: whether the pod gets bound without a
/// decision (what fail-open allowed).
async fn admitted(h: &H, ns: &str, name: &str, what: &str, failures: &mut Vec<String>) {
    let bound = h.bound_within(ns, name, Duration::from_secs(10)).await;
    failures.push(match bound {
        Some(p) if allocated(&p).is_none() => format!(
            "{what}: ADMITTED and bound to {:?} WITHOUT a decision (schedulerName {:?})",
            node_of(&p),
            p.spec.and_then(|s| s.scheduler_name)
        ),
        Some(_) => format!("{what}: ADMITTED (bound with a decision)"),
        None => format!("{what}: ADMITTED (not bound within 10s)"),
    });
}

pub async fn run(h: &H, shim: &Shim) {
    let pool = "failclosed";
    let ns = h.namespace(pool, false).await;
    h.make_node(
        "failclosed-node1",
        pool,
        Shape {
            cards: 2,
            mem: 16384,
        },
        2,
    )
    .await;
    let plain = PlainScheduler::start(h, "default-scheduler").await;
    let mut failures: Vec<String> = Vec::new();
    let cpu = |name: &str| PodSpec::new(name, pool).limit("cpu", "100m").build();

    // 1. matchConditions: a pod without GPU resources is not sent to the shim at all.
    let before = metric_sum(shim.ext, REVIEWS).await;
    h.create(&ns, &cpu("cpu-up")).await.unwrap();
    let after = metric_sum(shim.ext, REVIEWS).await;
    if after != before {
        failures.push(format!(
            "a pod without GPU resources reached the webhooks ({} reviews)",
            after - before
        ));
    }
    if h.bound_within(&ns, "cpu-up", Duration::from_secs(30))
        .await
        .is_none()
    {
        failures.push("cpu-up not bound by the default scheduler".into());
    }
    let gpu = PodSpec::new("gpu-up", pool)
        .limit("nvidia.com/gpu", "1")
        .limit("nvidia.com/gpumem", "1000")
        .build();
    h.create(&ns, &gpu).await.unwrap();
    let gpu_reviews = metric_sum(shim.ext, REVIEWS).await - after;
    assert!(
        gpu_reviews >= 2,
        "the GPU pod reached {gpu_reviews} webhooks, not 2"
    );

    // 2. Contradictory requests: a card count of 0 with memory or cores.
    for (name, key, other) in [
        ("zero-mem", "nvidia.com/gpumem", "4096"),
        ("zero-cores", "nvidia.com/gpucores", "30"),
    ] {
        let p = PodSpec::new(name, pool)
            .limit("nvidia.com/gpu", "0")
            .limit(key, other)
            .build();
        match h.create(&ns, &p).await {
            Err(kube::Error::Api(e)) if e.message.contains(key) => {
                h.result(format!(
                    "nvidia.com/gpu: 0 with {key}: denied: {}",
                    e.message
                ));
            }
            Err(e) => failures.push(format!("{name}: denied without naming {key}: {e}")),
            Ok(_) => {
                admitted(
                    h,
                    &ns,
                    name,
                    &format!("nvidia.com/gpu: 0 with {key}"),
                    &mut failures,
                )
                .await
            }
        }
    }

    // 3. gpusched-kube hung (SIGSTOP).
    shim.signal("STOP");
    h.say("gpusched-kube stopped (SIGSTOP)");
    let t = Instant::now();
    let cpu_create = h.create(&ns, &cpu("cpu-hung")).await;
    let cpu_s = t.elapsed().as_secs_f64();
    match cpu_create {
        Ok(_) => {
            if h.bound_within(&ns, "cpu-hung", Duration::from_secs(30))
                .await
                .is_none()
            {
                failures.push("cpu-hung not bound by the default scheduler".into());
            }
        }
        Err(e) => failures.push(format!("a pod without GPU resources was refused: {e}")),
    }
    let t = Instant::now();
    let gpu_hung = PodSpec::new("gpu-hung", pool)
        .limit("nvidia.com/gpu", "1")
        .limit("nvidia.com/gpumem", "1000")
        .build();
    let gpu_create = h.create(&ns, &gpu_hung).await;
    let gpu_s = t.elapsed().as_secs_f64();
    match gpu_create {
        Err(e) => h.result(format!(
            "gpusched-kube hung: a pod without GPU resources created in {cpu_s:.2}s and bound by \
             the default scheduler; a GPU pod refused after {gpu_s:.1}s: {e}"
        )),
        Ok(_) => {
            admitted(
                h,
                &ns,
                "gpu-hung",
                "GPU pod while the shim hangs",
                &mut failures,
            )
            .await
        }
    }
    // Skipping the webhooks (pod label) does not skip the scheduler rule.
    let sneaky = PodSpec::new("gpu-sneaky", pool)
        .label(IGNORE, "ignore")
        .limit("nvidia.com/gpu", "1")
        .build();
    match h.create(&ns, &sneaky).await {
        Err(kube::Error::Api(e)) if e.message.contains("spec.schedulerName") => {
            h.result(format!(
                "GPU pod labelled {IGNORE}=ignore with default-scheduler: denied: {}",
                e.message
            ));
        }
        Err(e) => failures.push(format!(
            "gpu-sneaky: denied without naming spec.schedulerName: {e}"
        )),
        Ok(_) => {
            admitted(
                h,
                &ns,
                "gpu-sneaky",
                "GPU pod labelled ignore with default-scheduler",
                &mut failures,
            )
            .await
        }
    }
    // A GPU pod naming our scheduler itself is admitted and waits for the shim.
    let own = PodSpec::new("gpu-own", pool)
        .label(IGNORE, "ignore")
        .scheduler(SCHEDULER)
        .limit("nvidia.com/gpu", "1")
        .build();
    h.create(&ns, &own).await.unwrap();
    // An invalid annotation the webhook would have denied.
    let bad = PodSpec::new("bad-weights", pool)
        .label(IGNORE, "ignore")
        .scheduler(SCHEDULER)
        .ann("hami.io/device-scoring-weights", "slot=1,core=1")
        .limit("nvidia.com/gpu", "1")
        .build();
    h.create(&ns, &bad).await.unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    if let Some(n) = node_of(&h.pod(&ns, "gpu-own").await) {
        failures.push(format!("gpu-own bound to {n} while gpusched-kube hangs"));
    }
    shim.signal("CONT");
    let back = shim.wait_ready(Duration::from_secs(60)).await;
    h.say(format!(
        "gpusched-kube resumed, ready after {:.1}s",
        back.as_secs_f64()
    ));
    match h
        .bound_within(&ns, "gpu-own", Duration::from_secs(60))
        .await
    {
        Some(p) if allocated(&p).is_some() => h.result(format!(
            "gpu-own (schedulerName {SCHEDULER}, created while the shim hung): pending until it \
             came back, then bound with the decision {:?} ✓",
            p.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ALLOCATED))
        )),
        Some(_) => failures.push("gpu-own bound WITHOUT a decision".into()),
        None => failures.push("gpu-own not bound after the shim came back".into()),
    }

    // 4. The invalid pod: unschedulable with the key (reason Unschedulable, not SchedulerError),
    //    and not retried while nothing changes.
    let t = Instant::now();
    let p = loop {
        let p = h.pod(&ns, "bad-weights").await;
        if unschedulable_message(&p).is_some_and(|m| m.contains("hami.io/device-scoring-weights"))
            || t.elapsed() > Duration::from_secs(60)
        {
            break p;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    match (reason(&p), unschedulable_message(&p)) {
        (Some(r), Some(m))
            if r == "Unschedulable" && m.contains("hami.io/device-scoring-weights") =>
        {
            // Parked: kube-scheduler requeues an unschedulable pod only on a cluster event (like
            // gpu-own's bind just before, which may still bring one retry). Once that has
            // passed, nothing happens here: no filter call at all (the error path retried
            // after every backoff, up to every 10 s, forever).
            tokio::time::sleep(Duration::from_secs(3)).await;
            let f0 = metric_sum(shim.ext, FILTERS).await;
            tokio::time::sleep(Duration::from_secs(12)).await;
            let retries = metric_sum(shim.ext, FILTERS).await - f0;
            if retries > 1 {
                failures.push(format!(
                    "{retries} filter calls in 12 quiet seconds with bad-weights pending"
                ));
            }
            h.result(format!(
                "invalid annotation: PodScheduled=False reason {r}: {m}; then {retries} filter \
                 calls in 12 quiet seconds"
            ));
        }
        (r, m) => failures.push(format!(
            "bad-weights: PodScheduled=False reason {r:?} (want Unschedulable), message {m:?}"
        )),
    }
    plain.stop().await;
    assert!(
        failures.is_empty(),
        "fail-closed checks failed:\n  {}",
        failures.join("\n  ")
    );
    h.result(
        "fail closed for GPU pods only: no webhook call for a pod without GPU resources (shim \
         running or hung), GPU pods refused while the shim hangs, never bound without a decision ✓",
    );
}
