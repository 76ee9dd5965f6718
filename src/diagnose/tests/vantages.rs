//! Issue 25: the scan rules from every vantage (host namespace, container) × driver
//! generation (host PIDs before 535.113, translated with 0-byte own entries to 560,
//! translated with usage from 565, unknown), on hand-built inventories shaped as each
//! driver lists them (open-gpu-kernel-modules `gpu_rmapi.c` `_gpuConvertPid`;
//! NVIDIA/nvidia-container-toolkit#1013; NVIDIA/nvidia-docker#1483).

use super::*;
use crate::model::vantage::ListView;
use crate::model::Vantage;

const NEIGHBOUR: u64 = 6 * GIB;

/// `inv` seen from `host`/container under driver `driver` (`None`: version unknown).
fn seen_from(mut inv: Inventory, host: bool, driver: Option<&str>) -> Inventory {
    inv.vantage = Vantage::new(
        PidNamespace {
            host,
            reason: "test".into(),
        },
        driver.map(str::to_string),
    );
    inv
}

fn worst(inv: &Inventory) -> Option<Severity> {
    diagnose(inv, &Thresholds::default())
        .0
        .iter()
        .map(|f| f.severity)
        .max()
}

fn finding<'a>(f: &'a [Finding], id: &str) -> Option<&'a Finding> {
    f.iter().find(|f| f.id == id)
}

/// A container's own process (PID 7 in its namespace) holding `own` on GPU 0 as the driver
/// lists it, beside a neighbour outside the namespace holding [`NEIGHBOUR`] that a
/// translating driver does not list at all.
fn own_beside_unlisted_neighbour(listed_as: Option<u64>, own: u64) -> Inventory {
    let me = proc_(7, CVD_UNSET, &[(0, listed_as)]);
    let mut inv = inv_with(1, vec![me], &[], false);
    let d = &mut inv.environment.devices[0];
    d.memory.used = own + NEIGHBOUR;
    d.memory.free = TOTAL - RESERVED - d.memory.used;
    inv
}

#[test]
fn translated_with_usage_other_tenants_memory_is_info_never_lost() {
    let inv = seen_from(
        own_beside_unlisted_neighbour(Some(2 * GIB), 2 * GIB),
        false,
        Some("570.86.10"),
    );
    assert_eq!(
        inv.list_view(),
        ListView::OwnNamespaceOnly { zero_usage: false }
    );
    let (f, _) = diagnose(&inv, &Thresholds::default());
    assert!(worst(&inv) <= Some(Severity::Info), "{f:#?}");
    let nlo = finding(&f, ids::NO_LIVE_OWNER).expect("no-live-owner at info");
    assert_eq!(nlo.severity, Severity::Info);
    assert!(
        nlo.title
            .contains("memory of processes outside this container's PID namespace"),
        "{}",
        nlo.title
    );
    assert!(nlo.title.contains("hostPID"), "{}", nlo.title);
    assert_eq!(
        evidence_bytes(nlo, "not listed from this PID namespace"),
        Some(NEIGHBOUR)
    );
    assert_eq!(
        evidence_bytes(nlo, "held by processes listed here"),
        Some(2 * GIB)
    );
    // invisible-processes can fire here: its evidence is the unlisted bytes.
    let inv_f = finding(&f, ids::INVISIBLE_PROCESSES).expect("invisible-processes");
    assert_eq!(inv_f.severity, Severity::Info);
    assert_eq!(
        evidence_bytes(inv_f, "used on GPU 0 by no process listed here"),
        Some(NEIGHBOUR)
    );
    // The own process's bytes are real: nothing says they are unknown.
    assert!(finding(&f, ids::USAGE_UNAVAILABLE).is_none(), "{f:#?}");
    // The metric's split: other tenants' memory, not lost (the alert reads `lost`).
    let split = crate::diagnose::unattributed::split(&inv, &inv.devices()[0]).unwrap();
    assert_eq!((split.lost, split.outside_namespace), (0, NEIGHBOUR));
    let host = seen_from(inv.clone(), true, Some("570.86.10"));
    let split = crate::diagnose::unattributed::split(&host, &host.devices()[0]).unwrap();
    assert_eq!((split.lost, split.outside_namespace), (NEIGHBOUR, 0));
}

