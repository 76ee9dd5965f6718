//! Fingerprints on synthetic recordings: each fires on its pattern (positive tests, here) and
//! benign jobs raise nothing (hand-written families, then proptest-generated ones).

use super::*;
use crate::model::{DeviceSeries, Marker, ProcessSample};
use proptest::prelude::*;

const G: u64 = GIB;

fn uuid(i: u32) -> String {
    format!("GPU-{i:08x}-1111-2222-3333-444444444444")
}

/// A change of one process's usage on one device at a time.
#[derive(Clone, Copy, Debug)]
struct Ev {
    t: f64,
    pid: u32,
    dev: u32,
    /// New usage of `pid` on `dev` (absolute, bytes).
    used: u64,
}

/// Builds a recording the way a recorder samples: memory every `period` ms, per-process
/// lists every `proc_period` ms, from a list of usage changes.
struct Job {
    totals: Vec<u64>,
    /// Used by others from the start, per device.
    base: Vec<u64>,
    events: Vec<Ev>,
    procs: Vec<RecordedProcess>,
    markers: Vec<Marker>,
    errors: Vec<ErrorEvent>,
    period: f64,
    proc_period: f64,
    end: f64,
    /// PIDs whose memory is NOT returned at exit (a stuck driver).
    stuck: Vec<u32>,
    /// Device readings wobble by up to this many bytes (allocator and driver noise).
    jitter: u64,
    /// How the job ended (`None`: status 1 when its output shows an error, else 0).
    exit: Option<JobExit>,
}

impl Job {
    fn new(totals: &[u64], end: f64) -> Job {
        Job {
            totals: totals.to_vec(),
            base: vec![0; totals.len()],
            events: Vec::new(),
            procs: Vec::new(),
            markers: Vec::new(),
            errors: Vec::new(),
            period: 50.0,
            proc_period: 250.0,
            end,
            stuck: Vec::new(),
            jitter: 0,
            exit: None,
        }
    }

    fn proc_(&mut self, pid: u32, cvd: Option<&str>, exit: Option<f64>) -> &mut Self {
        self.procs.push(RecordedProcess {
            name: Some(format!("python{pid}")),
            exit_ms: exit,
            cuda_visible_devices: cvd.map(String::from),
            ..RecordedProcess::seen(pid, 0.0, true)
        });
        self
    }

    fn set(&mut self, t: f64, pid: u32, dev: u32, used: u64) -> &mut Self {
        self.events.push(Ev { t, pid, dev, used });
        self
    }

    /// Raise `pid`'s usage on `dev` from `from` to `to` over `[t, t + ms]` in small steps.
    fn ramp(&mut self, t: f64, ms: f64, pid: u32, dev: u32, from: u64, to: u64) -> &mut Self {
        let n = ((ms / 20.0) as u64).max(1);
        for k in 1..=n {
            let v = from as i128 + (to as i128 - from as i128) * k as i128 / n as i128;
            self.set(t + ms * k as f64 / n as f64, pid, dev, v as u64);
        }
        self
    }

    fn marker(&mut self, t: f64, kind: &str, label: &str) -> &mut Self {
        self.markers.push(Marker {
            t_ms: t,
            kind: kind.into(),
            label: label.into(),
            device: None,
        });
        self
    }

    fn oom(&mut self, t: f64, dev: Option<u32>, requested: Option<u64>) -> &mut Self {
        self.errors.push(ErrorEvent {
            t_ms: t,
            kind: ErrorKind::OutOfMemory,
            device: dev,
            pid: None,
            line: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.36 GiB".into(),
            requested_bytes: requested,
            facts: None,
        });
        self
    }

