//! The import graphs the architecture tests check: between the top-level modules of `src/`
//! and between its files, and the cycles of either, each named by its loops.

use super::reader::{code_only, import_paths, imports, module_path, without_test_modules};
use super::{is_test_file, read, root, rust_files};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// One import of a top-level module by another: `from -> to` at `file:line`.
#[derive(Debug, Clone)]
pub(super) struct Edge {
    pub(super) from: String,
    pub(super) to: String,
    pub(super) at: String,
}

/// Every import between two top-level modules of `src/` outside test code.
pub(super) fn module_edges() -> Vec<Edge> {
    let src = root().join("src");
    let mut edges = Vec::new();
    for path in rust_files(&src) {
        let relative = path.strip_prefix(&src).unwrap_or(&path).to_path_buf();
        let name = relative.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // The binary's root and test-only files (`mod tests;`, these tests).
        if matches!(name, "main.rs" | "lib.rs") || is_test_file(&src, &path) {
            continue;
        }
        let module = module_path(&relative);
        let Some(top) = module.first().cloned() else {
            continue;
        };
        let code = without_test_modules(&code_only(&read(&path)));
        for (to, line) in imports(&code, &module) {
            if to != top && to != "self" {
                edges.push(Edge {
                    from: top.clone(),
                    to,
                    at: format!("src/{}:{line}", relative.display()),
                });
            }
        }
    }
    edges
}

/// The module path of every file of `src/` outside test code (`diagnose/scan/mod.rs` is
/// `[diagnose, scan]`), with its path relative to `src/`. The crate root is left out.
pub(super) fn file_modules() -> BTreeMap<Vec<String>, PathBuf> {
    let src = root().join("src");
    let mut out = BTreeMap::new();
    for path in rust_files(&src) {
        let relative = path.strip_prefix(&src).unwrap_or(&path).to_path_buf();
        if is_test_file(&src, &path) {
            continue;
        }
        let module = module_path(&relative);
        if !module.is_empty() {
            out.insert(module, relative);
        }
    }
    out
}

/// Every import between two files of `src/` outside test code, as `from -> to` with their
/// module paths joined by `/`: `to` is the deepest file the imported path names. A file
/// naming an item of a module around it (`super::Thresholds`) is left out: a module declares
/// its children, and they may use what it holds.
pub(super) fn file_edges() -> Vec<Edge> {
    let files = file_modules();
    let mut edges = Vec::new();
    for (module, relative) in &files {
        let code = without_test_modules(&code_only(&read(&root().join("src").join(relative))));
        for (path, line) in import_paths(&code, module) {
            let Some(to) = (1..=path.len())
                .rev()
                .map(|k| &path[..k])
                .find(|p| files.contains_key(*p))
            else {
                continue;
            };
            if to == module.as_slice() || module.starts_with(to) {
                continue;
            }
            edges.push(Edge {
                from: module.join("/"),
                to: to.join("/"),
                at: format!("src/{}:{line}", relative.display()),
            });
        }
    }
    edges
}

/// Cycles of the module graph (strongly connected components of two or more modules).
pub(super) fn cycles(edges: &[Edge]) -> Vec<BTreeSet<String>> {
    let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for e in edges {
        graph.entry(&e.from).or_default().insert(&e.to);
    }
    let reach = |from: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(m) = stack.pop() {
            for next in graph.get(m.as_str()).into_iter().flatten() {
                if seen.insert(next.to_string()) {
                    stack.push(next.to_string());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&str, BTreeSet<String>> =
        graph.keys().map(|m| (*m, reach(m))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for (m, r) in &reachable {
        if !r.contains(*m) {
            continue;
        }
        let scc: BTreeSet<String> = r
            .iter()
            .filter(|o| reachable.get(o.as_str()).is_some_and(|b| b.contains(*m)))
            .cloned()
            .collect();
        if !out.contains(&scc) {
            out.push(scc);
        }
    }
    out
}

/// The shortest loops through each module of `cycle`, each once: `a -> b (file:line) -> a
/// (file:line)`, with the first import found of each step.
pub(super) fn loops(cycle: &BTreeSet<String>, edges: &[Edge]) -> Vec<String> {
    let first_at = |from: &str, to: &str| {
        edges
            .iter()
            .find(|e| e.from == from && e.to == to)
            .map_or(String::new(), |e| e.at.clone())
    };
    let mut seen: BTreeSet<BTreeSet<(String, String)>> = BTreeSet::new();
    let mut out = Vec::new();
    for start in cycle {
        // Breadth-first from `start` back to it, inside the cycle.
        let mut parent: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start.clone()]);
        let mut back: Option<String> = None;
        while let Some(m) = queue.pop_front() {
            let nexts: BTreeSet<&String> = edges
                .iter()
                .filter(|e| e.from == m && cycle.contains(&e.to))
                .map(|e| &e.to)
                .collect();
            if nexts.contains(start) {
                back = Some(m);
                break;
            }
            for n in nexts {
                if !parent.contains_key(n) {
                    parent.insert(n.clone(), m.clone());
                    queue.push_back(n.clone());
                }
            }
        }
        let Some(last) = back else { continue };
        let mut path = vec![last.clone()];
        while let Some(p) = parent.get(path.last().map_or("", |s| s.as_str())) {
            path.push(p.clone());
        }
        if path.last() != Some(start) {
            path.push(start.clone());
        }
        path.reverse();
        path.push(start.clone());
        let steps: BTreeSet<(String, String)> = path
            .windows(2)
            .map(|w| (w[0].clone(), w[1].clone()))
            .collect();
        if !seen.insert(steps) {
            continue;
        }
        let mut text = path[0].clone();
        for w in path.windows(2) {
            text.push_str(&format!(" -> {} ({})", w[1], first_at(&w[0], &w[1])));
        }
        out.push(text);
    }
    out
}
