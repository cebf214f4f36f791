//! Traces and clusters: the openb CSV files (Alibaba cluster-trace-gpu-v2023) and gpusched's
//! own JSON Lines formats, turned into gpusched workloads and nodes.

use std::collections::BTreeMap;
use std::path::Path;

use gpusched_api::json::from_json;
use gpusched_api::v1;
use serde::Serialize;

/// A row that could not be read: where and why.
#[derive(Debug, thiserror::Error)]
#[error("{path}:{line}: {message}")]
pub struct BadRow {
    /// The file.
    pub path: String,
    /// 1-based line number.
    pub line: u64,
    /// What is wrong.
    pub message: String,
}

/// Per-card needs of one GPU container, as far as the simulator knows them (used to narrow
/// the candidate nodes and to classify requests for the fragmentation measure, never to
/// decide): the shared measures' type.
pub use gpusched_client::measure::Need;

/// What an openb row said of a pod (for the artifact's measure and the host filter).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct OpenbPod {
    /// Host CPU, millicores.
    pub cpu_milli: u64,
    /// Host memory, MiB.
    pub mem_mib: u64,
    /// Cards.
    pub num_gpu: u32,
    /// Share of each card, 1..=1000 (0 for a pod without GPU).
    pub gpu_milli: u32,
    /// Allowed models (empty = any).
    pub gpu_spec: Vec<String>,
}

/// One workload of a trace.
#[derive(Clone, Debug)]
pub struct Job {
    /// Name (from the trace).
    pub name: String,
    /// Arrival, seconds.
    pub arrive: f64,
    /// Departure, seconds (None: stays to the end).
    pub leave: Option<f64>,
    /// What is sent to the service.
    pub workload: v1::Workload,
    /// GPU demand in whole-GPU equivalents (cores percent / 100 summed over cards).
    pub demand: f64,
    /// Per-container needs, when known (typed workloads).
    pub needs: Option<Vec<Need>>,
    /// Host CPU (millicores) and memory (MiB) the pod asks (openb rows; 0 otherwise).
    pub host: (u64, u64),
    /// A pod without GPU, kept only for the host filter (`ReadOptions::cpu_only`): the
    /// simulator places it itself, the service is not asked.
    pub cpu_only: bool,
    /// The openb row, when the trace is an openb pod list.
    pub openb: Option<OpenbPod>,
    /// Priority (higher is more important; see [`crate::priority`]): openb `qos`, a JSON Lines
    /// `priority`; 0 when the trace has none.
    pub priority: i32,
}

/// What reading a trace found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LoadStats {
    /// Data rows read.
    pub rows: usize,
    /// GPU workloads kept.
    pub gpu_jobs: usize,
    /// Rows without a GPU request (skipped: the service places GPUs only).
    pub skipped_no_gpu: usize,
    /// Malformed rows skipped (`--skip-bad`).
    pub skipped_bad: usize,
    /// The first few skipped rows, `file:line: why`.
    pub bad_examples: Vec<String>,
}

/// How to read traces and node lists.
#[derive(Clone, Debug)]
pub struct ReadOptions {
    /// Skip malformed rows (counted) instead of failing.
    pub skip_bad: bool,
    /// Card memory per openb model, MiB.
    pub model_mem_mib: BTreeMap<String, u64>,
    /// Virtual slots per card (HAMi deviceSplitCount).
    pub slots: u32,
    /// Keep openb pods without GPU (as `cpu_only` jobs) instead of skipping them.
    pub cpu_only: bool,
}

/// Default card memory per openb model (MiB). G1-G3 are undisclosed types; their size only
/// matters for requests in MiB (openb requests are percentages, see the README).
pub fn default_model_mem() -> BTreeMap<String, u64> {
    [
        ("V100M16", 16),
        ("V100M32", 32),
        ("P100", 16),
        ("T4", 16),
        ("A10", 24),
        ("G1", 16),
        ("G2", 16),
        ("G3", 32),
    ]
    .into_iter()
    .map(|(k, g)| (k.to_owned(), g * 1024))
    .collect()
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            skip_bad: false,
            model_mem_mib: default_model_mem(),
            slots: 10,
            cpu_only: false,
        }
    }
}

/// A trace: workloads in file order, and what reading found.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// The GPU workloads.
    pub jobs: Vec<Job>,
    /// Counts.
    pub stats: LoadStats,
    /// Hard GPU limits per namespace (JSON Lines `quota` lines; see [`crate::quota`]).
    pub quotas: BTreeMap<String, crate::quota::Hard>,
}