    fn build(&self) -> Recording {
        let mut events = self.events.clone();
        // Exits return memory unless stuck.
        for p in &self.procs {
            if let (Some(t), false) = (p.exit_ms, self.stuck.contains(&p.pid)) {
                for d in 0..self.totals.len() as u32 {
                    events.push(Ev {
                        t,
                        pid: p.pid,
                        dev: d,
                        used: 0,
                    });
                }
            }
        }
        events.sort_by(|a, b| a.t.total_cmp(&b.t));
        let nd = self.totals.len();
        let mut usage: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        let mut series: Vec<Vec<(f64, u64)>> = vec![Vec::new(); nd];
        let mut psamples = Vec::new();
        let mut k = 0;
        let mut t = 0.0;
        let mut next_proc = 0.0;
        while t <= self.end {
            while k < events.len() && events[k].t <= t {
                let e = events[k];
                usage.insert((e.pid, e.dev), e.used);
                k += 1;
            }
            for (d, s) in series.iter_mut().enumerate() {
                let held: u64 = usage
                    .iter()
                    .filter(|((_, dv), _)| *dv as usize == d)
                    .map(|(_, u)| *u)
                    .sum();
                let wobble = if self.jitter > 0 {
                    (t as u64).wrapping_mul(2_654_435_761) % self.jitter
                } else {
                    0
                };
                s.push((t, self.base[d] + held + wobble));
            }
            if t >= next_proc {
                next_proc += self.proc_period;
                for ((pid, dv), u) in &usage {
                    let exited = self
                        .procs
                        .iter()
                        .any(|p| p.pid == *pid && p.exit_ms.is_some_and(|x| x <= t));
                    if *u > 0 && !exited {
                        psamples.push(ProcessSample {
                            t_ms: t,
                            device: *dv,
                            pid: *pid,
                            used: Some(*u),
                        });
                    }
                }
            }
            t += self.period;
        }
        Recording {
            rules_only: Default::default(),
            devices: (0..nd as u32)
                .map(|i| RecordedDevice {
                    index: i,
                    uuid: uuid(i),
                    name: "Test GPU".into(),
                    total: self.totals[i as usize],
                    minor: None,
                    label: None,
                })
                .collect(),
            timeline: Timeline {
                devices: series
                    .into_iter()
                    .enumerate()
                    .map(|(i, samples)| DeviceSeries {
                        device: i as u32,
                        total: self.totals[i],
                        samples,
                    })
                    .collect(),
                markers: self.markers.clone(),
                processes: psamples,
                gaps: Vec::new(),
            },
            processes: self.procs.clone(),
            errors: self.errors.clone(),
            end_ms: self.end,
            exit: Some(self.exit.unwrap_or(if self.errors.is_empty() {
                JobExit::Code(0)
            } else {
                JobExit::Code(1)
            })),
            device_file_holders: Vec::new(),
        }
    }

    fn ids(&self) -> Vec<String> {
        ids_of(&self.build())
    }
}

fn ids_of(rec: &Recording) -> Vec<String> {
    fingerprints(rec, &TimelineThresholds::default())
        .into_iter()
        .map(|f| f.id)
        .collect()
}

fn find(rec: &Recording, id: &str) -> Finding {
    let all = fingerprints(rec, &TimelineThresholds::default());
    all.iter()
        .find(|f| f.id == id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} did not fire; got {:?}", all))
}

fn gib(x: f64) -> u64 {
    (x * G as f64) as u64
}

fn has(f: &Finding, label_part: &str) -> bool {
    f.evidence.iter().any(|e| e.label.contains(label_part))
}

// ----------------------------------------------------------------------------------------
// Positive tests: each fingerprint fires on its pattern, with evidence.

#[test]
fn out_of_memory_names_device_free_memory_and_line() {
    let mut j = Job::new(&[16 * G, 16 * G], 8000.0);
    j.proc_(10, None, Some(7000.0));
    j.ramp(1000.0, 2000.0, 10, 1, 0, gib(14.0));
    j.marker(3500.0, "marker", "epoch 1");
    j.oom(4000.0, Some(1), Some(gib(3.0)));
    let f = find(&j.build(), ids::OUT_OF_MEMORY);
    assert_eq!(f.severity, Severity::Error);
    assert_eq!(f.devices, vec![1]);
    assert!(
        f.title.contains("GPU 1") && f.title.contains("2.00 GiB free"),
        "{}",
        f.title
    );
    let free = f.evidence.iter().find(|e| e.label == "free at that moment");
    assert_eq!(free.and_then(|e| e.bytes), Some(gib(2.0)));
    assert!(f
        .evidence
        .iter()
        .any(|e| e.value.contains("Tried to allocate")));
    assert!(f.evidence.iter().any(|e| e.value == "epoch 1"));
    assert!(f.evidence.iter().any(|e| e.value.contains(&uuid(1))));
    assert_eq!(f.fix, fixes::OUT_OF_MEMORY);
}

