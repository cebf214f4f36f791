//! Bursts of pods: creation, watching until settled, the burst's pods, and the checks shared by
//! the bursts (no card over-booked, no decision without a bind).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use gpusched_client::v1;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube::runtime::watcher;

use super::cluster::H;
use super::pods::{PodSpec, Shape, allocated, node_of, unschedulable_message};

/// Sums the written `-allocated` annotations of every pod bound to these nodes and checks that no
/// card is booked beyond its slots, memory or cores; every GPU booking names a card of its node;
/// no pod carries a decision without being bound. Returns (pods bound, cards used).
pub async fn check_no_overbooking(
    h: &H,
    nodes: &HashMap<String, Vec<v1::Card>>,
    gpu_pods_ns: &str,
) -> (usize, usize) {
    let all = Api::<Pod>::all(h.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    let mut used: HashMap<(String, String), (u32, u64, u32)> = HashMap::new();
    let mut bound = 0;
    for p in &all.items {
        let node = node_of(p);
        let ann = allocated(p);
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        if ns == gpu_pods_ns {
            match (&node, &ann) {
                (Some(_), None) => panic!("pod {:?} bound without a GPU decision", p.metadata.name),
                (None, Some(_)) => panic!(
                    "pod {:?} carries a decision but is not bound",
                    p.metadata.name
                ),
                _ => {}
            }
        }
        let (Some(node), Some(ann)) = (node, ann) else {
            continue;
        };
        if !nodes.contains_key(&node) {
            continue;
        }
        if ns == gpu_pods_ns {
            bound += 1;
            assert_eq!(
                p.metadata
                    .annotations
                    .as_ref()
                    .unwrap()
                    .get(gpusched_hami::VGPU_NODE),
                Some(&node),
                "hami.io/vgpu-node"
            );
        }
        for b in ann.into_iter().flatten() {
            assert!(
                nodes[&node].iter().any(|c| c.id == b.uuid),
                "pod {:?} booked card {} which is not on node {node}",
                p.metadata.name,
                b.uuid
            );
            let e = used.entry((node.clone(), b.uuid)).or_default();
            e.0 += 1;
            e.1 += b.mem_mib;
            e.2 += b.cores;
        }
    }
    for ((node, card), (slots, mem, cores)) in &used {
        let c = nodes[node].iter().find(|c| &c.id == card).unwrap();
        assert!(
            *slots <= c.slots && *mem <= c.total_mem_mib && *cores <= c.total_cores,
            "OVER-BOOKED {node}/{card}: slots {slots}/{}, mem {mem}/{}, cores {cores}/{}",
            c.slots,
            c.total_mem_mib,
            c.total_cores
        );
    }
    (bound, used.len())
}

/// What a burst measured.
pub struct BurstStats {
    pub bound: usize,
    pub pending: usize,
    pub create_s: f64,
    pub last_bound_s: f64,
    pub rate: f64,
    /// Seconds from a pod's create returning to its bind seen by a watch, sorted.
    pub to_bind: Vec<f64>,
}

impl BurstStats {
    /// The `q` quantile (0..=1) of the time-to-bind, in seconds.
    pub fn to_bind_q(&self, q: f64) -> f64 {
        if self.to_bind.is_empty() {
            return 0.0;
        }
        let i = ((self.to_bind.len() as f64 * q).ceil() as usize).clamp(1, self.to_bind.len());
        self.to_bind[i - 1]
    }
}

/// Creates `pods` at once (32 in flight) and watches until every pod is bound or pending with a
/// reason and nothing changed for `settle`. `at_bound` runs once when that many pods are bound.
pub async fn burst<'a, F, Fut>(
    h: &'a H,
    ns: &str,
    pods: Vec<Pod>,
    settle: Duration,
    at_bound: Option<(usize, F)>,
) -> BurstStats
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()> + 'a,
{
    let n = pods.len();
    let api: Api<Pod> = Api::namespaced(h.client.clone(), ns);
    // A watch sees each bind as it happens (the list below polls only to decide when to stop).
    let seen_bound: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let watch = {
        let seen = seen_bound.clone();
        let stream = watcher(api.clone(), watcher::Config::default());
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                let pods = match ev {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => vec![p],
                    _ => continue,
                };
                for p in pods {
                    if node_of(&p).is_some() {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        seen.lock()
                            .unwrap()
                            .entry(name)
                            .or_insert_with(Instant::now);
                    }
                }
            }
        })
    };
    let t0 = Instant::now();
    let created: Vec<Result<(String, Instant), kube::Error>> = futures::stream::iter(pods)
        .map(|p| {
            let api = api.clone();
            async move {
                let p = api.create(&PostParams::default(), &p).await?;
                Ok((p.metadata.name.unwrap_or_default(), Instant::now()))
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let mut created_at = HashMap::new();
    for r in created {
        match r {
            Ok((name, at)) => {
                created_at.insert(name, at);
            }
            Err(e) => panic!("creating a burst pod failed: {e}"),
        }
    }
    let create_s = t0.elapsed().as_secs_f64();
    let mut bound_at: HashMap<String, f64> = HashMap::new();
    let mut hook = at_bound;
    let mut last_change = Instant::now();
    let mut last_state = (0usize, 0usize);
    loop {
        let list = api.list(&ListParams::default()).await.unwrap();
        let now = t0.elapsed().as_secs_f64();
        let mut pending_with_reason = 0;
        for p in &list.items {
            let name = p.metadata.name.clone().unwrap_or_default();
            if node_of(p).is_some() {
                bound_at.entry(name).or_insert(now);
            } else if unschedulable_message(p).is_some() {
                pending_with_reason += 1;
            }
        }
        let bound = bound_at.len();
        if let Some((threshold, _)) = &hook
            && bound >= *threshold
        {
            let (_, f) = hook.take().unwrap();
            f().await;
            last_change = Instant::now();
        }
        if (bound, pending_with_reason) != last_state {
            last_state = (bound, pending_with_reason);
            last_change = Instant::now();
        }
        if bound + pending_with_reason == n && last_change.elapsed() >= settle {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(240),
            "burst in {ns} did not settle: {bound} bound, {pending_with_reason} pending with a reason, of {n}"
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    watch.abort();
    let mut to_bind: Vec<f64> = seen_bound
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(name, at)| {
            let c = created_at.get(name)?;
            Some(at.saturating_duration_since(*c).as_secs_f64())
        })
        .collect();
    to_bind.sort_by(f64::total_cmp);
    let last_bound_s = bound_at.values().copied().fold(0.0, f64::max);
    let bound = bound_at.len();
    BurstStats {
        to_bind,
        bound,
        pending: n - bound,
        create_s,
        last_bound_s,
        rate: if last_bound_s > 0.0 {
            bound as f64 / last_bound_s
        } else {
            0.0
        },
    }
}

/// The burst's pods: 70% one card, 30% two cards; 4096 MiB and 30% cores per card.
pub fn burst_pods(pool: &str, scheduler: &str, n: usize, extended_only: bool) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let gpus = if i % 10 < 7 { "1" } else { "2" };
            let mut s = PodSpec::new(format!("b{i:03}"), pool)
                .scheduler(scheduler)
                .limit("nvidia.com/gpu", gpus);
            if !extended_only {
                s = s
                    .limit("nvidia.com/gpumem", "4096")
                    .limit("nvidia.com/gpucores", "30");
            }
            s.build()
        })
        .collect()
}

