//! The job's output as evidence: a bounded tail of its last lines (redacted) and the
//! recognition of the error lines of the major stacks — PyTorch 1.x/2.x (`CUDA out of memory.
//! Tried to allocate …` with every number the line states, see [`OomDetail`]), the driver
//! (`CUDA error: out of memory`), NCCL (`NCCL WARN Cuda failure 'out of memory'`), cuBLAS
//! (`CUBLAS_STATUS_ALLOC_FAILED`), JAX/XLA (`RESOURCE_EXHAUSTED: Out of memory while trying to
//! allocate`), vLLM's start-up memory checks (V0 and V1), PyTorch's NCCL watchdog timeout and
//! torchrun's `ChildFailedError` exit tables. Stream-agnostic: stderr and stdout lines go
//! through the same parser (vLLM logs to stdout). Recognising a line is recording, not
//! diagnosing: the findings are decided in `diagnose/` from these events.

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
    /// A private key printed over several lines is kept as one redacted line per line.
    pem: crate::redact::PemLines,
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

/// Every number a PyTorch out-of-memory line states, in bytes (`None`: the line does not say).
///
/// 2.x: `Tried to allocate R. GPU 0 has a total capacity of T of which F is free. [Process P
/// has X memory in use.] Including non-PyTorch memory, this process has U memory in use. Of the
/// allocated memory A is allocated by PyTorch, [with X allocated in private pools,] and V is
/// reserved by PyTorch but unallocated.` (2.1 spelled it `capacty`.) 1.x: `Tried to allocate R
/// (GPU 0; T total capacity; A already allocated; F free; S reserved in total by PyTorch)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OomDetail {
    /// The failed allocation (`Tried to allocate`).
    pub requested: Option<u64>,
    /// The device's total memory as the process saw it.
    pub total: Option<u64>,
    /// Free on the device at the failure.
    pub free: Option<u64>,
    /// Everything the printing process held, PyTorch's or not (2.x `this process has`).
    pub process_in_use: Option<u64>,
    /// Held by live tensors (2.x `allocated by PyTorch`, 1.x `already allocated`).
    pub allocated: Option<u64>,
    /// Reserved by the caching allocator but not holding a tensor: fragmentation
    /// (2.x directly; 1.x reserved in total minus allocated).
    pub reserved_unallocated: Option<u64>,
    /// `Process P has X memory in use` entries (other processes, or the process itself where
    /// PyTorch cannot tell, as in containers).
    pub listed_processes: Vec<(u32, u64)>,
}

impl OomDetail {
    /// Held by the process outside PyTorch's allocator: contexts, cuBLAS/cuDNN workspaces,
    /// NCCL buffers (in use − allocated − reserved-unallocated).
    pub fn non_pytorch(&self) -> Option<u64> {
        let used = self.process_in_use?;
        let torch = self
            .allocated?
            .saturating_add(self.reserved_unallocated.unwrap_or(0));
        Some(used.saturating_sub(torch))
    }

    /// Held by other processes: total − free − in use by this process.
    pub fn other_processes(&self) -> Option<u64> {
        Some(
            self.total?
                .saturating_sub(self.free?)
                .saturating_sub(self.process_in_use?),
        )
    }

    fn is_empty(&self) -> bool {
        *self == OomDetail::default()
    }
}

/// The size written just before byte `end` of `s` (`… 3.03 GiB` + ` free`).
fn size_before(s: &str, end: usize) -> Option<u64> {
    let mut w = s.get(..end)?.split_whitespace().rev();
    let unit = w.next()?;
    let num = w.next()?.trim_start_matches(['(', ';', ',']);
    size_at(&format!("{num} {unit}"))
}

/// The size that follows the first `key` in `s`.
fn size_after(s: &str, key: &str) -> Option<u64> {
    size_at(&s[s.find(key)? + key.len()..])
}

/// The size that precedes the first `key` in `s`.
fn size_preceding(s: &str, key: &str) -> Option<u64> {
    size_before(s, s.find(key)?)
}

