//! The numbers of a PyTorch out-of-memory line (1.x and 2.x wordings): what the recogniser
//! reads once when the line is recorded ([`super::LineFacts`]) and the rules read from the
//! event.

use super::extract::size_at;

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
    /// The per-process cap of the caching allocator (`X allowed;`, printed when
    /// `set_per_process_memory_fraction` is in force, c10 CUDACachingAllocator.cpp).
    pub allowed: Option<u64>,
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

    /// Held by other processes: total − free − in use by this process. `None` where the line
    /// says this process has 0 bytes in use: some drivers (in containers) cannot attribute
    /// memory to the process, and the job's own memory would be counted as others'.
    pub fn other_processes(&self) -> Option<u64> {
        if self.process_in_use == Some(0) {
            return None;
        }
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
        allowed: size_preceding(l, " allowed;"),
    };
    if d.reserved_unallocated.is_none() {
        // 1.4 to 1.13: `S reserved in total by PyTorch` includes the allocated.
        let reserved = size_preceding(l, " reserved in total by PyTorch");
        if let (Some(r), Some(a)) = (reserved, d.allocated) {
            d.reserved_unallocated = Some(r.saturating_sub(a));
        }
    }
    if d.reserved_unallocated.is_none() {
        // Before 1.4: `S cached` is "memory held by the allocator but not used by the
        // program" (THCCachingAllocator), the unallocated part itself.
        d.reserved_unallocated =
            size_preceding(l, " cached)").or_else(|| size_preceding(l, " cached;"));
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
