//! GPU quotas per namespace (ResourceQuota `limits.nvidia.com/gpumem` / `-gpucores`), with a
//! watch that checks after every binding that the pod's namespace stays within its quota:
//! admission refusing what can never fit (a floor above the limit, a limit of 0, an unreadable
//! value, which also gets an Event and the gauge); a burst from two namespaces with different
//! quotas (one with two quotas: the smallest of each key wins), each bound exactly up to its
//! quota and the rest waiting with the budget in PodScheduled; a namespace without quota
//! unaffected; a quota raised at run time and a pod deleted (the event kube-scheduler retries
//! waiting pods on) letting exactly that many more bind; a quota lowered to 0 blocking even a
//! freed share; a percentage that passes the budget on an 80 GiB card placed on the 16 GiB
//! one; and a second burst with two replicas and the leader killed mid-burst.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

use crate::harness::cluster::H;
use crate::harness::http::{metric, metric_sum};
use crate::harness::pods::{PodSpec, Shape, allocated, node_of, unschedulable_message};
use crate::harness::shim::Shim;

/// Label of every pod of this scenario (the checker watches them).
const LABEL: &str = "gpusched.e2e/quota";
const MEM: &str = "limits.nvidia.com/gpumem";
const CORES: &str = "limits.nvidia.com/gpucores";

/// What the checker holds: each namespace's limits (MiB, cores; absent: unlimited) and the
/// bound pods' consumption by uid; every binding that takes its namespace past a limit is a
/// violation.
#[derive(Default)]
struct Ledger {
    limits: HashMap<String, (u64, u64)>,
    bound: HashMap<String, (String, u64, u64)>,
    binds: usize,
    violations: Vec<String>,
}

impl Ledger {
    fn apply(&mut self, p: &Pod) {
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let (Some(_), Some(devices)) = (node_of(p), allocated(p)) else {
            return;
        };
        if self.bound.contains_key(&uid) {
            return;
        }
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let (mem, cores) = devices
            .iter()
            .flatten()
            .fold((0, 0), |(m, c), b| (m + b.mem_mib, c + u64::from(b.cores)));
        self.bound.insert(uid, (ns.clone(), mem, cores));
        self.binds += 1;
        let (used_mem, used_cores) = self
            .bound
            .values()
            .filter(|(n, ..)| *n == ns)
            .fold((0, 0), |(m, c), (_, pm, pc)| (m + pm, c + pc));
        let (lim_mem, lim_cores) = self
            .limits
            .get(&ns)
            .copied()
            .unwrap_or((u64::MAX, u64::MAX));
        if used_mem > lim_mem || used_cores > lim_cores {
            self.violations.push(format!(
                "binding {:?} took {ns} to {used_mem} MiB / {used_cores} cores, over its quota \
                 {lim_mem} MiB / {lim_cores} cores",
                p.metadata.name
            ));
        }
    }

    fn delete(&mut self, p: &Pod) {
        if let Some(uid) = &p.metadata.uid {
            self.bound.remove(uid);
        }
    }
}

/// Watches every pod of the scenario and checks each binding against the ledger's limits.
fn checker(h: &H, ledger: Arc<Mutex<Ledger>>) -> tokio::task::JoinHandle<()> {
    let api: Api<Pod> = Api::all(h.client.clone());
    let stream = watcher(
        api,
        watcher::Config::default().labels(&format!("{LABEL}=1")),
    );
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    ledger.lock().unwrap().apply(&p)
                }
                Ok(watcher::Event::Delete(p)) => ledger.lock().unwrap().delete(&p),
                _ => {}
            }
        }
    })
}

async fn make_quota(h: &H, ns: &str, name: &str, hard: serde_json::Value) {
    let q: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": name}, "spec": {"hard": hard}
    }))
    .unwrap();
    Api::<ResourceQuota>::namespaced(h.client.clone(), ns)
        .create(&PostParams::default(), &q)
        .await
        .unwrap_or_else(|e| panic!("quota {ns}/{name}: {e}"));
}

async fn set_quota(h: &H, ns: &str, name: &str, hard: serde_json::Value) {
    Api::<ResourceQuota>::namespaced(h.client.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"hard": hard}})),
        )
        .await
        .unwrap_or_else(|e| panic!("quota {ns}/{name}: {e}"));
}