/// A cluster and what reading found.
#[derive(Clone, Debug, Default)]
pub struct ClusterFile {
    /// The nodes, idle.
    pub nodes: Vec<v1::Node>,
    /// Per node (same order): its host CPU (millicores) and memory (MiB), when the node list
    /// gives them (openb `cpu_milli`, `memory_mib`).
    pub hosts: Vec<Option<(u64, u64)>>,
    /// Counts (rows, nodes without GPUs in `skipped_no_gpu`).
    pub stats: LoadStats,
}

struct Rows<'a> {
    path: &'a str,
    opts: &'a ReadOptions,
    stats: LoadStats,
}

impl Rows<'_> {
    /// Ok(true) when the row was skipped as bad, Err when it must fail.
    fn bad(&mut self, line: u64, message: String) -> Result<(), BadRow> {
        let e = BadRow {
            path: self.path.to_owned(),
            line,
            message,
        };
        if self.opts.skip_bad {
            self.stats.skipped_bad += 1;
            if self.stats.bad_examples.len() < 5 {
                self.stats.bad_examples.push(e.to_string());
            }
            Ok(())
        } else {
            Err(e)
        }
    }
}

fn read_text(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

fn csv_reader(text: &str) -> csv::Reader<&[u8]> {
    csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes())
}

fn columns(path: &str, rdr: &mut csv::Reader<&[u8]>, want: &[&str]) -> anyhow::Result<Vec<usize>> {
    let headers = rdr
        .headers()
        .map_err(|e| anyhow::anyhow!("{path}:1: cannot read the header: {e}"))?
        .clone();
    want.iter()
        .map(|w| {
            headers.iter().position(|h| h == *w).ok_or_else(|| {
                anyhow::anyhow!(
                    "{path}:1: the header lacks column `{w}` (want {})",
                    want.join(",")
                )
            })
        })
        .collect()
}

fn field<'r>(rec: &'r csv::StringRecord, idx: usize, name: &str) -> Result<&'r str, String> {
    rec.get(idx)
        .ok_or_else(|| format!("missing column `{name}` ({} fields)", rec.len()))
}

fn num<T: std::str::FromStr>(rec: &csv::StringRecord, idx: usize, name: &str) -> Result<T, String> {
    let s = field(rec, idx, name)?;
    s.parse()
        .map_err(|_| format!("column `{name}`: `{s}` is not a valid number"))
}

fn time(rec: &csv::StringRecord, idx: usize, name: &str) -> Result<Option<f64>, String> {
    let s = field(rec, idx, name)?;
    if s.is_empty() {
        return Ok(None);
    }
    let t: f64 = s
        .parse()
        .map_err(|_| format!("column `{name}`: `{s}` is not a time in seconds"))?;
    if !t.is_finite() || t < 0.0 {
        return Err(format!("column `{name}`: `{s}` is not a time >= 0"));
    }
    Ok(Some(t))
}

/// The typed workload of an openb pod: `num_gpu` cards, each with `pct` percent of the card's
/// cores and `pct` percent of its memory, on the allowed models.
pub fn openb_workload(name: &str, num_gpu: u32, pct: u32, gpu_types: &[String]) -> v1::Workload {
    v1::Workload {
        quota: None,
        namespace: "openb".into(),
        name: name.to_owned(),
        uid: String::new(),
        spec: Some(v1::workload::Spec::Typed(v1::TypedWorkloadSpec {
            use_gpu_types: gpu_types.to_vec(),
            containers: vec![v1::ContainerRequest {
                name: "main".into(),
                gpu_count: num_gpu,
                gpumem_mib: 0,
                gpumem_percent: pct,
                gpucores_percent: Some(pct),
            }],
            ..v1::TypedWorkloadSpec::default()
        })),
    }
}

/// Reads an openb pod list (`name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,
/// pod_phase,creation_time,deletion_time,scheduled_time`). Only `name`, `num_gpu` and
/// `gpu_milli` are required: the other lists of the same release carry fewer columns (no
/// `gpu_spec`: no type constraint; no `creation_time`: file order; no `deletion_time`: no
/// departures).
pub fn read_openb_pods(path: &Path, opts: &ReadOptions) -> anyhow::Result<Trace> {
    let text = read_text(path)?;
    parse_openb_pods(&path.display().to_string(), &text, opts)
}