#[test]
fn zero_byte_own_entries_are_unknown_not_zero() {
    // 535.113 to 560: the container's own process listed with 0 bytes while it holds 2 GiB.
    let inv = seen_from(
        own_beside_unlisted_neighbour(Some(0), 2 * GIB),
        false,
        Some("550.54.15"),
    );
    assert_eq!(
        inv.list_view(),
        ListView::OwnNamespaceOnly { zero_usage: true }
    );
    let (f, _) = diagnose(&inv, &Thresholds::default());
    assert!(worst(&inv) <= Some(Severity::Info), "{f:#?}");
    let nlo = finding(&f, ids::NO_LIVE_OWNER).unwrap();
    assert_eq!(nlo.severity, Severity::Info);
    assert!(nlo.title.contains("0 bytes"), "{}", nlo.title);
    assert_eq!(
        evidence_bytes(nlo, "not listed from this PID namespace"),
        Some(2 * GIB + NEIGHBOUR)
    );
    let un = finding(&f, ids::USAGE_UNAVAILABLE).expect("usage-unavailable");
    assert!(un.evidence[0].value.contains("PID 7 on GPU 0"), "{un:#?}");
    assert!(un.evidence[0].value.contains("unknown, not 0"), "{un:#?}");
    // The same entry from the host namespace is a peer listing, not an unknown.
    let host = seen_from(
        own_beside_unlisted_neighbour(Some(0), 0),
        true,
        Some("550.54.15"),
    );
    assert!(usage_unavailable(&host).is_empty());
}

#[test]
fn per_process_rules_do_not_decide_from_zero_byte_entries() {
    // Two containers' processes would each be claimants of a full GPU; listed with 0 bytes
    // (and one on a GPU outside its CUDA_VISIBLE_DEVICES) nothing may warn.
    let a = proc_(7, "0", &[(0, Some(0)), (1, Some(0))]);
    let b = proc_(8, "1", &[(1, Some(0))]);
    let mut inv = seen_from(
        inv_with(2, vec![a, b], &[], false),
        false,
        Some("535.183.01"),
    );
    for d in &mut inv.environment.devices {
        d.memory.used = TOTAL - RESERVED - 200 * MIB;
        d.memory.free = 200 * MIB;
    }
    let (f, _) = diagnose(&inv, &Thresholds::default());
    assert!(worst(&inv) <= Some(Severity::Info), "{f:#?}");
    for id in [ids::STRAY_CONTEXT, ids::DUPLICATE_COPY] {
        assert!(finding(&f, id).is_none(), "{id}: {f:#?}");
    }
}

#[test]
fn host_pid_drivers_in_a_container_keep_the_old_reading() {
    // Before 535.113 a container sees every client under its host PID: the neighbour is
    // listed and not visible here (info), and memory nobody listed is lost (error).
    let mut neighbour = proc_(4242, CVD_UNKNOWN, &[(0, Some(NEIGHBOUR))]);
    neighbour.visible = false;
    let me = proc_(7, CVD_UNSET, &[(0, Some(2 * GIB))]);
    let inv = seen_from(
        inv_with(1, vec![me.clone(), neighbour.clone()], &[], false),
        false,
        Some("535.54.03"),
    );
    assert_eq!(inv.list_view(), ListView::HostPidsInContainer);
    let (f, _) = diagnose(&inv, &Thresholds::default());
    assert!(worst(&inv) <= Some(Severity::Info), "{f:#?}");
    let inv_f = finding(&f, ids::INVISIBLE_PROCESSES).unwrap();
    assert_eq!(evidence_bytes(inv_f, "memory they hold"), Some(NEIGHBOUR));
    assert!(finding(&f, ids::NO_LIVE_OWNER).is_none(), "{f:#?}");
    // A listed PID not visible here means host PIDs where the version gives no generation.
    let inv = seen_from(
        inv_with(1, vec![me.clone(), neighbour], &[], false),
        false,
        None,
    );
    assert_eq!(inv.list_view(), ListView::HostPidsInContainer);
    // Memory no listed client accounts for, under host PIDs: lost, as before.
    let inv = seen_from(
        inv_with(1, vec![me], &[(0, 4 * GIB)], false),
        false,
        Some("535.54.03"),
    );
    let f = no_live_owner(&inv, &Thresholds::default());
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0].severity, Severity::Error);
}

#[test]
fn nothing_about_a_host_pid_not_visible_here_is_more_than_info() {
    // Before 535.113: a neighbour listed under its host PID with a context-sized footprint
    // beside its main work (the stray-context pattern). From the container: info; from the
    // host (where it is visible): the warning.
    let mut n = proc_(
        4242,
        CVD_UNKNOWN,
        &[(0, Some(8 * GIB)), (1, Some(500 * MIB))],
    );
    n.visible = false;
    let inv = seen_from(
        inv_with(2, vec![n.clone()], &[], false),
        false,
        Some("535.54.03"),
    );
    let (f, _) = diagnose(&inv, &Thresholds::default());
    let stray = finding(&f, ids::STRAY_CONTEXT).expect("stray-context at info");
    assert_eq!(stray.severity, Severity::Info);
    assert!(
        stray
            .evidence
            .iter()
            .any(|e| e.value.contains("not visible")),
        "{stray:#?}"
    );
    assert!(worst(&inv) <= Some(Severity::Info), "{f:#?}");
    n.visible = true;
    let host = seen_from(inv_with(2, vec![n], &[], true), true, Some("535.54.03"));
    let (f, _) = diagnose(&host, &Thresholds::default());
    assert_eq!(
        finding(&f, ids::STRAY_CONTEXT).map(|f| f.severity),
        Some(Severity::Warn)
    );
}

