//! `gpuschedctl`: try gpusched decisions from the shell. Requests are protobuf JSON (the
//! canonical proto3 mapping) from a file or stdin; answers are printed as JSON, or with
//! `--explain` as a readable per-node, per-card table.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use gpusched_api::json::{from_json, to_json};
use gpusched_client::{ClientBuilder, Error, RetryPolicy, TlsOptions, v1};

#[derive(Debug, Parser)]
#[command(
    name = "gpuschedctl",
    version,
    about = "Ask a gpusched server for placement decisions"
)]
struct Cli {
    /// Server address.
    #[arg(
        long,
        env = "GPUSCHED_ADDR",
        default_value = "http://127.0.0.1:50051",
        global = true
    )]
    addr: String,
    /// CA certificate (PEM) of the server: turns TLS on.
    #[arg(long, global = true, value_name = "PEM")]
    tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS.
    #[arg(long, global = true, value_name = "PEM")]
    tls_cert: Option<PathBuf>,
    /// Client key (PEM) for mutual TLS.
    #[arg(long, global = true, value_name = "PEM")]
    tls_key: Option<PathBuf>,
    /// Name to verify the server certificate against.
    #[arg(long, global = true)]
    tls_server_name: Option<String>,
    /// Deadline per call, e.g. 5s or 500ms.
    #[arg(long, global = true, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Choose the node and cards (AllocateRequest).
    Allocate(Input),
    /// Place several workloads one after another (AllocateBatchRequest).
    Batch(Input),
    /// Which nodes can host the workload (FilterRequest).
    Filter(Input),
    /// Node scores (ScoreRequest).
    Score(Input),
    /// Validate a workload (ValidateWorkloadRequest).
    Validate(Input),
    /// Normalise raw card facts (NormalizeInventoryRequest).
    Normalize(Input),
    /// Who must leave which node for a pending workload of higher priority (PreemptRequest).
    Preempt(Input),
}

#[derive(Debug, clap::Args)]
struct Input {
    /// Request file (JSON); `-` or nothing reads stdin.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
    /// Print a readable per-node, per-card explanation instead of JSON.
    #[arg(long)]
    explain: bool,
    /// Compact JSON output.
    #[arg(long)]
    compact: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, "s"), |i| s.split_at(i));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration such as 5s or 500ms"))?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(format!("{s:?}: units ms, s or m")),
    }
}

fn read_input(file: &Option<PathBuf>) -> anyhow::Result<String> {
    match file {
        Some(p) if p.as_os_str() != "-" => {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
        }
        _ => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("reading stdin")?;
            Ok(s)
        }
    }
}

fn explain_on(options: &mut Option<v1::PlacementOptions>) {
    options
        .get_or_insert_with(v1::PlacementOptions::default)
        .explain = true;
}

fn reason_name(r: i32) -> String {
    v1::Reason::try_from(r).map_or_else(
        |_| r.to_string(),
        |r| r.as_str_name().trim_start_matches("REASON_").to_owned(),
    )
}

fn table(
    explanations: &[v1::NodeExplanation],
    failed: &[v1::FailedNode],
    scores: &[v1::NodeScore],
) -> String {
    let mut out = String::new();
    for s in scores {
        out.push_str(&format!(
            "node {:<24} score {:>8.3}  preference {:>3}\n",
            s.node_name, s.raw_score, s.normalized_score
        ));
    }
    for f in failed {
        out.push_str(&format!(
            "node {:<24} FAILED  {}{}\n",
            f.node_name,
            f.message,
            if f.unresolvable {
                "  (unresolvable)"
            } else {
                ""
            }
        ));
    }
    for e in explanations {
        out.push_str(&format!("\n{}\n", e.node_name));
        if let Some(q) = &e.quota {
            out.push_str(&format!("  {}\n", quota_line(q)));
        }
        for c in &e.containers {
            out.push_str(&format!(
                "  container {}{}\n",
                c.container_name,
                if c.init { " (init)" } else { "" }
            ));
            out.push_str("    visit  card                                      idx numa    slot    core  memory   score  outcome\n");
            for k in &c.cards {
                let visit = if k.visited {
                    k.visit_position.to_string()
                } else {
                    "-".into()
                };
                let outcome = if k.chosen {
                    "CHOSEN".to_owned()
                } else if k.rejected != 0 {
                    reason_name(k.rejected)
                } else if k.visited {
                    "fits".to_owned()
                } else {
                    "not reached".to_owned()
                };
                out.push_str(&format!(
                    "    {:>5}  {:<40} {:>4} {:>4} {:>7.3} {:>7.3} {:>7.3} {:>7.3}  {}\n",
                    visit,
                    k.card_id,
                    k.card_index,
                    k.numa,
                    k.slot_term,
                    k.core_term,
                    k.memory_term,
                    k.score,
                    outcome
                ));
                if !k.mig_profiles.is_empty() {
                    out.push_str(&format!(
                        "           MIG: {}\n",
                        mig_profiles(&k.mig_profiles)
                    ));
                }
            }
        }
    }
    out
}

