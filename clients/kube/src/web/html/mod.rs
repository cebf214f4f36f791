//! Server-rendered HTML of the operator view: plain pages, inline style, no script, every link
//! relative. `layout.rs` is the page and escaping; `grid.rs` the cluster, `verdict.rs` why pods
//! wait, `explain.rs` a pod's decision, `forms.rs` what-if and login. They read the model only.

mod explain;
mod forms;
mod grid;
mod layout;
mod verdict;

pub use forms::Form;

use crate::web::model::{Board, Explanation, PendingList};

/// The cluster page: totals, grid, pending pods.
pub fn cluster_page(board: &Board, pending: &PendingList) -> String {
    let mut body = String::with_capacity(board.nodes.len() * 1200 + 8192);
    grid::board(&mut body, board, "");
    verdict::pending(&mut body, pending, "");
    layout::page("cluster", "", &body)
}

/// A pod's page (at `pod/<namespace>/<name>`).
pub fn pod_page(e: &Explanation) -> String {
    let mut body = String::new();
    explain::explanation(&mut body, e, "../../");
    layout::page(&e.pod, "../../", &body)
}

/// The what-if page (at `what-if`).
pub fn what_if_page(f: &Form<'_>) -> String {
    let mut body = String::new();
    forms::what_if(&mut body, f);
    layout::page("what if", "", &body)
}

/// The login page, for any path: `base` leads back to the root from it.
pub fn login_page(failed: bool, base: &str) -> String {
    let mut body = String::new();
    forms::login(&mut body, failed, base);
    layout::bare_page("log in", &body)
}

/// A page saying what is wrong (a pod not found, a bad selector).
pub fn message_page(title: &str, message: &str, base: &str) -> String {
    layout::page(
        title,
        base,
        &format!("<p class=error id=message>{}</p>", layout::esc(message)),
    )
}
