//! Policy set-ups: node policy x GPU policy x device scoring weights, from flags or TOML.

use std::collections::BTreeMap;
use std::path::Path;

use gpusched_api::v1;
use serde::{Deserialize, Serialize};

/// Device scoring weights (`hami.io/device-scoring-weights`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Weights {
    /// Slot term.
    pub slot: u64,
    /// Core term.
    pub core: u64,
    /// Memory term.
    pub memory: u64,
}

/// One policy set-up.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Setup {
    /// Name in reports and charts.
    pub name: String,
    /// Node policy: `binpack` or `spread`.
    pub node_policy: String,
    /// GPU policy tokens (`binpack`, `spread`, `mutex`, `topology-aware`, `numa`).
    pub gpu_policy: Vec<String>,
    /// Weights given to every workload that has none of its own (None: the service's 1,1,1).
    pub weights: Option<Weights>,
    /// The fragmentation measure sees host CPU and memory: nodes carry their free host
    /// resources and workloads go in Kubernetes form with `cpu`/`memory` requests (node policy
    /// `fgd+host`, or `host = true` in TOML).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub host: bool,
}

/// The default set-ups: node binpack/spread x GPU binpack/spread.
pub fn default_setups() -> Vec<Setup> {
    [
        "binpack/binpack",
        "binpack/spread",
        "spread/binpack",
        "spread/spread",
    ]
    .iter()
    .filter_map(|s| parse_setup(s).ok())
    .collect()
}

fn node_policy(s: &str) -> Result<v1::NodePolicy, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "binpack" => Ok(v1::NodePolicy::Binpack),
        "spread" => Ok(v1::NodePolicy::Spread),
        "fgd" => Ok(v1::NodePolicy::Fgd),
        o => Err(format!("node policy `{o}`: use binpack, spread or fgd")),
    }
}

fn gpu_token(s: &str) -> Result<v1::GpuPolicy, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "binpack" => Ok(v1::GpuPolicy::Binpack),
        "spread" => Ok(v1::GpuPolicy::Spread),
        "mutex" => Ok(v1::GpuPolicy::Mutex),
        "topology-aware" => Ok(v1::GpuPolicy::TopologyAware),
        "numa" => Ok(v1::GpuPolicy::Numa),
        "fgd" => Ok(v1::GpuPolicy::Fgd),
        o => Err(format!(
            "GPU policy token `{o}`: use binpack, spread, mutex, topology-aware, numa or fgd"
        )),
    }
}

fn parse_weights(s: &str) -> Result<Weights, String> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    if parts.len() != 3 {
        return Err(format!(
            "weights `{s}`: give three numbers slot,core,memory or slot=A,core=B,memory=C"
        ));
    }
    let mut w = [0u64; 3];
    for (i, p) in parts.iter().enumerate() {
        let (key, val) = match p.split_once('=') {
            Some((k, v)) => (Some(k.trim()), v.trim()),
            None => (None, *p),
        };
        let slot = match key {
            None => i,
            Some("slot") => 0,
            Some("core") => 1,
            Some("memory") => 2,
            Some(k) => return Err(format!("weights `{s}`: unknown term `{k}`")),
        };
        w[slot] = val
            .parse()
            .map_err(|_| format!("weights `{s}`: `{val}` is not a whole number"))?;
    }
    Ok(Weights {
        slot: w[0],
        core: w[1],
        memory: w[2],
    })
}

/// Parses `[NAME=]NODE[+host]/GPU[/WEIGHTS]`: e.g. `binpack/spread`,
/// `bp=binpack/binpack,numa`, `spread/binpack/1,2,1`, `fgd/fgd`, `fgd+host/fgd`.
pub fn parse_setup(s: &str) -> Result<Setup, String> {
    let (name, spec) = match s.split_once('=') {
        Some((n, rest)) if !n.contains('/') => (Some(n.trim().to_owned()), rest),
        _ => (None, s),
    };
    let parts: Vec<&str> = spec.split('/').collect();
    if parts.len() < 2 || parts.len() > 3 {
        return Err(format!(
            "set-up `{s}`: use [NAME=]NODE/GPU[/SLOT,CORE,MEMORY], e.g. binpack/spread"
        ));
    }
    let gpu: Vec<String> = parts[1]
        .split(',')
        .map(|t| t.trim().to_ascii_lowercase())
        .collect();
    let weights = parts.get(2).map(|w| parse_weights(w)).transpose()?;
    let node = parts[0].trim().to_ascii_lowercase();
    let (node, host) = match node.strip_suffix("+host") {
        Some(n) => (n.to_owned(), true),
        None => (node, false),
    };
    let setup = Setup {
        name: name.unwrap_or_else(|| spec.trim().to_owned()),
        node_policy: node,
        gpu_policy: gpu,
        weights,
        host,
    };
    setup.check()?;
    Ok(setup)
}