#[test]
fn out_of_memory_without_a_device_picks_the_fullest_job_device() {
    let mut j = Job::new(&[16 * G, 16 * G], 5000.0);
    j.proc_(10, None, None);
    j.set(100.0, 10, 0, gib(4.0)).set(100.0, 10, 1, gib(15.0));
    j.oom(3000.0, None, None);
    let f = find(&j.build(), ids::OUT_OF_MEMORY);
    assert_eq!(f.devices, vec![1]);
    assert!(has(&f, "device"));
}

#[test]
fn stray_context_over_time_by_uuid() {
    // Work on GPU 1; a context appears on GPU 0 later (the warm-up) and stays.
    let mut j = Job::new(&[16 * G, 16 * G], 20_000.0);
    j.proc_(10, None, Some(19_000.0));
    j.set(500.0, 10, 1, 448 * MIB);
    j.ramp(1000.0, 3000.0, 10, 1, 448 * MIB, gib(6.0));
    j.set(5000.0, 10, 0, 576 * MIB);
    let f = find(&j.build(), ids::STRAY_CONTEXT);
    assert_eq!(f.devices, vec![0]);
    assert_eq!(f.pid, Some(10));
    assert!(
        f.title.contains("stray 576 MiB context on GPU 0"),
        "{}",
        f.title
    );
    assert!(f.evidence.iter().any(|e| e.value == uuid(0)));
    assert!(has(&f, "held on GPU 0"));
    assert_eq!(f.fix, fixes::STRAY_CONTEXT);
}

#[test]
fn stray_context_outside_cuda_visible_devices() {
    let mut j = Job::new(&[16 * G, 16 * G], 3000.0);
    j.proc_(10, Some("1"), None);
    j.set(100.0, 10, 1, gib(8.0)).set(200.0, 10, 0, gib(3.0));
    let f = find(&j.build(), ids::STRAY_CONTEXT);
    assert!(
        f.title.contains("outside its CUDA_VISIBLE_DEVICES=1"),
        "{}",
        f.title
    );
    // By UUID works too.
    let mut j = Job::new(&[16 * G, 16 * G], 3000.0);
    j.proc_(10, Some(&uuid(1)), None);
    j.set(100.0, 10, 1, gib(8.0)).set(200.0, 10, 0, gib(3.0));
    assert!(j.ids().contains(&ids::STRAY_CONTEXT.to_string()));
}

#[test]
fn stray_context_shows_nvidia_visible_devices_once() {
    let nvd_labels = |f: &Finding| {
        f.evidence
            .iter()
            .filter(|e| e.label.starts_with("NVIDIA_VISIBLE_DEVICES"))
            .count()
    };
    // (a) outside CUDA_VISIBLE_DEVICES: the rule's own "(its container's GPUs)" evidence.
    let mut j = Job::new(&[16 * G, 16 * G], 3000.0);
    j.proc_(10, Some("0"), None);
    j.set(100.0, 10, 0, gib(8.0)).set(200.0, 10, 1, gib(3.0));
    let mut rec = j.build();
    rec.processes[0].gpu_env.nvidia_visible_devices = Some("all".into());
    let f = find(&rec, ids::STRAY_CONTEXT);
    assert_eq!(nvd_labels(&f), 1, "{:?}", f.evidence);
    assert!(has(&f, "NVIDIA_VISIBLE_DEVICES (its container's GPUs)"));
    // (b) a context-sized footprint, CUDA_VISIBLE_DEVICES unknown: the timeline adds it.
    let mut j = Job::new(&[16 * G, 16 * G], 3000.0);
    j.proc_(10, Some("MIG-x"), None);
    j.set(100.0, 10, 1, gib(8.0)).set(200.0, 10, 0, 448 * MIB);
    let mut rec = j.build();
    rec.processes[0].gpu_env.nvidia_visible_devices = Some("all".into());
    let f = find(&rec, ids::STRAY_CONTEXT);
    assert_eq!(nvd_labels(&f), 1, "{:?}", f.evidence);
    assert!(has(&f, "NVIDIA_VISIBLE_DEVICES"));
}