/// Positions of the openb pod columns; `None` for optional ones the file lacks.
struct PodColumns {
    name: usize,
    num_gpu: usize,
    gpu_milli: usize,
    gpu_spec: Option<usize>,
    creation: Option<usize>,
    deletion: Option<usize>,
    cpu: Option<usize>,
    mem: Option<usize>,
}

/// [`read_openb_pods`] on text.
pub fn parse_openb_pods(path: &str, text: &str, opts: &ReadOptions) -> anyhow::Result<Trace> {
    let mut rdr = csv_reader(text);
    let col = columns(path, &mut rdr, &["name", "num_gpu", "gpu_milli"])?;
    let headers = rdr
        .headers()
        .map_err(|e| anyhow::anyhow!("{path}:1: cannot read the header: {e}"))?
        .clone();
    let optional = |w: &str| headers.iter().position(|h| h == w);
    let cols = PodColumns {
        name: col[0],
        num_gpu: col[1],
        gpu_milli: col[2],
        gpu_spec: optional("gpu_spec"),
        creation: optional("creation_time"),
        deletion: optional("deletion_time"),
        cpu: optional("cpu_milli"),
        mem: optional("memory_mib"),
    };
    // Optional: older lists have no `qos`.
    let qos = optional("qos");
    let mut rows = Rows {
        path,
        opts,
        stats: LoadStats::default(),
    };
    let mut jobs = Vec::new();
    for rec in rdr.records() {
        let (rec, line) = match rec {
            Ok(r) => {
                let line = r.position().map_or(0, csv::Position::line);
                (r, line)
            }
            Err(e) => {
                let line = e.position().map_or(0, csv::Position::line);
                rows.stats.rows += 1;
                rows.bad(line, format!("unreadable row: {e}"))?;
                continue;
            }
        };
        rows.stats.rows += 1;
        // Without creation times, the file order (row number) is the arrival order.
        let order = rows.stats.rows as f64;
        match openb_row(&rec, &cols, order, opts.cpu_only, qos) {
            Ok(Some(job)) => jobs.push(job),
            Ok(None) => rows.stats.skipped_no_gpu += 1,
            Err(m) => rows.bad(line, m)?,
        }
    }
    let mut stats = rows.stats;
    stats.gpu_jobs = jobs.iter().filter(|j| !j.cpu_only).count();
    Ok(Trace {
        jobs,
        stats,
        ..Trace::default()
    })
}

fn optional_num(rec: &csv::StringRecord, idx: Option<usize>, name: &str) -> Result<u64, String> {
    match idx {
        None => Ok(0),
        Some(i) if field(rec, i, name)?.is_empty() => Ok(0),
        Some(i) => num(rec, i, name),
    }
}

fn openb_row(
    rec: &csv::StringRecord,
    col: &PodColumns,
    order: f64,
    keep_cpu_only: bool,
    qos: Option<usize>,
) -> Result<Option<Job>, String> {
    let name = field(rec, col.name, "name")?.to_owned();
    if name.is_empty() {
        return Err("column `name` is empty".into());
    }
    let num_gpu: u32 = num(rec, col.num_gpu, "num_gpu")?;
    let gpu_milli: u32 = num(rec, col.gpu_milli, "gpu_milli")?;
    let spec = match col.gpu_spec {
        Some(i) => field(rec, i, "gpu_spec")?,
        None => "",
    };
    let arrive = match col.creation {
        Some(i) => time(rec, i, "creation_time")?
            .ok_or_else(|| "column `creation_time` is empty".to_owned())?,
        None => order,
    };
    let leave = match col.deletion {
        Some(i) => time(rec, i, "deletion_time")?,
        None => None,
    };
    let host = (
        optional_num(rec, col.cpu, "cpu_milli")?,
        optional_num(rec, col.mem, "memory_mib")?,
    );
    let types: Vec<String> = spec
        .split('|')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let openb = OpenbPod {
        cpu_milli: host.0,
        mem_mib: host.1,
        num_gpu,
        gpu_milli: if num_gpu == 0 { 0 } else { gpu_milli },
        gpu_spec: types.clone(),
    };
    let priority = match qos {
        Some(i) => crate::priority::of_qos(field(rec, i, "qos")?)
            .map_err(|e| format!("column `qos`: {e}"))?,
        None => 0,
    };
    if num_gpu == 0 {
        if !keep_cpu_only {
            return Ok(None);
        }
        return Ok(Some(Job {
            workload: v1::Workload {
                namespace: "openb".into(),
                name: name.clone(),
                ..v1::Workload::default()
            },
            name,
            arrive,
            leave,
            demand: 0.0,
            needs: None,
            host,
            cpu_only: true,
            openb: Some(openb),
            priority,
        }));
    }
    if gpu_milli == 0 || gpu_milli > 1000 {
        return Err(format!(
            "column `gpu_milli`: {gpu_milli} is not in 1..=1000 (num_gpu is {num_gpu})"
        ));
    }
    if num_gpu > 64 {
        return Err(format!("column `num_gpu`: {num_gpu} is more than 64 cards"));
    }
    let pct = gpu_milli.div_ceil(10);
    Ok(Some(Job {
        workload: openb_workload(&name, num_gpu, pct, &types),
        name,
        arrive,
        leave,
        demand: f64::from(num_gpu) * f64::from(pct) / 100.0,
        needs: Some(vec![Need {
            count: num_gpu,
            cores: pct,
            mem_mib: 0,
            mem_percent: pct,
        }]),
        host,
        cpu_only: false,
        openb: Some(openb),
        priority,
    }))
}

