//! The outputs: `report.json` (deterministic), `summary.md`, `timing.json`, charts.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::bins::{self, Bins, Measure, Spread};
use crate::chart::{self, XAxis};
use crate::replay::{SetupResult, Timing};
use crate::trace::LoadStats;

/// What was replayed.
#[derive(Clone, Debug, Serialize)]
pub struct Input {
    /// `replay` (arrivals and departures) or `fill` (arrivals only).
    pub mode: String,
    /// Trace file name (no directories, so that reports do not depend on where it lies).
    pub trace: String,
    /// Node list file name.
    pub nodes: String,
    /// Reading the trace.
    pub trace_stats: LoadStats,
    /// Reading the node list.
    pub node_stats: LoadStats,
    /// Nodes with GPUs.
    pub node_count: usize,
    /// Cards.
    pub card_count: usize,
    /// GPU demand of the whole trace, % of the cluster's GPUs.
    pub trace_demand_pct: f64,
    /// Virtual slots per card (node lists in CSV).
    pub slots: u32,
}

/// The report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Tool and version.
    pub tool: String,
    /// Input.
    pub input: Input,
    /// One result per set-up, in the order given (with `--seed`/`--seeds`: the first seed's).
    pub setups: Vec<SetupResult>,
    /// The paper's experiment (`--seed`/`--seeds`): measures by arrived demand over seeds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paper: Option<PaperReport>,
    /// With `--preemption`: each set-up replayed with priorities, preemption off and/or on.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub priorities: Vec<crate::preempt::PriorityResult>,
}

/// The paper's experiment over seeds: per set-up, the measures at 100% arrived demand
/// (median and spread over seeds) and the median curves by arrived demand.
#[derive(Clone, Debug, Serialize)]
pub struct PaperReport {
    /// The seeds, in the order run.
    pub seeds: Vec<u64>,
    /// The tune-up ratio (`--tune`), if any.
    pub tune: Option<f64>,
    /// Host CPU and memory were a feasibility filter (`--host`).
    pub host_filter: bool,
    /// Pods per seed: shuffled, and appended by the tune-up.
    pub order: Vec<crate::order::OrderStats>,
    /// Per set-up.
    pub setups: Vec<PaperSetup>,
}

/// One set-up of the paper's experiment.
#[derive(Clone, Debug, Serialize)]
pub struct PaperSetup {
    /// Set-up name.
    pub name: String,
    /// Per seed: allocation, fragmentation and fragmentation ratio at 100% arrived demand (the
    /// artifact's `analysis_*_discrete.csv` column `100`), placed and unplaced.
    pub per_seed: Vec<PaperRun>,
    /// Allocation at 100% arrived demand over seeds, %.
    pub allocation_at_100: Option<Spread>,
    /// The artifact's fragmentation at 100%, % of all GPU compute.
    pub fragmentation_at_100: Option<Spread>,
    /// The same, % of the free compute.
    pub fragmentation_ratio_at_100: Option<Spread>,
    /// Median allocation over seeds by whole percent of arrived demand (0..=130).
    pub allocation_by_demand: Bins,
    /// Median fragmentation by arrived demand.
    pub fragmentation_by_demand: Bins,
    /// Replay seconds per seed (wall clock; not deterministic, kept for the table).
    #[serde(skip)]
    pub seconds: Vec<f64>,
}

/// One seed of one set-up.
#[derive(Clone, Debug, Serialize)]
pub struct PaperRun {
    /// Seed.
    pub seed: u64,
    /// Allocation at 100%.
    pub allocation_at_100: Option<f64>,
    /// Fragmentation at 100%, % of all compute.
    pub fragmentation_at_100: Option<f64>,
    /// Fragmentation at 100%, % of the free compute.
    pub fragmentation_ratio_at_100: Option<f64>,
    /// GPU workloads placed.
    pub placed: usize,
    /// GPU workloads not placed.
    pub unplaced: usize,
}