#[test]
fn the_host_namespace_decides_as_before_under_every_generation() {
    for driver in [
        Some("535.54.03"),
        Some("550.54.15"),
        Some("570.86.10"),
        None,
    ] {
        let mut dead = proc_(999, CVD_UNKNOWN, &[(0, Some(8 * GIB))]);
        dead.visible = false;
        let inv = seen_from(inv_with(1, vec![dead], &[], true), true, driver);
        let f = no_live_owner(&inv, &Thresholds::default());
        assert_eq!(f.len(), 1, "{driver:?}: {f:#?}");
        assert_eq!(f[0].severity, Severity::Error, "{driver:?}");
        assert_eq!(f[0].pid, Some(999));
        let inv = seen_from(
            own_beside_unlisted_neighbour(Some(2 * GIB), 2 * GIB),
            true,
            driver,
        );
        let f = no_live_owner(&inv, &Thresholds::default());
        assert_eq!(f[0].severity, Severity::Error, "{driver:?}");
        assert!(invisible_processes(&inv, &Thresholds::default()).is_empty());
    }
}

#[test]
fn an_unknown_generation_in_a_container_cannot_conclude() {
    let inv = seen_from(
        own_beside_unlisted_neighbour(Some(2 * GIB), 2 * GIB),
        false,
        None,
    );
    assert_eq!(inv.list_view(), ListView::Unknown);
    let (f, _) = diagnose(&inv, &Thresholds::default());
    assert!(worst(&inv) <= Some(Severity::Info), "{f:#?}");
    let nlo = finding(&f, ids::NO_LIVE_OWNER).unwrap();
    assert!(nlo.title.contains("generation is unknown"), "{}", nlo.title);
    // Nothing unlisted: nothing to say.
    let quiet = seen_from(inv_with(1, vec![], &[], false), false, Some("570.86.10"));
    assert!(diagnose(&quiet, &Thresholds::default()).0.is_empty());
}

#[test]
fn a_translating_driver_listing_an_exited_process_of_this_namespace_keeps_its_reading() {
    // H200, 580.159.04 (docs/simulator.md): inside a PID namespace the driver lists a parent
    // that exited while its forked child keeps the context, under its namespace PID, which
    // no longer exists. That is not a host PID: the version's reading stands, the tenant
    // outside the namespace stays info, and the exited process's memory is not taken for
    // an invisible neighbour's.
    let mut parent = proc_(9, CVD_UNSET, &[(0, Some(2 * GIB))]);
    parent.visible = false;
    let mut inv = inv_with(1, vec![parent], &[], false);
    let d = &mut inv.environment.devices[0];
    d.memory.used = 2 * GIB + NEIGHBOUR;
    d.memory.free = TOTAL - RESERVED - d.memory.used;
    let inv = seen_from(inv, false, Some("580.159.04"));
    assert_eq!(
        inv.list_view(),
        ListView::OwnNamespaceOnly { zero_usage: false }
    );
    let (f, _) = diagnose(&inv, &Thresholds::default());
    let outside: Vec<&Finding> = f
        .iter()
        .filter(|x| x.id == ids::NO_LIVE_OWNER && x.title.contains("outside this container"))
        .collect();
    assert_eq!(outside.len(), 1, "{f:#?}");
    assert_eq!(outside[0].severity, Severity::Info, "{f:#?}");
    assert!(
        f.iter()
            .all(|x| x.id != ids::INVISIBLE_PROCESSES || x.pid != Some(9)),
        "{f:#?}"
    );
    // The exited process's own bytes are lost, as on the host: an error naming it.
    let lost: Vec<&Finding> = f
        .iter()
        .filter(|x| x.id == ids::NO_LIVE_OWNER && x.severity == Severity::Error)
        .collect();
    assert_eq!(lost.len(), 1, "{f:#?}");
    assert_eq!(lost[0].pid, Some(9), "{f:#?}");
    assert_eq!(
        evidence_bytes(lost[0], "no live owner"),
        Some(2 * GIB),
        "{f:#?}"
    );
}