/// One card of a node built from a node list.
pub fn card(index: u32, model: &str, mem_mib: u64, slots: u32) -> v1::Card {
    v1::Card {
        mig: None,
        id: format!("gpu{index}"),
        index,
        r#type: model.to_owned(),
        slots,
        total_mem_mib: mem_mib,
        total_cores: 100,
        numa: 0,
        health: v1::CardHealth::Healthy as i32,
        mode: v1::CardMode::HamiCore as i32,
        usage: None,
    }
}

/// A node of a node list with its host CPU and memory, when given.
type NodeRow = (v1::Node, Option<(u64, u64)>);

/// Reads an openb node list (`sn,cpu_milli,memory_mib,gpu,model`).
pub fn read_openb_nodes(path: &Path, opts: &ReadOptions) -> anyhow::Result<ClusterFile> {
    let text = read_text(path)?;
    parse_openb_nodes(&path.display().to_string(), &text, opts)
}

/// [`read_openb_nodes`] on text.
pub fn parse_openb_nodes(
    path: &str,
    text: &str,
    opts: &ReadOptions,
) -> anyhow::Result<ClusterFile> {
    let mut rdr = csv_reader(text);
    let col = columns(path, &mut rdr, &["sn", "gpu", "model"])?;
    let headers = rdr
        .headers()
        .map_err(|e| anyhow::anyhow!("{path}:1: cannot read the header: {e}"))?
        .clone();
    let cpu_col = headers.iter().position(|h| h == "cpu_milli");
    let mem_col = headers.iter().position(|h| h == "memory_mib");
    let mut hosts = Vec::new();
    let mut rows = Rows {
        path,
        opts,
        stats: LoadStats::default(),
    };
    let mut nodes = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for rec in rdr.records() {
        rows.stats.rows += 1;
        let rec = match rec {
            Ok(r) => r,
            Err(e) => {
                let line = e.position().map_or(0, csv::Position::line);
                rows.bad(line, format!("unreadable row: {e}"))?;
                continue;
            }
        };
        let line = rec.position().map_or(0, csv::Position::line);
        let node = (|| -> Result<Option<NodeRow>, String> {
            let sn = field(&rec, col[0], "sn")?;
            if sn.is_empty() {
                return Err("column `sn` is empty".into());
            }
            let gpus: u32 = num(&rec, col[1], "gpu")?;
            let model = field(&rec, col[2], "model")?;
            if gpus == 0 {
                return Ok(None);
            }
            if gpus > 64 {
                return Err(format!("column `gpu`: {gpus} is more than 64 cards"));
            }
            let mem = *opts.model_mem_mib.get(model).ok_or_else(|| {
                format!(
                    "unknown GPU model `{model}`: give its card memory with --model-mem {model}=MIB"
                )
            })?;
            if !seen.insert(sn.to_owned()) {
                return Err(format!("duplicate node `{sn}`"));
            }
            let host = match (cpu_col, mem_col) {
                (Some(c), Some(m)) => Some((
                    num::<u64>(&rec, c, "cpu_milli")?,
                    num::<u64>(&rec, m, "memory_mib")?,
                )),
                _ => None,
            };
            Ok(Some((
                v1::Node {
                    name: sn.to_owned(),
                    cards: (0..gpus).map(|i| card(i, model, mem, opts.slots)).collect(),
                    ..v1::Node::default()
                },
                host,
            )))
        })();
        match node {
            Ok(Some((n, h))) => {
                nodes.push(n);
                hosts.push(h);
            }
            Ok(None) => rows.stats.skipped_no_gpu += 1,
            Err(m) => rows.bad(line, m)?,
        }
    }
    let mut stats = rows.stats;
    stats.gpu_jobs = nodes.len();
    Ok(ClusterFile {
        nodes,
        hosts,
        stats,
    })
}

