//! Terminal safety and the one standard-output writer.
//!
//! Text a process or a file controls (process names and arguments, scenario and variant
//! names, labels, error messages quoting file content) goes through [`clean`] (one field) or
//! [`clean_text`] (a block whose newlines are kept) before it reaches a terminal: control
//! characters (C0, DEL, C1) and bidirectional overrides become visible escapes (`\x1b`,
//! `\u{202e}`), so no escape sequence, carriage return or Trojan-Source reordering can act on
//! the terminal. Markdown and HTML have their own escaping (`report::markdown`,
//! `report::html`), and with the scenario writer (`repro::toml_out`) apply the same
//! [`is_hidden`] policy through [`reveal_hidden`]; JSON escapes C0 itself.
//!
//! [`print`] is how commands write to standard output: a closed pipe (`| head -1`) ends the
//! output quietly, any other write error (`> /dev/full`) is an [`OutputError`], exit 3, one
//! line on stderr — never a panic. [`eprint_line`] writes a line to stderr and ignores errors.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// The one policy for characters that hide or reorder text: bidirectional embeddings,
/// overrides, isolates and marks (U+202A–202E, U+2066–2069, U+200E/200F, U+061C: Trojan
/// Source, CVE-2021-42574), zero-width characters and the BOM (U+200B–200D, U+2060,
/// U+FEFF), and the Unicode line separators. They never reach a terminal, an HTML or
/// Markdown report or a scenario file raw: [`clean`] escapes them with the control
/// characters, [`reveal_hidden`] alone for documents whose renderer handles controls.
pub fn is_hidden(c: char) -> bool {
    matches!(
        c,
        '\u{202A}'..='\u{202E}'
            | '\u{2066}'..='\u{2069}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2060}'
            | '\u{061C}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{FEFF}'
    )
}

/// Whether `c` must not reach a terminal as is.
fn is_unsafe(c: char) -> bool {
    c.is_control() || is_hidden(c)
}

/// Text for a document (HTML, Markdown, JUnit, a scenario file): every [`is_hidden`]
/// character becomes the visible escape [`clean`] writes (`\u{202e}`); control characters
/// are left to the document's own escaping. Text without one comes back unchanged.
pub fn reveal_hidden(s: &str) -> String {
    escape_where(s, is_hidden, escape_into)
}

fn escape_into(out: &mut String, c: char) {
    let n = c as u32;
    if n < 0x100 {
        out.push_str(&format!("\\x{n:02x}"));
    } else {
        out.push_str(&format!("\\u{{{n:x}}}"));
    }
}

/// One field (a name, a label, a command line) made safe for a terminal: every control
/// character, newline and tab included, becomes a visible escape. Text without such
/// characters comes back unchanged.
pub fn clean(s: &str) -> String {
    escape_where(s, is_unsafe, escape_into)
}

/// `s` with every character that `escape` picks written out by `write_escape`; `s` as it is
/// when there is none.
fn escape_where(
    s: &str,
    escape: impl Fn(char) -> bool,
    write_escape: impl Fn(&mut String, char),
) -> String {
    if !s.chars().any(&escape) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if escape(c) {
            write_escape(&mut out, c);
        } else {
            out.push(c);
        }
    }
    out
}

/// Bytes a process chose (its name, an argument, an environment value), UTF-8 or not, as
/// text: valid UTF-8 stays as it is, every byte that is not becomes a visible `\xNN` escape,
/// the way [`clean`] writes a control character (`caf\xe9`). Nothing is dropped or refused:
/// one bad byte never costs the rest of the field. Control characters are left to [`clean`]
/// and [`one_line`] (the same `\xNN` form on a terminal).
pub fn escape_bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// A command line as the OS gave it, one [`escape_bytes`] string per argument.
pub fn escape_args<A: AsRef<std::ffi::OsStr>>(args: &[A]) -> Vec<String> {
    use std::os::unix::ffi::OsStrExt;
    args.iter()
        .map(|a| escape_bytes(a.as_ref().as_bytes()))
        .collect()
}

/// One field of untrusted text kept to one line: every control character (newline, tab,
/// escape, C1) becomes a space. For what is stored in a report and shown as one line (a
/// stderr line, a process name or command line, a marker label); [`clean`] still escapes
/// what reaches a terminal.
pub fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A block of text made safe for a terminal: like [`clean`], but `\n` is kept.
pub fn clean_text(s: &str) -> String {
    escape_where(s, |c| c != '\n' && is_unsafe(c), escape_into)
}

