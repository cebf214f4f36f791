//! The crate's layout as a rule (ARCHITECTURE.md, "Entry points / request path"): every
//! `crate::` path in `src/` points down the request path (transport -> handlers -> pipeline ->
//! {convert, cache} -> the shared leaves), no file imports itself back through others, and no
//! code outside the crate names a module that is not part of its surface (`pipeline`,
//! `testing`, the root's re-exports). Reads the sources; builds nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level modules by layer: a module may name only modules of a lower layer (or itself).
const LAYERS: &[(&str, u32)] = &[
    ("testing", 11),
    ("server", 10),
    ("transport", 9),
    ("handlers", 8),
    ("pipeline", 7),
    ("state", 6),
    ("metrics", 5),
    ("convert", 5),
    ("error", 4),
    ("cache", 3),
    ("candidates", 2),
    ("config", 1),
    ("rpc", 1),
    ("telemetry", 1),
];

/// The modules the crate's users may name (`gpusched_service::<module>::...`).
const SURFACE: &[&str] = &["pipeline", "testing"];

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if p.is_dir() {
            if !matches!(name, "target" | ".git" | "node_modules") {
                rust_files(&p, out);
            }
        } else if name.ends_with(".rs") {
            out.push(p);
        }
    }
}

/// The module path of a file under `src/` (`transport/prescan/mod.rs` -> `transport::prescan`).
fn module_of(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src()).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_str().unwrap().trim_end_matches(".rs").to_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// The text of a file without comments (line and block) and string literals, so that a path
/// in a doc comment or a message is not an import.
fn code(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            while i < b.len() && !b[i..].starts_with(b"*/") {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' && (i == 0 || b[i - 1] != b'\'') {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// Every `crate::a::b...` path of a file (and the paths of a `use crate::{a, b::c}` group,
/// one level deep), as their segments.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let path: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let segments: Vec<String> = path
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let after = &rest[path.len()..];
        if let Some(group) = after.strip_prefix('{') {
            let group: String = group.chars().take_while(|c| *c != '}').collect();
            for item in group.split(',') {
                let item: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let mut p = segments.clone();
                p.extend(
                    item.split("::")
                        .filter(|s| !s.is_empty() && *s != "self")
                        .map(str::to_owned),
                );
                out.push(p);
            }
        } else if !segments.is_empty() {
            out.push(segments);
        }
    }
    out
}

/// file module path -> the file modules it names (the longest prefix of each path that is a
/// file module).
fn edges() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(f)).collect();
    let mut edges = BTreeMap::new();
    for f in &files {
        if f.ends_with("main.rs") {
            continue;
        }
        let from = module_of(f);
        let text = std::fs::read_to_string(f).unwrap();
        let mut to = BTreeSet::new();
        for p in crate_paths(&code(&text)) {
            let target = (1..=p.len())
                .rev()
                .map(|n| p[..n].to_vec())
                .find(|m| modules.contains(m));
            if let Some(t) = target
                && t != from
                && !t.is_empty()
            {
                to.insert(t);
            }
        }
        edges.insert(from, to);
    }
    edges
}

fn layer(module: &[String]) -> u32 {
    let top = module.first().map_or("", String::as_str);
    LAYERS
        .iter()
        .find(|(m, _)| *m == top)
        .map(|(_, l)| *l)
        .unwrap_or_else(|| panic!("top-level module {top:?} has no layer in LAYERS"))
}

#[test]
fn every_import_points_down_the_request_path() {
    let edges = edges();
    assert!(edges.len() > 40, "{} files", edges.len());
    let mut upward = Vec::new();
    for (from, to) in &edges {
        if from.is_empty() {
            continue; // lib.rs: the surface
        }
        for t in to {
            let same_top = from.first() == t.first();
            if !same_top && layer(t) >= layer(from) {
                upward.push(format!("{} -> {}", from.join("::"), t.join("::")));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports up or sideways:\n{}",
        upward.join("\n")
    );
}

#[test]
fn no_file_imports_itself_back() {
    let edges = edges();
    // Depth-first search for a cycle over file modules (the root's re-exports excluded).
    fn visit(
        m: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        stack: &mut Vec<Vec<String>>,
        done: &mut BTreeSet<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        if let Some(at) = stack.iter().position(|s| s == m) {
            return Some(stack[at..].to_vec());
        }
        if done.contains(m) {
            return None;
        }
        stack.push(m.clone());
        for t in edges.get(m).into_iter().flatten() {
            if !t.is_empty()
                && let Some(c) = visit(t, edges, stack, done)
            {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(m.clone());
        None
    }
    let mut done = BTreeSet::new();
    for m in edges.keys().filter(|m| !m.is_empty()) {
        let cycle = visit(m, &edges, &mut Vec::new(), &mut done);
        assert!(
            cycle.is_none(),
            "import cycle: {}",
            cycle
                .unwrap_or_default()
                .iter()
                .map(|m| m.join("::"))
                .collect::<Vec<_>>()
                .join(" -> ")
        );
    }
}

#[test]
fn users_name_only_the_surface() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let own_src = src().canonicalize().unwrap();
    let mut files = Vec::new();
    rust_files(&repo, &mut files);
    let mut outside = Vec::new();
    let mut seen = 0;
    for f in files {
        if f.canonicalize().is_ok_and(|c| c.starts_with(&own_src)) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        let code = code(&text);
        let mut rest = code.as_str();
        while let Some(at) = rest.find("gpusched_service::") {
            rest = &rest[at + "gpusched_service::".len()..];
            seen += 1;
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            // A module is lower case and followed by `::`; a root item (start, Settings,
            // Metrics::new...) is not.
            let is_module = rest[name.len()..].starts_with("::")
                && name.starts_with(|c: char| c.is_ascii_lowercase());
            if is_module && !SURFACE.contains(&name.as_str()) {
                outside.push(format!("{}: gpusched_service::{name}::", f.display()));
            }
        }
    }
    assert!(seen > 20, "only {seen} uses of gpusched_service found");
    assert!(
        outside.is_empty(),
        "paths outside the surface:\n{}",
        outside.join("\n")
    );
}