/// Reads JSON Lines of `gpusched.v1.Node` (proto JSON), one node per line; blank lines and
/// lines starting with `#` are skipped.
pub fn read_jsonl_nodes(path: &Path, opts: &ReadOptions) -> anyhow::Result<ClusterFile> {
    let text = read_text(path)?;
    parse_jsonl_nodes(&path.display().to_string(), &text, opts)
}

/// [`read_jsonl_nodes`] on text.
pub fn parse_jsonl_nodes(
    path: &str,
    text: &str,
    opts: &ReadOptions,
) -> anyhow::Result<ClusterFile> {
    let mut rows = Rows {
        path,
        opts,
        stats: LoadStats::default(),
    };
    let mut nodes = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, l) in text.lines().enumerate() {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        rows.stats.rows += 1;
        let line = i as u64 + 1;
        match from_json::<v1::Node>("gpusched.v1.Node", l) {
            Ok(n) if n.name.is_empty() => rows.bad(line, "node without a name".into())?,
            Ok(n) if !seen.insert(n.name.clone()) => {
                rows.bad(line, format!("duplicate node `{}`", n.name))?;
            }
            Ok(n) if n.cards.is_empty() => rows.stats.skipped_no_gpu += 1,
            Ok(n) => nodes.push(n),
            Err(e) => rows.bad(line, format!("not a gpusched.v1.Node: {e}"))?,
        }
    }
    let mut stats = rows.stats;
    stats.gpu_jobs = nodes.len();
    // A node's `host` (free host resources) is its capacity: the cluster starts idle.
    let hosts = nodes
        .iter()
        .map(|n| {
            n.host.map(|h| {
                (
                    u64::try_from(h.free_cpu_milli).unwrap_or(0),
                    u64::try_from(h.free_mem_mib).unwrap_or(0),
                )
            })
        })
        .collect();
    for n in &mut nodes {
        n.host = None;
    }
    Ok(ClusterFile {
        nodes,
        hosts,
        stats,
    })
}

/// Reads a JSON Lines trace: each line `{"arrive": SECONDS, "leave": SECONDS|null,
/// "workload": <gpusched.v1.Workload in proto JSON>}`.
pub fn read_jsonl_jobs(path: &Path, opts: &ReadOptions) -> anyhow::Result<Trace> {
    let text = read_text(path)?;
    parse_jsonl_jobs(&path.display().to_string(), &text, opts)
}

/// [`read_jsonl_jobs`] on text.
pub fn parse_jsonl_jobs(path: &str, text: &str, opts: &ReadOptions) -> anyhow::Result<Trace> {
    let mut rows = Rows {
        path,
        opts,
        stats: LoadStats::default(),
    };
    let mut jobs = Vec::new();
    let mut quotas = BTreeMap::new();
    for (i, l) in text.lines().enumerate() {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let line = i as u64 + 1;
        match crate::quota::line(l) {
            Some(Ok((namespace, hard))) => {
                if quotas.insert(namespace.clone(), hard).is_some() {
                    rows.bad(line, format!("a second quota for namespace `{namespace}`"))?;
                }
                continue;
            }
            Some(Err(m)) => {
                rows.bad(line, m)?;
                continue;
            }
            None => {}
        }
        rows.stats.rows += 1;
        match jsonl_job(l, line) {
            Ok(Some(j)) => jobs.push(j),
            Ok(None) => rows.stats.skipped_no_gpu += 1,
            Err(m) => rows.bad(line, m)?,
        }
    }
    let mut stats = rows.stats;
    stats.gpu_jobs = jobs.len();
    Ok(Trace {
        jobs,
        stats,
        quotas,
    })
}