/// Standard output could not be written (not a closed pipe: that ends output quietly).
#[derive(Debug, thiserror::Error)]
#[error("writing to standard output: {0}")]
pub struct OutputError(#[source] pub std::io::Error);

/// Set once the reader of standard output went away; later writes are skipped.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Write bytes to standard output and flush. A closed pipe is not an error: the rest of the
/// output is dropped and the command goes on to its normal exit code.
pub fn write_stdout(bytes: &[u8]) -> Result<(), OutputError> {
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            STDOUT_CLOSED.store(true, Ordering::Relaxed);
            Ok(())
        }
        Err(e) => Err(OutputError(e)),
    }
}

/// Print human text (a table, a line) on standard output, made safe with [`clean_text`],
/// with a final newline.
pub fn print(text: &str) -> Result<(), OutputError> {
    let mut s = clean_text(text);
    s.push('\n');
    write_stdout(s.as_bytes())
}

/// JSON made safe for a terminal and still the same JSON: the characters [`clean`] escapes
/// and serde_json leaves raw (C1 controls, bidirectional overrides) become `\uXXXX` escapes.
pub fn json_safe(s: &str) -> String {
    escape_where(
        s,
        |c| c != '\n' && is_unsafe(c),
        |out, c| {
            let mut buf = [0u16; 2];
            for unit in c.encode_utf16(&mut buf) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        },
    )
}

/// Print JSON on standard output (made safe with [`json_safe`]), with a final newline.
pub fn print_json(json: &str) -> Result<(), OutputError> {
    let mut s = json_safe(json);
    if !s.ends_with('\n') {
        s.push('\n');
    }
    write_stdout(s.as_bytes())
}

/// A line on standard error, made safe with [`clean_text`]; write errors are ignored (there
/// is nowhere left to report them).
pub fn eprint_line(text: &str) {
    let mut s = clean_text(text);
    s.push('\n');
    let _ = std::io::stderr().lock().write_all(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn escapes_become_visible() {
        assert_eq!(clean("a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(clean("x\ry\n"), "x\\x0dy\\x0a");
        assert_eq!(clean("\u{9b}31m"), "\\x9b31m");
        assert_eq!(clean("abc\u{202e}def"), "abc\\u{202e}def");
        assert_eq!(clean_text("line1\nline2\x07"), "line1\nline2\\x07");
        assert_eq!(clean("plain text, é ü 日本"), "plain text, é ü 日本");
        assert_eq!(one_line("a\nb\tc\x1b[2J\u{9b}d"), "a b c [2J d");
        let j = json_safe(&serde_json::to_string("a\u{9b}b\u{202e}\x1b").unwrap());
        assert_eq!(j, r#""a\u009bb\u202e\u001b""#);
        let back: String = serde_json::from_str(&j).unwrap();
        assert_eq!(back, "a\u{9b}b\u{202e}\x1b");
    }

    #[test]
    fn bytes_that_are_not_utf8_are_escaped_not_dropped() {
        assert_eq!(escape_bytes(b"caf\xe9"), "caf\\xe9");
        assert_eq!(escape_bytes(b"\xff\xfe"), "\\xff\\xfe");
        assert_eq!(escape_bytes("é日本".as_bytes()), "é日本");
        assert_eq!(escape_bytes(b"a\xffb\xc3"), "a\\xffb\\xc3");
        let args = [
            std::ffi::OsString::from("python"),
            std::os::unix::ffi::OsStringExt::from_vec(b"--tag=\xff".to_vec()),
            std::ffi::OsString::new(),
        ];
        assert_eq!(escape_args(&args), ["python", "--tag=\\xff", ""]);
    }

    proptest! {
        #[test]
        fn escaped_bytes_are_always_text(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let s = escape_bytes(&b);
            // Valid input comes back unchanged; anything else grows visible escapes only.
            if let Ok(v) = std::str::from_utf8(&b) {
                prop_assert_eq!(&s, v);
            } else {
                prop_assert!(s.contains("\\x"));
            }
        }

        #[test]
        fn nothing_unsafe_survives(s in "\\PC*|[\\x00-\\x1f\\x7f-\\u{9f}\\u{202a}-\\u{202e}a-z]{0,40}") {
            prop_assert!(!clean(&s).chars().any(is_unsafe));
            prop_assert!(!clean_text(&s).chars().any(|c| c != '\n' && is_unsafe(c)));
            // Idempotent on its own output.
            prop_assert_eq!(clean(&clean(&s)), clean(&s));
        }
    }
}