#[test]
fn stray_context_without_device_entries_maps_indices_by_the_series() {
    let mut j = Job::new(&[16 * G, 16 * G], 3000.0);
    j.proc_(10, Some("1"), None);
    j.set(100.0, 10, 1, gib(8.0));
    let mut rec = j.build();
    rec.devices.clear();
    assert!(ids_of(&rec).is_empty(), "{:?}", ids_of(&rec));
    j.set(200.0, 10, 0, 448 * MIB);
    let mut rec = j.build();
    rec.devices.clear();
    assert_eq!(ids_of(&rec), vec![ids::STRAY_CONTEXT.to_string()]);
}

#[test]
fn stray_context_is_scans_rule_on_one_sample() {
    // The one-sample case: the same decision and title as scan's snapshot rule.
    let mut j = Job::new(&[24 * G, 24 * G], 0.0);
    j.proc_(7, None, None);
    j.set(0.0, 7, 0, 512 * MIB).set(0.0, 7, 1, gib(10.0));
    let f = find(&j.build(), ids::STRAY_CONTEXT);
    let snapshot = ProcessInfo {
        pid: 7,
        visible: true,
        user: None,
        name: Some("python7".into()),
        cmdline: None,
        cuda_visible_devices: CVD_UNSET.into(),
        container: None,
        pod: None,
        devices: vec![
            ProcessDeviceUsage {
                device: 0,
                used: Some(512 * MIB),
                lists: Vec::new(),
            },
            ProcessDeviceUsage {
                device: 1,
                used: Some(gib(10.0)),
                lists: Vec::new(),
            },
        ],
    };
    let scan = crate::diagnose::stray::stray_context_of(
        &snapshot,
        None,
        &[0, 1].map(|i| crate::diagnose::devset::GpuRef {
            uuid: uuid(i),
            name: "Test GPU".into(),
            minor: None,
        }),
        G,
        G,
    );
    let scan = scan.expect("scan's rule fires");
    assert!(
        f.title.starts_with(&scan.title),
        "{} / {}",
        f.title,
        scan.title
    );
    assert_eq!((f.devices, f.pid), (scan.devices, scan.pid));
    assert_eq!(f.evidence[..scan.evidence.len()], scan.evidence[..]);
}

#[test]
fn stray_context_ignores_integer_cvd_on_a_mixed_box_without_pci_order() {
    let mut j = Job::new(&[16 * G, 24 * G], 3000.0);
    j.proc_(10, Some("1"), None);
    j.set(100.0, 10, 0, gib(8.0)).set(200.0, 10, 1, gib(3.0));
    let mut rec = j.build();
    rec.devices[1].name = "Other GPU".into();
    // CUDA's fastest-first order may put physical GPU 1 at ordinal 0: no finding from (a),
    // and 3 GiB is not context-sized for (b).
    assert!(!ids_of(&rec).contains(&ids::STRAY_CONTEXT.to_string()));
    rec.processes[0].gpu_env.cuda_device_order = Some("PCI_BUS_ID".into());
    assert!(ids_of(&rec).contains(&ids::STRAY_CONTEXT.to_string()));
}