fn jsonl_time(v: &serde_json::Value, key: &str) -> Result<Option<f64>, String> {
    match v.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(x) => match x.as_f64() {
            Some(t) if t.is_finite() && t >= 0.0 => Ok(Some(t)),
            _ => Err(format!("`{key}` must be a number of seconds >= 0, got {x}")),
        },
    }
}

fn jsonl_job(l: &str, line: u64) -> Result<Option<Job>, String> {
    let v: serde_json::Value = serde_json::from_str(l).map_err(|e| format!("not JSON: {e}"))?;
    if !v.is_object() {
        return Err("a line must be a JSON object".into());
    }
    let arrive = jsonl_time(&v, "arrive")?.ok_or_else(|| "`arrive` is missing".to_owned())?;
    let leave = jsonl_time(&v, "leave")?;
    let priority = crate::priority::of_json(v.get("priority"))?;
    let w = v
        .get("workload")
        .ok_or_else(|| "`workload` is missing".to_owned())?;
    let workload: v1::Workload = from_json("gpusched.v1.Workload", &w.to_string())
        .map_err(|e| format!("`workload` is not a gpusched.v1.Workload: {e}"))?;
    let name = if workload.name.is_empty() {
        format!("line-{line}")
    } else {
        workload.name.clone()
    };
    let (demand, needs) = match &workload.spec {
        Some(v1::workload::Spec::Typed(t)) => typed_demand(t),
        Some(v1::workload::Spec::Kubernetes(k)) => (kubernetes_demand(k), None),
        None => return Err("`workload` has neither `typed` nor `kubernetes`".into()),
    };
    if demand <= 0.0 {
        return Ok(None);
    }
    Ok(Some(Job {
        name,
        arrive,
        leave,
        workload,
        demand,
        needs,
        host: (0, 0),
        cpu_only: false,
        openb: None,
        priority,
    }))
}

fn typed_demand(t: &v1::TypedWorkloadSpec) -> (f64, Option<Vec<Need>>) {
    let demand = t
        .containers
        .iter()
        .map(|c| f64::from(c.gpu_count) * f64::from(c.gpucores_percent.unwrap_or(100)) / 100.0)
        .sum();
    let needs = t
        .init_containers
        .iter()
        .chain(&t.containers)
        .filter(|c| c.gpu_count > 0)
        .map(|c| Need {
            count: c.gpu_count,
            cores: c.gpucores_percent.unwrap_or(0),
            mem_mib: c.gpumem_mib,
            mem_percent: c.gpumem_percent,
        })
        .collect();
    (demand, Some(needs))
}

fn quantity(c: &v1::KubernetesContainer, key: &str) -> Option<f64> {
    c.limits
        .get(key)
        .or_else(|| c.requests.get(key))
        .and_then(|s| s.trim().parse::<f64>().ok())
}

fn kubernetes_demand(k: &v1::KubernetesWorkloadSpec) -> f64 {
    k.containers
        .iter()
        .map(|c| {
            let n = quantity(c, "nvidia.com/gpu").unwrap_or(0.0);
            let cores = quantity(c, "nvidia.com/gpucores").unwrap_or(100.0);
            n * cores / 100.0
        })
        .sum()
}

/// Reads a trace by extension: `.csv` = openb pods, `.jsonl`/`.json`/`.ndjson` = JSON Lines.
pub fn read_trace(path: &Path, opts: &ReadOptions) -> anyhow::Result<Trace> {
    match ext(path).as_str() {
        "csv" => read_openb_pods(path, opts),
        "jsonl" | "json" | "ndjson" => read_jsonl_jobs(path, opts),
        e => anyhow::bail!(
            "{}: unknown trace format `.{e}` (use .csv for openb pods, .jsonl for JSON Lines)",
            path.display()
        ),
    }
}

/// Reads a node list by extension: `.csv` = openb nodes, `.jsonl`/`.json`/`.ndjson` = nodes.
pub fn read_nodes(path: &Path, opts: &ReadOptions) -> anyhow::Result<ClusterFile> {
    match ext(path).as_str() {
        "csv" => read_openb_nodes(path, opts),
        "jsonl" | "json" | "ndjson" => read_jsonl_nodes(path, opts),
        e => anyhow::bail!(
            "{}: unknown node list format `.{e}` (use .csv for openb nodes, .jsonl for JSON Lines)",
            path.display()
        ),
    }
}

fn ext(path: &Path) -> String {
    path.extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase()
}
