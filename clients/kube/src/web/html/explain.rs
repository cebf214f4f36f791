//! A pod's page: its decision explained (ranking, card tables, recorded cards), or why it waits.

use std::fmt::Write as _;

use crate::web::html::layout::{esc, url_segment};
use crate::web::html::verdict::verdict;
use crate::web::model::{Assigned, Explanation, NodeDecision};

fn assigned_table(out: &mut String, rows: &[Assigned], id: &str) {
    let _ = write!(
        out,
        "<table class=tbl id={id}><tr><th>container</th><th>card</th><th>MiB</th><th>cores %</th></tr>"
    );
    for a in rows {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&a.container),
            esc(&a.card),
            a.mem_mib,
            a.cores
        );
    }
    out.push_str("</table>");
}

fn decision(out: &mut String, d: &NodeDecision) {
    let _ = write!(
        out,
        "<h2>Cards on {} (node score {:.4})</h2>",
        esc(&d.node),
        d.raw_score
    );
    for c in &d.containers {
        let _ = write!(
            out,
            "<p><b>{}</b>{}</p><table class=tbl data-container=\"{}\"><tr><th>visit</th>\
             <th>card</th><th>index</th><th>numa</th><th>slot term</th><th>core term</th>\
             <th>memory term</th><th>score</th><th>outcome</th></tr>",
            esc(&c.name),
            if c.init { " (init)" } else { "" },
            esc(&c.name)
        );
        for k in &c.cards {
            let outcome = if k.chosen {
                "chosen".to_owned()
            } else if !k.rejected.is_empty() {
                esc(&k.rejected)
            } else if k.visited {
                "passed, not needed".to_owned()
            } else {
                "not reached".to_owned()
            };
            let _ = write!(
                out,
                "<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.4}</td><td>{:.4}</td>\
                 <td>{:.4}</td><td>{:.4}{}</td><td>{}</td></tr>",
                if k.chosen { " class=chosen" } else { "" },
                if k.visited {
                    k.visit.to_string()
                } else {
                    "—".to_owned()
                },
                esc(&k.card),
                k.index,
                k.numa,
                k.slot_term,
                k.core_term,
                k.memory_term,
                k.score,
                if k.tie {
                    " <span class=tag>tie: visit order</span>"
                } else {
                    ""
                },
                outcome
            );
        }
        out.push_str("</table>");
    }
}

/// The body of a pod's page.
pub fn explanation(out: &mut String, e: &Explanation, base: &str) {
    let _ = write!(
        out,
        "<h2 id=pod data-pod=\"{}\">{}</h2>",
        esc(&e.pod),
        esc(&e.pod)
    );
    match &e.bound_node {
        Some(n) => {
            let _ = write!(
                out,
                "<p>bound by gpusched to <b id=bound>{}</b></p>",
                esc(n)
            );
        }
        None => out.push_str("<p>not bound (pending)</p>"),
    }
    if !e.policy.is_empty() {
        let _ = write!(
            out,
            "<p>policy: {} · candidates {} · feasible {}</p>",
            esc(&e.policy),
            e.candidates,
            e.feasible
        );
    }
    if !e.recorded.is_empty() {
        out.push_str("<h2>Recorded decision (hami.io/vgpu-devices-allocated)</h2>");
        assigned_table(out, &e.recorded, "recorded");
    }
    if let Some(m) = e.matches_recorded {
        let _ = write!(
            out,
            "<p data-matches=\"{m}\">{}</p>",
            if m {
                "<span class=ok>the service, asked again, books the very cards recorded</span>"
            } else {
                "<span class=error>the service, asked again now, would book other cards (usage changed since)</span>"
            }
        );
    }
    if !e.ranking.is_empty() {
        out.push_str(
            "<h2>Node ranking (Score)</h2><table class=tbl id=ranking><tr><th>#</th><th>node</th>\
             <th>node score</th><th>preference</th><th></th></tr>",
        );
        for r in &e.ranking {
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{:.4}</td><td>{}</td><td>{}</td></tr>",
                r.rank,
                esc(&r.node),
                r.raw_score,
                r.normalized,
                if r.tie {
                    "<span class=tag>tie: smaller name first</span>"
                } else {
                    ""
                }
            );
        }
        out.push_str("</table>");
    }
    if let Some(d) = &e.decision {
        decision(out, d);
    }
    if let Some(v) = &e.verdict {
        out.push_str("<h2>Why it waits</h2><div id=why>");
        verdict(out, v);
        out.push_str("</div>");
    }
    let (ns, name) = e.pod.split_once('/').unwrap_or(("", &e.pod));
    let _ = write!(
        out,
        "<p class=muted>{}</p><p><a href=\"{base}what-if?pod={}%2F{}\">what if…</a></p>",
        esc(&e.note),
        url_segment(ns),
        url_segment(name)
    );
}
