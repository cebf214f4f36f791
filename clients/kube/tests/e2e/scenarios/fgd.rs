//! Fragmentation-aware placement (`fgd`, docs/placement-semantics.md section 12) against binpack
//! on the real control plane: the same burst of fractional GPU pods fills two pools of two
//! nodes x 4 cards, once with `hami.io/node-scheduler-policy` and `hami.io/gpu-scheduler-policy`
//! `binpack`, once `fgd`. The burst comes in two waves (8 pods of 40 % of a card's cores and
//! memory, then 8 of 60 %), each created at once, the second when the first has settled. The
//! shim sends fgd pods the workload mix it derives from the GPU pods it sees (`[fgd] mix =
//! "observed"`; the e2e shim counts the newest 64, see `harness/shim.rs`), here the burst's two
//! shapes.
//!
//! Counted from the bound pods' decisions (`hami.io/vgpu-devices-allocated`): a **sliver** is a
//! card with free compute that no shape of the burst can use (too few free cores, memory or
//! slots). Binpack pairs the 40 % pods (80 % used: 20 % left that neither shape fits) and has
//! no card left for half of the 60 % pods; fgd gives each 40 % pod its own card and fills each
//! with a 60 % pod. Asserted: fgd leaves fewer sliver cores than binpack and binds at least as
//! many pods; a RESULT line prints both counts.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use gpusched_client::v1;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams};

use crate::harness::burst::{burst, check_no_overbooking};
use crate::harness::cluster::H;
use crate::harness::pods::{PodSpec, Shape, allocated, node_of};

const SHAPE: Shape = Shape {
    cards: 4,
    mem: 16384,
};
const NODES: usize = 2;
/// The waves: percent of a card (cores and memory) and pod count.
const WAVES: [(u32, usize); 2] = [(40, 8), (60, 8)];

/// What one fill left.
struct Fill {
    bound: usize,
    pods: usize,
    /// Cards with free compute no shape of the burst can use.
    slivers: usize,
    /// Their free cores (percent of a card, summed).
    sliver_cores: u32,
    /// Cores booked over the pool.
    used_cores: u32,
    namespaces: Vec<String>,
}

/// Whether a container of `pct` % (cores and memory) fits a card with this usage
/// (slots, MiB, cores; checks 6, 8, 9 and 10 of section 5.4).
fn fits(card: &v1::Card, used: (u32, u64, u32), pct: u32) -> bool {
    let mem = card.total_mem_mib * u64::from(pct) / 100;
    used.0 < card.slots
        && card.total_mem_mib.saturating_sub(used.1) >= mem
        && card.total_cores.saturating_sub(used.2) >= pct
        && !(pct == 100 && used.0 > 0)
}

async fn fill(h: &H, policy: &str) -> Fill {
    let pool = format!("fgd-{policy}");
    let nodes = h.make_nodes(&pool, &pool, NODES, SHAPE, 40).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut namespaces = Vec::new();
    let mut bound = 0;
    let mut pods = 0;
    for (wave, (pct, n)) in WAVES.iter().enumerate() {
        let ns = h.namespace(&format!("{pool}-w{wave}"), false).await;
        let list: Vec<Pod> = (0..*n)
            .map(|i| {
                PodSpec::new(format!("p{pct}-{i:02}"), &pool)
                    .ann("hami.io/node-scheduler-policy", policy)
                    .ann("hami.io/gpu-scheduler-policy", policy)
                    .limit("nvidia.com/gpu", "1")
                    .limit("nvidia.com/gpucores", pct.to_string())
                    .limit("nvidia.com/gpumem-percentage", pct.to_string())
                    .build()
            })
            .collect();
        let s = burst(
            h,
            &ns,
            list,
            Duration::from_secs(2),
            None::<(usize, fn() -> std::future::Ready<()>)>,
        )
        .await;
        let (b, _) = check_no_overbooking(h, &nodes, &ns).await;
        assert_eq!(
            b, s.bound,
            "{policy} wave {wave}: bound pods carry decisions"
        );
        bound += s.bound;
        pods += n;
        namespaces.push(ns);
    }
    // Usage per card from the bound pods' decisions.
    let mut used: HashMap<String, (u32, u64, u32)> = HashMap::new();
    for ns in &namespaces {
        let list = Api::<Pod>::namespaced(h.client.clone(), ns)
            .list(&ListParams::default())
            .await
            .unwrap();
        for p in list.items.iter().filter(|p| node_of(p).is_some()) {
            for b in allocated(p).into_iter().flatten().flatten() {
                let e = used.entry(b.uuid).or_default();
                e.0 += 1;
                e.1 += b.mem_mib;
                e.2 += b.cores;
            }
        }
    }
    let (mut slivers, mut sliver_cores, mut used_cores) = (0, 0, 0);
    for card in nodes.values().flatten() {
        let u = used.get(&card.id).copied().unwrap_or_default();
        used_cores += u.2;
        let free = card.total_cores.saturating_sub(u.2);
        if free > 0 && !WAVES.iter().any(|(pct, _)| fits(card, u, *pct)) {
            slivers += 1;
            sliver_cores += free;
        }
    }
    Fill {
        bound,
        pods,
        slivers,
        sliver_cores,
        used_cores,
        namespaces,
    }
}

pub async fn run(h: &H) {
    let t = Instant::now();
    let binpack = fill(h, "binpack").await;
    let fgd = fill(h, "fgd").await;
    let capacity = NODES as u32 * SHAPE.cards * 100;
    h.result(format!(
        "fgd vs binpack, same burst (8 pods of 40% then 8 of 60%, 2 nodes x 4 cards): unusable \
         slivers binpack {} cards / {} cores, fgd {} cards / {} cores; pods bound binpack {}/{}, \
         fgd {}/{}; compute allocated binpack {}%, fgd {}% ({:.1}s)",
        binpack.slivers,
        binpack.sliver_cores,
        fgd.slivers,
        fgd.sliver_cores,
        binpack.bound,
        binpack.pods,
        fgd.bound,
        fgd.pods,
        binpack.used_cores * 100 / capacity,
        fgd.used_cores * 100 / capacity,
        t.elapsed().as_secs_f64()
    ));
    assert!(
        fgd.sliver_cores < binpack.sliver_cores,
        "fgd left {} sliver cores, binpack {}",
        fgd.sliver_cores,
        binpack.sliver_cores
    );
    assert!(
        fgd.bound >= binpack.bound,
        "fgd bound {} pods, binpack {}",
        fgd.bound,
        binpack.bound
    );
    // The pods that found no room would be retried at every cluster event: gone.
    for ns in binpack.namespaces.iter().chain(&fgd.namespaces) {
        let api = Api::<Pod>::namespaced(h.client.clone(), ns);
        let list = api.list(&ListParams::default()).await.unwrap();
        for p in list.items.iter().filter(|p| node_of(p).is_none()) {
            let name = p.metadata.name.clone().unwrap_or_default();
            let _ = api.delete(&name, &DeleteParams::default()).await;
        }
    }
}
