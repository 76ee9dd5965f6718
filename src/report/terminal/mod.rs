//! The terminal output format, beside JSON, Markdown and HTML (as ripgrep's `printer`): pure
//! functions from the report model plus presentation [`Options`] to the text a person reads
//! in a terminal. [`scan`] is `vramdoc scan`'s tables, [`replay`] the summary table and
//! verdict words of `vramdoc replay`, [`run`] the summary `vramdoc run` prints when the job ends; progress bars stay with the commands that drive them.
//! Every field a process, a scenario file or a report file controls is made terminal-safe
//! here ([`crate::term::clean`]); commands only write the result out.

pub mod plan;
pub mod replay;
pub mod run;
pub mod scan;
pub mod whatif;

use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};

/// Width every table is laid out for, unless [`Options::width`] says otherwise.
pub const WIDTH: u16 = 100;

/// How terminal text is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Columns every line fits in.
    pub width: u16,
}

impl Default for Options {
    fn default() -> Self {
        Options { width: WIDTH }
    }
}

/// A table in the one style every command uses, laid out for `width` columns.
pub fn table(header: Vec<&str>, width: u16) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_width(width)
        .set_header(header);
    t
}

/// Cut a free-text line to `width` characters, ending in `…` when cut.
pub fn clip(line: &str, width: u16) -> String {
    let n = usize::from(width.max(1));
    if line.chars().count() <= n {
        return line.to_string();
    }
    let mut s: String = line.chars().take(n - 1).collect();
    s.push('…');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_cuts_to_width() {
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcd", 3), "ab…");
        assert_eq!(clip("ééé", 2), "é…");
    }
}
