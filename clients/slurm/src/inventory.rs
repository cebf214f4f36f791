//! Node inventories: the files `gpusched-agent inventory --format json` writes, one per node,
//! in one directory (`<dir>/<anything>.json`; the node is the file's `nodeName`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gpusched_api::json::from_json;
use gpusched_client::v1;
use serde_json::Value;

/// An inventory that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    /// The directory or a file cannot be read.
    #[error("inventory {path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file is not the agent's JSON.
    #[error("inventory {path}: {why} (expected `gpusched-agent inventory --format json`)")]
    Format {
        /// The path.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// Two files for one node.
    #[error("inventory: node {node} is described by both {first} and {second}")]
    DuplicateNode {
        /// The node.
        node: String,
        /// One file.
        first: PathBuf,
        /// The other.
        second: PathBuf,
    },
}

/// One node's cards and pair scores, as the agent published them (usage unset).
#[derive(Clone, Debug, PartialEq)]
pub struct NodeInventory {
    /// Slurm node name (the agent's `nodeName`).
    pub node: String,
    /// Schedulable cards.
    pub cards: Vec<v1::Card>,
    /// Pair scores between the cards.
    pub pair_scores: Vec<v1::CardPairScore>,
}

impl NodeInventory {
    /// The v1 node, without usage.
    pub fn to_node(&self) -> v1::Node {
        v1::Node {
            host: None,
            name: self.node.clone(),
            cards: self.cards.clone(),
            cordoned_card_ids: vec![],
            pair_scores: self.pair_scores.clone(),
            annotations: Default::default(),
        }
    }
}

/// Parses one agent JSON document.
pub fn parse(path: &Path, text: &str) -> Result<NodeInventory, InventoryError> {
    let fmt = |why: String| InventoryError::Format {
        path: path.to_owned(),
        why,
    };
    let v: Value = serde_json::from_str(text).map_err(|e| fmt(e.to_string()))?;
    let node = v
        .get("nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| fmt("no nodeName".to_owned()))?
        .to_owned();
    let mut only = serde_json::Map::new();
    for key in ["cards", "pairScores"] {
        if let Some(x) = v.get(key) {
            only.insert(key.to_owned(), x.clone());
        }
    }
    let resp: v1::NormalizeInventoryResponse = from_json(
        "gpusched.v1.NormalizeInventoryResponse",
        &Value::Object(only).to_string(),
    )
    .map_err(|e| fmt(e.to_string()))?;
    Ok(NodeInventory {
        node,
        cards: resp.cards,
        pair_scores: resp.pair_scores,
    })
}

/// Reads every `*.json` file of `dir`, by node name.
pub fn read_dir(dir: &Path) -> Result<BTreeMap<String, NodeInventory>, InventoryError> {
    let io = |path: &Path, source| InventoryError::Io {
        path: path.to_owned(),
        source,
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    let mut out: BTreeMap<String, (PathBuf, NodeInventory)> = BTreeMap::new();
    for p in paths {
        let text = std::fs::read_to_string(&p).map_err(|e| io(&p, e))?;
        let inv = parse(&p, &text)?;
        if let Some((first, _)) = out.get(&inv.node) {
            return Err(InventoryError::DuplicateNode {
                node: inv.node.clone(),
                first: first.clone(),
                second: p,
            });
        }
        out.insert(inv.node.clone(), (p, inv));
    }
    Ok(out.into_iter().map(|(k, (_, v))| (k, v)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGENT: &str = r#"{
      "cards": [
        {"id": "GPU-a", "type": "NVIDIA H100 80GB HBM3", "slots": 10, "totalMemMib": "81920",
         "totalCores": 100, "health": "CARD_HEALTH_HEALTHY", "mode": "CARD_MODE_HAMI_CORE"},
        {"id": "GPU-b", "index": 1, "type": "NVIDIA H100 80GB HBM3", "slots": 10,
         "totalMemMib": "81920", "totalCores": 100, "health": "CARD_HEALTH_HEALTHY"}
      ],
      "pairScores": [{"cardId": "GPU-a", "peerCardId": "GPU-b", "score": "460"}],
      "skipped": [], "effectiveConfig": {"deviceSplitCount": 10},
      "nodeName": "node1",
      "devices": [{"uuid": "GPU-a", "minorNumber": 0}]
    }"#;

    #[test]
    fn agent_json_gives_cards_and_pairs() {
        let inv = parse(Path::new("n1.json"), AGENT).unwrap();
        assert_eq!(inv.node, "node1");
        assert_eq!(inv.cards.len(), 2);
        assert_eq!(inv.cards[1].index, 1);
        assert_eq!(inv.cards[0].total_mem_mib, 81920);
        assert_eq!(inv.pair_scores[0].score, 460);
    }

    #[test]
    fn bad_documents_name_the_file_and_the_problem() {
        let e = parse(Path::new("x.json"), "{}").unwrap_err().to_string();
        assert!(e.contains("x.json") && e.contains("nodeName"), "{e}");
        let e = parse(
            Path::new("y.json"),
            r#"{"nodeName":"n","cards":[{"slots":"many"}]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("y.json"), "{e}");
    }

    #[test]
    fn a_directory_is_read_by_node_and_duplicates_refused() {
        let dir = std::env::temp_dir().join(format!("gpusched-inv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.json"), AGENT).unwrap();
        std::fs::write(dir.join("notes.txt"), "ignored").unwrap();
        assert_eq!(read_dir(&dir).unwrap().len(), 1);
        std::fs::write(dir.join("b.json"), AGENT).unwrap();
        assert!(matches!(
            read_dir(&dir),
            Err(InventoryError::DuplicateNode { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
