//! The failures `vramdoc run` sees most (issue 15): PyTorch's full out-of-memory numbers,
//! fragmentation, a ratchet told from a plain too-big batch, overcommit only for one claim,
//! and failures that are not GPU memory (NCCL watchdog abort, host OOM kill).

use super::*;

/// An error as the job's output showed it, parsed by the recorder's own parser.
fn line<'a>(j: &'a mut Job, t: f64, text: &str) -> &'a mut Job {
    let p = crate::record::stderr::parse_line(text).expect("a recognised line");
    j.errors.push(ErrorEvent {
        t_ms: t,
        kind: p.error_kind(),
        device: p.device,
        pid: None,
        line: p.line,
        requested_bytes: p.requested,
    });
    j
}

fn alloc_conf(j: &mut Job, pid: u32, conf: &str) {
    if let Some(p) = j.procs.iter_mut().find(|p| p.pid == pid) {
        p.pytorch_cuda_alloc_conf = Some(conf.into());
    }
}

/// A 2.x line on GPU 0 of a 24 GiB card: `req` asked, `spare` reserved but unallocated.
fn torch_line(req: &str, spare: &str) -> String {
    format!(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {req}. GPU 0 has a total \
         capacity of 23.65 GiB of which 3.06 MiB is free. Including non-PyTorch memory, this \
         process has 21.50 GiB memory in use. Of the allocated memory 18.00 GiB is allocated by \
         PyTorch, and {spare} is reserved by PyTorch but unallocated. If reserved but \
         unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
         to avoid fragmentation."
    )
}

fn one_oom_job(text: &str) -> Job {
    let mut j = Job::new(&[24 * G], 12_000.0);
    j.proc_(10, None, Some(11_000.0));
    j.ramp(500.0, 3000.0, 10, 0, 0, gib(21.5));
    line(&mut j, 10_000.0, text);
    j
}

#[test]
fn out_of_memory_carries_every_number_of_the_pytorch_line() {
    let j = one_oom_job(&torch_line("2.00 GiB", "512.00 MiB"));
    let f = find(&j.build(), ids::OUT_OF_MEMORY);
    for part in [
        "allocated by PyTorch",
        "reserved by PyTorch but unallocated",
        "non-PyTorch memory",
        "other processes",
        "in use by this process",
    ] {
        assert!(has(&f, part), "{part}: {:?}", f.evidence);
    }
    let other = f
        .evidence
        .iter()
        .find(|e| e.label.starts_with("other processes"))
        .and_then(|e| e.bytes);
    // 23.65 GiB − 3.06 MiB − 21.50 GiB.
    let want = gib(23.65) as i64 - (3.06 * MIB as f64) as i64 - gib(21.5) as i64;
    assert!(
        other.is_some_and(|o| (o as i64 - want).abs() < MIB as i64),
        "{other:?}"
    );
    assert!(!j.ids().contains(&ids::FRAGMENTATION.to_string()));
}

#[test]
fn fragmentation_when_reserved_unallocated_covers_the_request() {
    let mut j = one_oom_job(&torch_line("1.00 GiB", "2.50 GiB"));
    let f = find(&j.build(), ids::FRAGMENTATION);
    assert_eq!(f.severity, Severity::Error);
    assert!(f.title.contains("2.50 GiB"), "{}", f.title);
    assert!(f.fix.contains("expandable_segments:True"), "{}", f.fix);
    // Already set in the job's environment: not suggested again (pytorch/pytorch#173049).
    alloc_conf(&mut j, 10, "max_split_size_mb:128,expandable_segments:True");
    let f = find(&j.build(), ids::FRAGMENTATION);
    assert!(f.fix.contains("already on"), "{}", f.fix);
    assert!(!f.fix.contains("Set PYTORCH_CUDA_ALLOC_CONF"), "{}", f.fix);
    assert!(has(&f, "PYTORCH_CUDA_ALLOC_CONF"));
    // `expandable_segments:False` is not on.
    alloc_conf(&mut j, 10, "expandable_segments:False");
    let f = find(&j.build(), ids::FRAGMENTATION);
    assert!(f.fix.contains("Set PYTORCH_CUDA_ALLOC_CONF"), "{}", f.fix);
}

#[test]
fn no_fragmentation_without_the_numbers_or_below_the_request() {
    // murong-xu/CADS#4: 9.35 GiB spare < 22.78 GiB asked.
    let j = one_oom_job(&torch_line("22.78 GiB", "9.35 GiB"));
    assert_eq!(j.ids(), vec![ids::OUT_OF_MEMORY.to_string()]);
    let j = one_oom_job("RuntimeError: CUDA error: out of memory");
    assert_eq!(j.ids(), vec![ids::OUT_OF_MEMORY.to_string()]);
}
