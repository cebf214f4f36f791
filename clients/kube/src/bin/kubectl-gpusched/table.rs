//! The answers as terminal tables (aligned columns, one header line).

use gpusched_kube::web::model::{
    Assigned, Board, Explanation, PendingList, PendingPod, Verdict, WhatIf,
};
use gpusched_kube::web::short_text;
use gpusched_kube::web::units::{pct, thousands};

/// Columns padded to their widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if let Some(w) = width.get_mut(i) {
                *w = (*w).max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = width[i]));
            }
        }
        s.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.to_vec());
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
    }
    out
}

/// Cards given to containers.
fn assigned(rows: &[Assigned]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|a| {
            vec![
                a.container.clone(),
                a.card.clone(),
                thousands(a.mem_mib),
                a.cores.to_string(),
            ]
        })
        .collect();
    table(&["CONTAINER", "CARD", "MIB", "CORES%"], &rows)
}

/// `top`: the totals, then one line per card.
pub fn top(b: &Board) -> String {
    let t = &b.totals;
    let mut out = format!(
        "{} nodes, {} cards ({} idle, {} partial, {} full; {} unhealthy, {} cordoned), \
         allocation {}%, fragmentation {}%, pods bound {}, pending {}\n\
         slots {}/{}, memory {}/{} MiB, cores {}/{}%\n\n",
        t.nodes,
        t.cards,
        t.states.idle,
        t.states.partial,
        t.states.full,
        t.unhealthy_cards,
        t.cordoned_cards,
        pct(t.allocation_pct),
        pct(t.fragmentation_pct),
        t.pods_bound,
        t.pods_pending,
        t.slots.used,
        t.slots.total,
        thousands(t.mem_mib.used),
        thousands(t.mem_mib.total),
        t.cores.used,
        t.cores.total
    );
    let mut rows = Vec::new();
    for n in &b.nodes {
        for c in &n.cards {
            let mut state = Vec::new();
            if !c.healthy {
                state.push("unhealthy");
            }
            if c.cordoned {
                state.push("cordoned");
            }
            if n.unschedulable {
                state.push("node-unschedulable");
            }
            rows.push(vec![
                n.name.clone(),
                c.id.clone(),
                format!("{}/{}", c.slots.used, c.slots.total),
                format!(
                    "{}/{}",
                    thousands(c.mem_mib.used),
                    thousands(c.mem_mib.total)
                ),
                format!("{}/{}", c.cores.used, c.cores.total),
                if state.is_empty() {
                    "ok".to_owned()
                } else {
                    state.join(",")
                },
                c.pods
                    .iter()
                    .map(|p| p.pod.clone())
                    .collect::<Vec<_>>()
                    .join(" "),
            ]);
        }
    }
    out.push_str(&table(
        &["NODE", "CARD", "SLOTS", "MIB", "CORES%", "STATE", "PODS"],
        &rows,
    ));
    for u in &b.unusable {
        out.push_str(&format!("kept back: {} ({})\n", u.name, u.reason));
    }
    out
}

/// A verdict in words (several lines for a pod that waits).
pub fn verdict(v: &Verdict) -> String {
    match v {
        Verdict::Fits {
            candidates,
            feasible,
        } => format!(
            "fits now on {feasible} of {candidates} candidate nodes (waiting on kube-scheduler)\n"
        ),
        Verdict::Waits {
            candidates,
            reasons,
            nearest,
            quota,
        } => {
            let mut out = if quota.is_empty() {
                String::new()
            } else {
                format!("{quota}\n")
            };
            out.push_str(&match nearest {
                Some(m) => format!("nearest miss: {}\n", m.text),
                None => "nearest miss: none (no node can take it by freeing capacity)\n".to_owned(),
            });
            if let Some(m) = nearest {
                for s in &m.short {
                    out.push_str(&format!(
                        "  {} #{} ({}): {}\n",
                        s.card,
                        s.index,
                        s.reason,
                        short_text(s)
                    ));
                }
            }
            let rows: Vec<Vec<String>> = reasons
                .iter()
                .map(|g| {
                    let mut names = g.node_names.join(",");
                    if g.nodes > g.node_names.len() {
                        names.push_str(&format!(",+{}", g.nodes - g.node_names.len()));
                    }
                    vec![
                        g.reason.clone(),
                        format!("{}/{candidates}", g.nodes),
                        g.cards.to_string(),
                        if g.unresolvable { "no" } else { "yes" }.to_owned(),
                        names,
                    ]
                })
                .collect();
            out.push_str(&table(
                &["REASON", "NODES", "CARDS", "USAGE-CAN-HELP", "NODE-NAMES"],
                &rows,
            ));
            out
        }
        Verdict::Invalid { error } => format!("the service refuses the pod: {error}\n"),
        Verdict::Unknown { error } => format!("unknown: {error}\n"),
    }
}