/// Multi-size: load, then a workspace per new size that stays cached, then OOM.
fn multi_size(total: u64, requested: u64) -> Job {
    let t = total as f64;
    let mut j = Job::new(&[total], 60_000.0);
    j.proc_(10, None, Some(50_000.0));
    j.marker(0.0, "marker", "load");
    j.ramp(1000.0, 4000.0, 10, 0, 0, (0.5 * t) as u64);
    let mut level = 0.5 * t;
    for (k, size) in [0.26, 0.12, 0.09].iter().enumerate() {
        let at = 10_000.0 + k as f64 * 10_000.0;
        j.marker(at, "marker", &format!("size {k}"));
        level += size * t;
        j.ramp(
            at + 500.0,
            1000.0,
            10,
            0,
            (level - size * t) as u64,
            level as u64,
        );
    }
    j.oom(42_000.0, Some(0), Some(requested));
    j
}

#[test]
fn growth_without_release_ending_in_oom() {
    let j = multi_size(16 * G, gib(4.4));
    let f = find(&j.build(), ids::GROWTH_WITHOUT_RELEASE);
    assert_eq!(f.severity, Severity::Error);
    assert_eq!(f.devices, vec![0]);
    assert_eq!(f.pid, Some(10));
    assert!(f.title.contains("then out of memory"), "{}", f.title);
    assert!(has(&f, "step 3"));
    assert!(has(&f, "alone it would fit"));
    assert!(
        f.fix.starts_with(fixes::GROWTH_WITHOUT_RELEASE),
        "{}",
        f.fix
    );
    assert!(f.fix.ends_with(fixes::GROWTH_TORCH), "{}", f.fix);
    // A request that would not fit even on the first plateau is not this pattern.
    let j = multi_size(16 * G, gib(9.0));
    assert!(!j.ids().contains(&ids::GROWTH_WITHOUT_RELEASE.to_string()));
}

#[test]
fn an_oom_long_after_the_growth_stopped_is_not_growth() {
    // Load, first iteration, other ranks' contexts in the first minute; OOM an hour later.
    let mut j = Job::new(&[16 * G], 3_700_000.0);
    j.period = 500.0;
    j.proc_(10, None, None);
    j.ramp(1000.0, 20_000.0, 10, 0, 0, gib(6.0));
    j.set(30_000.0, 10, 0, gib(10.0))
        .set(40_000.0, 10, 0, gib(12.0));
    j.oom(3_600_000.0, Some(0), Some(gib(1.0)));
    assert_eq!(j.ids(), vec![ids::OUT_OF_MEMORY.to_string()]);
    // A job stepping up phase after phase (three steps after its load) and failing at its
    // next step is. (Two warm-up rises then a small failing request are not: see
    // run_failures.rs.)
    let mut j = Job::new(&[16 * G], 100_000.0);
    j.proc_(10, None, None);
    j.ramp(1000.0, 20_000.0, 10, 0, 0, gib(6.0));
    j.set(30_000.0, 10, 0, gib(10.0))
        .set(40_000.0, 10, 0, gib(12.0))
        .set(50_000.0, 10, 0, gib(13.5));
    j.oom(60_000.0, Some(0), Some(gib(1.0)));
    assert!(j.ids().contains(&ids::GROWTH_WITHOUT_RELEASE.to_string()));
}

#[test]
fn growth_without_release_near_full_while_still_growing() {
    // A leak: +1 GiB every 30 s until 15.4 of 16 GiB, no OOM yet.
    let mut j = Job::new(&[16 * G], 400_000.0);
    j.proc_(10, None, None);
    j.ramp(1000.0, 3000.0, 10, 0, 0, gib(4.4));
    for k in 1..=11u64 {
        j.set(k as f64 * 30_000.0, 10, 0, gib(4.4) + k * G);
    }
    let f = find(&j.build(), ids::GROWTH_WITHOUT_RELEASE);
    assert_eq!(f.severity, Severity::Warn);
    assert!(f.title.contains("% of total"), "{}", f.title);
}