impl PaperSetup {
    /// The set-up's summary over the runs of its seeds (`runs` in seed order).
    pub fn of(name: &str, seeds: &[u64], runs: &[SetupResult]) -> PaperSetup {
        let alloc: Vec<Bins> = runs
            .iter()
            .map(|r| bins::bins(&r.by_demand, Measure::Allocation))
            .collect();
        let frag: Vec<Bins> = runs
            .iter()
            .map(|r| bins::bins(&r.by_demand, Measure::Fragmentation))
            .collect();
        let ratio: Vec<Bins> = runs
            .iter()
            .map(|r| bins::bins(&r.by_demand, Measure::FragmentationRatio))
            .collect();
        let at = |b: &Bins| b.get(100).copied().flatten();
        let per_seed: Vec<PaperRun> = runs
            .iter()
            .enumerate()
            .map(|(k, r)| PaperRun {
                seed: seeds.get(k).copied().unwrap_or_default(),
                allocation_at_100: at(&alloc[k]),
                fragmentation_at_100: at(&frag[k]),
                fragmentation_ratio_at_100: at(&ratio[k]),
                placed: r.placed,
                unplaced: r.unplaced,
            })
            .collect();
        let over = |f: fn(&PaperRun) -> Option<f64>| {
            bins::spread(&per_seed.iter().filter_map(f).collect::<Vec<_>>())
        };
        PaperSetup {
            name: name.to_owned(),
            allocation_at_100: over(|r| r.allocation_at_100),
            fragmentation_at_100: over(|r| r.fragmentation_at_100),
            fragmentation_ratio_at_100: over(|r| r.fragmentation_ratio_at_100),
            allocation_by_demand: bins::median_bins(&alloc),
            fragmentation_by_demand: bins::median_bins(&frag),
            per_seed,
            seconds: runs.iter().map(|r| r.timing.total_s).collect(),
        }
    }
}

/// The Markdown table of the paper's experiment.
pub fn paper_markdown(p: &PaperReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "
## The paper's experiment: {} seed(s) {:?}, tuned to {}, host filter {}
",
        p.seeds.len(),
        p.seeds,
        p.tune
            .map_or_else(|| "-".to_owned(), |t| format!("{:.0}%", t * 100.0)),
        if p.host_filter { "on" } else { "off" }
    );
    s.push_str(
        "| set-up | allocation at 100% arrived: median [min-max] | fragmentation at 100%: median [min-max] | frag ratio at 100% | seconds per replay (median) |
",
    );
    s.push_str(
        "|---|---:|---:|---:|---:|
",
    );
    let show = |x: &Option<Spread>| {
        x.map_or_else(
            || "-".to_owned(),
            |x| format!("{:.2} [{:.2}-{:.2}]", x.median, x.min, x.max),
        )
    };
    for x in &p.setups {
        let secs = bins::spread(&x.seconds).map_or(0.0, |s| s.median);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.1} |",
            x.name,
            show(&x.allocation_at_100),
            show(&x.fragmentation_at_100),
            show(&x.fragmentation_ratio_at_100),
            secs
        );
    }
    s.push_str(
        "
Allocation: booked GPU compute / all GPU compute after the arrivals whose arrived demand rounds to 100% of the cluster's GPUs (the artifact's `analysis_allo_discrete` column `100`); fragmentation: the artifact's measure (`pkg/utils/frag.go`, its typical pods of the trace) over all GPU compute, and over the free compute (ratio). Chart: `paper-by-demand.svg`.
",
    );
    s
}

/// Timing of a run (not deterministic; kept apart from the report).
#[derive(Clone, Debug, Serialize)]
pub struct TimingReport {
    /// Reading and converting the trace and the node list, seconds.
    pub load_s: f64,
    /// Where the server ran: `in-process` or the address.
    pub server: String,
    /// Per set-up.
    pub setups: Vec<(String, Timing)>,
}

fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |f| f.to_string_lossy().into_owned(),
    )
}

impl Input {
    /// The input description.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        fill: bool,
        trace: &Path,
        nodes: &Path,
        trace_stats: LoadStats,
        node_stats: LoadStats,
        node_count: usize,
        card_count: usize,
        demand: f64,
        slots: u32,
    ) -> Input {
        Input {
            mode: if fill { "fill" } else { "replay" }.into(),
            trace: file_name(trace),
            nodes: file_name(nodes),
            trace_stats,
            node_stats,
            node_count,
            card_count,
            trace_demand_pct: (demand / card_count.max(1) as f64 * 1000.0).round() / 10.0,
            slots,
        }
    }
}

