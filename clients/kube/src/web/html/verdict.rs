//! Why pods wait: the pending list and one verdict (the service's grouped reasons and the
//! nearest miss).

use std::fmt::Write as _;

use crate::web::html::layout::{esc, url_segment};
use crate::web::model::{PendingList, Verdict};
use crate::web::units::thousands;

/// A verdict: what fits, or the nearest miss and the reasons.
pub fn verdict(out: &mut String, v: &Verdict) {
    match v {
        Verdict::Fits {
            candidates,
            feasible,
        } => {
            let _ = write!(
                out,
                "<span class=ok data-verdict=fits>fits now on {} of {} candidate nodes</span> \
                 <span class=muted>(waiting on kube-scheduler: its other constraints or its \
                 back-off)</span>",
                thousands(*feasible as u64),
                thousands(*candidates as u64)
            );
        }
        Verdict::Waits {
            candidates,
            reasons,
            nearest,
            quota,
        } => {
            out.push_str("<div data-verdict=waits>");
            if !quota.is_empty() {
                let _ = write!(out, "<p class=error data-quota>{}</p>", esc(quota));
            }
            match nearest {
                Some(m) => {
                    let _ = write!(
                        out,
                        "nearest miss: <span class=nearest data-node=\"{}\">{}</span>",
                        esc(&m.node),
                        esc(&m.text)
                    );
                    if m.wanted > 1 {
                        let _ = write!(
                            out,
                            " <span class=muted>({} of {} cards of {} fit there)</span>",
                            m.fitting,
                            m.wanted,
                            esc(&m.container)
                        );
                    }
                }
                None => {
                    out.push_str("<span class=muted>no node can take it by freeing capacity</span>")
                }
            }
            let _ = write!(out, "<ul class=reasons>",);
            for g in reasons {
                let _ = write!(
                    out,
                    "<li data-reason=\"{}\"><b>{}</b> — {} of {} nodes",
                    esc(&g.reason),
                    esc(&g.reason),
                    thousands(g.nodes as u64),
                    thousands(*candidates as u64)
                );
                if g.cards > 0 {
                    let s = if g.cards == 1 { "" } else { "s" };
                    let _ = write!(out, ", {} card{s}", thousands(g.cards));
                }
                if g.unresolvable {
                    out.push_str(" <span class=tag>usage cannot help</span>");
                }
                let _ = write!(out, ": {}", esc(&g.node_names.join(", ")));
                if g.nodes > g.node_names.len() {
                    let _ = write!(out, ", … {} more", g.nodes - g.node_names.len());
                }
                out.push_str("</li>");
            }
            out.push_str("</ul></div>");
        }
        Verdict::Invalid { error } => {
            let _ = write!(
                out,
                "<span class=error data-verdict=invalid>the service refuses the pod: {}</span>",
                esc(error)
            );
        }
        Verdict::Unknown { error } => {
            let _ = write!(
                out,
                "<span class=error data-verdict=unknown>{}</span>",
                esc(error)
            );
        }
    }
}

/// The pending pods' table.
pub fn pending(out: &mut String, list: &PendingList, base: &str) {
    let _ = write!(
        out,
        "<h2>Pending GPU pods ({})</h2>",
        list.pods.len() + list.not_analysed
    );
    if list.pods.is_empty() {
        out.push_str("<p class=muted>none</p>");
        return;
    }
    out.push_str("<table class=pend id=pending><tr><th>pod</th><th>age</th><th>why it waits (gpusched, now)</th><th>kube-scheduler</th></tr>");
    for p in &list.pods {
        let (ns, name) = p.pod.split_once('/').unwrap_or(("", &p.pod));
        let _ = write!(
            out,
            "<tr data-pod=\"{}\"><td><a href=\"{base}pod/{}/{}\">{}</a></td><td>{}s</td><td>",
            esc(&p.pod),
            url_segment(ns),
            url_segment(name),
            esc(&p.pod),
            p.age_s
        );
        verdict(out, &p.verdict);
        let _ = write!(
            out,
            "</td><td class=muted>{}</td></tr>",
            esc(&p.scheduler_message)
        );
    }
    out.push_str("</table>");
    if list.not_analysed > 0 {
        let _ = write!(
            out,
            "<p class=muted>{} more pending pods not analysed (web.max_pending)</p>",
            list.not_analysed
        );
    }
}
