//! The command's stderr as evidence: a bounded tail of its last lines (redacted) and the
//! recognition of the out-of-memory lines of the major stacks — PyTorch 1.x/2.x
//! (`CUDA out of memory. Tried to allocate …`, `torch.OutOfMemoryError`), the driver
//! (`CUDA error: out of memory`), vLLM's start-up memory checks and torchrun's
//! `ChildFailedError` exit tables. Recognising a line is recording, not diagnosing: the
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
}

impl ParsedError {
    /// What the timeline rules read it as.
    pub fn error_kind(&self) -> ErrorKind {
        match (&self.kind, self.exit_code) {
            (k, _) if k.is_out_of_memory() => ErrorKind::OutOfMemory,
            // `exitcode -9`: killed by signal 9.
            (RunErrorKind::ChildExit, Some(c)) if c < 0 => ErrorKind::KilledBySignal { signal: -c },
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
}

fn cut(line: &str) -> String {
    let clean = crate::term::one_line(line.trim_end());
    let red = crate::redact::redact_text(&clean);
    red.chars().take(LINE_CHARS).collect()
}

/// `2.00 GiB`, `20.00 MiB`, `1024.00 KiB`, `0 bytes` at the start of `s`.
fn size_at(s: &str) -> Option<u64> {
    let mut words = s.split_whitespace();
    let num = words.next()?;
    let unit = words
        .next()?
        .trim_end_matches(|c: char| !c.is_ascii_alphabetic());
    let v: f64 = num.parse().ok()?;
    let mult: f64 = match unit {
        "bytes" | "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "KB" | "kB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        _ => return None,
    };
    let b = v * mult;
    (b.is_finite() && b >= 0.0).then_some(b.round() as u64)
}

fn number_after(s: &str, key: &str) -> Option<u32> {
    let rest = &s[s.find(key)? + key.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Recognise one line (without its state: torchrun tables need [`StderrWatcher`]).
pub fn parse_line(line: &str) -> Option<ParsedError> {
    let l = line;
    let make = |kind, device, requested| ParsedError {
        kind,
        device,
        requested,
        line: cut(l),
        exit_code: None,
    };
    if l.contains("CUDA out of memory") || l.contains("OutOfMemoryError") {
        let requested = l
            .find("Tried to allocate ")
            .and_then(|i| size_at(&l[i + "Tried to allocate ".len()..]));
        // 1.x: `(GPU 0; 15.78 GiB total capacity; …)`; 2.x: `GPU 0 has a total capacity`.
        let device = number_after(l, "(GPU ").or_else(|| {
            let i = l.find(" has a total capac")?;
            let head = &l[..i];
            let j = head.rfind("GPU ")?;
            head[j + 4..].trim().parse().ok()
        });
        return Some(make(RunErrorKind::CudaOom, device, requested));
    }
    if l.contains("CUDA error: out of memory") || l.contains("CUDA_ERROR_OUT_OF_MEMORY") {
        return Some(make(
            RunErrorKind::CudaErrorOom,
            number_after(l, "cuda:"),
            None,
        ));
    }
    if l.contains("less than desired GPU memory utilization") {
        // `Free memory on device cuda:0 (19.77/22.05 GiB) on startup is less than desired GPU
        // memory utilization (0.9, 19.84 GiB)`: the claim is the second size.
        let requested = l.rfind("utilization (").and_then(|i| {
            let rest = &l[i + "utilization (".len()..];
            let comma = rest.find(',')?;
            size_at(rest[comma + 1..].trim())
        });
        return Some(make(
            RunErrorKind::VllmFreeMemory,
            number_after(l, "cuda:"),
            requested,
        ));
    }
    if l.contains("No available memory for the cache blocks") {
        return Some(make(RunErrorKind::VllmNoCacheBlocks, None, None));
    }
    if l.contains("maximum number of tokens that can be stored in KV cache") {
        return Some(make(RunErrorKind::VllmKvCache, None, None));
    }
    if l.contains("ChildFailedError") {
        return Some(make(RunErrorKind::ChildFailed, None, None));
    }
    None
}

impl StderrWatcher {
    pub fn new() -> StderrWatcher {
        StderrWatcher::default()
    }

    /// Take one line of stderr (without its newline); returns an error it recognises.
    pub fn line(&mut self, line: &str) -> Option<ParsedError> {
        if self.tail.len() == TAIL_LINES {
            self.tail.pop_front();
        }
        self.tail.push_back(cut(line));
        let found = parse_line(line);
        if let Some(f) = &found {
            if f.kind == RunErrorKind::ChildFailed {
                self.in_table = true;
                self.rank = None;
            }
            return found;
        }
        if !self.in_table {
            return None;
        }
        let t = line.trim();
        if let Some(v) = t
            .strip_prefix("rank")
            .map(|r| r.trim_start_matches([' ', ':']))
        {
            self.rank = Some(v.split_whitespace().next().unwrap_or("").to_string());
        } else if let Some(v) = t
            .strip_prefix("exitcode")
            .map(|r| r.trim_start_matches([' ', ':']))
        {
            // `exitcode  : -9 (pid: 4242)`: a negative code is the signal that killed it.
            let code = v.split_whitespace().next().unwrap_or("");
            let rank = self.rank.clone().unwrap_or_else(|| "?".into());
            return Some(ParsedError {
                kind: RunErrorKind::ChildExit,
                device: None,
                requested: None,
                exit_code: code.parse().ok(),
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

    /// The last lines read, oldest first.
    pub fn tail(&self) -> Vec<String> {
        self.tail.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    // Lines as users reported them (pytorch/pytorch#59778, #16417; vllm-project/vllm#20305
    // and kvcached#29; CompVis/stable-diffusion#702).
    #[test]
    fn pytorch_1x_line() {
        let l = "RuntimeError: CUDA out of memory. Tried to allocate 2.26 GiB (GPU 0; 6.00 GiB \
                 total capacity; 781.59 MiB already allocated; 3.03 GiB free; 1.24 GiB reserved \
                 in total by PyTorch)";
        let e = parse_line(l).unwrap();
        assert_eq!(e.kind, RunErrorKind::CudaOom);
        assert_eq!(e.device, Some(0));
        assert_eq!(e.requested, Some((2.26 * GIB as f64).round() as u64));
        let l = "RuntimeError: CUDA out of memory. Tried to allocate 1024.00 KiB (GPU 3; 11.17 \
                 GiB total capacity; 10.90 GiB already allocated; 576.00 KiB free; 30.96 MiB cached)";
        let e = parse_line(l).unwrap();
        assert_eq!((e.device, e.requested), (Some(3), Some(1024 * 1024)));
    }

    #[test]
    fn pytorch_2x_lines() {
        let l = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 1 \
                 has a total capacity of 79.15 GiB of which 5.75 MiB is free. Including \
                 non-PyTorch memory, this process has 79.14 GiB memory in use.";
        let e = parse_line(l).unwrap();
        assert_eq!(
            (e.kind, e.device, e.requested),
            (RunErrorKind::CudaOom, Some(1), Some(20 * MIB))
        );
        // 2.1 spelled it "capacty".
        let l = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.70 GiB. \
                 GPU 0 has a total capacty of 6.00 GiB of which 0 bytes is free.";
        let e = parse_line(l).unwrap();
        assert_eq!(e.device, Some(0));
        assert_eq!(e.requested, Some((1.7 * GIB as f64).round() as u64));
        assert_eq!(
            parse_line("torch.OutOfMemoryError").unwrap().kind,
            RunErrorKind::CudaOom
        );
    }

    #[test]
    fn driver_and_vllm_lines() {
        let e = parse_line("RuntimeError: CUDA error: out of memory").unwrap();
        assert_eq!(e.kind, RunErrorKind::CudaErrorOom);
        let l = "ValueError: Free memory on device (59.32/79.15 GiB) on startup is less than \
                 desired GPU memory utilization (0.9, 71.24 GiB). Decrease GPU memory \
                 utilization or reduce GPU memory used by other processes.";
        let e = parse_line(l).unwrap();
        assert_eq!(e.kind, RunErrorKind::VllmFreeMemory);
        assert_eq!(e.requested, Some((71.24 * GIB as f64).round() as u64));
        let l = "free memory on device cuda:1 (19.77/22.05 GiB) on startup is less than desired \
                 GPU memory utilization (0.9, 19.84 GiB)";
        assert_eq!(parse_line(l).unwrap().device, Some(1));
        let l = "ValueError: No available memory for the cache blocks. Try increasing \
                 `gpu_memory_utilization` when initializing the engine.";
        assert_eq!(parse_line(l).unwrap().kind, RunErrorKind::VllmNoCacheBlocks);
        let l = "ValueError: The model's max seq len (32768) is larger than the maximum number \
                 of tokens that can be stored in KV cache (20000). Try increasing \
                 `gpu_memory_utilization` or decreasing `max_model_len` when initializing the \
                 engine.";
        assert_eq!(parse_line(l).unwrap().kind, RunErrorKind::VllmKvCache);
        assert!(parse_line("epoch 3: loss 0.25").is_none());
        assert!(parse_line("").is_none());
    }

    #[test]
    fn torchrun_exit_table() {
        let table = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n\
============================================================\n\
train.py FAILED\n\
------------------------------------------------------------\n\
Failures:\n\
  <NO_OTHER_FAILURES>\n\
------------------------------------------------------------\n\
Root Cause (first observed failure):\n\
[0]:\n\
  time      : 2024-05-04_12:00:00\n\
  host      : node1\n\
  rank      : 1 (local_rank: 1)\n\
  exitcode  : -9 (pid: 4242)\n\
  error_file: <N/A>\n\
  traceback : Signal 9 (SIGKILL) received by PID 4242\n\
============================================================";
        let mut w = StderrWatcher::new();
        let found: Vec<ParsedError> = table.lines().filter_map(|l| w.line(l)).collect();
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].kind, RunErrorKind::ChildFailed);
        assert_eq!(found[1].kind, RunErrorKind::ChildExit);
        assert_eq!(
            found[1].error_kind(),
            ErrorKind::KilledBySignal { signal: 9 }
        );
        assert_eq!(found[0].error_kind(), ErrorKind::Other);
        assert_eq!(found[1].line, "torchrun rank 1: exitcode -9 (pid 4242)");
        assert!(w.line("exitcode  : 3").is_none(), "outside a table");
    }

    #[test]
    fn tail_is_bounded_cut_and_redacted() {
        let mut w = StderrWatcher::new();
        for i in 0..100 {
            w.line(&format!("line {i}"));
        }
        w.line(&"x".repeat(2000));
        w.line("connecting with --token=hunter2hunter2 \x1b[31m");
        let t = w.tail();
        assert_eq!(t.len(), TAIL_LINES);
        assert_eq!(t[0], "line 62");
        assert_eq!(t[TAIL_LINES - 2].len(), LINE_CHARS);
        assert!(
            !t[TAIL_LINES - 1].contains("hunter2"),
            "{}",
            t[TAIL_LINES - 1]
        );
        assert!(!t[TAIL_LINES - 1].contains('\x1b'));
    }
}
