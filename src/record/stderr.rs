//! The job's output as evidence: a bounded tail of its last lines (redacted) and, for each
//! line, the recogniser's verdict (`record::recognise`, one table of sourced patterns for
//! PyTorch, TensorFlow, JAX/XLA, NCCL, vLLM, llama.cpp/Ollama, TensorRT, torchrun, cuBLAS/cuDNN
//! and the CUDA runtime), with every number a PyTorch out-of-memory line states
//! ([`OomDetail`]). Multi-line forms are read here as bounded blocks: torchrun's
//! `ChildFailedError` table, PyTorch's `DistBackendError … Last error:` block (NCCL's own
//! error on the lines after). Stream-agnostic: stderr and stdout lines go through the same
//! parser (vLLM logs to stdout). Recognising a line is recording, not diagnosing: the
//! findings are decided in `diagnose/` from these events.

use super::recording::ErrorKind;
use crate::model::RunErrorKind;
use std::collections::VecDeque;

/// Lines kept in the tail.
pub const TAIL_LINES: usize = 40;
/// Characters kept of one line.
pub const LINE_CHARS: usize = 500;

/// A recognised error line.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedError {
    pub kind: RunErrorKind,
    /// CUDA ordinal named by the line (`GPU 0`, `cuda:1`).
    pub device: Option<u32>,
    /// Bytes the failed allocation (or the engine's claim) asked for.
    pub requested: Option<u64>,
    /// The line, cleaned, redacted and cut to [`LINE_CHARS`].
    pub line: String,
    /// A torchrun `exitcode` (negative: killed by that signal), for `child-exit`.
    pub exit_code: Option<i32>,
    /// What a PyTorch out-of-memory line states besides the request.
    pub detail: Option<OomDetail>,
}

impl ParsedError {
    /// What the timeline rules read it as.
    pub fn error_kind(&self) -> ErrorKind {
        match (&self.kind, self.exit_code) {
            (k, _) if k.is_out_of_memory() => ErrorKind::OutOfMemory,
            (RunErrorKind::NcclWatchdog, _) => ErrorKind::CollectiveTimeout,
            (RunErrorKind::CudaUnknownError, _) => ErrorKind::DriverError,
            (RunErrorKind::CudaFault, _) => ErrorKind::CudaFault,
            // `exitcode -9`: killed by signal 9.
            (RunErrorKind::ChildExit | RunErrorKind::WorkerKilled, Some(c)) if c < 0 => {
                ErrorKind::KilledBySignal { signal: -c }
            }
            _ => ErrorKind::Other,
        }
    }
}

/// Reads stderr line by line: keeps the tail and yields recognised errors.
#[derive(Debug, Default)]
pub struct StderrWatcher {
    tail: VecDeque<String>,
    /// Inside a torchrun `ChildFailedError` table: the rank of the entry being read.
    in_table: bool,
    rank: Option<String>,
    /// Lines of the torchrun table still read (bounded: a table never ends unread forever).
    table_left: u16,
    /// The table's `exitcode` row of the current rank was reported (its `traceback : Signal
    /// 9 (SIGKILL) received by PID` row says the same and is not reported twice).
    table_exit_seen: bool,
    /// Lines of an NCCL `DistBackendError` block still read; the block's first line.
    nccl_left: u8,
    nccl_head: String,
    /// The previous line was `Last error:` alone: NCCL's error is this one.
    last_error_next: bool,
    /// Lines of TensorFlow's BFC `Stats:` block still read, and its `Limit` / `InUse`
    /// (the allocator's own accounting), given to the next TensorFlow OOM line.
    bfc_left: u8,
    bfc: (Option<u64>, Option<u64>),
    /// A private key printed over several lines is kept as one redacted line per line.
    pem: crate::redact::PemLines,
    /// The previous line, when it recognised nothing and is long enough to have been
    /// hard-wrapped at a fixed width ([`WRAP_MIN_CHARS`]): joined with the next line once.
    wrap_prev: Option<String>,
    /// The line just read was part of a private key (never kept for joining).
    key_line: bool,
}

/// A line shorter than this is not taken for the first half of a hard-wrapped line: the
/// narrowest terminals and CI log viewers that wrap at a fixed width do so at 80 columns, and
/// a margin keeps lines that merely end early out.
pub const WRAP_MIN_CHARS: usize = 64;

