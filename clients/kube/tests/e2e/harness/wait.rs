//! Waiting for what the scheduler does to a pod: bound, or pending with a reason.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use super::cluster::H;
use super::pods::{node_of, unschedulable_message};

impl H {
    pub async fn wait_bound(&self, ns: &str, name: &str) -> Pod {
        let t = Instant::now();
        loop {
            let p = self.pod(ns, name).await;
            if node_of(&p).is_some() {
                return p;
            }
            if t.elapsed() > Duration::from_secs(60) {
                panic!(
                    "pod {ns}/{name} not bound after 60s: {:?}; events: {:?}",
                    unschedulable_message(&p),
                    self.events(ns, name).await
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The pod once bound, or None if it is not bound within `within` (no panic: for checks
    /// that collect every failure of a scenario).
    pub async fn bound_within(&self, ns: &str, name: &str, within: Duration) -> Option<Pod> {
        let t = Instant::now();
        loop {
            let p = self.pod(ns, name).await;
            if node_of(&p).is_some() {
                return Some(p);
            }
            if t.elapsed() > within {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn wait_unschedulable(&self, ns: &str, name: &str, needle: &str) -> String {
        let t = Instant::now();
        loop {
            let p = self.pod(ns, name).await;
            assert!(
                node_of(&p).is_none(),
                "pod {ns}/{name} was bound to {:?}",
                node_of(&p)
            );
            if let Some(m) = unschedulable_message(&p).filter(|m| m.contains(needle)) {
                return m;
            }
            if t.elapsed() > Duration::from_secs(60) {
                panic!(
                    "pod {ns}/{name}: no PodScheduled=False condition naming {needle:?} after 60s: {:?}; events {:?}",
                    unschedulable_message(&p),
                    self.events(ns, name).await
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