/// Every number of a PyTorch out-of-memory line (1.x or 2.x); `None` when it states none.
pub fn oom_detail(l: &str) -> Option<OomDetail> {
    let mut d = OomDetail {
        requested: size_after(l, "Tried to allocate "),
        total: size_after(l, "total capacity of ")
            .or_else(|| size_after(l, "total capacty of "))
            .or_else(|| size_preceding(l, " total capacity")),
        free: l
            .find("of which ")
            .and_then(|i| size_at(&l[i + "of which ".len()..]))
            .or_else(|| size_preceding(l, " free;"))
            .or_else(|| size_preceding(l, " free)")),
        process_in_use: size_after(l, "this process has "),
        allocated: size_after(l, "Of the allocated memory ")
            .or_else(|| size_preceding(l, " already allocated")),
        reserved_unallocated: size_preceding(l, " is reserved by PyTorch but unallocated"),
        listed_processes: Vec::new(),
    };
    if d.reserved_unallocated.is_none() {
        // 1.x: `S reserved in total by PyTorch` (older: `S cached`) includes the allocated.
        let reserved = size_preceding(l, " reserved in total by PyTorch")
            .or_else(|| size_preceding(l, " cached)"));
        if let (Some(r), Some(a)) = (reserved, d.allocated) {
            d.reserved_unallocated = Some(r.saturating_sub(a));
        }
    }
    let mut rest = l;
    while let Some(i) = rest.find("Process ") {
        rest = &rest[i + "Process ".len()..];
        let pid: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let (Ok(pid), Some(tail)) = (pid.parse::<u32>(), rest.get(pid.len()..)) else {
            continue;
        };
        if let Some(size) = tail.strip_prefix(" has ").and_then(size_at) {
            d.listed_processes.push((pid, size));
        }
    }
    (!d.is_empty()).then_some(d)
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

/// A PyTorch out-of-memory line: `CUDA out of memory` (HIP on ROCm), or PyTorch's
/// `OutOfMemoryError` class; never Java's `java.lang.OutOfMemoryError` or Python's
/// `MemoryError`.
fn is_torch_oom(l: &str) -> bool {
    if l.contains("java.lang.OutOfMemoryError") {
        return false;
    }
    l.contains("CUDA out of memory")
        || l.contains("HIP out of memory")
        || l.contains("torch.OutOfMemoryError")
        || l.contains("torch.cuda.OutOfMemoryError")
        || l.contains("OutOfMemoryError: CUDA")
}

/// Every line [`parse_line`] recognises holds one of these (a pre-filter: most lines of a
/// job's output hold none and are not parsed).
const ERROR_KEYS: [&str; 8] = [
    "emory", // memory, Memory (OutOfMemoryError)
    "EMORY", // CUDA_ERROR_OUT_OF_MEMORY
    "ALLOC_FAILED",
    "unknown error",
    "KV cache",
    "killed by signal",
    "Watchdog",
    "ChildFailedError",
];

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
/// tables need [`StderrWatcher`]).
pub fn parse_line(line: &str) -> Option<ParsedError> {
    let l = line;
    let make = |kind, device, requested| ParsedError {
        kind,
        device,
        requested,
        line: cut(l),
        exit_code: None,
        detail: None,
    };
    if is_torch_oom(l) {
        let detail = oom_detail(l);
        // 1.x: `(GPU 0; 15.78 GiB total capacity; …)`; 2.x: `GPU 0 has a total capacity`.
        let device = number_after(l, "(GPU ").or_else(|| {
            let i = l.find(" has a total capac")?;
            let head = &l[..i];
            let j = head.rfind("GPU ")?;
            head[j + 4..].trim().parse().ok()
        });
        return Some(ParsedError {
            kind: RunErrorKind::CudaOom,
            device,
            requested: detail.as_ref().and_then(|d| d.requested),
            line: cut(&compact_torch_line(l)),
            exit_code: None,
            detail,
        });
    }
    if l.contains("CUDA error: out of memory") || l.contains("CUDA_ERROR_OUT_OF_MEMORY") {
        return Some(make(
            RunErrorKind::CudaErrorOom,
            number_after(l, "cuda:"),
            None,
        ));
    }
    if l.contains("CUDA error: unknown error") {
        return Some(make(
            RunErrorKind::CudaUnknownError,
            number_after(l, "cuda:"),
            None,
        ));
    }
    // NCCL: `enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'` (NVIDIA/TensorRT-LLM#1670).
    if l.contains("NCCL WARN") && l.contains("Cuda failure 'out of memory'") {
        return Some(make(RunErrorKind::NcclOom, None, None));
    }
    if l.contains("CUBLAS_STATUS_ALLOC_FAILED") {
        return Some(make(RunErrorKind::CublasAllocFailed, None, None));
    }
    // XLA: `RESOURCE_EXHAUSTED: Out of memory while trying to allocate 7406166528 bytes.`;
    // older jaxlib: `Resource exhausted: Out of memory while trying to allocate 24 bytes.`
    if let Some(i) = l.find("Out of memory while trying to allocate ") {
        let head = &l[..i];
        if head.contains("RESOURCE_EXHAUSTED") || head.contains("Resource exhausted") {
            let requested = size_at(&l[i + "Out of memory while trying to allocate ".len()..]);
            return Some(make(RunErrorKind::JaxOom, None, requested));
        }
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
    // vLLM V1: `To serve at least one request with the models's max seq len (262144), (24.0 GiB
    // KV cache is needed, which is larger than the available KV cache memory (3.18 GiB).`
    // (vllm-project/vllm#34076; later releases spell it `model's`).
    if l.contains("To serve at least one request with the model")
        && l.contains("KV cache is needed")
    {
        let requested = size_preceding(l, " KV cache is needed");
        return Some(make(RunErrorKind::VllmKvCache, None, requested));
    }
    // PyTorch: `RuntimeError: DataLoader worker (pid 1817) is killed by signal: Killed.`
    // (pytorch/pytorch#8976): the signal by the name Python's strsignal gives it.
    if let Some(i) = l.find(" is killed by signal: ") {
        if l[..i].contains("DataLoader worker") {
            let name = l[i + " is killed by signal: ".len()..]
                .trim()
                .trim_end_matches('.');
            let signal = match name {
                "Killed" => Some(9),
                "Terminated" => Some(15),
                "Segmentation fault" => Some(11),
                "Bus error" => Some(7),
                "Aborted" => Some(6),
                _ => None,
            };
            return Some(ParsedError {
                exit_code: signal.map(|s: i32| -s),
                ..make(RunErrorKind::WorkerKilled, None, None)
            });
        }
    }
    // PyTorch's NCCL watchdog, which then aborts the process (SIGABRT).
    if l.contains("Watchdog caught collective operation timeout") {
        return Some(make(RunErrorKind::NcclWatchdog, None, None));
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
    /// Cheap for the lines that are not errors (a job's output passes through here): the
    /// tail keeps them raw (cut and redacted by [`StderrWatcher::tail`]) and only a line
    /// holding one of [`ERROR_KEYS`] is parsed.
    pub fn line(&mut self, line: &str) -> Option<ParsedError> {
        let mut kept = if self.tail.len() == TAIL_LINES {
            self.tail.pop_front().unwrap_or_default()
        } else {
            String::new()
        };
        kept.clear();
        if self.pem.is_key_line(line) {
            kept.push_str(crate::redact::REDACTED);
            self.tail.push_back(kept);
            return None;
        }
        kept.push_str(prefix_of(line, LINE_CHARS * 4));
        self.tail.push_back(kept);
        if !self.in_table && (line.len() < 5 || !ERROR_KEYS.iter().any(|k| line.contains(k))) {
            return None;
        }
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

    /// The last lines read, oldest first, cleaned, redacted and cut to [`LINE_CHARS`].
    pub fn tail(&self) -> Vec<String> {
        self.tail.iter().map(|l| cut(l)).collect()
    }
}

#[cfg(test)]
#[path = "stderr_tests.rs"]
mod tests;