/// `why POD`.
pub fn why(p: &PendingPod) -> String {
    let mut out = format!("{} (age {}s)\n", p.pod, p.age_s);
    out.push_str(&verdict(&p.verdict));
    if !p.scheduler_message.is_empty() {
        out.push_str(&format!("kube-scheduler: {}\n", p.scheduler_message));
    }
    out
}

/// `pending`.
pub fn pending(l: &PendingList) -> String {
    let rows: Vec<Vec<String>> = l
        .pods
        .iter()
        .map(|p| {
            let what = match &p.verdict {
                Verdict::Fits { feasible, .. } => format!("fits on {feasible} nodes now"),
                Verdict::Waits {
                    nearest: Some(m), ..
                } => format!("nearest miss: {}", m.text),
                Verdict::Waits { reasons, .. } => reasons.first().map_or_else(String::new, |g| {
                    format!("{} on {} nodes", g.reason, g.nodes)
                }),
                Verdict::Invalid { error } | Verdict::Unknown { error } => error.clone(),
            };
            vec![p.pod.clone(), format!("{}s", p.age_s), what]
        })
        .collect();
    let mut out = table(&["POD", "AGE", "WHY"], &rows);
    if l.not_analysed > 0 {
        out.push_str(&format!("({} more not analysed)\n", l.not_analysed));
    }
    out
}

/// `explain POD`.
pub fn explain(e: &Explanation) -> String {
    let mut out = format!(
        "{}: {}\npolicy: {}; {} candidate nodes, {} feasible\n",
        e.pod,
        e.bound_node
            .as_deref()
            .map_or("pending".to_owned(), |n| format!("bound to {n}")),
        e.policy,
        e.candidates,
        e.feasible
    );
    if !e.recorded.is_empty() {
        out.push_str(
            "
recorded decision:
",
        );
        out.push_str(&assigned(&e.recorded));
    }
    if let Some(m) = e.matches_recorded {
        out.push_str(if m {
            "asked again, the service books the very cards recorded\n"
        } else {
            "asked again now, the service would book other cards (usage changed since)\n"
        });
    }
    if !e.ranking.is_empty() {
        let rows: Vec<Vec<String>> = e
            .ranking
            .iter()
            .map(|r| {
                vec![
                    r.rank.to_string(),
                    r.node.clone(),
                    format!("{:.4}", r.raw_score),
                    r.normalized.to_string(),
                    if r.tie { "tie: smaller name first" } else { "" }.to_owned(),
                ]
            })
            .collect();
        out.push_str("\nnode ranking:\n");
        out.push_str(&table(&["#", "NODE", "SCORE", "PREFERENCE", ""], &rows));
    }
    if let Some(d) = &e.decision {
        out.push_str(&format!(
            "\ncards on {} (node score {:.4}):\n",
            d.node, d.raw_score
        ));
        for c in &d.containers {
            let rows: Vec<Vec<String>> = c
                .cards
                .iter()
                .map(|k| {
                    vec![
                        if k.visited {
                            k.visit.to_string()
                        } else {
                            "-".into()
                        },
                        k.card.clone(),
                        format!("{:.4}", k.slot_term),
                        format!("{:.4}", k.core_term),
                        format!("{:.4}", k.memory_term),
                        format!("{:.4}", k.score),
                        if k.chosen {
                            "chosen".to_owned()
                        } else if !k.rejected.is_empty() {
                            k.rejected.clone()
                        } else {
                            String::new()
                        } + if k.tie { " (tie)" } else { "" },
                    ]
                })
                .collect();
            out.push_str(&format!(
                "container {}{}:\n",
                c.name,
                if c.init { " (init)" } else { "" }
            ));
            out.push_str(&table(
                &[
                    "VISIT", "CARD", "SLOT", "CORE", "MEMORY", "SCORE", "OUTCOME",
                ],
                &rows,
            ));
        }
    }
    if let Some(v) = &e.verdict {
        out.push('\n');
        out.push_str(&verdict(v));
    }
    out.push_str(&format!("({})\n", e.note));
    out
}

/// `what-if`.
pub fn what_if(w: &WhatIf) -> String {
    let mut out = format!(
        "{}: policy {}; {} of {} candidate nodes feasible\n",
        w.pod, w.policy, w.feasible, w.candidates
    );
    match &w.node {
        Some(n) => {
            out.push_str(&format!(
                "would go to {n} (node score {:.4})\n",
                w.raw_score
            ));
            out.push_str(&assigned(&w.cards));
        }
        None => {
            out.push_str("fits nowhere now\n");
            if let Some(v) = &w.verdict {
                out.push_str(&verdict(v));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_to_the_widest_cell() {
        let t = table(
            &["A", "BB", "C"],
            &[
                vec!["xxx".into(), "y".into(), "z".into()],
                vec!["x".into(), "yyyy".into(), "".into()],
            ],
        );
        assert_eq!(t, "A    BB    C\nxxx  y     z\nx    yyyy\n");
    }
}
