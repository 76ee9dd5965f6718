//! The source reader of the architecture tests: code with comments and literals blanked,
//! `#[cfg(test)]` modules left out, a file's module path, and the crate paths it names.

use std::path::Path;

pub(super) fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `src` with comments and the contents of string and char literals blanked out (newlines
/// kept, so line numbers stay right).
pub(super) fn code_only(src: &str) -> String {
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
pub(super) fn without_test_modules(code: &str) -> String {
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
pub(super) fn module_path(rel_to_src: &Path) -> Vec<String> {
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
pub(super) fn imports(code: &str, module: &[String]) -> Vec<(String, usize)> {
    import_paths(code, module)
        .into_iter()
        .filter_map(|(path, line)| Some((path.first()?.clone(), line)))
        .collect()
}

/// The item paths `code` (of the module at `module`) names from the crate, each from the
/// crate root, with its line: `crate::a::b::c` and `super::..::b::c` (resolved against
/// `module` and the inline modules around it), every leaf of a `use` tree
/// (`use crate::{a, b::{c, d}}` is `a`, `b::c`, `b::d`).
pub(super) fn import_paths(code: &str, module: &[String]) -> Vec<(Vec<String>, usize)> {
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
        let (base, j): (Vec<String>, usize) = if word_at(i, "crate") {
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
        let line = line_of(i);
        let mut leaves = Vec::new();
        let end = use_tree(&c, k, base, &mut leaves);
        out.extend(leaves.into_iter().map(|p| (p, line)));
        i = end.max(i + 1);
    }
    out
}

/// The leaves of the `use` tree (or plain path) at `c[i..]`, each `prefix` followed by its
/// segments; returns where the tree ends. A group `{a, b::{c}}` gives one leaf per item.
pub(super) fn use_tree(
    c: &[char],
    mut i: usize,
    mut prefix: Vec<String>,
    leaves: &mut Vec<Vec<String>>,
) -> usize {
    let skip_ws = |mut i: usize| {
        while c.get(i).is_some_and(|ch| ch.is_whitespace()) {
            i += 1;
        }
        i
    };
    loop {
        i = skip_ws(i);
        if c.get(i) == Some(&'{') {
            i += 1;
            loop {
                i = skip_ws(i);
                match c.get(i) {
                    None => return i,
                    Some('}') => return i + 1,
                    Some(',') => i += 1,
                    Some(_) => {
                        let end = use_tree(c, i, prefix.clone(), leaves);
                        // An item that is no path (`self`, `*`, `Foo as Bar`'s rest) moves on.
                        i = if end > i { end } else { i + 1 };
                        i = skip_ws(i);
                        // Past `as name` and anything else up to the next item.
                        while c.get(i).is_some_and(|ch| *ch != ',' && *ch != '}') {
                            i += 1;
                        }
                    }
                }
            }
        }
        let start = i;
        while c.get(i).is_some_and(|ch| is_ident(*ch)) {
            i += 1;
        }
        if i == start {
            if !prefix.is_empty() {
                leaves.push(prefix);
            }
            return i;
        }
        let name: String = c[start..i].iter().collect();
        if name != "self" {
            prefix.push(name);
        }
        let after = skip_ws(i);
        if c.get(after) == Some(&':') && c.get(after + 1) == Some(&':') {
            i = after + 2;
            continue;
        }
        leaves.push(prefix);
        return i;
    }
}
