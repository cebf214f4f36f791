//! Where the inventory goes: the Kubernetes Node (HAMi's annotations, optionally the GPU
//! capacity) and/or a file.

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt as _;
use gpusched_api::v1;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use crate::config::{KubeSettings, OutputFormat};
use crate::format::{NodeInventory, node_annotations, render};

/// Field manager name of our patches.
pub const FIELD_MANAGER: &str = "gpusched-agent";
/// Prefix of our handshake value.
pub const REPORTED: &str = "Reported_";

/// A publication failure.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// The Kubernetes API refused or could not be reached.
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    /// The output file could not be written.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// Publishes inventories.
pub trait Publisher: Send + Sync {
    /// Publishes (always writes: the caller decides when).
    fn publish(&self, inv: &NodeInventory)
    -> impl Future<Output = Result<(), PublishError>> + Send;

    /// Removes what was published (clean shutdown, when configured).
    fn withdraw(&self) -> impl Future<Output = Result<(), PublishError>> + Send;

    /// Notified when a consumer asks for a fresh publication (HAMi's handshake).
    fn requests(&self) -> Option<Arc<Notify>> {
        None
    }
}

/// `Reported_<YYYY-MM-DD HH:MM:SS>` (local time, like HAMi's device plugin and scheduler).
pub fn handshake_value(now: chrono::DateTime<chrono::Local>) -> String {
    format!("{REPORTED}{}", now.format("%Y-%m-%d %H:%M:%S"))
}

/// Slots of the healthy cards: what HAMi's device plugin advertises as `nvidia.com/gpu`.
pub fn healthy_slots(normalized: &v1::NormalizeInventoryResponse) -> u64 {
    normalized
        .cards
        .iter()
        .filter(|c| c.health == v1::CardHealth::Healthy as i32)
        .map(|c| u64::from(c.slots))
        .sum()
}

/// The merge patch of the Node's annotations for `inv` (a missing pair-score or MIG layout
/// annotation is removed, so nothing stale stays behind).
pub fn annotation_patch(inv: &NodeInventory, handshake: &str) -> Value {
    let mut annotations: Map<String, Value> = node_annotations(&inv.normalized, &inv.facts)
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    for optional in [gpusched_hami::NODE_SCORE, gpusched_hami::NODE_MIG_LAYOUTS] {
        annotations
            .entry(optional.to_owned())
            .or_insert(Value::Null);
    }
    annotations.insert(
        gpusched_hami::NODE_HANDSHAKE.to_owned(),
        Value::String(handshake.to_owned()),
    );
    json!({ "metadata": { "annotations": annotations } })
}

/// The merge patch that removes our annotations.
pub fn withdraw_patch() -> Value {
    json!({ "metadata": { "annotations": {
        gpusched_hami::NODE_REGISTER: null,
        gpusched_hami::NODE_SCORE: null,
        gpusched_hami::NODE_MIG_LAYOUTS: null,
        gpusched_hami::NODE_HANDSHAKE: null,
    } } })
}

/// The status merge patch setting (or, with None, removing) the GPU capacity.
pub fn capacity_patch(resource: &str, slots: Option<u64>) -> Value {
    let v = slots.map_or(Value::Null, |n| Value::String(n.to_string()));
    json!({ "status": {
        "capacity": { resource: v.clone() },
        "allocatable": { resource: v },
    } })
}

/// Publishes to the Node `node` and watches it for HAMi's handshake requests.
#[derive(Debug)]
pub struct KubePublisher {
    api: Api<Node>,
    node: String,
    settings: KubeSettings,
    notify: Arc<Notify>,
    last_register: Arc<Mutex<Option<String>>>,
    watch: tokio::task::JoinHandle<()>,
}

impl Drop for KubePublisher {
    fn drop(&mut self) {
        self.watch.abort();
    }
}

impl KubePublisher {
    /// A publisher for `node` (starts watching the Node).
    pub fn new(client: kube::Client, node: &str, settings: KubeSettings) -> Self {
        let api: Api<Node> = Api::all(client);
        let notify = Arc::new(Notify::new());
        let last_register: Arc<Mutex<Option<String>>> = Arc::default();
        let watch = tokio::spawn(watch_node(
            api.clone(),
            node.to_owned(),
            Arc::clone(&notify),
            Arc::clone(&last_register),
        ));
        KubePublisher {
            api,
            node: node.to_owned(),
            settings,
            notify,
            last_register,
            watch,
        }
    }