/// Lines of a torchrun failure table read at most.
const TABLE_LINES: u16 = 60;

fn cut(line: &str) -> String {
    let clean = crate::term::one_line(line.trim_end());
    let red = crate::redact::redact_text(&clean);
    red.chars().take(LINE_CHARS).collect()
}

use super::recognise;
pub use super::recognise::{oom_detail, OomDetail};

fn number_after(s: &str, key: &str) -> Option<u32> {
    let rest = &s[s.find(key)? + key.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// PyTorch's own advice after the numbers (`If reserved but unallocated memory is large try
/// setting PYTORCH_CUDA_ALLOC_CONF=…`): dropped from the kept line so the numbers fit in
/// [`LINE_CHARS`]; vramdoc's fix text says what applies.
const TORCH_ADVICE: [&str; 2] = [
    " If reserved but unallocated memory is large",
    " If reserved memory is >> allocated memory",
];

/// A PyTorch out-of-memory line made to keep its numbers within [`LINE_CHARS`]: PyTorch's
/// advice dropped, and the `Process N has X memory in use.` entries (one per process on the
/// GPU) moved after the process's own numbers, so a cut drops those first.
fn compact_torch_line(l: &str) -> String {
    let l = TORCH_ADVICE
        .iter()
        .filter_map(|a| l.find(a))
        .min()
        .map_or(l, |i| &l[..i]);
    let mut head = String::with_capacity(l.len());
    let mut procs = String::new();
    let mut rest = l;
    while let Some(i) = rest.find("Process ") {
        let seg_end = rest[i..]
            .find(" memory in use.")
            .map(|j| i + j + " memory in use.".len());
        match seg_end {
            Some(end) if rest[i + "Process ".len()..].starts_with(|c: char| c.is_ascii_digit()) => {
                head.push_str(&rest[..i]);
                procs.push(' ');
                procs.push_str(&rest[i..end]);
                rest = rest[end..].trim_start();
            }
            _ => {
                head.push_str(&rest[..i + "Process ".len()]);
                rest = &rest[i + "Process ".len()..];
            }
        }
    }
    head.push_str(rest);
    let mut out = head.trim_end().to_string();
    out.push_str(&procs);
    out
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
fn prefix_of(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Recognise one line of the job's output, stderr or stdout (without its state: torchrun
/// tables and NCCL's `Last error:` block need [`StderrWatcher`]).
pub fn parse_line(line: &str) -> Option<ParsedError> {
    let m = recognise::recognise(line)?;
    let torch = m.pattern.kind == RunErrorKind::CudaOom;
    let detail = if torch { oom_detail(line) } else { None };
    Some(ParsedError {
        kind: m.pattern.kind.clone(),
        device: m.facts.device,
        requested: detail
            .as_ref()
            .and_then(|d| d.requested)
            .or(m.facts.requested),
        line: if torch {
            cut(&compact_torch_line(line))
        } else {
            cut(line)
        },
        exit_code: m.facts.exit_code,
        detail,
    })
}

/// Lines that open PyTorch's `DistBackendError` block: NCCL's own error follows on the next
/// lines (`Last error:` then the text) when `NCCL_DEBUG` is unset (NCCLUtils.cpp).
fn opens_nccl_block(l: &str) -> bool {
    let [dist, unhandled, nccl] = NCCL_OPENERS;
    l.contains(dist)
        || l.contains(unhandled)
        || (l.contains(nccl) && l.contains("unhandled cuda error"))
}

/// Words one of which a line must hold to open an NCCL block ([`opens_nccl_block`]).
const NCCL_OPENERS: [&str; 3] = ["DistBackendError", "ncclUnhandledCudaError", "NCCL error"];
/// What a line must hold to open TensorFlow's BFC `Stats:` block.
const BFC_OPENER: &str = "bfc_allocator";

/// Every word one of which a line must hold to change the watcher's state on its own: open
/// a block (NCCL's, TensorFlow's BFC statistics) or a private key. With the recogniser's
/// keys ([`super::recognise::table`]) they make the cheap look at raw bytes
/// (`record::lines`): a line holding none of them, in the watcher's neutral state
/// ([`StderrWatcher::is_neutral`]), only passes into the tail.
pub const STATE_KEYS: [&str; 5] = [
    NCCL_OPENERS[0],
    NCCL_OPENERS[1],
    NCCL_OPENERS[2],
    BFC_OPENER,
    crate::redact::PEM_HEADER,
];

/// Lines of an NCCL block read after its first (bounded).
const NCCL_BLOCK_LINES: u8 = 6;

/// Lines of TensorFlow's BFC `Stats:` block read after its first (bounded).
const BFC_STATS_LINES: u8 = 8;

impl StderrWatcher {
    pub fn new() -> StderrWatcher {
        StderrWatcher::default()
    }

    /// Outside every block and private key: how the next line is read depends on that line
    /// (and the one before, for a hard-wrapped line) only.
    pub fn is_neutral(&self) -> bool {
        !self.in_table && self.nccl_left == 0 && self.bfc_left == 0 && !self.pem.in_key()
    }

    /// Lines that, in the neutral state, hold none of the recogniser's keys nor the
    /// [`STATE_KEYS`], and none of the keys across the end of the line before each either:
    /// [`StderrWatcher::line`] would only have kept them in the tail (and the last one for
    /// joining). `last` is the run's last lines, up to [`TAIL_LINES`] of them (the earlier
    /// ones would leave the tail anyway), as the lines `line` would have been given.
    pub fn passed_over(&mut self, last: &[&str]) {
        debug_assert!(self.is_neutral());
        let keep = &last[last.len().saturating_sub(TAIL_LINES)..];
        for line in keep {
            let mut kept = if self.tail.len() == TAIL_LINES {
                self.tail.pop_front().unwrap_or_default()
            } else {
                String::new()
            };
            kept.clear();
            kept.push_str(prefix_of(line, LINE_CHARS * 4));
            self.tail.push_back(kept);
        }
        self.key_line = false;
        self.wrap_prev = match keep.last() {
            Some(line) if line.trim_end().chars().count() >= WRAP_MIN_CHARS => {
                Some(prefix_of(line, LINE_CHARS * 4).to_string())
            }
            Some(_) => None,
            None => self.wrap_prev.take(),
        };
    }

    /// Take one line of stderr (without its newline); returns an error it recognises.
    /// Cheap for the lines that are not errors (a job's output passes through here): the
    /// tail keeps them raw (cut and redacted by [`StderrWatcher::tail`]) and only a line
    /// holding one of the recogniser's keys (one multi-pattern search) is parsed.
    ///
    /// A line hard-wrapped by a terminal or a log viewer at a fixed width arrives as two: a
    /// line that recognises nothing alone is joined with the previous one when that one
    /// recognised nothing either and is as long as a wrapped line ([`WRAP_MIN_CHARS`]), so a
    /// phrase split across the two is read once. Bounded: two lines at most, each cut as the
    /// tail cuts it; a joined pair is never joined again, so no line is read twice.
    pub fn line(&mut self, line: &str) -> Option<ParsedError> {
        let prev = self.wrap_prev.take();
        self.key_line = false;
        let found = self.line_alone(line);
        if found.is_some() || self.key_line || self.in_table || self.nccl_left > 0 {
            return found;
        }
        if let Some(p) = prev {
            let joined = format!("{p}{}", prefix_of(line, LINE_CHARS * 4));
            if recognise::may_match(&joined) {
                if let Some(e) = parse_line(&joined) {
                    return Some(e);
                }
            }
        }
        if line.trim_end().chars().count() >= WRAP_MIN_CHARS {
            self.wrap_prev = Some(prefix_of(line, LINE_CHARS * 4).to_string());
        }
        None
    }

    /// One line read on its own (and as part of the blocks it opens or continues).
    fn line_alone(&mut self, line: &str) -> Option<ParsedError> {
        let mut kept = if self.tail.len() == TAIL_LINES {
            self.tail.pop_front().unwrap_or_default()
        } else {
            String::new()
        };
        kept.clear();
        if self.pem.is_key_line(line) {
            self.key_line = true;
            kept.push_str(crate::redact::REDACTED);
            self.tail.push_back(kept);
            return None;
        }
        kept.push_str(prefix_of(line, LINE_CHARS * 4));
        self.tail.push_back(kept);
        if self.nccl_left > 0 {
            self.nccl_left -= 1;
            if let Some(e) = self.nccl_block_line(line) {
                return Some(e);
            }
        } else if opens_nccl_block(line) {
            self.nccl_left = NCCL_BLOCK_LINES;
            self.nccl_head = prefix_of(line.trim(), 200).to_string();
            self.last_error_next = false;
            if let Some(i) = line.find("Last error:") {
                // The block on one line (the exception's message printed as one string).
                let rest = line[i + "Last error:".len()..].trim();
                if let Some(e) = self.nccl_last_error(rest) {
                    return Some(e);
                }
            }
        }
        if self.bfc_left > 0 {
            self.bfc_left -= 1;
            let t = line.trim_start();
            let num = |key: &str| t.strip_prefix(key)?.trim().parse::<u64>().ok();
            if let Some(v) = num("Limit:") {
                self.bfc.0 = Some(v);
            } else if let Some(v) = num("InUse:") {
                self.bfc.1 = Some(v);
            }
        } else if line.contains(BFC_OPENER) && line.contains("] Stats:") {
            self.bfc_left = BFC_STATS_LINES;
            self.bfc = (None, None);
        }
        if !self.in_table && !recognise::may_match(line) {
            return None;
        }
        let mut found = parse_line(line);
        if let (Some(f), (Some(limit), in_use)) = (&mut found, self.bfc) {
            if f.kind == RunErrorKind::TfOom {
                f.line = cut(&format!(
                    "{} {}",
                    f.line,
                    recognise::bfc_suffix(limit, in_use)
                ));
            }
        }
        if let Some(f) = &found {
            if f.kind == RunErrorKind::ChildFailed {
                self.in_table = true;
                self.table_left = TABLE_LINES;
                self.table_exit_seen = false;
                self.rank = None;
            } else if self.in_table
                && self.table_exit_seen
                && f.kind == RunErrorKind::ChildExit
                && line.contains("received by PID")
            {
                return None;
            }
            return found;
        }
        if !self.in_table {
            return None;
        }
        self.table_left = self.table_left.saturating_sub(1);
        if self.table_left == 0 {
            self.in_table = false;
        }
        let t = line.trim();
        if let Some(v) = t
            .strip_prefix("rank")
            .map(|r| r.trim_start_matches([' ', ':']))
        {
            self.rank = Some(v.split_whitespace().next().unwrap_or("").to_string());
            self.table_exit_seen = false;
        } else if let Some(v) = t
            .strip_prefix("exitcode")
            .map(|r| r.trim_start_matches([' ', ':']))
        {
            // `exitcode  : -9 (pid: 4242)`: a negative code is the signal that killed it.
            let code = v.split_whitespace().next().unwrap_or("");
            let rank = self.rank.clone().unwrap_or_else(|| "?".into());
            self.table_exit_seen = true;
            return Some(ParsedError {
                kind: RunErrorKind::ChildExit,
                device: None,
                requested: None,
                exit_code: code.parse().ok(),
                detail: None,
                line: cut(&format!("torchrun rank {rank}: exitcode {code} {}", {
                    let pid = number_after(v, "pid: ");
                    pid.map_or(String::new(), |p| format!("(pid {p})"))
                })),
            });
        } else if t.starts_with("=====") && self.rank.is_some() {
            self.in_table = false;
        }
        None
    }

    /// A line inside an NCCL block: `Last error:` (alone, the error on the next line, or
    /// followed by it), then NCCL's text, read as the block's error.
    fn nccl_block_line(&mut self, line: &str) -> Option<ParsedError> {
        let t = line.trim();
        if self.last_error_next {
            if t.is_empty() {
                return None;
            }
            self.last_error_next = false;
            self.nccl_left = 0;
            return self.nccl_last_error(t);
        }
        let i = t.find("Last error:")?;
        let rest = t[i + "Last error:".len()..].trim();
        if rest.is_empty() {
            self.last_error_next = true;
            return None;
        }
        self.nccl_left = 0;
        self.nccl_last_error(rest)
    }

    /// NCCL's own error text of a `DistBackendError` block, recognised, with the block's
    /// first line kept as context.
    fn nccl_last_error(&self, text: &str) -> Option<ParsedError> {
        let mut e = parse_line(text)?;
        e.line = cut(&format!("{} | Last error: {}", self.nccl_head, text));
        Some(e)
    }

    /// The last lines read, oldest first, cleaned, redacted and cut to [`LINE_CHARS`].
    pub fn tail(&self) -> Vec<String> {
        self.tail.iter().map(|l| cut(l)).collect()
    }
}

#[cfg(test)]
#[path = "stderr_tests.rs"]
mod tests;