impl Setup {
    /// Checks the names (the service checks everything else).
    pub fn check(&self) -> Result<(), String> {
        if self.name.is_empty() {
            return Err("a set-up needs a name".into());
        }
        node_policy(&self.node_policy)?;
        if self.gpu_policy.is_empty() {
            return Err(format!("set-up `{}`: no GPU policy", self.name));
        }
        for t in &self.gpu_policy {
            gpu_token(t)?;
        }
        Ok(())
    }

    /// Whether the node or the GPU policy is `fgd` (the requests then carry the mix).
    pub fn uses_fgd(&self) -> bool {
        self.node_policy == "fgd" || self.gpu_policy.iter().any(|t| t == "fgd")
    }

    /// The request options carrying the policies (a workload's own policy still wins).
    pub fn options(&self) -> Result<v1::PlacementOptions, String> {
        Ok(v1::PlacementOptions {
            default_node_policy: node_policy(&self.node_policy)? as i32,
            default_gpu_policy: self
                .gpu_policy
                .iter()
                .map(|t| gpu_token(t).map(|g| g as i32))
                .collect::<Result<_, _>>()?,
            // Reasons are read only for workloads that were not placed.
            failed_nodes: v1::FailedNodes::WhenUnplaced as i32,
            ..v1::PlacementOptions::default()
        })
    }

    /// The workload as sent under this set-up: the weights are added unless it has its own.
    pub fn workload(&self, w: &v1::Workload) -> v1::Workload {
        let mut w = w.clone();
        if let Some(ws) = self.weights {
            match &mut w.spec {
                Some(v1::workload::Spec::Typed(t)) if t.scoring_weights.is_none() => {
                    t.scoring_weights = Some(v1::ScoringWeights {
                        slot: ws.slot,
                        core: ws.core,
                        memory: ws.memory,
                    });
                }
                Some(v1::workload::Spec::Kubernetes(k)) => {
                    k.annotations
                        .entry("hami.io/device-scoring-weights".into())
                        .or_insert_with(|| {
                            format!("slot={},core={},memory={}", ws.slot, ws.core, ws.memory)
                        });
                }
                _ => {}
            }
        }
        w
    }
}

/// The TOML file of `--config`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Set-ups.
    #[serde(default)]
    pub setup: Vec<SetupToml>,
    /// Card memory per openb model, MiB (added to / replacing the defaults).
    #[serde(default)]
    pub models: BTreeMap<String, u64>,
    /// Virtual slots per card.
    pub slots: Option<u32>,
}

/// One `[[setup]]` table.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetupToml {
    /// Name (default `NODE/GPU`).
    pub name: Option<String>,
    /// Node policy.
    pub node: String,
    /// GPU policy: `"binpack"` or a chain `"binpack,numa"`.
    pub gpu: String,
    /// Weights.
    pub weights: Option<Weights>,
    /// The fragmentation measure sees host CPU and memory (see [`Setup::host`]).
    #[serde(default)]
    pub host: bool,
}

/// Reads `--config`.
pub fn read_config(path: &Path) -> anyhow::Result<ConfigFile> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    parse_config(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// Parses the TOML text of `--config`.
pub fn parse_config(text: &str) -> anyhow::Result<ConfigFile> {
    let c: ConfigFile = toml::from_str(text)?;
    for s in &c.setup {
        s.to_setup().map_err(|e| anyhow::anyhow!(e))?;
    }
    Ok(c)
}

impl SetupToml {
    /// The set-up.
    pub fn to_setup(&self) -> Result<Setup, String> {
        let gpu: Vec<String> = self
            .gpu
            .split(',')
            .map(|t| t.trim().to_ascii_lowercase())
            .collect();
        let s = Setup {
            name: self
                .name
                .clone()
                .unwrap_or_else(|| format!("{}/{}", self.node, self.gpu)),
            node_policy: self.node.trim().to_ascii_lowercase(),
            gpu_policy: gpu,
            weights: self.weights,
            host: self.host,
        };
        s.check()?;
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_setups() {
        let s = parse_setup("bp=binpack/binpack,numa/slot=1,core=2,memory=3").unwrap();
        assert_eq!(s.name, "bp");
        assert_eq!(s.gpu_policy, vec!["binpack", "numa"]);
        assert_eq!(
            s.weights,
            Some(Weights {
                slot: 1,
                core: 2,
                memory: 3
            })
        );
        assert_eq!(
            parse_setup("spread/binpack").unwrap().name,
            "spread/binpack"
        );
        assert!(parse_setup("fill/binpack").is_err());
        let f = parse_setup("fgd+host/fgd").unwrap();
        assert!(f.host && f.uses_fgd() && f.node_policy == "fgd");
        assert!(!parse_setup("binpack/fgd").unwrap().host);
        assert!(parse_setup("binpack").is_err());
        assert_eq!(default_setups().len(), 4);
        let c = parse_config(
            "slots = 4\n[models]\nX = 1024\n[[setup]]\nnode = \"spread\"\ngpu = \"binpack\"\nweights = { slot = 0, core = 1, memory = 1 }\n",
        )
        .unwrap();
        assert_eq!(c.setup[0].to_setup().unwrap().name, "spread/binpack");
        assert_eq!(c.slots, Some(4));
    }
}
