//! The layering of docs/architecture.md, checked on the source itself: the imports between
//! the top-level modules of `src/` (read from `crate::`/`super::` paths, comments, string
//! literals and `#[cfg(test)]` modules left out) have no cycle; `commands`/`cli` are imported
//! only by `commands/` (and `main.rs`); `report/` (the renderers) only by the modules above
//! it; cudarc and nvml-wrapper are named only in `src/gpu/`, which names neither the
//! simulator nor `backend`; the simulator crates do not depend on `vramdoc`; no source file
//! is over [`MAX_LINES`] lines and no command file over [`MAX_COMMAND_LINES`]; and nothing
//! outside tests sets the process environment (`set_var`: the session's box is a value).
//! Each failure names the file and the line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Longest source file (lines) in `src/` and `crates/*/src/`.
const MAX_LINES: usize = 800;

/// The only modules that may import `report` (the renderers and writer): the ones that
/// render or write a report. Every stage below depends on `model` instead.
const REPORT_IMPORTERS: &[&str] = &["commands", "serve", "cli", "incidents"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn rel(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `src` with comments and the contents of string and char literals blanked out (newlines
/// kept, so line numbers stay right).
fn code_only(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < c.len() {
        let prev_ident = i > 0 && is_ident(c[i - 1]);
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if !prev_ident && (c[i] == 'r' || (c[i] == 'b' && c.get(i + 1) == Some(&'r'))) {
            // A raw string r"..", r#".."#, br#".."#, or just an identifier starting with r/b.
            let start = if c[i] == 'b' { i + 2 } else { i + 1 };
            let mut j = start;
            while c.get(j) == Some(&'#') {
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            let hashes = j - start;
            out.push('"');
            i = j + 1;
            while i < c.len() {
                if c[i] == '"' && (0..hashes).all(|k| c.get(i + 1 + k) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                blank(&mut out, c[i]);
                i += 1;
            }
            out.push('"');
        } else if c[i] == '"' {
            out.push('"');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            out.push('"');
            i += 1;
        } else if c[i] == '\'' {
            // A char literal ('a', '\n', '\u{..}') or a lifetime ('a).
            let end = if c.get(i + 1) == Some(&'\\') {
                (i + 3..c.len()).find(|&k| c[k] == '\'')
            } else if c.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    out.push_str("' '");
                    i = e + 1;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// `code` without its `#[cfg(test)] mod NAME { .. }` blocks.
fn without_test_modules(code: &str) -> String {
    let mut out = code.to_string();
    while let Some(at) = out.find("#[cfg(test)]") {
        // Past further attributes and a visibility, to `mod NAME {` or `mod NAME;`.
        let mut rest = &out[at + "#[cfg(test)]".len()..];
        loop {
            rest = rest.trim_start();
            if rest.starts_with("#[") {
                rest = rest.find(']').map_or("", |k| &rest[k + 1..]);
            } else if let Some(r) = rest.strip_prefix("pub") {
                let r = r.trim_start();
                rest = if r.starts_with('(') {
                    r.find(')').map_or("", |k| &r[k + 1..])
                } else {
                    r
                };
            } else {
                break;
            }
        }
        let body_start = rest
            .strip_prefix("mod ")
            .and_then(|rest| rest.find(['{', ';']).map(|k| (rest, k)));
        let Some((rest, k)) = body_start else {
            // Not a module (a test-only function or import): drop the attribute only.
            out.replace_range(at..at + "#[cfg(test)]".len(), "");
            continue;
        };
        let open = out.len() - rest.len() + k;
        if out.as_bytes()[open] == b';' {
            out.replace_range(at..=open, "");
            continue;
        }
        let mut depth = 0usize;
        let mut end = out.len();
        for (j, ch) in out[open..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + j + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        let lines = "\n".repeat(out[at..end].matches('\n').count());
        out.replace_range(at..end, &lines);
    }
    out
}

/// The module path of a file of `src/` (`report/terminal/run.rs` → `[report, terminal,
/// run]`, `report/mod.rs` → `[report]`, `lib.rs` → `[]`).
fn module_path(rel_to_src: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel_to_src
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        match last.as_str() {
            "mod.rs" | "lib.rs" | "main.rs" => {}
            f => parts.push(f.trim_end_matches(".rs").to_string()),
        }
    }
    parts
}

/// The top-level modules `code` (of the module at `module`) imports, with the line of each:
/// every `crate::x` and `super::..::x` path, `use crate::{a, b::c}` groups included.
fn imports(code: &str, module: &[String]) -> Vec<(String, usize)> {
    let c: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let line_of = |i: usize| c[..i].iter().filter(|ch| **ch == '\n').count() + 1;
    let word_at = |i: usize, w: &str| -> bool {
        w.chars()
            .enumerate()
            .all(|(k, ch)| c.get(i + k) == Some(&ch))
            && (i == 0 || !is_ident(c[i - 1]))
            && c.get(i + w.len()).is_some_and(|ch| !is_ident(*ch))
    };
    let ident_at = |mut i: usize| -> (String, usize) {
        while c.get(i).is_some_and(|ch| ch.is_whitespace()) {
            i += 1;
        }
        let s: String = c[i..].iter().take_while(|ch| is_ident(**ch)).collect();
        let n = s.chars().count();
        (s, i + n)
    };
    let sep_at = |mut i: usize| -> Option<usize> {
        while c.get(i).is_some_and(|ch| ch.is_whitespace()) {
            i += 1;
        }
        (c.get(i) == Some(&':') && c.get(i + 1) == Some(&':')).then_some(i + 2)
    };
    // Inline modules (`mod name { .. }`) open at a brace depth: `super` inside one is the
    // module around it.
    let mut depth = 0usize;
    let mut inline: Vec<(usize, String)> = Vec::new();
    let mut pending: Option<String> = None;
    let mut i = 0;
    while i < c.len() {
        match c[i] {
            '{' => {
                depth += 1;
                if let Some(name) = pending.take() {
                    inline.push((depth, name));
                }
                i += 1;
                continue;
            }
            '}' => {
                if inline.last().is_some_and(|(d, _)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
                continue;
            }
            ';' => {
                pending = None;
                i += 1;
                continue;
            }
            _ => {}
        }
        if word_at(i, "mod") {
            let (name, end) = ident_at(i + 3);
            pending = (!name.is_empty()).then_some(name);
            i = end;
            continue;
        }
        let (base, mut j): (Vec<String>, usize) = if word_at(i, "crate") {
            (Vec::new(), i + 5)
        } else if word_at(i, "super") && (i < 2 || c[i - 2..i] != [':', ':']) {
            let mut base: Vec<String> = module
                .iter()
                .cloned()
                .chain(inline.iter().map(|(_, name)| name.clone()))
                .collect();
            let mut j = i + 5;
            base.pop();
            // super::super::..
            while let Some(k) = sep_at(j) {
                if ident_at(k).0 == "super" {
                    base.pop();
                    j = ident_at(k).1;
                } else {
                    break;
                }
            }
            (base, j)
        } else {
            i += 1;
            continue;
        };
        let Some(k) = sep_at(j) else {
            i = j;
            continue;
        };
        j = k;
        let line = line_of(i);
        if let Some(top) = base.first() {
            out.push((top.clone(), line));
        } else {
            while c.get(j).is_some_and(|ch| ch.is_whitespace()) {
                j += 1;
            }
            if c.get(j) == Some(&'{') {
                // A group: the first identifier of each item at depth 1.
                let mut level = 0;
                let mut expect = true;
                while j < c.len() {
                    match c[j] {
                        '{' => {
                            level += 1;
                            expect = level == 1;
                        }
                        '}' => {
                            level -= 1;
                            if level == 0 {
                                j += 1;
                                break;
                            }
                        }
                        ',' if level == 1 => expect = true,
                        ch if expect && is_ident(ch) => {
                            let (name, end) = ident_at(j);
                            out.push((name, line));
                            expect = false;
                            j = end;
                            continue;
                        }
                        _ => {}
                    }
                    j += 1;
                }
            } else {
                let (name, _) = ident_at(j);
                if !name.is_empty() {
                    out.push((name, line));
                }
            }
        }
        i = j.max(i + 1);
    }
    out
}

/// One import of a top-level module by another: `from -> to` at `file:line`.
#[derive(Debug, Clone)]
struct Edge {
    from: String,
    to: String,
    at: String,
}

/// Every import between two top-level modules of `src/` outside test code.
fn module_edges() -> Vec<Edge> {
    let src = root().join("src");
    let mut edges = Vec::new();
    for path in rust_files(&src) {
        let relative = path.strip_prefix(&src).unwrap_or(&path).to_path_buf();
        let name = relative.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // The binary's root and test-only files (`mod tests;`, this file).
        if matches!(name, "main.rs" | "lib.rs" | "tests.rs") || name.ends_with("_tests.rs") {
            continue;
        }
        if relative.components().any(|c| c.as_os_str() == "tests") {
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

/// Cycles of the module graph (strongly connected components of two or more modules).
fn cycles(edges: &[Edge]) -> Vec<BTreeSet<String>> {
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

fn fail_if_any(problems: Vec<String>, what: &str) {
    assert!(
        problems.is_empty(),
        "{what}:\n  {}\n",
        problems.join("\n  ")
    );
}

/// The shortest loops through each module of `cycle`, each once: `a -> b (file:line) -> a
/// (file:line)`, with the first import found of each step.
fn loops(cycle: &BTreeSet<String>, edges: &[Edge]) -> Vec<String> {
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

#[test]
fn no_import_cycle_between_top_level_modules() {
    let edges = module_edges();
    assert!(
        edges.iter().any(|e| e.from == "report" && e.to == "model"),
        "the import reader found no `report -> model` edge: it is broken"
    );
    let problems: Vec<String> = cycles(&edges)
        .iter()
        .flat_map(|cycle| loops(cycle, &edges))
        .collect();
    fail_if_any(
        problems,
        "import cycle between modules of src/ (move what the lower module needs down, \
         e.g. a type into `model`, a helper into `term` or `host`)",
    );
}

#[test]
fn only_commands_import_commands_and_cli() {
    let problems: Vec<String> = module_edges()
        .iter()
        .filter(|e| (e.to == "commands" || e.to == "cli") && e.from != "commands")
        .map(|e| format!("{} -> {} ({})", e.from, e.to, e.at))
        .collect();
    fail_if_any(
        problems,
        "only commands/ and main.rs may import `commands` or `cli` (move what is shared \
         below them)",
    );
}

#[test]
fn stages_use_the_model_not_the_renderers() {
    let problems: Vec<String> = module_edges()
        .iter()
        .filter(|e| e.to == "report" && !REPORT_IMPORTERS.contains(&e.from.as_str()))
        .map(|e| format!("{} -> report ({})", e.from, e.at))
        .collect();
    fail_if_any(
        problems,
        "report/ (renderers, writer) imported below it: import the types from the `model` module",
    );
}

/// `(file, line)` of each identifier in `names` (or starting with one of `prefixes`) in the
/// code of `path` (comments and strings left out).
fn named(path: &Path, names: &[&str], prefixes: &[&str]) -> Vec<String> {
    let code = code_only(&read(path));
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        for word in line.split(|c: char| !is_ident(c)) {
            if names.contains(&word) || prefixes.iter().any(|p| word.starts_with(p)) {
                out.push(format!("{}:{} names `{word}`", rel(path), n + 1));
            }
        }
    }
    out
}

#[test]
fn only_gpu_names_the_driver_crates_and_gpu_names_no_simulator() {
    let src = root().join("src");
    let gpu = src.join("gpu");
    let mut problems = Vec::new();
    for path in rust_files(&src) {
        if !path.starts_with(&gpu) {
            problems.extend(named(
                &path,
                &["cudarc", "nvml_wrapper", "nvml_wrapper_sys"],
                &[],
            ));
        } else {
            problems.extend(named(&path, &[], &["vramdoc_sim"]));
        }
    }
    problems.extend(
        module_edges()
            .iter()
            .filter(|e| e.from == "gpu" && e.to == "backend")
            .map(|e| format!("gpu -> backend ({})", e.at)),
    );
    fail_if_any(
        problems,
        "cudarc/nvml-wrapper belong to src/gpu/ only, and src/gpu/ (the real path) names \
         neither the simulator nor `backend`",
    );
}

#[test]
fn simulator_crates_do_not_depend_on_vramdoc() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for entry in std::fs::read_dir(root().join("crates"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let manifest = entry.path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        checked += 1;
        let doc: toml::Table = text
            .parse()
            .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
        let mut tables: Vec<(String, &toml::Table)> = Vec::new();
        for (key, value) in &doc {
            if key.ends_with("dependencies") {
                tables.extend(value.as_table().map(|t| (key.clone(), t)));
            }
        }
        for (target, value) in doc
            .get("target")
            .and_then(|t| t.as_table())
            .into_iter()
            .flatten()
        {
            for (key, deps) in value.as_table().into_iter().flatten() {
                if key.ends_with("dependencies") {
                    tables.extend(
                        deps.as_table()
                            .map(|t| (format!("target.{target}.{key}"), t)),
                    );
                }
            }
        }
        for (section, deps) in tables {
            for (name, spec) in deps {
                let package = spec.get("package").and_then(|p| p.as_str()).unwrap_or(name);
                if package == "vramdoc" {
                    problems.push(format!("{}: [{section}] {name}", rel(&manifest)));
                }
            }
        }
    }
    assert!(checked >= 2, "found {checked} crates under crates/");
    fail_if_any(
        problems,
        "the simulator crates must not depend on vramdoc (the CLI): move what they share into \
         crates/gpu-spec",
    );
}

#[test]
fn no_source_file_is_over_the_limit() {
    let mut files = rust_files(&root().join("src"));
    for entry in std::fs::read_dir(root().join("crates"))
        .into_iter()
        .flatten()
        .flatten()
    {
        files.extend(rust_files(&entry.path().join("src")));
    }
    assert!(files.len() > 50, "found only {} source files", files.len());
    let problems: Vec<String> = files
        .iter()
        .filter_map(|p| {
            let n = read(p).lines().count();
            (n > MAX_LINES).then(|| format!("{}: {n} lines", rel(p)))
        })
        .collect();
    fail_if_any(
        problems,
        &format!(
            "source files over {MAX_LINES} lines: split each into a folder of files by concern \
             (e.g. foo.rs -> foo/mod.rs + foo/<part>.rs, or its tests into foo/tests.rs)"
        ),
    );
}

#[test]
fn the_reader_sees_what_it_must() {
    // `CRATE` stands for the keyword, so that no other reader of this file mistakes the
    // sample for an import of this file.
    let sample = "use CRATE::{model::Report, term};\n// CRATE::commands\nlet s = \"CRATE::cli\";\n\
         let r = r#\"CRATE::cli\"#; let c = '\"'; fn f<'a>() { super::super::host::pids(); }\n\
         #[cfg(test)]\nmod tests { use CRATE::report; }\n#[cfg(test)]\n#[allow(unused)]\n\
         pub(crate) mod more { use CRATE::cli; }\nlet e = '\\''; use CRATE::units;\n\
         mod inner { fn g() { super::super::super::redact::x(); } }\nuse CRATE::exit;\n";
    let code = code_only(&sample.replace("CRATE", "crate"));
    let code = without_test_modules(&code);
    let found: Vec<String> = imports(&code, &["a".into(), "b".into()])
        .into_iter()
        .map(|(m, _)| m)
        .collect();
    assert_eq!(found, ["model", "term", "host", "units", "redact", "exit"]);
    assert_eq!(
        module_path(Path::new("report/terminal/run.rs")),
        ["report", "terminal", "run"]
    );
    assert_eq!(module_path(Path::new("report/mod.rs")), ["report"]);
}

/// Whether `path` (under `src/`) is test code: a `tests.rs`, `*_tests.rs` or a file under a
/// `tests/` directory.
fn is_test_file(src: &Path, path: &Path) -> bool {
    let relative = path.strip_prefix(src).unwrap_or(path);
    let name = relative.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || relative.components().any(|c| c.as_os_str() == "tests")
}

#[test]
fn no_process_wide_environment_is_set_outside_tests() {
    let src = root().join("src");
    let mut problems = Vec::new();
    for path in rust_files(&src) {
        if is_test_file(&src, &path) {
            continue;
        }
        let code = without_test_modules(&code_only(&read(&path)));
        for (n, line) in code.lines().enumerate() {
            let words: Vec<&str> = line.split(|c: char| !is_ident(c)).collect();
            for w in ["set_var", "remove_var"] {
                if words.contains(&w) {
                    problems.push(format!("{}:{} calls `{w}`", rel(&path), n + 1));
                }
            }
        }
    }
    fail_if_any(
        problems,
        "the process environment is not a channel: pass the value (the session's `Backend`) \
         to engines, and set a child's variables on its own `Command`",
    );
}

/// Longest file (lines) under `src/commands/`: a command is glue (parse → engine → render →
/// exit code); what grows beyond this belongs in an engine or a renderer.
const MAX_COMMAND_LINES: usize = 200;

#[test]
fn command_files_are_glue() {
    let commands = root().join("src/commands");
    let files = rust_files(&commands);
    assert!(
        files.len() > 5,
        "no command files found under {}",
        commands.display()
    );
    let problems: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let n = read(path).lines().count();
            (n > MAX_COMMAND_LINES).then(|| format!("{}: {n} lines", rel(path)))
        })
        .collect();
    fail_if_any(
        problems,
        &format!(
            "a command file is over {MAX_COMMAND_LINES} lines: move the engine (loops, \
             scheduling, process work) below `commands/` and the rendering into `report/`"
        ),
    );
}

#[test]
fn the_set_var_check_sees_a_call() {
    let code = code_only("fn f() { std::env::set_var(\"A\", \"b\"); }\n// set_var in a comment\n");
    assert_eq!(code.matches("set_var").count(), 1);
}