#[test]
fn not_released_after_release_marker_on_every_device() {
    let mut j = Job::new(&[16 * G, 16 * G], 20_000.0);
    j.proc_(10, None, None).proc_(11, None, None);
    for (pid, dev) in [(10, 0), (11, 1)] {
        j.set(100.0, pid, dev, 448 * MIB);
        j.ramp(1000.0, 2000.0, pid, dev, 448 * MIB, gib(7.0));
        j.set(9000.0, pid, dev, gib(5.7));
    }
    j.marker(10_000.0, "release", "del model; empty_cache()");
    j.marker(12_000.0, "marker", "load next");
    let f = find(&j.build(), ids::NOT_RELEASED);
    assert_eq!(f.devices, vec![0, 1]);
    assert!(f.title.contains("5.70 GiB"), "{}", f.title);
    assert!(has(&f, "held by the job's processes"));
    assert_eq!(f.fix, fixes::NOT_RELEASED);
    // Released down to the contexts: silent.
    let mut j = Job::new(&[16 * G, 16 * G], 20_000.0);
    j.proc_(10, None, None).proc_(11, None, None);
    for (pid, dev) in [(10, 0), (11, 1)] {
        j.set(100.0, pid, dev, 448 * MIB);
        j.ramp(1000.0, 2000.0, pid, dev, 448 * MIB, gib(7.0));
        j.set(9000.0, pid, dev, 448 * MIB);
    }
    j.marker(
        10_000.0,
        "release",
        "destroy_process_group(); empty_cache()",
    );
    assert!(j.ids().is_empty(), "{:?}", j.ids());
}

/// CogVLM: a full copy on GPU 0, then device_map="auto" splits another copy over 0 and 1.
fn double_load_job(second_is_split: bool) -> Job {
    let mut j = Job::new(&[24 * G, 24 * G], 30_000.0);
    j.proc_(10, None, None);
    j.set(100.0, 10, 0, 448 * MIB).set(150.0, 10, 1, 448 * MIB);
    j.ramp(1000.0, 4000.0, 10, 0, 448 * MIB, 448 * MIB + gib(12.0));
    if second_is_split {
        j.ramp(
            8000.0,
            2000.0,
            10,
            0,
            448 * MIB + gib(12.0),
            448 * MIB + gib(18.0),
        );
        j.ramp(10_500.0, 2000.0, 10, 1, 448 * MIB, 448 * MIB + gib(6.0));
    } else {
        // One full copy per GPU (the demo's design): not a double load.
        j.ramp(8000.0, 4000.0, 10, 1, 448 * MIB, 448 * MIB + gib(12.0));
    }
    j
}

#[test]
fn double_load_full_copy_plus_split_copy() {
    let f = find(&double_load_job(true).build(), ids::DOUBLE_LOAD);
    assert_eq!(f.pid, Some(10));
    assert_eq!(f.devices, vec![0, 1]);
    assert!(has(&f, "load 1") && has(&f, "load 2"));
    assert_eq!(f.fix, fixes::DOUBLE_LOAD);
    assert!(!double_load_job(false)
        .ids()
        .contains(&ids::DOUBLE_LOAD.to_string()));
}

/// vLLM: weights, a profile run, one KV-cache claim up to `u` x total, then dynamic work.
fn engine(u: f64, fail: bool) -> Job {
    engine_with(u, fail, 300 * MIB)
}

/// [`engine`] beside others holding `others` from the start.
fn engine_with(u: f64, fail: bool, others: u64) -> Job {
    let total = 16 * G;
    let t = total as f64;
    let mut j = Job::new(&[total], 120_000.0);
    j.proc_(10, None, Some(110_000.0));
    j.base[0] = others;
    j.set(500.0, 10, 0, 448 * MIB);
    j.ramp(
        1000.0,
        8000.0,
        10,
        0,
        448 * MIB,
        448 * MIB + (0.33 * t) as u64,
    );
    j.set(12_000.0, 10, 0, 448 * MIB + (0.37 * t) as u64);
    j.marker(14_000.0, "marker", "KV cache");
    j.ramp(
        14_500.0,
        200.0,
        10,
        0,
        448 * MIB + (0.37 * t) as u64,
        (u * t) as u64,
    );
    // Serving: activations come and go inside the budget.
    let mut at = 20_000.0;
    while at < 100_000.0 {
        j.set(at, 10, 0, (u * t) as u64 + 200 * MIB);
        j.set(at + 300.0, 10, 0, (u * t) as u64);
        at += 2000.0;
    }
    if fail {
        j.errors.push(ErrorEvent {
            t_ms: 30_000.0,
            kind: ErrorKind::DriverError,
            device: None,
            pid: Some(10),
            line: "RuntimeError: CUDA error: unknown error".into(),
            requested_bytes: None,
            facts: None,
        });
    }
    j
}