/// `budget 10240 MiB, unlimited cores; this placement consumes 8192 MiB, 0 cores`.
fn quota_line(q: &v1::QuotaExplanation) -> String {
    let budget = q.budget.unwrap_or_default();
    let used = q.consumed.unwrap_or_default();
    let limit = |v: Option<u64>, unit: &str| {
        v.map_or_else(|| format!("unlimited {unit}"), |v| format!("{v} {unit}"))
    };
    format!(
        "quota: budget {}, {}; this placement consumes {} MiB, {} cores",
        limit(budget.mem_mib, "MiB"),
        limit(budget.cores, "cores"),
        used.mem_mib,
        used.cores
    )
}

/// The profiles a MIG choice met, in its order: `1g.10gb chosen at 3 (new) | 2g.20gb not
/// reached | ...`.
fn mig_profiles(profiles: &[v1::MigProfileConsidered]) -> String {
    profiles
        .iter()
        .map(|p| {
            let what = match v1::MigOutcome::try_from(p.outcome) {
                Ok(v1::MigOutcome::Chosen) => format!(
                    "chosen at {} ({})",
                    p.start,
                    if p.reused { "reused" } else { "new" }
                ),
                Ok(v1::MigOutcome::TooSmall) => "too small".into(),
                Ok(v1::MigOutcome::NotAllowed) => "not allowed".into(),
                Ok(v1::MigOutcome::NoFreePlace) => "no free place".into(),
                Ok(v1::MigOutcome::NotReached) => "not reached".into(),
                _ => format!("outcome {}", p.outcome),
            };
            format!("{} {what}", p.profile)
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// One card of a placement: `GPU-1 (3000 MiB, 30% cores)`, with its MIG instance when it has
/// one.
fn card_text(k: &v1::CardAssignment) -> String {
    match &k.mig {
        Some(m) => format!(
            "{} (MIG {} at {}, {}; {} MiB, {}% cores)",
            k.card_id,
            m.profile,
            m.start,
            if m.reused { "reused" } else { "new" },
            k.mem_mib,
            k.cores_percent
        ),
        None => format!(
            "{} ({} MiB, {}% cores)",
            k.card_id, k.mem_mib, k.cores_percent
        ),
    }
}

/// Cards per container, one line each.
fn containers_text(containers: &[v1::ContainerAssignment]) -> String {
    let mut s = String::new();
    for c in containers {
        let cards: Vec<String> = c.cards.iter().map(card_text).collect();
        s.push_str(&format!(
            "  {}{}: {}\n",
            c.container_name,
            if c.init { " (init)" } else { "" },
            if cards.is_empty() {
                "-".into()
            } else {
                cards.join(", ")
            }
        ));
    }
    s
}

/// A Preempt answer: the choice, then per node its verdict and (with --explain) every eligible
/// workload's reprieve.
fn preemption_table(r: &v1::PreemptResponse) -> String {
    let mut out = match v1::PreemptChoiceKind::try_from(r.choice) {
        Ok(v1::PreemptChoiceKind::NotNeeded) => {
            "not needed: some node fits as it is (allocate as usual)\n".to_owned()
        }
        Ok(v1::PreemptChoiceKind::Evict) => format!("evict on {}\n", r.node_name),
        Ok(v1::PreemptChoiceKind::NoCandidate) => "no candidate: no node can make room\n".into(),
        _ => format!("choice {}\n", r.choice),
    };
    for n in &r.nodes {
        use v1::node_preemption::Verdict;
        match &n.verdict {
            Some(Verdict::NotNeeded(score)) => out.push_str(&format!(
                "node {:<24} not needed (node score {:.3})\n",
                n.node_name, score.raw_score
            )),
            Some(Verdict::Victims(v)) => {
                out.push_str(&format!(
                    "node {:<24} victims {} ({} violate a budget; {} eligible)\n",
                    n.node_name,
                    v.ids.join(", "),
                    v.budget_violations,
                    n.eligible
                ));
                out.push_str(&containers_text(&v.containers));
            }
            Some(Verdict::NotCandidate(c)) => out.push_str(&format!(
                "node {:<24} not a candidate ({}): {}\n",
                n.node_name,
                v1::NotCandidateReason::try_from(c.reason).map_or_else(
                    |_| c.reason.to_string(),
                    |x| x
                        .as_str_name()
                        .trim_start_matches("NOT_CANDIDATE_REASON_")
                        .to_lowercase()
                ),
                c.failure.as_ref().map_or("", |f| f.message.as_str())
            )),
            None => {}
        }
        for p in &n.reprieves {
            let what = match v1::ReprieveOutcome::try_from(p.outcome) {
                Ok(v1::ReprieveOutcome::Kept) => "kept".to_owned(),
                Ok(v1::ReprieveOutcome::KeptAtSecondLook) => "kept at the second look".into(),
                Ok(v1::ReprieveOutcome::Evicted) => format!(
                    "evicted: with it back, {}",
                    p.failure.as_ref().map_or("", |f| f.message.as_str())
                ),
                _ => format!("outcome {}", p.outcome),
            };
            out.push_str(&format!(
                "    {:<20} priority {:>11}{} {what}\n",
                p.id,
                p.priority,
                if p.violates_budget { " (budget)" } else { "" }
            ));
        }
    }
    out
}

fn allocation_table(r: &v1::AllocationResult) -> String {
    let mut out = if r.placed {
        let mut s = format!("placed on {}", r.node_name);
        if let Some(n) = &r.node_score {
            s.push_str(&format!(" (node score {:.3})", n.raw_score));
        }
        s.push('\n');
        s.push_str(&containers_text(&r.containers));
        s
    } else if !r.requests_gpu {
        "no container requests a GPU: nothing to place\n".to_owned()
    } else {
        "not placed: no node fits\n".to_owned()
    };
    if let Some(p) = &r.effective_policy {
        out.push_str(&format!(
            "policy: node {:?}, gpu {}, numa-bind {}\n",
            v1::NodePolicy::try_from(p.node_policy).unwrap_or_default(),
            p.gpu_policy_text,
            p.numa_bind
        ));
    }
    out.push_str(&table(&r.explanations, &r.failed_nodes, &[]));
    out
}

async fn run(cli: Cli) -> anyhow::Result<String> {
    let mut builder = ClientBuilder::new(cli.addr.clone())
        .timeout(Some(cli.timeout))
        .retry(RetryPolicy::none());
    if cli.tls_ca.is_some() || cli.tls_cert.is_some() {
        let read = |p: &Option<PathBuf>| -> anyhow::Result<Option<Vec<u8>>> {
            p.as_ref()
                .map(|p| std::fs::read(p).with_context(|| format!("reading {}", p.display())))
                .transpose()
        };
        let identity = match (read(&cli.tls_cert)?, read(&cli.tls_key)?) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            _ => bail!("--tls-cert and --tls-key go together"),
        };
        builder = builder.tls(TlsOptions {
            ca_pem: read(&cli.tls_ca)?,
            identity,
            domain: cli.tls_server_name.clone(),
        });
    }
    let client = builder.connect_lazy()?;
    let pretty = |compact: bool| !compact;
    Ok(match cli.command {
        Command::Allocate(i) => {
            let mut req: v1::AllocateRequest =
                from_json("gpusched.v1.AllocateRequest", &read_input(&i.file)?)?;
            if i.explain {
                explain_on(&mut req.options);
            }
            let r = client.allocate_request(req).await?;
            if i.explain {
                allocation_table(&r)
            } else {
                to_json("gpusched.v1.AllocationResult", &r, pretty(i.compact))?
            }
        }
        Command::Batch(i) => {
            let mut req: v1::AllocateBatchRequest =
                from_json("gpusched.v1.AllocateBatchRequest", &read_input(&i.file)?)?;
            if i.explain {
                explain_on(&mut req.options);
            }
            let r = client.allocate_batch(req).await?;
            if i.explain {
                r.results
                    .iter()
                    .enumerate()
                    .map(|(n, x)| format!("workload {n}: {}", allocation_table(x)))
                    .collect()
            } else {
                to_json("gpusched.v1.AllocateBatchResponse", &r, pretty(i.compact))?
            }
        }
        Command::Filter(i) => {
            let mut req: v1::FilterRequest =
                from_json("gpusched.v1.FilterRequest", &read_input(&i.file)?)?;
            if i.explain {
                explain_on(&mut req.options);
            }
            let r = client.filter_request(req).await?;
            if i.explain {
                format!(
                    "feasible: {}\n{}",
                    r.feasible_node_names.join(", "),
                    table(&r.explanations, &r.failed_nodes, &[])
                )
            } else {
                to_json("gpusched.v1.FilterResponse", &r, pretty(i.compact))?
            }
        }
        Command::Score(i) => {
            let mut req: v1::ScoreRequest =
                from_json("gpusched.v1.ScoreRequest", &read_input(&i.file)?)?;
            if i.explain {
                explain_on(&mut req.options);
            }
            let r = client.score_request(req).await?;
            if i.explain {
                table(&r.explanations, &r.failed_nodes, &r.scores)
            } else {
                to_json("gpusched.v1.ScoreResponse", &r, pretty(i.compact))?
            }
        }
        Command::Validate(i) => {
            let req: v1::ValidateWorkloadRequest =
                from_json("gpusched.v1.ValidateWorkloadRequest", &read_input(&i.file)?)?;
            let workload = req.workload.context("the request has no workload")?;
            let r = client.validate_workload(workload).await?;
            to_json(
                "gpusched.v1.ValidateWorkloadResponse",
                &r,
                pretty(i.compact),
            )?
        }
        Command::Normalize(i) => {
            let req: v1::NormalizeInventoryRequest = from_json(
                "gpusched.v1.NormalizeInventoryRequest",
                &read_input(&i.file)?,
            )?;
            let r = client.normalize_inventory(req).await?;
            to_json(
                "gpusched.v1.NormalizeInventoryResponse",
                &r,
                pretty(i.compact),
            )?
        }
        Command::Preempt(i) => {
            let mut req: v1::PreemptRequest =
                from_json("gpusched.v1.PreemptRequest", &read_input(&i.file)?)?;
            if i.explain {
                explain_on(&mut req.options);
            }
            let r = client.preempt_request(req).await?;
            if i.explain {
                preemption_table(&r)
            } else {
                to_json("gpusched.v1.PreemptResponse", &r, pretty(i.compact))?
            }
        }
    })
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gpuschedctl: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(cli)) {
        Ok(out) => {
            print!("{out}");
            if !out.ends_with('\n') {
                println!();
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            match e.downcast_ref::<Error>().and_then(Error::api) {
                Some(api) => {
                    eprintln!("gpuschedctl: {:?}: {}", api.code, api.message);
                    for v in &api.field_violations {
                        eprintln!("  {} {}: {}", v.reason, v.field, v.description);
                    }
                }
                None => eprintln!("gpuschedctl: {e:#}"),
            }
            std::process::ExitCode::from(1)
        }
    }
}