/// What the namespaces' quotas cost, per set-up and namespace (nothing without quotas).
fn quota_table(s: &mut String, r: &Report) {
    let rows: Vec<(&str, &String, &crate::quota::NamespaceReport)> = r
        .setups
        .iter()
        .flat_map(|x| {
            x.quota
                .iter()
                .flatten()
                .map(move |(ns, q)| (x.setup.name.as_str(), ns, q))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    let limit = |l: Option<u64>| l.map_or_else(|| "-".to_owned(), |v| v.to_string());
    s.push_str(
        "\n| set-up | namespace | MiB limit | cores limit | placed | refused by quota | peak MiB | peak cores |\n",
    );
    s.push_str("|---|---|---:|---:|---:|---:|---:|---:|\n");
    for (setup, ns, q) in rows {
        let _ = writeln!(
            s,
            "| {setup} | {ns} | {} | {} | {} | {} | {} | {} |",
            limit(q.hard.mem_mib),
            limit(q.hard.cores),
            q.placed,
            q.refused_by_quota,
            q.peak_mem_mib,
            q.peak_cores
        );
    }
}

/// The Markdown summary: one row per set-up.
pub fn markdown(r: &Report) -> String {
    let mut s = String::new();
    let i = &r.input;
    let _ = writeln!(
        s,
        "# gpusched-sim: {} of `{}` on `{}`\n",
        i.mode, i.trace, i.nodes
    );
    let _ = writeln!(
        s,
        "{} GPU workloads ({} rows, {} without GPU skipped, {} bad rows skipped); {} nodes, {} cards; \
         the trace asks for {:.1}% of the cluster's GPUs in all.\n",
        i.trace_stats.gpu_jobs,
        i.trace_stats.rows,
        i.trace_stats.skipped_no_gpu,
        i.trace_stats.skipped_bad,
        i.node_count,
        i.card_count,
        i.trace_demand_pct
    );
    s.push_str(
        "| set-up | placed | unplaced | first unplaced at demand | peak alloc | mean alloc | mean frag | cards idle / partly / full at the end | top reason of unplaced |\n",
    );
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---|---|\n");
    for x in &r.setups {
        let last = x.samples.last().cloned().unwrap_or_default();
        let top = x
            .unplaced_by_reason
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
            .map_or_else(|| "-".to_owned(), |(k, v)| format!("{k} ({v})"));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.1}% | {:.1}% | {:.1}% | {} / {} / {} | {} |",
            x.setup.name,
            x.placed,
            x.unplaced,
            x.first_unplaced_at_demand_pct
                .map_or_else(|| "-".to_owned(), |p| format!("{p:.1}%")),
            x.peak_allocation_pct,
            x.mean_allocation_pct,
            x.mean_fragmentation_pct,
            last.cards.idle,
            last.cards.partial,
            last.cards.full,
            top
        );
    }
    quota_table(&mut s, r);
    s.push_str(
        "\nalloc: booked compute (cores) / all compute; frag: share of the free compute on cards \
         where a request drawn from the trace's per-card request mix could not fit; means over \
         samples evenly spaced in events. Top reason: the service's reason on most nodes that \
         could take the workload were they emptier (count = workloads). Charts: `by-demand.svg`, \
         `by-time.svg` (and .png).\n",
    );
    let mig: Vec<(&str, Vec<crate::mig::MigSample>)> = r
        .setups
        .iter()
        .map(|x| {
            (
                x.setup.name.as_str(),
                x.samples.iter().filter_map(|p| p.mig).collect(),
            )
        })
        .collect();
    s.push_str(&crate::mig::summary(&mig));
    s
}

/// A human table of the timing.
pub fn timing_table(t: &TimingReport) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "load (read + convert the trace and nodes): {:.3}s; server: {}",
        t.load_s, t.server
    );
    let _ = writeln!(
        s,
        "{:<24} {:>8} {:>8} {:>8} {:>10} {:>10} {:>8} {:>7} {:>10}",
        "set-up",
        "total s",
        "build s",
        "rpc s",
        "handler s",
        "wire+codec",
        "book s",
        "calls",
        "nodes/call"
    );
    for (name, x) in &t.setups {
        let handler = x
            .server_handler_s
            .map_or_else(|| "-".to_owned(), |h| format!("{h:.3}"));
        let wire = x
            .server_handler_s
            .map_or_else(|| "-".to_owned(), |h| format!("{:.3}", x.rpc_s - h));
        let _ = writeln!(
            s,
            "{:<24} {:>8.3} {:>8.3} {:>8.3} {:>10} {:>10} {:>8.3} {:>7} {:>10.0}",
            name,
            x.total_s,
            x.build_s,
            x.rpc_s,
            handler,
            wire,
            x.book_s,
            x.calls,
            x.nodes_sent as f64 / x.calls.max(1) as f64
        );
    }
    s
}

