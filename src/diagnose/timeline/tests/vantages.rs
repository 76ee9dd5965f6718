//! Issue 25: fingerprints as far as the recorder's vantage supports them. In a container on
//! a driver from 535.113 on, only the container's processes are listed (open-gpu-kernel-modules
//! `gpu_rmapi.c` `_gpuConvertPid`), with 0 bytes up to the 560 series
//! (NVIDIA/nvidia-container-toolkit#1013).

use super::*;
use crate::model::{PidNamespace, Vantage};

fn vantage(host: bool, driver: &str) -> Vantage {
    Vantage::new(
        PidNamespace {
            host,
            reason: "test".into(),
        },
        Some(driver.into()),
    )
}

fn seen_from(rec: &Recording, v: &Vantage) -> Vec<Finding> {
    let th = TimelineThresholds::default();
    vantage::within_vantage(rec, &th, v, fingerprints(rec, &th))
}

fn severity_of(f: &[Finding], id: &str) -> Option<Severity> {
    f.iter().find(|f| f.id == id).map(|f| f.severity)
}

/// The job (PID 10) returns its 6 GiB at exit; a neighbour outside the container starts
/// during the job with 3 GiB and keeps it. A translating driver does not list the neighbour.
fn unlisted_neighbour_after_the_job() -> Recording {
    let mut j = Job::new(&[16 * G], 10_000.0);
    j.proc_(10, None, Some(5000.0));
    j.set(100.0, 10, 0, gib(6.0));
    j.set(2000.0, 99, 0, gib(3.0));
    let mut rec = j.build();
    rec.timeline.processes.retain(|s| s.pid != 99);
    rec
}

#[test]
fn an_unlisted_neighbours_memory_is_not_held_after_exit_from_a_container() {
    let rec = unlisted_neighbour_after_the_job();
    // Read as if every client were listed (the host's reading of these lists), the
    // neighbour's 3 GiB look held by the job: the gap the vantage closes.
    let host = seen_from(&rec, &vantage(true, "570.86.10"));
    assert_eq!(
        severity_of(&host, ids::HELD_AFTER_EXIT),
        Some(Severity::Error)
    );
    for driver in ["570.86.10", "550.54.15"] {
        let f = seen_from(&rec, &vantage(false, driver));
        let held = f.iter().find(|f| f.id == ids::HELD_AFTER_EXIT).unwrap();
        assert_eq!(held.severity, Severity::Info, "{driver}: {held:#?}");
        assert!(held
            .title
            .starts_with("Undecidable from this PID namespace"));
        assert!(has(held, "by no process listed here"), "{held:#?}");
        assert!(f.iter().all(|f| f.severity == Severity::Info), "{f:#?}");
    }
    // A host-PID driver lists every client: the container decides as the host does.
    let old = seen_from(&rec, &vantage(false, "535.54.03"));
    assert_eq!(
        severity_of(&old, ids::HELD_AFTER_EXIT),
        Some(Severity::Error)
    );
}

#[test]
fn the_jobs_own_growth_is_decided_where_it_is_listed_with_usage() {
    let rec = multi_size(16 * G, gib(4.4)).build();
    // 565 on: the job is listed with its usage and nothing else is on the GPU.
    let f = seen_from(&rec, &vantage(false, "570.86.10"));
    assert_eq!(
        severity_of(&f, ids::GROWTH_WITHOUT_RELEASE),
        Some(Severity::Error)
    );
    // 535.113 to 560: the same job listed with 0 bytes: its growth cannot be told from a
    // neighbour's (not raised, or at info); the out-of-memory error itself is still an error.
    let mut zero = rec.clone();
    for s in &mut zero.timeline.processes {
        s.used = Some(0);
    }
    let f = seen_from(&zero, &vantage(false, "550.54.15"));
    assert!(
        severity_of(&f, ids::GROWTH_WITHOUT_RELEASE) <= Some(Severity::Info),
        "{f:#?}"
    );
    assert_eq!(severity_of(&f, ids::OUT_OF_MEMORY), Some(Severity::Error));
}