/// A scenario pod: `cards` x `mem` MiB (or a percentage) and `cores`.
fn gpu_pod<'a>(name: &str, pool: &'a str, mem: &'a str, cores: &'a str) -> PodSpec<'a> {
    let spec = PodSpec::new(name, pool)
        .label(LABEL, "1")
        .limit("nvidia.com/gpu", "1")
        .limit("nvidia.com/gpucores", cores);
    match mem.strip_suffix('%') {
        Some(pct) => spec.limit("nvidia.com/gpumem-percentage", pct),
        None => spec.limit("nvidia.com/gpumem", mem),
    }
}

/// Creates the pods (16 in flight); a create refused because no webhook answers (no replica
/// is ready during a failover: the webhooks fail closed) is retried, as a client would, for up
/// to 30 s. Returns how many retries it took.
async fn create_all(h: &H, ns: &str, pods: Vec<Pod>) -> usize {
    let retries: Vec<usize> = futures::stream::iter(pods)
        .map(|p| async move {
            let t = Instant::now();
            let mut retries = 0;
            loop {
                match h.create(ns, &p).await {
                    Ok(_) => return retries,
                    Err(e)
                        if e.to_string().contains("failed calling webhook")
                            && t.elapsed() < Duration::from_secs(30) =>
                    {
                        retries += 1;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => panic!("creating {:?} in {ns}: {e}", p.metadata.name),
                }
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    retries.iter().sum()
}

/// (bound pods, pending pods with a PodScheduled=False message) of a namespace.
async fn census(h: &H, ns: &str) -> (Vec<Pod>, Vec<(String, String)>) {
    let pods = Api::<Pod>::namespaced(h.client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let mut bound = vec![];
    let mut waiting = vec![];
    for p in pods {
        if node_of(&p).is_some() {
            bound.push(p);
        } else if let Some(m) = unschedulable_message(&p) {
            waiting.push((p.metadata.name.clone().unwrap_or_default(), m));
        }
    }
    (bound, waiting)
}

/// Waits until each namespace has exactly its number of bound pods and every other pod waits
/// with a PodScheduled message, nothing changing for `quiet`; panics after 90 s.
async fn settle(h: &H, want: &[(&str, usize, usize)], quiet: Duration) {
    let t = Instant::now();
    let mut last = None;
    let mut since = Instant::now();
    loop {
        let mut now = vec![];
        for (ns, _, _) in want {
            let (b, w) = census(h, ns).await;
            now.push((b.len(), w.len()));
        }
        let done = want
            .iter()
            .zip(&now)
            .all(|((_, bound, total), (b, w))| b == bound && b + w == *total);
        if last.as_ref() != Some(&now) {
            last = Some(now.clone());
            since = Instant::now();
        }
        if done && since.elapsed() >= quiet {
            return;
        }
        assert!(
            t.elapsed() < Duration::from_secs(90),
            "quota namespaces did not settle: want (namespace, bound, pods) {want:?}, have \
             (bound, waiting) {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn delete_pod(h: &H, ns: &str, name: &str) {
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    Api::<Pod>::namespaced(h.client.clone(), ns)
        .delete(name, &dp)
        .await
        .unwrap_or_else(|e| panic!("deleting {ns}/{name}: {e}"));
}

/// The first bound pod of a namespace, by name.
async fn some_bound(h: &H, ns: &str) -> String {
    let (mut bound, _) = census(h, ns).await;
    bound.sort_by_key(|p| p.metadata.name.clone());
    bound
        .first()
        .and_then(|p| p.metadata.name.clone())
        .expect("a bound pod")
}

async fn denied(h: &H, ns: &str, pod: &Pod) -> String {
    match h.create(ns, pod).await {
        Ok(_) => panic!("{ns}: pod {:?} admitted", pod.metadata.name),
        Err(e) => e.to_string(),
    }
}

pub async fn run(h: &H, shim: &mut Shim) {
    let pool = "quota";
    let shape = Shape {
        cards: 4,
        mem: 16384,
    };
    h.make_nodes("quota", pool, 3, shape, 40).await;
    let qa = h.namespace("qa", false).await;
    let qb = h.namespace("qb", false).await;
    let qc = h.namespace("qc", false).await;
    make_quota(h, &qa, "gpu", json!({MEM: "40000", CORES: "300"})).await;
    // Two quotas: memory from "mem" (20000 < 24000), cores from "both" (200).
    make_quota(h, &qb, "mem", json!({MEM: "20000"})).await;
    make_quota(h, &qb, "both", json!({MEM: "24000", CORES: "200"})).await;
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    ledger
        .lock()
        .unwrap()
        .limits
        .extend([(qa.clone(), (40000, 300)), (qb.clone(), (20000, 200))]);
    let watch = checker(h, ledger.clone());
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Admission: what can never fit is refused, naming the quota and the key.
    let two_big = PodSpec::new("two-big", pool)
        .label(LABEL, "1")
        .limit("nvidia.com/gpu", "2")
        .limit("nvidia.com/gpumem", "12000")
        .build();
    let e = denied(h, &qb, &two_big).await;
    assert!(
        e.contains("exceeding resource quota")
            && e.contains(&format!("ResourceQuota {qb}/mem sets {MEM} to 20000 MiB"))
            && e.contains("needs at least 24000 MiB"),
        "{e}"
    );
    let qz = h.namespace("qz", false).await;
    make_quota(h, &qz, "frozen", json!({MEM: "0"})).await;
    let qx = h.namespace("qx", false).await;
    make_quota(h, &qx, "typo", json!({MEM: "16Gi"})).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let one = gpu_pod("one", pool, "1000", "10").build();
    let e = denied(h, &qz, &one).await;
    assert!(
        e.contains(&format!("ResourceQuota {qz}/frozen sets {MEM} to 0")),
        "{e}"
    );
    let e = denied(h, &qx, &one).await;
    assert!(e.contains("\"16Gi\" has the binary suffix"), "{e}");
    assert!(e.contains("e.g. 16384 for 16Gi"), "{e}");
    let t = Instant::now();
    let event = loop {
        let ev = h.events(&qx, "typo").await;
        if let Some(e) = ev.iter().find(|e| e.starts_with("GpuschedQuotaInvalid")) {
            break e.clone();
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no GpuschedQuotaInvalid event on {qx}/typo: {ev:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(event.contains(MEM) && event.contains("16Gi"), "{event}");
    assert!(
        metric(shim.ext, "gpusched_kube_quotas_invalid").await >= 1,
        "quotas_invalid gauge"
    );
    // The API server itself refuses what is not a whole, non-negative quantity.
    for bad in ["-1", "1.5", "lots"] {
        let q = json!({"apiVersion": "v1", "kind": "ResourceQuota",
            "metadata": {"name": "bad", "namespace": qx}, "spec": {"hard": {MEM: bad}}});
        let (ok, out) = h
            .kubectl(
                &["create", "--dry-run=server", "-f", "-"],
                Some(&q.to_string()),
            )
            .await;
        assert!(!ok, "the API server accepted {MEM}: {bad}: {out}");
    }
    h.result(format!(
        "quota admission: 2 x 12000 MiB against {MEM} 20000 denied naming ResourceQuota {qb}/mem; \
         {MEM}: 0 denies every GPU pod; {MEM}: 16Gi fails closed (denied with the hint, event \
         {event:?}, gpusched_kube_quotas_invalid >= 1); the API server itself refuses -1, 1.5, \
         lots ✓"
    ));

    // A burst from two namespaces: 16 pods each of 4096 MiB and 20 cores. qa fits 9 (36864 of
    // 40000 MiB), qb 4 (16384 of 20000; cores 80 of 200).
    let burst = |prefix: &str| -> Vec<Pod> {
        (0..16)
            .map(|i| gpu_pod(&format!("{prefix}{i:02}"), pool, "4096", "20").build())
            .collect()
    };
    let t = Instant::now();
    tokio::join!(
        create_all(h, &qa, burst("a")),
        create_all(h, &qb, burst("b"))
    );
    settle(
        h,
        &[(qa.as_str(), 9, 16), (qb.as_str(), 4, 16)],
        Duration::from_secs(3),
    )
    .await;
    let settled = t.elapsed();
    let (_, waiting) = census(h, &qb).await;
    let msg = &waiting[0].1;
    assert!(
        msg.contains("ResourceQuotaNotFit")
            && msg.contains(&format!(
                "quota of namespace {qb}: {MEM} 20000 (ResourceQuota mem), 16384 used, 3616 left; \
                 {CORES} 200 (ResourceQuota both), 80 used, 120 left"
            )),
        "{msg}"
    );
    let refusals = metric_sum(
        shim.ext,
        &format!(r#"gpusched_kube_quota_refusals_total{{namespace="{qa}",stage="filter""#),
    )
    .await;
    assert!(refusals > 0, "no filter refusal counted for {qa}");
    h.result(format!(
        "quota burst: 16 + 16 pods of 4096 MiB / 20 cores into {qa} ({MEM} 40000, {CORES} 300) \
         and {qb} (two quotas: {MEM} 20000 and 24000, {CORES} 200): 9 and 4 bound in {:.1}s, the \
         rest waiting with \"{msg}\"; {refusals} filter refusals counted for {qa} ✓",
        settled.as_secs_f64()
    ));

    // Another namespace without quota is not affected.
    let others: Vec<Pod> = (0..3)
        .map(|i| gpu_pod(&format!("c{i}"), pool, "4096", "20").build())
        .collect();
    create_all(h, &qc, others).await;
    for i in 0..3 {
        h.wait_bound(&qc, &format!("c{i}")).await;
    }

    // qa's quota raised to 60000 MiB (14 pods; cores 280 of 300), then one of qb's pods
    // deleted: kube-scheduler retries the waiting pods at that event (it does not watch
    // quotas): qa binds 5 more, qb exactly one (its freed share).
    ledger
        .lock()
        .unwrap()
        .limits
        .insert(qa.clone(), (60000, 300));
    set_quota(h, &qa, "gpu", json!({MEM: "60000"})).await;
    let victim = some_bound(h, &qb).await;
    let t = Instant::now();
    delete_pod(h, &qb, &victim).await;
    settle(
        h,
        &[(qa.as_str(), 14, 16), (qb.as_str(), 4, 15)],
        Duration::from_secs(3),
    )
    .await;
    h.result(format!(
        "quota raised at run time ({qa}: {MEM} 40000 -> 60000) and a pod of {qb} deleted: at \
         that event {qa} bound 5 more (14) and {qb} 1 more (4 again) within {:.1}s; the other \
         namespace {qc} (no quota) bound 3/3 meanwhile ✓",
        t.elapsed().as_secs_f64()
    ));

    // qb lowered to 0: a freed share is not given again, while qa's is (the same event).
    set_quota(h, &qb, "mem", json!({MEM: "0"})).await;
    ledger.lock().unwrap().limits.insert(qb.clone(), (0, 200));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (a_victim, b_victim) = (some_bound(h, &qa).await, some_bound(h, &qb).await);
    delete_pod(h, &qb, &b_victim).await;
    delete_pod(h, &qa, &a_victim).await;
    settle(
        h,
        &[(qa.as_str(), 14, 15), (qb.as_str(), 3, 14)],
        Duration::from_secs(4),
    )
    .await;
    h.result(format!(
        "{MEM}: 0 set on {qb} at run time: after a pod of each namespace was deleted, {qa} bound \
         the next one (14) and {qb} none (3 left bound, the rest waiting) ✓"
    ));

    // A percentage: 50% books 40960 MiB on the 80 GiB card (over the 10240 left) and 8192 on
    // the 16 GiB one.
    let pct_pool = "quota-pct";
    h.make_node(
        "qp-big",
        pct_pool,
        Shape {
            cards: 1,
            mem: 81920,
        },
        4,
    )
    .await;
    h.make_node(
        "qp-small",
        pct_pool,
        Shape {
            cards: 1,
            mem: 16384,
        },
        4,
    )
    .await;
    let qp = h.namespace("qp", false).await;
    make_quota(h, &qp, "gpu", json!({MEM: "10240"})).await;
    ledger
        .lock()
        .unwrap()
        .limits
        .insert(qp.clone(), (10240, u64::MAX));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    h.create(&qp, &gpu_pod("half", pct_pool, "50%", "10").build())
        .await
        .unwrap();
    let p = h.wait_bound(&qp, "half").await;
    let booked: Vec<(String, u64)> = allocated(&p)
        .unwrap()
        .into_iter()
        .flatten()
        .map(|b| (b.uuid, b.mem_mib))
        .collect();
    assert_eq!(node_of(&p).as_deref(), Some("qp-small"));
    assert_eq!(booked, [("GPU-qp-small-1".to_owned(), 8192)]);
    h.result(format!(
        "quota and a percentage: gpumem-percentage 50 with {MEM} 10240 is bound to qp-small \
         (16 GiB card, 8192 MiB booked), not qp-big (80 GiB card, 40960 MiB) ✓"
    ));

    failover(h, shim, pool, &ledger).await;

    let (violations, binds) = {
        let l = ledger.lock().unwrap();
        (l.violations.clone(), l.binds)
    };
    assert!(violations.is_empty(), "over quota: {violations:?}");
    h.result(format!(
        "quota checker: {binds} bindings watched, each namespace within its quota after every one ✓"
    ));
    watch.abort();
    remove_pods(h, &[&qa, &qb, &qc, &qp]).await;
}

/// Deletes every pod of these namespaces: waiting pods would be retried at every later event
/// of the other scenarios.
async fn remove_pods(h: &H, namespaces: &[&str]) {
    for ns in namespaces {
        let _ = Api::<Pod>::namespaced(h.client.clone(), ns)
            .delete_collection(
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::default()
                },
                &ListParams::default(),
            )
            .await;
    }
}

/// A burst into two namespaces with quotas while two replicas run; the leader is killed
/// (SIGKILL) after the first bindings, the standby takes over and finishes: each namespace
/// bound exactly up to its quota, never past it. `shim` is the standby afterwards.
async fn failover(h: &H, shim: &mut Shim, pool: &str, ledger: &Arc<Mutex<Ledger>>) {
    let f1 = h.namespace("qf1", false).await;
    let f2 = h.namespace("qf2", false).await;
    // 2048 MiB a pod: 9 fit 20000 MiB, 6 fit 12288 MiB.
    make_quota(h, &f1, "gpu", json!({MEM: "20000"})).await;
    make_quota(h, &f2, "gpu", json!({MEM: "12288"})).await;
    ledger.lock().unwrap().limits.extend([
        (f1.clone(), (20000, u64::MAX)),
        (f2.clone(), (12288, u64::MAX)),
    ]);
    let standby = Shim::start(&h.env, "replica-q").await;
    h.proxy.add(&standby);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pods = |prefix: &str| -> Vec<Pod> {
        (0..15)
            .map(|i| gpu_pod(&format!("{prefix}{i:02}"), pool, "2048", "10").build())
            .collect()
    };
    let binds_before = ledger.lock().unwrap().binds;
    let t = Instant::now();
    let creating = async {
        let (a, b) = tokio::join!(create_all(h, &f1, pods("f")), create_all(h, &f2, pods("g")));
        a + b
    };
    let killing = async {
        loop {
            let bound = ledger.lock().unwrap().binds - binds_before;
            if bound >= 3 {
                return bound;
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "no binding in the failover burst"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let (retried, at_kill) = tokio::join!(creating, async {
        let n = killing.await;
        shim.kill9().await;
        h.proxy.remove(&shim.identity);
        n
    });
    assert!(
        at_kill < 15,
        "the leader was killed after the burst ({at_kill} bound)"
    );
    let took = standby.wait_ready(Duration::from_secs(30)).await;
    settle(
        h,
        &[(f1.as_str(), 9, 15), (f2.as_str(), 6, 15)],
        Duration::from_secs(3),
    )
    .await;
    h.result(format!(
        "quota with two replicas: leader {} killed (SIGKILL) after {at_kill} of 15 bindings, \
         {} ready {:.1}s later ({retried} creates retried while no webhook answered); {f1} \
         ({MEM} 20000) and {f2} ({MEM} 12288) bound exactly 9 and 6 of 15 pods of 2048 MiB, \
         {:.1}s from the first create ✓",
        shim.identity,
        standby.identity,
        took.as_secs_f64(),
        t.elapsed().as_secs_f64()
    ));
    remove_pods(h, &[&f1, &f2]).await;
    *shim = standby;
}