/// The size of the burst/baseline scenarios: the CI defaults (20 nodes x 4 cards, 200 pods),
/// or `E2E_BURST_NODES`, `E2E_BURST_CARDS`, `E2E_BURST_PODS` (`deploy/e2e/bench.sh`).
/// `E2E_BURST_SAME_ADMISSION=1` sends the baseline's pods through the webhooks too.
#[derive(Clone, Copy)]
pub struct BurstSize {
    pub nodes: usize,
    pub pods: usize,
    pub shape: Shape,
    pub same_admission: bool,
}

impl BurstSize {
    pub fn from_env() -> BurstSize {
        let num = |k: &str, d: usize| -> usize {
            std::env::var(k)
                .ok()
                .filter(|v| !v.is_empty())
                .map(|v| {
                    v.parse()
                        .unwrap_or_else(|_| panic!("{k}={v:?}: not a number"))
                })
                .unwrap_or(d)
        };
        BurstSize {
            nodes: num("E2E_BURST_NODES", BURST_NODES),
            pods: num("E2E_BURST_PODS", BURST_PODS),
            shape: Shape {
                cards: num("E2E_BURST_CARDS", BURST_SHAPE.cards as usize) as u32,
                mem: BURST_SHAPE.mem,
            },
            same_admission: std::env::var("E2E_BURST_SAME_ADMISSION").is_ok_and(|v| v == "1"),
        }
    }
}

/// CPU seconds (user + system) a process has used so far, from `/proc/<pid>/stat`.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let hz = 100.0; // USER_HZ on Linux
    Some(ticks as f64 / hz)
}

/// CPU use of named processes across a burst: `start` before, `per_pod` after.
pub struct CpuMeter(Vec<(String, u32, f64)>);

impl CpuMeter {
    pub fn start(procs: &[(&str, Option<u32>)]) -> CpuMeter {
        CpuMeter(
            procs
                .iter()
                .filter_map(|(n, pid)| {
                    let pid = (*pid)?;
                    Some(((*n).to_owned(), pid, cpu_seconds(pid)?))
                })
                .collect(),
        )
    }

    /// "name X ms, ..." of CPU per pod since `start`.
    pub fn per_pod(&self, pods: usize) -> String {
        self.0
            .iter()
            .map(|(n, pid, t0)| {
                let dt = cpu_seconds(*pid).unwrap_or(*t0) - t0;
                format!("{n} {:.2} ms", dt * 1000.0 / pods.max(1) as f64)
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A pid from the environment (`SCHEDULER_PID`, `APISERVER_PID`, `E2E_SERVER_PID`).
pub fn env_pid(k: &str) -> Option<u32> {
    std::env::var(k).ok()?.parse().ok()
}

/// Nodes of a burst.
pub const BURST_NODES: usize = 20;
/// Pods of a burst.
pub const BURST_PODS: usize = 200;
/// Cards of a burst node.
pub const BURST_SHAPE: Shape = Shape {
    cards: 4,
    mem: 16384,
};
