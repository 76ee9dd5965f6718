//! Tests of one process's side: charging, OOM, visibility, contents, faults.

use super::*;
use crate::{Faults, InitOptions};
use vramdoc_gpu_spec::units::GIB;

fn new_box(spec: &str) -> (tempfile::TempDir, SimBox) {
    let dir = tempfile::tempdir().unwrap();
    let b = SimBox::create(dir.path(), spec, &InitOptions::default()).unwrap();
    (dir, b)
}

#[test]
fn host_backing_is_bounded_per_process() {
    let (_d, b) = new_box("1x16GiB");
    let mut p = SimProcess::new(b, None);
    p.create_context(0).unwrap();
    let n = HOST_BACKING_LIMIT / BACKED_LIMIT;
    let ptrs: Vec<u64> = (0..n).map(|_| p.alloc(0, BACKED_LIMIT).unwrap()).collect();
    for &ptr in &ptrs {
        p.write(ptr, &[1, 2, 3, 4]).unwrap();
    }
    // Past the limit a small allocation is uniform: it costs no host memory.
    let over = p.alloc(0, BACKED_LIMIT).unwrap();
    assert!(matches!(p.write(over, &[1]), Err(SimError::Unsupported(_))));
    p.fill_u32(over, 7, BACKED_LIMIT / 4).unwrap();
    assert_eq!(p.checksum_u32(over, 2).unwrap(), 14);
    // Its contents can be given up: it then reads as zeros.
    assert!(p.discard_contents(over + 8));
    assert_eq!(p.checksum_u32(over, 2).unwrap(), 0);
    assert!(!p.discard_contents(1));
    // Freeing gives the budget back.
    p.free(ptrs[0]).unwrap();
    let again = p.alloc(0, MIB).unwrap();
    p.write(again, &[9]).unwrap();
}

#[test]
fn context_alloc_free_are_charged_and_returned() {
    let (_d, b) = new_box("2x24GiB");
    let mut p = SimProcess::new(b.clone(), None);
    assert!(matches!(p.alloc(0, MIB), Err(SimError::NoContext(0))));
    p.create_context(1).unwrap();
    let overhead = b.device(1).unwrap().context_overhead;
    assert_eq!(b.memory(1).unwrap().used, overhead);
    assert_eq!(b.memory(0).unwrap().used, 0, "device 0 untouched");
    let ptr = p.alloc(1, 3 * MIB).unwrap();
    assert_eq!(
        b.memory(1).unwrap().used,
        overhead + 4 * MIB,
        "rounded to 2 MiB"
    );
    p.free(ptr).unwrap();
    assert_eq!(b.memory(1).unwrap().used, overhead);
    p.destroy_context(1).unwrap();
    assert_eq!(b.memory(1).unwrap().used, 0);
    assert!(b.state().unwrap().processes.is_empty());
}

#[test]
fn out_of_memory_beyond_free() {
    let (_d, b) = new_box("t4");
    let mut p = SimProcess::new(b.clone(), None);
    p.create_context(0).unwrap();
    let free = b.memory(0).unwrap().free;
    assert!(matches!(
        p.alloc(0, free + 1),
        Err(SimError::OutOfMemory { .. })
    ));
    let fit = free / GRANULARITY * GRANULARITY;
    let ptr = p.alloc(0, fit).unwrap();
    assert!(b.memory(0).unwrap().free < GRANULARITY);
    p.free(ptr).unwrap();
}

#[test]
fn visible_devices_map_ordinals_to_physical() {
    let (_d, b) = new_box("3x16GiB");
    let mut p = SimProcess::new(b.clone(), Some("2"));
    assert_eq!(p.device_count(), 1);
    p.create_context(0).unwrap();
    p.alloc(0, GIB).unwrap();
    assert_eq!(b.memory(0).unwrap().used, 0);
    assert_eq!(b.memory(1).unwrap().used, 0);
    assert!(b.memory(2).unwrap().used > GIB);
    assert!(matches!(
        p.create_context(1),
        Err(SimError::InvalidDevice(1))
    ));
}

