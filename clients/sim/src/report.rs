//! The outputs: `report.json` (deterministic), `summary.md`, `timing.json`, charts.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

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
    /// One result per set-up, in the order given.
    pub setups: Vec<SetupResult>,
    /// With `--preemption`: each set-up replayed with priorities, preemption off and/or on.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub priorities: Vec<crate::preempt::PriorityResult>,
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