#[test]
fn overcommit_claim_then_failure() {
    let f = find(&engine(0.92, true).build(), ids::OVERCOMMIT);
    assert_eq!(f.severity, Severity::Error);
    assert_eq!(f.devices, vec![0]);
    assert_eq!(f.pid, Some(10));
    assert!(f.evidence.iter().any(|e| e.value.contains("unknown error")));
    // The fix names the plan that fits (tests/run_failures.rs: its figures).
    assert!(f.fix.starts_with(fixes::OVERCOMMIT), "{}", f.fix);
    // The same claim without a failure, or a 0.5 budget that fails for another reason.
    assert!(engine(0.92, false).ids().is_empty());
    // Stopped with Ctrl-C / SIGTERM: not a failure; SIGKILL with no out-of-memory error is
    // the host's OOM killer, named as such, not the engine's budget.
    for (signal, fires) in [(2, false), (15, false), (9, false), (6, false)] {
        let mut j = engine(0.92, false);
        j.errors.push(ErrorEvent {
            t_ms: 100_000.0,
            kind: ErrorKind::KilledBySignal { signal },
            device: None,
            pid: Some(10),
            line: format!("killed by signal {signal}"),
            requested_bytes: None,
            facts: None,
        });
        assert_eq!(
            j.ids().contains(&ids::OVERCOMMIT.to_string()),
            fires,
            "signal {signal}"
        );
        assert_eq!(
            j.ids().contains(&ids::HOST_OOM_KILL.to_string()),
            signal == 9,
            "signal {signal}"
        );
    }
    assert!(!engine(0.5, true)
        .ids()
        .contains(&ids::OVERCOMMIT.to_string()));
}

#[test]
fn held_after_exit_when_memory_stays() {
    let mut j = Job::new(&[16 * G], 10_000.0);
    j.proc_(10, None, Some(5000.0));
    j.set(100.0, 10, 0, gib(6.0));
    j.stuck.push(10);
    let f = find(&j.build(), ids::HELD_AFTER_EXIT);
    assert_eq!(f.devices, vec![0]);
    assert!(f.title.contains("6.00 GiB"), "{}", f.title);
    assert_eq!(f.fix, fixes::HELD_AFTER_EXIT);
    // Returned at exit: silent; no samples after the grace period: silent.
    let mut j = Job::new(&[16 * G], 10_000.0);
    j.proc_(10, None, Some(5000.0));
    j.set(100.0, 10, 0, gib(6.0));
    assert!(j.ids().is_empty());
    let mut j = Job::new(&[16 * G], 5200.0);
    j.proc_(10, None, Some(5000.0));
    j.set(100.0, 10, 0, gib(6.0));
    j.stuck.push(10);
    assert!(j.ids().is_empty());
}

#[test]
fn held_after_exit_discounts_other_processes() {
    let mut j = Job::new(&[16 * G], 10_000.0);
    j.proc_(10, None, Some(5000.0));
    j.set(100.0, 10, 0, gib(6.0));
    // A neighbour (not in the tree) starts during the job and keeps running.
    j.set(2000.0, 99, 0, gib(3.0));
    assert!(j.ids().is_empty(), "{:?}", j.ids());
}