    fn params() -> PatchParams {
        PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        }
    }
}

/// Watches our Node: a handshake that is not ours (`Requesting_...` from HAMi's scheduler,
/// `Deleted_...` after its clean-up, or none) or a register annotation that is not the one we
/// wrote asks for a fresh publication.
async fn watch_node(
    api: Api<Node>,
    node: String,
    notify: Arc<Notify>,
    last_register: Arc<Mutex<Option<String>>>,
) {
    let cfg = watcher::Config::default().fields(&format!("metadata.name={node}"));
    let mut stream = watcher::watcher(api, cfg).default_backoff().boxed();
    let mut failures = 0u32;
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Apply(n) | Event::InitApply(n)) => {
                failures = 0;
                let ours = last_register
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                let Some(ours) = ours else { continue };
                let annotations = n.metadata.annotations.unwrap_or_default();
                let handshake = annotations.get(gpusched_hami::NODE_HANDSHAKE);
                let asked = handshake.is_none_or(|h| !h.starts_with(REPORTED));
                let replaced = annotations.get(gpusched_hami::NODE_REGISTER) != Some(&ours);
                if asked || replaced {
                    tracing::info!(
                        handshake = handshake.map_or("<none>", String::as_str),
                        register_replaced = replaced,
                        "node asks for a fresh inventory"
                    );
                    notify.notify_one();
                }
            }
            Ok(_) => {}
            Err(e) => {
                failures += 1;
                if failures == 1 || failures.is_multiple_of(30) {
                    tracing::warn!(error = %e, failures, "watching the node failed (retrying)");
                }
            }
        }
    }
}

impl Publisher for KubePublisher {
    async fn publish(&self, inv: &NodeInventory) -> Result<(), PublishError> {
        let patch = annotation_patch(inv, &handshake_value(chrono::Local::now()));
        let register = gpusched_hami::encode_register(&inv.normalized.cards);
        // Set before the patch: a watch event of our own write must not look foreign.
        *self
            .last_register
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(register);
        self.api
            .patch(&self.node, &Self::params(), &Patch::Merge(&patch))
            .await?;
        if self.settings.patch_capacity {
            let slots = healthy_slots(&inv.normalized);
            self.api
                .patch_status(
                    &self.node,
                    &Self::params(),
                    &Patch::Merge(capacity_patch(&self.settings.resource_name, Some(slots))),
                )
                .await?;
        }
        Ok(())
    }

    async fn withdraw(&self) -> Result<(), PublishError> {
        self.watch.abort();
        self.api
            .patch(&self.node, &Self::params(), &Patch::Merge(withdraw_patch()))
            .await?;
        if self.settings.patch_capacity {
            self.api
                .patch_status(
                    &self.node,
                    &Self::params(),
                    &Patch::Merge(capacity_patch(&self.settings.resource_name, None)),
                )
                .await?;
        }
        Ok(())
    }

    fn requests(&self) -> Option<Arc<Notify>> {
        Some(Arc::clone(&self.notify))
    }
}

/// Writes the inventory to a file (written to `<path>.tmp`, then renamed) when it changes.
#[derive(Debug)]
pub struct FilePublisher {
    path: PathBuf,
    format: OutputFormat,
    last: Mutex<Option<String>>,
}

impl FilePublisher {
    /// A publisher writing `format` to `path`.
    pub fn new(path: PathBuf, format: OutputFormat) -> Self {
        FilePublisher {
            path,
            format,
            last: Mutex::new(None),
        }
    }
}

impl Publisher for FilePublisher {
    async fn publish(&self, inv: &NodeInventory) -> Result<(), PublishError> {
        let text = render(inv, self.format).map_err(|e| PublishError::Other(e.to_string()))?;
        if self
            .last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_deref()
            == Some(text.as_str())
        {
            return Ok(());
        }
        let file_err = |e: std::io::Error| PublishError::File {
            path: self.path.display().to_string(),
            message: e.to_string(),
        };
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        tokio::fs::write(&tmp, &text).await.map_err(file_err)?;
        tokio::fs::rename(&tmp, &self.path)
            .await
            .map_err(file_err)?;
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(text);
        Ok(())
    }

    async fn withdraw(&self) -> Result<(), PublishError> {
        Ok(())
    }
}

/// Every configured destination.
#[derive(Debug, Default)]
pub struct Sinks {
    /// The Kubernetes Node.
    pub kube: Option<KubePublisher>,
    /// A file.
    pub file: Option<FilePublisher>,
}

