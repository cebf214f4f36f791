//! The two forms: what-if (a pod spec or a pending pod, a policy; the answer below) and login.

use std::fmt::Write as _;

use crate::web::html::layout::esc;
use crate::web::html::verdict::verdict;
use crate::web::model::WhatIf;
use crate::web::units::thousands;

/// The node policies offered (empty: the pod's own).
const NODE_POLICIES: [&str; 4] = ["", "binpack", "spread", "fgd"];
/// The GPU policies offered (empty: the pod's own).
const GPU_POLICIES: [&str; 7] = [
    "",
    "binpack",
    "spread",
    "topology-aware",
    "mutex",
    "numa",
    "fgd",
];

/// What the form shows: the last question and its answer or error.
#[derive(Debug, Default)]
pub struct Form<'a> {
    /// The spec as typed.
    pub spec: &'a str,
    /// The pending pod picked.
    pub pod: &'a str,
    /// Node policy chosen.
    pub node_policy: &'a str,
    /// GPU policy chosen.
    pub gpu_policy: &'a str,
    /// The pending pods to pick from.
    pub pending: &'a [String],
    /// The answer.
    pub answer: Option<&'a WhatIf>,
    /// The error (field, message).
    pub error: Option<(&'a str, &'a str)>,
}

fn select(out: &mut String, name: &str, options: &[&str], chosen: &str, empty: &str) {
    let _ = write!(out, "<select name={name} id={name}>");
    for o in options {
        let _ = write!(
            out,
            "<option value=\"{}\"{}>{}</option>",
            esc(o),
            if *o == chosen { " selected" } else { "" },
            if o.is_empty() { esc(empty) } else { esc(o) }
        );
    }
    out.push_str("</select>");
}

/// The what-if page body.
pub fn what_if(out: &mut String, f: &Form<'_>) {
    out.push_str(
        "<h2>What if</h2><p class=muted>Where would a pod go now? The service's Allocate on the \
         current view; nothing is booked or written.</p>\
         <form method=post action=what-if id=whatif>",
    );
    out.push_str("<p>a pending pod: ");
    let mut pods: Vec<&str> = vec![""];
    pods.extend(f.pending.iter().map(String::as_str));
    if !f.pod.is_empty() && !pods.contains(&f.pod) {
        pods.push(f.pod);
    }
    select(out, "pod", &pods, f.pod, "— or paste a pod below —");
    out.push_str(
        "</p><textarea name=spec id=spec placeholder=\"apiVersion: v1&#10;kind: Pod&#10;...\">",
    );
    out.push_str(&esc(f.spec));
    out.push_str("</textarea><p>node policy ");
    select(
        out,
        "node_policy",
        &NODE_POLICIES,
        f.node_policy,
        "the pod's own",
    );
    out.push_str(" GPU policy ");
    select(
        out,
        "gpu_policy",
        &GPU_POLICIES,
        f.gpu_policy,
        "the pod's own",
    );
    out.push_str(" <button id=ask>Ask</button></p></form>");
    if let Some((field, message)) = f.error {
        let _ = write!(
            out,
            "<p class=error id=whatif-error data-field=\"{}\">{}: {}</p>",
            esc(field),
            esc(field),
            esc(message)
        );
    }
    let Some(a) = f.answer else { return };
    let _ = write!(
        out,
        "<div id=whatif-result data-node=\"{}\"><p>{} · policy {} · {} of {} candidate nodes feasible</p>",
        esc(a.node.as_deref().unwrap_or("")),
        esc(&a.pod),
        esc(&a.policy),
        thousands(a.feasible as u64),
        thousands(a.candidates as u64)
    );
    match &a.node {
        Some(n) => {
            let _ = write!(
                out,
                "<p class=ok>would go to <b>{}</b> (node score {:.4})</p><table class=tbl>\
                 <tr><th>container</th><th>card</th><th>MiB</th><th>cores %</th></tr>",
                esc(n),
                a.raw_score
            );
            for c in &a.cards {
                let _ = write!(
                    out,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&c.container),
                    esc(&c.card),
                    thousands(c.mem_mib),
                    c.cores
                );
            }
            out.push_str("</table>");
        }
        None => {
            out.push_str("<p>fits nowhere now:</p>");
            if let Some(v) = &a.verdict {
                verdict(out, v);
            }
        }
    }
    out.push_str("</div>");
}

/// The login form (the only thing shown without the token).
pub fn login(out: &mut String, failed: bool, base: &str) {
    out.push_str(
        "<h2>gpusched operator view</h2><p>This view needs the token configured in \
         gpusched-kube's <code>web.token_file</code>.</p>",
    );
    if failed {
        out.push_str("<p class=error id=login-error>wrong token</p>");
    }
    let _ = write!(
        out,
        "<form method=post action=\"{}login\" id=login><input type=password name=token \
         id=token autocomplete=current-password size=40> <button id=login-button>Log in</button>\
         </form>",
        esc(base)
    );
}