#[test]
fn held_after_exit_takes_memory_listed_from_the_first_round_for_the_baseline() {
    // A driver that keeps exited processes' memory: an earlier job's 2 GiB is there from the
    // start under its dead PID, first listed a round after the first memory reading. It is
    // in the baseline, not growth of others: the job's 6 GiB (allocated after that round)
    // are what is held.
    let mut j = Job::new(&[16 * G], 10_000.0);
    j.set(0.0, 99, 0, gib(2.0));
    j.proc_(10, None, Some(5000.0));
    j.set(300.0, 10, 0, gib(6.0));
    j.stuck.push(10);
    let mut rec = j.build();
    rec.timeline.processes.retain(|p| p.t_ms > 0.0);
    let f = find(&rec, ids::HELD_AFTER_EXIT);
    assert!(f.title.contains("6.00 GiB"), "{}", f.title);
    // A neighbour that came between the first sample and that round (used rose) is not in
    // the baseline: its later growth is all others', nothing is held.
    let mut j = Job::new(&[16 * G], 10_000.0);
    j.proc_(10, None, Some(5000.0));
    j.set(100.0, 99, 0, gib(0.4));
    j.set(300.0, 10, 0, gib(6.0));
    j.set(2000.0, 99, 0, gib(3.0));
    let mut rec = j.build();
    rec.timeline.processes.retain(|p| p.t_ms > 0.0);
    assert!(ids_of(&rec).is_empty(), "{:?}", ids_of(&rec));
}

mod benign;
mod families;
mod run_failures;
mod vantages;

#[test]
fn stray_context_over_time_reads_slurms_gpus_through_minors() {
    // A Slurm job (ConstrainDevices) on physical GPU 1: local CUDA_VISIBLE_DEVICES=0, and
    // SLURM_JOB_GPUS names GPU 1's device file. Minors permuted: GPU 1 is /dev/nvidia0.
    let job = |slurm: Option<&str>| {
        let mut j = Job::new(&[16 * G, 16 * G], 3000.0);
        j.proc_(10, Some("0"), None);
        j.set(100.0, 10, 1, gib(8.0));
        let mut rec = j.build();
        for (d, m) in rec.devices.iter_mut().zip([1, 0]) {
            d.minor = Some(m);
        }
        rec.processes[0].gpu_env.slurm_gpus = slurm.map(|v| ("SLURM_JOB_GPUS".into(), v.into()));
        rec
    };
    // Without Slurm's variable the job looks stray (the case this fixes).
    assert!(ids_of(&job(None)).contains(&ids::STRAY_CONTEXT.to_string()));
    for v in ["0", "1"] {
        let ids = ids_of(&job(Some(v)));
        assert!(
            !ids.contains(&ids::STRAY_CONTEXT.to_string()),
            "SLURM_JOB_GPUS={v}: {ids:?}"
        );
    }
}

#[test]
fn stray_context_over_time_reads_the_device_files_the_process_could_open() {
    // `docker run --gpus device=1` of an image that sets CUDA_VISIBLE_DEVICES=0: only GPU 1's
    // device file (minor 0: minors permuted) is in the process's view of /dev, read while it
    // ran. Its environment alone would make GPU 1 a stray context.
    let job = |node_minors: Option<Vec<u32>>| {
        let mut j = Job::new(&[16 * G, 16 * G], 3000.0);
        j.proc_(10, Some("0"), None);
        j.set(100.0, 10, 1, gib(8.0));
        let mut rec = j.build();
        for (d, m) in rec.devices.iter_mut().zip([1, 0]) {
            d.minor = Some(m);
        }
        rec.processes[0].gpu_env.node_minors = node_minors;
        rec
    };
    assert!(ids_of(&job(None)).contains(&ids::STRAY_CONTEXT.to_string()));
    let ids = ids_of(&job(Some(vec![0])));
    assert!(!ids.contains(&ids::STRAY_CONTEXT.to_string()), "{ids:?}");
    // A view that names every GPU restricts nothing: the environment decides again.
    assert!(ids_of(&job(Some(vec![0, 1]))).contains(&ids::STRAY_CONTEXT.to_string()));
}