impl Publisher for Sinks {
    async fn publish(&self, inv: &NodeInventory) -> Result<(), PublishError> {
        let file = match &self.file {
            Some(f) => f.publish(inv).await,
            None => Ok(()),
        };
        if let Some(k) = &self.kube {
            k.publish(inv).await?;
        }
        file
    }

    async fn withdraw(&self) -> Result<(), PublishError> {
        if let Some(k) = &self.kube {
            k.withdraw().await?;
        }
        Ok(())
    }

    fn requests(&self) -> Option<Arc<Notify>> {
        self.kube.as_ref().and_then(Publisher::requests)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone as _;

    fn inv(pairs: bool) -> NodeInventory {
        let card = |id: &str, healthy: bool, slots: u32| v1::Card {
            id: id.into(),
            slots,
            total_mem_mib: 1024,
            total_cores: 100,
            r#type: "NVIDIA T4".into(),
            health: if healthy {
                v1::CardHealth::Healthy
            } else {
                v1::CardHealth::Unhealthy
            } as i32,
            mode: v1::CardMode::HamiCore as i32,
            ..Default::default()
        };
        NodeInventory {
            node_name: "n".into(),
            normalized: v1::NormalizeInventoryResponse {
                cards: vec![
                    card("A", true, 10),
                    card("B", false, 10),
                    card("C", true, 4),
                ],
                pair_scores: if pairs {
                    vec![v1::CardPairScore {
                        card_id: "A".into(),
                        peer_card_id: "B".into(),
                        score: 100,
                    }]
                } else {
                    vec![]
                },
                ..Default::default()
            },
            facts: vec![],
        }
    }

    #[test]
    fn handshake_format() {
        let t = chrono::Local
            .with_ymd_and_hms(2026, 3, 4, 5, 6, 7)
            .single()
            .unwrap();
        assert_eq!(handshake_value(t), "Reported_2026-03-04 05:06:07");
    }

    #[test]
    fn patches() {
        assert_eq!(healthy_slots(&inv(false).normalized), 14);
        let p = annotation_patch(&inv(true), "Reported_x");
        let a = &p["metadata"]["annotations"];
        assert_eq!(a[gpusched_hami::NODE_HANDSHAKE], "Reported_x");
        assert_eq!(
            a[gpusched_hami::NODE_SCORE],
            r#"[{"uuid":"A","score":{"B":100}}]"#
        );
        assert_eq!(
            a[gpusched_hami::NODE_REGISTER],
            gpusched_hami::encode_register(&inv(true).normalized.cards)
        );
        let p = annotation_patch(&inv(false), "Reported_x");
        assert!(p["metadata"]["annotations"][gpusched_hami::NODE_SCORE].is_null());
        assert!(
            p["metadata"]["annotations"]
                .as_object()
                .unwrap()
                .contains_key(gpusched_hami::NODE_SCORE)
        );
        let w = withdraw_patch();
        assert_eq!(w["metadata"]["annotations"].as_object().unwrap().len(), 4);
        assert!(w["metadata"]["annotations"][gpusched_hami::NODE_MIG_LAYOUTS].is_null());
        // Without MIG cards, the layout annotation is removed.
        assert!(p["metadata"]["annotations"][gpusched_hami::NODE_MIG_LAYOUTS].is_null());
        assert_eq!(
            capacity_patch("nvidia.com/gpu", Some(14)),
            json!({"status":{"capacity":{"nvidia.com/gpu":"14"},"allocatable":{"nvidia.com/gpu":"14"}}})
        );
        assert!(
            capacity_patch("nvidia.com/gpu", None)["status"]["capacity"]["nvidia.com/gpu"]
                .is_null()
        );
    }

    #[tokio::test]
    async fn file_publisher_writes_on_change_only() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gres.conf");
        let f = FilePublisher::new(path.clone(), OutputFormat::SlurmGres);
        f.publish(&inv(false)).await.unwrap();
        let first = std::fs::read_to_string(&path).unwrap();
        assert!(first.contains("NodeName=n Name=gpu Type=nvidia_t4 File=/dev/nvidia0"));
        std::fs::write(&path, "touched").unwrap();
        f.publish(&inv(false)).await.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "touched");
        let mut changed = inv(false);
        changed.normalized.cards.pop();
        f.publish(&changed).await.unwrap();
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .contains("2 card(s)")
        );
        assert!(!dir.path().join("gres.conf.tmp").exists());
    }
}