#[test]
fn fill_and_checksum_small_and_large() {
    let (_d, b) = new_box("24GiB");
    let mut p = SimProcess::new(b, None);
    p.create_context(0).unwrap();
    let small = p.alloc(0, 4096).unwrap();
    p.fill_u32(small, 7, 1024).unwrap();
    assert_eq!(p.checksum_u32(small, 1024).unwrap(), 7 * 1024);
    let mut out = [0u8; 4];
    p.read(small + 8, &mut out).unwrap();
    assert_eq!(u32::from_le_bytes(out), 7);
    let large = p.alloc(0, 2 * GIB).unwrap();
    assert_eq!(p.checksum_u32(large, 2 * GIB / 4).unwrap(), 0);
    p.fill_u32(large, 3, 2 * GIB / 4).unwrap();
    assert_eq!(
        p.checksum_u32(large, 2 * GIB / 4).unwrap(),
        3 * (2 * GIB / 4)
    );
    assert!(p.read(small + 4096, &mut out).is_err());
}

#[test]
fn injected_allocation_failure_after_n_calls() {
    let (_d, b) = new_box("t4");
    b.set_faults(&Faults {
        alloc_fail_after: Some(2),
        ..Default::default()
    })
    .unwrap();
    let mut p = SimProcess::new(b, None);
    p.create_context(0).unwrap();
    p.alloc(0, MIB).unwrap();
    p.alloc(0, MIB).unwrap();
    assert!(matches!(p.alloc(0, MIB), Err(SimError::OutOfMemory { .. })));
}

#[test]
fn lost_device_fails_operations() {
    let (_d, b) = new_box("2xt4");
    let mut p = SimProcess::new(b.clone(), None);
    p.create_context(1).unwrap();
    b.set_faults(&Faults {
        lost_devices: vec![1],
        ..Default::default()
    })
    .unwrap();
    assert!(matches!(p.alloc(1, MIB), Err(SimError::DeviceLost(1))));
    assert!(matches!(p.check(1), Err(SimError::DeviceLost(1))));
    assert!(p.check(0).is_ok());
}

#[test]
fn concurrent_allocations_never_overcommit() {
    let (_d, b) = new_box("16GiB");
    let free0 = b.memory(0).unwrap().free;
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let b = b.clone();
            std::thread::spawn(move || {
                let mut ok = 0u64;
                for _ in 0..40 {
                    // Each thread charges the same PID; the box lock keeps totals exact.
                    let r = b.update(|st, _| {
                        let m = crate::memory_of(b.device(0)?, st);
                        if m.free < 256 * MIB {
                            return Err(SimError::OutOfMemory {
                                device: 0,
                                requested: 256 * MIB,
                                free: m.free,
                            });
                        }
                        let u = st
                            .processes
                            .entry(std::process::id())
                            .or_default()
                            .devices
                            .entry(0)
                            .or_default();
                        u.alloc_bytes += 256 * MIB;
                        Ok(())
                    });
                    if r.is_ok() {
                        ok += 1;
                    }
                }
                ok
            })
        })
        .collect();
    let granted: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(granted, free0 / (256 * MIB));
    assert_eq!(b.memory(0).unwrap().used, granted * 256 * MIB);
}

/// A graphics-only client (a display server) holds what it allocates and no CUDA context
/// overhead (Xorg at 28 MiB in nvidia-smi -q, NVIDIA/nvidia-docker#1264); a compute client's
/// listing includes its context's.
#[test]
fn a_graphics_client_holds_no_context_overhead() {
    let mib = 1u64 << 20;
    let (_d, b) = new_box("1x16GiB");
    let before = b.memory(0).unwrap().used;
    let mut x = SimProcess::new(b.clone(), None);
    x.set_kind(ProcessKind::Graphics);
    x.create_context(0).unwrap();
    x.alloc(0, 20 * mib).unwrap();
    let listed = b.processes(0).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].used, 20 * mib, "{listed:?}");
    assert_eq!(b.memory(0).unwrap().used, before + 20 * mib);
    // The same on a fresh box as a compute client: its context's overhead is listed too.
    let (_d2, b2) = new_box("1x16GiB");
    let overhead = b2.device(0).unwrap().context_overhead;
    assert!(overhead > 0);
    let mut c = SimProcess::new(b2.clone(), None);
    c.create_context(0).unwrap();
    c.alloc(0, 20 * mib).unwrap();
    let compute = b2.processes(0).unwrap();
    assert_eq!(compute[0].used, 20 * mib + overhead);
}