/// Writes report.json, summary.md, timing.json and the charts into `dir`.
pub fn write_all(
    dir: &Path,
    r: &Report,
    t: &TimingReport,
    png: bool,
) -> anyhow::Result<Vec<String>> {
    std::fs::create_dir_all(dir).map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    let w = |name: &str, text: &str| -> anyhow::Result<String> {
        let p = dir.join(name);
        std::fs::write(&p, text).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
        Ok(name.to_owned())
    };
    let openb = r.input.trace.ends_with(".csv");
    let mut summary = markdown(r);
    if let Some(p) = &r.paper {
        summary.push_str(&paper_markdown(p));
    }
    if !r.priorities.is_empty() {
        summary.push_str(&crate::priority_chart::markdown(&r.priorities, openb));
    }
    let mut out = vec![
        w("report.json", &(serde_json::to_string_pretty(r)? + "\n"))?,
        w("summary.md", &summary)?,
        w("timing.json", &(serde_json::to_string_pretty(t)? + "\n"))?,
    ];
    let title = |x: &str| format!("gpusched-sim {} of {}: {}", r.input.mode, r.input.trace, x);
    for (x, stem, what) in [
        (XAxis::Demand, "by-demand", "by arrived demand"),
        (XAxis::Time, "by-time", "over time"),
    ] {
        chart::write_svg(&dir.join(format!("{stem}.svg")), &title(what), &r.setups, x)?;
        out.push(format!("{stem}.svg"));
        if png {
            chart::write_png(&dir.join(format!("{stem}.png")), &title(what), &r.setups, x)?;
            out.push(format!("{stem}.png"));
        }
    }
    if let Some(p) = &r.paper {
        let alloc: Vec<chart::Line<'_>> = p
            .setups
            .iter()
            .map(|x| (x.name.as_str(), &x.allocation_by_demand))
            .collect();
        let frag: Vec<chart::Line<'_>> = p
            .setups
            .iter()
            .map(|x| (x.name.as_str(), &x.fragmentation_by_demand))
            .collect();
        let title = format!(
            "gpusched-sim: {} on {}, median of {} seed(s)",
            r.input.trace,
            r.input.nodes,
            p.seeds.len()
        );
        out.extend(chart::write_demand(
            dir,
            "paper-by-demand",
            &title,
            &alloc,
            &frag,
            png,
        )?);
    }
    if !r.priorities.is_empty() {
        out.extend(crate::priority_chart::write(
            dir,
            &title("by priority class"),
            &r.priorities,
            openb,
            png,
        )?);
    }
    Ok(out)
}

/// The decisions of every set-up (and seed) in event order, as CSV: `setup,seed,event,workload,
/// node,cards,host_cpu_milli,host_mem_mib`; `node` is empty when not placed, `cards` lists
/// `card:MiB:cores` separated by `;`.
pub fn placements_csv(runs: &[(String, Option<u64>, &SetupResult)]) -> String {
    let mut s = String::from("setup,seed,event,workload,node,cards,host_cpu_milli,host_mem_mib\n");
    for (name, seed, r) in runs {
        for p in &r.log {
            let cards: Vec<String> = p
                .cards
                .iter()
                .map(|(id, mib, cores)| format!("{id}:{mib}:{cores}"))
                .collect();
            let _ = writeln!(
                s,
                "{},{},{},{},{},{},{},{}",
                csv_field(name),
                seed.map_or_else(String::new, |x| x.to_string()),
                p.event,
                csv_field(&p.workload),
                csv_field(p.node.as_deref().unwrap_or("")),
                csv_field(&cards.join(";")),
                p.host.0,
                p.host.1
            );
        }
    }
    s
}

fn csv_field(x: &str) -> String {
    if x.contains([',', '"', '\n']) {
        format!("\"{}\"", x.replace('"', "\"\""))
    } else {
        x.to_owned()
    }
}
