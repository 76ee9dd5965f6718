//! The layering of docs/architecture.md, checked on the source itself: the imports between
//! the top-level modules of `src/` (read from `crate::`/`super::` paths, comments, string
//! literals and `#[cfg(test)]` modules left out) have no cycle; `commands`/`cli` are imported
//! only by `commands/` (and `main.rs`); `report/` (the renderers) only by the modules above
//! it; cudarc and nvml-wrapper are named only in `src/gpu/`, which names neither the
//! simulator nor `backend`; the simulator crates do not depend on `vramdoc`; no source file
//! is over [`MAX_LINES`] lines and no command file over [`MAX_COMMAND_LINES`]; and nothing
//! outside tests sets the process environment (`set_var`: the session's box is a value).
//! Each failure names the file and the line.

mod graph;
mod reader;

use graph::{cycles, file_edges, loops, module_edges};
use reader::{code_only, import_paths, imports, is_ident, module_path, without_test_modules};
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

fn fail_if_any(problems: Vec<String>, what: &str) {
    assert!(
        problems.is_empty(),
        "{what}:\n  {}\n",
        problems.join("\n  ")
    );
}

/// Fails naming every loop of every cycle of `edges`, with `what` to do about them.
fn fail_on_cycles(edges: &[graph::Edge], what: &str) {
    let problems: Vec<String> = cycles(edges)
        .iter()
        .flat_map(|cycle| loops(cycle, edges))
        .collect();
    fail_if_any(problems, what);
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    let edges = module_edges();
    assert!(
        edges.iter().any(|e| e.from == "report" && e.to == "model"),
        "the import reader found no `report -> model` edge: it is broken"
    );
    fail_on_cycles(
        &edges,
        "import cycle between modules of src/ (move what the lower module needs down, \
         e.g. a type into `model`, a helper into `term` or `host`)",
    );
}

#[test]
fn no_import_cycle_between_files() {
    let edges = file_edges();
    assert!(
        edges
            .iter()
            .any(|e| e.from == "diagnose/scan/no_live_owner" && e.to == "diagnose/scan/holders"),
        "the import reader found no `diagnose/scan/no_live_owner -> diagnose/scan/holders` edge: \
         it is broken"
    );
    fail_on_cycles(
        &edges,
        "import cycle between files of src/ (move the piece both use down into a file both \
         import, e.g. repro/limits.rs, replay/clock.rs, diagnose/scan/accounting.rs)",
    );
}

#[test]
fn no_module_hides_behind_a_path_attribute() {
    let src = root().join("src");
    let mut problems = Vec::new();
    for path in rust_files(&src) {
        let code = code_only(&read(&path));
        let lines: Vec<&str> = code.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            if !line.trim_start().starts_with("#[path") {
                continue;
            }
            // The item it applies to: the next line that is no attribute.
            let item = lines[n + 1..]
                .iter()
                .map(|l| l.trim())
                .find(|l| !l.starts_with("#["))
                .unwrap_or("");
            if item != "mod tests;" {
                problems.push(format!("{}:{}: #[path] on `{item}`", rel(&path), n + 1));
            }
        }
    }
    fail_if_any(
        problems,
        "a module behind #[path] is hidden from the layout: give it its place in the tree \
         (foo.rs + foo_bar.rs -> foo/mod.rs + foo/bar.rs); only `mod tests;` may point at a \
         side file",
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

/// The writers of `report::write`: who names them writes report files.
const REPORT_WRITERS: &[&str] = &[
    "write_atomic",
    "write_reports",
    "write_report",
    "append_step_summary",
    "check_outputs",
    "check_output_file",
    "check_targets",
];

/// The files that may name them: the writer itself, the one sink every command writes
/// through, and serve's flight recorder, which keeps its own store of incident files.
const REPORT_WRITER_USERS: &[&str] = &["report/write.rs", "report/sink.rs", "incidents/store.rs"];

#[test]
fn only_the_sink_writes_report_files() {
    let src = root().join("src");
    let mut problems = Vec::new();
    let mut sink_seen = false;
    for path in rust_files(&src) {
        let relative = path.strip_prefix(&src).unwrap_or(&path);
        let allowed = REPORT_WRITER_USERS.iter().any(|f| relative == Path::new(f));
        if is_test_file(&src, &path) {
            continue;
        }
        let found = named(&path, REPORT_WRITERS, &[]);
        sink_seen |= relative == Path::new("report/sink.rs") && !found.is_empty();
        if !allowed {
            problems.extend(found);
        }
    }
    assert!(
        sink_seen,
        "report/sink.rs names none of the writers: the check is broken"
    );
    fail_if_any(
        problems,
        "report files are written through the one output sink (`report::sink::Sink`, built from \
         the command's output flags): use `Sink::emit`/`Sink::file`, not `report::write`",
    );
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

/// `file: N lines` for each of `files` longer than `max` lines.
fn over(files: &[PathBuf], max: usize) -> Vec<String> {
    files
        .iter()
        .filter_map(|p| {
            let n = read(p).lines().count();
            (n > max).then(|| format!("{}: {n} lines", rel(p)))
        })
        .collect()
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
    fail_if_any(
        over(&files, MAX_LINES),
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
    let nested = code_only(
        "use CRATE::a::{b, c::{d, self}};\nlet x = super::e::f(1);\n"
            .replace("CRATE", "crate")
            .as_str(),
    );
    let found: Vec<Vec<String>> = import_paths(&nested, &["m".into(), "n".into()])
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let want: Vec<Vec<&str>> = vec![
        vec!["a", "b"],
        vec!["a", "c", "d"],
        vec!["a", "c"],
        vec!["m", "e", "f"],
    ];
    assert_eq!(found, want);
}

/// Whether `path` (under `src/`) is test code: a `tests.rs`, `*_tests.rs` or a file under a
/// `tests/` or `*_tests/` directory (these tests).
fn is_test_file(src: &Path, path: &Path) -> bool {
    let relative = path.strip_prefix(src).unwrap_or(path);
    let name = relative.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || relative
            .parent()
            .into_iter()
            .flat_map(|p| p.components())
            .any(|c| {
                let c = c.as_os_str().to_string_lossy();
                c == "tests" || c.ends_with("_tests")
            })
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
    fail_if_any(
        over(&files, MAX_COMMAND_LINES),
        &format!(
            "a command file is over {MAX_COMMAND_LINES} lines: move the engine (loops, \
             scheduling, process work) below `commands/` and the rendering into `report/`"
        ),
    );
}

#[test]
fn the_set_var_check_sees_a_call() {
    // The name spelled in two pieces, so that no grep of this file takes the sample for a call.
    let name = concat!("set", "_var");
    let code = code_only(&format!(
        "fn f() {{ std::env::{name}(\"A\", \"b\"); }}\n// {name} in a comment\n"
    ));
    assert_eq!(code.matches(name).count(), 1);
}
