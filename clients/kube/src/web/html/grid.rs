//! The cluster page: totals, the nodes x cards grid, bookings per namespace.
//!
//! One box per card (`data-card` = its id), one row per node (`data-node`, the model in its
//! name's `title`); a cell shows slots, memory (GiB, and a bar) and cores booked and the names of the
//! pods booking it, and is shaded by how full it is. At 1,000 nodes x 8 cards the grid is the
//! bulk of the page, so a cell carries only what it shows plus a `title` with the card's id and
//! exact numbers; per-pod numbers are on the pod's page and in the API.

use std::fmt::Write as _;

use crate::web::html::layout::{esc, esc_into};
use crate::web::model::{Board, CardCell, Totals, Used};
use crate::web::units::{pct, share, thousands};

fn gib(mib: u64) -> String {
    format!("{:.1}", mib as f64 / 1024.0)
}

/// Shade class by the fullest dimension: idle, up to half, up to 90%, above.
fn level(c: &CardCell) -> &'static str {
    let f = [c.slots, c.mem_mib, c.cores]
        .iter()
        .map(|u| share(u.used, u.total))
        .fold(0.0, f64::max);
    if c.pods.is_empty() && c.slots.used == 0 {
        "l0"
    } else if f <= 50.0 {
        "l1"
    } else if f < 90.0 {
        "l2"
    } else {
        "l3"
    }
}

fn used(u: Used) -> String {
    format!("{}/{}", thousands(u.used), thousands(u.total))
}

/// One card's cell.
fn card_cell(out: &mut String, c: &CardCell) {
    let mut class = level(c).to_owned();
    if c.cordoned {
        class.push_str(" co");
    }
    if !c.healthy {
        class.push_str(" uh");
    }
    out.push_str("<div data-card=\"");
    esc_into(out, &c.id);
    // The title: the card's id and exact numbers (the cell shows GiB and the pods' names).
    let mut title = format!(
        "{}\n{} MiB, {}% cores, {} slots",
        c.id,
        used(c.mem_mib),
        used(c.cores),
        used(c.slots)
    );
    for x in &c.extras {
        let _ = write!(title, "\n{}: {}", x.label, x.value);
    }
    let _ = write!(out, "\" class=\"c {class}\" title=\"");
    esc_into(out, &title);
    // The bar: memory booked, in tenths.
    let tenths = (share(c.mem_mib.used, c.mem_mib.total) / 10.0)
        .round()
        .clamp(0.0, 10.0);
    let _ = write!(
        out,
        "\"><i class=w{tenths:.0}></i>#{} {}/{} · {}/{}G · {}%",
        c.index,
        c.slots.used,
        c.slots.total,
        gib(c.mem_mib.used),
        gib(c.mem_mib.total),
        c.cores.used
    );
    if c.cordoned {
        out.push_str("<span class=tag>cordoned</span>");
    }
    if !c.healthy {
        out.push_str("<span class=tag>unhealthy</span>");
    }
    if !c.pods.is_empty() {
        out.push_str("<br><small>");
        for (i, b) in c.pods.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            // The pod's name without its namespace (the API and the namespace table have them).
            esc_into(out, b.pod.rsplit('/').next().unwrap_or(&b.pod));
        }
        out.push_str("</small>");
    }
    for x in &c.extras {
        let _ = write!(
            out,
            "<br><small>{}: {}</small>",
            esc(&x.label),
            esc(&x.value)
        );
    }
    out.push_str("</div>");
}

fn totals(out: &mut String, t: &Totals) {
    let _ = write!(
        out,
        "<table class=tot id=totals><tr><th>nodes</th><td data-total=nodes>{}</td>\
         <th>cards</th><td data-total=cards>{}</td><th>idle / partial / full</th><td>{} / {} / {}</td>\
         <th>unhealthy</th><td>{}</td><th>cordoned</th><td>{}</td><th>unschedulable nodes</th><td>{}</td></tr>\
         <tr><th>slots</th><td>{}</td><th>memory, MiB</th><td>{}</td><th>cores, %</th><td>{}</td>\
         <th>allocation</th><td data-total=allocation>{}%</td><th>fragmentation</th>\
         <td data-total=fragmentation>{}%</td><th>pods bound / pending</th><td>{} / {}</td></tr></table>",
        t.nodes,
        t.cards,
        t.states.idle,
        t.states.partial,
        t.states.full,
        t.unhealthy_cards,
        t.cordoned_cards,
        t.unschedulable_nodes,
        used(t.slots),
        used(t.mem_mib),
        used(t.cores),
        pct(t.allocation_pct),
        pct(t.fragmentation_pct),
        t.pods_bound,
        t.pods_pending
    );
    out.push_str(
        "<details><summary class=muted>how allocation and fragmentation are measured</summary>\
         <p class=muted>Allocation: booked compute over all compute. Fragmentation: the share \
         of the free compute on cards where a request of the classes below could not fit \
         (gpusched-sim's measure, the same code). Classes: one card of every GPU container of \
         the pods bound here and of the pending pods analysed.</p><table class=tbl>\
         <tr><th>MiB</th><th>memory %</th><th>cores %</th><th>share</th></tr>",
    );
    for c in &t.request_classes {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}%</td></tr>",
            thousands(c.mem_mib),
            c.mem_percent,
            c.cores,
            pct(c.share * 100.0)
        );
    }
    out.push_str("</table></details>");
}

/// The cluster part of the page: totals, the filter form, the grid, unusable nodes, namespaces.
pub fn board(out: &mut String, b: &Board, base: &str) {
    out.push_str("<h2>Cluster</h2>");
    totals(out, &b.totals);
    let _ = write!(
        out,
        "<form method=get action=\"{}\" style=\"margin:8px 0\">nodes with labels \
         <input name=selector placeholder=\"key=value,...\" value=\"{}\"> <button>show</button></form>",
        if base.is_empty() { "./" } else { base },
        esc(&b.selector)
    );
    // Rows of flex boxes, not a table: a row off screen is neither laid out nor painted
    // (content-visibility), which keeps 1,000 rows quick to show.
    out.push_str("<div class=grid id=grid>");
    for n in &b.nodes {
        out.push_str("<div data-node=\"");
        esc_into(out, &n.name);
        out.push_str(if n.unschedulable {
            "\" class=\"row un\""
        } else {
            "\" class=row"
        });
        out.push_str("><b title=\"");
        let mut models: Vec<&str> = n.cards.iter().map(|c| c.model.as_str()).collect();
        models.dedup();
        esc_into(out, &models.join(", "));
        out.push_str("\">");
        esc_into(out, &n.name);
        if n.unschedulable {
            out.push_str("<span class=tag>unschedulable</span>");
        }
        out.push_str("</b>");
        for c in &n.cards {
            card_cell(out, c);
        }
        out.push_str("</div>");
    }
    out.push_str("</div>");
    if !b.unusable.is_empty() {
        out.push_str("<h2>Nodes kept back (GPU inventory not usable)</h2><table class=tbl>");
        for u in &b.unusable {
            let _ = write!(
                out,
                "<tr data-unusable=\"{}\"><th>{}</th><td>{}</td></tr>",
                esc(&u.name),
                esc(&u.name),
                esc(&u.reason)
            );
        }
        out.push_str("</table>");
    }
    out.push_str(
        "<h2>Bookings per namespace</h2><table class=tbl id=namespaces><tr><th>namespace</th>\
         <th>pods</th><th>cards</th><th>MiB</th><th>cores %</th><th>quota</th></tr>",
    );
    for ns in &b.namespaces {
        let quota: Vec<String> = ns
            .extras
            .iter()
            .map(|x| format!("{}: {}", esc(&x.label), esc(&x.value)))
            .collect();
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=muted>{}</td></tr>",
            esc(&ns.namespace),
            ns.pods,
            ns.cards,
            thousands(ns.mem_mib),
            thousands(ns.cores),
            if quota.is_empty() {
                "—".to_owned()
            } else {
                quota.join(", ")
            }
        );
    }
    out.push_str("</table>");
}
