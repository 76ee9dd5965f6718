//! The recorder's state, fed once per collection by `serve`'s collector thread
//! ([`Incidents::observe`]): the history is extended, the followed logs and the kernel log
//! are read, the scan is compared with the last one (a GPU newly lost, memory newly without a
//! live owner), and each failure event opens an incident — or joins the one its failure
//! opened already (same pod, same GPU, within [`DEDUP_WINDOW`]: one incident per failure,
//! not per rank line). At most `per_minute` incidents are written a minute; more are
//! counted (`vramdoc_incidents_suppressed_total`).

use super::history::History;
use super::kernel::{self, KernelEvent, KernelLog};
use super::podlogs::PodLogs;
use super::{
    now_unix, rfc3339, Incident, IncidentEvent, IncidentPod, IncidentsConfig, Store,
    INCIDENT_SCHEMA,
};
use crate::gpu::DeviceStatus;
use crate::model::{PodRef, ScanResult};
use crate::repro::source::{Source, SourceDevice, SourceError};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::time::Duration;

/// Events of one failure within this time join its incident.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(120);
/// Events kept in one incident (later ones are counted in `repeats`).
pub const MAX_EVENTS: usize = 16;

/// One failure event before it becomes (or joins) an incident.
#[derive(Debug, Clone)]
struct Pending {
    key: String,
    rule: &'static str,
    title: String,
    pod: Option<PodRef>,
    devices: Vec<u32>,
    event: IncidentEvent,
    out_of_memory: bool,
    /// Only joins the open incident of its key (an Xid that follows another, NVIDIA's
    /// catalogue): never opens one, never spends the rate limit.
    joins_only: bool,
}

/// The flight recorder.
pub struct Incidents {
    cfg: IncidentsConfig,
    store: Store,
    history: History,
    pod_logs: PodLogs,
    kernel: Option<KernelLog>,
    /// Why the kernel log is not watched, if it is not.
    pub kernel_note: Option<String>,
    open: BTreeMap<String, (f64, Incident)>,
    written: VecDeque<f64>,
    counts: BTreeMap<(String, String, String), u64>,
    suppressed: u64,
    lost: BTreeSet<u32>,
    ownerless: BTreeSet<u32>,
    /// GPU index by PCI address (`dddd:bb:dd`), as earlier scans read it (a lost GPU's
    /// address may no longer be readable when its Xid line arrives).
    pci: BTreeMap<String, u32>,
    listing: Vec<u8>,
    seq: u64,
}

impl Incidents {
    pub fn new(cfg: IncidentsConfig) -> Result<Incidents, super::IncidentError> {
        let store = Store::open(&cfg.dir, cfg.max_count, cfg.max_bytes)?;
        let (kernel, kernel_note) = match &cfg.kernel_log {
            None => (None, None),
            Some(p) => match KernelLog::open(p) {
                Ok(k) => (Some(k), None),
                Err(e) => (None, Some(e)),
            },
        };
        let mut me = Incidents {
            history: History::new(cfg.history),
            pod_logs: PodLogs::new(&cfg.pod_log_dir),
            store,
            kernel,
            kernel_note,
            open: BTreeMap::new(),
            written: VecDeque::new(),
            counts: BTreeMap::new(),
            suppressed: 0,
            lost: BTreeSet::new(),
            ownerless: BTreeSet::new(),
            pci: BTreeMap::new(),
            listing: Vec::new(),
            seq: 0,
            cfg,
        };
        me.relist();
        Ok(me)
    }

    /// The JSON list `GET /incidents` answers (newest first).
    pub fn listing(&self) -> Vec<u8> {
        self.listing.clone()
    }

    /// The history's heap bytes now (docs/fleet.md: per GPU-hour).
    pub fn history_bytes(&self) -> usize {
        self.history.approx_bytes()
    }

    fn relist(&mut self) {
        let list = self.store.list();
        self.listing = serde_json::to_vec(&serde_json::json!({ "incidents": list }))
            .unwrap_or_else(|_| b"{\"incidents\":[]}".to_vec());
        self.listing.push(b'\n');
    }

    /// One collection: `scan` is `None` when it failed. Returns the errors of writing
    /// incidents (serve prints them; collection goes on).
    pub fn observe(&mut self, scan: Option<&ScanResult>, t_unix: f64) -> Vec<String> {
        let mut pending = Vec::new();
        if let Some(scan) = scan {
            self.history.push(scan, t_unix);
            for d in &scan.devices {
                if let Some(pci) = kernel::normalise_pci(&d.pci_bus_id) {
                    self.pci.insert(pci, d.index);
                }
            }
            let holding: Vec<&PodRef> = scan
                .processes
                .iter()
                .filter(|p| p.devices.iter().any(|u| u.used != Some(0)))
                .filter_map(|p| p.pod.as_ref())
                .collect();
            self.pod_logs.hold(&holding, t_unix);
        } else {
            self.pod_logs.hold(&[], t_unix);
        }
        self.pod_lines(&mut pending, t_unix);
        self.kernel_lines(&mut pending, t_unix);
        if let Some(scan) = scan {
            self.scan_changes(scan, &mut pending, t_unix);
        }
        let mut errors = Vec::new();
        let mut wrote = false;
        for p in pending {
            match self.file(p, scan, t_unix) {
                Ok(w) => wrote |= w,
                Err(e) => errors.push(e),
            }
        }
        self.open.retain(|_, (until, _)| *until >= t_unix);
        if wrote {
            self.relist();
        }
        errors
    }

    fn pod_lines(&mut self, pending: &mut Vec<Pending>, t: f64) {
        for l in self.pod_logs.poll() {
            let pids = self.history.pids_of_pod(&l.pod.uid);
            let devs = self.history.devices_of(&pids);
            let device = match (l.error.device, devs.as_slice()) {
                (Some(o), d) if (o as usize) < d.len() => Some(d[o as usize]),
                (_, [one]) => Some(*one),
                _ => None,
            };
            let oom = l.error.kind.is_out_of_memory();
            let rule = if oom { "out-of-memory" } else { "gpu-error" };
            let what = if oom { "out of memory" } else { "a GPU error" };
            pending.push(Pending {
                key: format!("pod:{}", l.pod.uid),
                rule,
                title: format!("{} hit {what}", l.pod.describe()),
                devices: device.map_or(devs.clone(), |d| vec![d]),
                event: IncidentEvent {
                    t_unix: t,
                    source: "pod-log".into(),
                    kind: l.error.kind.as_str().to_string(),
                    line: Some(crate::redact::redact_text(&l.error.line)),
                    device,
                    xid: None,
                    meaning: None,
                    pid: None,
                    requested: l.error.requested,
                },
                pod: Some(l.pod),
                out_of_memory: oom,
                joins_only: false,
            });
        }
    }

    fn kernel_lines(&mut self, pending: &mut Vec<Pending>, t: f64) {
        let Some(k) = self.kernel.as_mut() else {
            return;
        };
        for ev in k.poll() {
            match ev {
                KernelEvent::Xid(x)
                    if kernel::xid_is_critical(x.code) || kernel::xid_follows(x.code) =>
                {
                    let device = self.pci.get(&x.pci).copied();
                    if device.is_none() && !self.pci.is_empty() {
                        // A PCI address that is no GPU of this node (an NVSwitch, another
                        // node's line in a shared log): no incident, no rate limit spent.
                        continue;
                    }
                    let pod = x.pid.and_then(|p| self.history.pod_of(p).cloned());
                    let lost = x.code == 79;
                    let mut gpu = device.map_or(format!("PCI {}", x.pci), |d| format!("GPU {d}"));
                    if let Some((gi, ci)) = x.mig {
                        gpu.push_str(&format!(" MIG GPU instance {gi}"));
                        if let Some(ci) = ci {
                            gpu.push_str(&format!(" compute instance {ci}"));
                        }
                    }
                    let meaning = match &x.recovery_action {
                        Some(a) => {
                            format!("{} (the driver asks: {a})", kernel::xid_meaning(x.code))
                        }
                        None => kernel::xid_meaning(x.code).to_string(),
                    };
                    pending.push(Pending {
                        key: device.map_or(format!("pci:{}", x.pci), |d| format!("gpu:{d}")),
                        rule: if lost { "gpu-lost" } else { "xid" },
                        title: format!("{gpu}: Xid {}: {meaning}", x.code),
                        pod,
                        devices: device.into_iter().collect(),
                        event: IncidentEvent {
                            t_unix: t,
                            source: "kernel".into(),
                            kind: "xid".into(),
                            line: Some(crate::redact::redact_text(&x.line)),
                            device,
                            xid: Some(x.code),
                            meaning: Some(meaning.clone()),
                            pid: x.pid,
                            requested: None,
                        },
                        out_of_memory: false,
                        joins_only: !kernel::xid_is_critical(x.code),
                    });
                }
                KernelEvent::OomKill(o) if self.history.held_memory(o.pid) => {
                    let pod = self.history.pod_of(o.pid).cloned();
                    let devices = self.history.devices_of(&[o.pid]);
                    let who = pod
                        .as_ref()
                        .map_or(format!("PID {}", o.pid), |p| p.describe());
                    pending.push(Pending {
                        key: pod.as_ref().map_or(format!("pid:{}", o.pid), |p| format!("pod:{}", p.uid)),
                        rule: "host-oom-kill",
                        title: format!("{who}: a GPU process was killed by the kernel's OOM killer (host memory)"),
                        pod,
                        devices,
                        event: IncidentEvent {
                            t_unix: t,
                            source: "kernel".into(),
                            kind: "host-oom-kill".into(),
                            line: Some(crate::redact::redact_text(&o.line)),
                            device: None,
                            xid: None,
                            meaning: None,
                            pid: Some(o.pid),
                            requested: None,
                        },
                        out_of_memory: false,
                        joins_only: false,
                    });
                }
                _ => {}
            }
        }
    }

    fn scan_changes(&mut self, scan: &ScanResult, pending: &mut Vec<Pending>, t: f64) {
        let lost: BTreeSet<u32> = scan
            .devices
            .iter()
            .filter(|d| d.status == DeviceStatus::Lost)
            .map(|d| d.index)
            .collect();
        for d in lost.difference(&self.lost) {
            pending.push(scan_event(
                *d,
                "gpu-lost",
                format!("GPU {d} is lost (fallen off the bus)"),
                t,
            ));
        }
        let ownerless: BTreeSet<u32> = scan
            .findings
            .iter()
            .filter(|f| f.id == "no-live-owner")
            .flat_map(|f| f.devices.iter().copied())
            .collect();
        for d in ownerless.difference(&self.ownerless) {
            let mut p = scan_event(
                *d,
                "no-live-owner",
                format!("GPU {d}: memory is held with no live owner after a process exit"),
                t,
            );
            p.key = format!("owner:{d}");
            // The pod of the dead process, when an earlier collection saw it.
            p.pod = scan
                .processes
                .iter()
                .filter(|q| !q.visible && q.usage_on(*d).is_some())
                .find_map(|q| {
                    q.pod
                        .clone()
                        .or_else(|| self.history.pod_of(q.pid).cloned())
                });
            pending.push(p);
        }
        self.lost = lost;
        self.ownerless = ownerless;
    }

    /// Open an incident for `p`, or add it to the one of its failure; `Ok(true)` when a
    /// file was written.
    fn file(&mut self, p: Pending, scan: Option<&ScanResult>, t: f64) -> Result<bool, String> {
        if p.joins_only && !self.open.contains_key(&p.key) {
            return Ok(false);
        }
        if let Some((_, inc)) = self.open.get_mut(&p.key) {
            inc.repeats += 1;
            if inc.events.len() >= MAX_EVENTS {
                return Ok(false);
            }
            inc.events.push(p.event);
            // Findings the failure raised since (a lost GPU seen after its Xid line).
            for f in concerning(scan, &p.devices) {
                if !inc
                    .findings
                    .iter()
                    .any(|g| g.id == f.id && g.devices == f.devices)
                {
                    inc.findings.push(f);
                }
            }
            for d in p.devices {
                if !inc.devices.contains(&d) {
                    inc.devices.push(d);
                }
            }
            if inc.pod.is_none() {
                inc.pod = p.pod.map(pod_of);
            }
            let inc = inc.clone();
            return self
                .store
                .write(&inc)
                .map(|_| true)
                .map_err(|e| e.to_string());
        }
        while self.written.front().is_some_and(|w| t - w >= 60.0) {
            self.written.pop_front();
        }
        if self.written.len() >= self.cfg.per_minute.max(1) as usize {
            self.suppressed += 1;
            return Ok(false);
        }
        self.seq += 1;
        let stamp: String = rfc3339(t)
            .chars()
            .filter(|c| c.is_ascii_alphanumeric())
            .collect();
        let id = format!("{stamp}-{}-{}", p.rule, self.seq);
        let (timeline, start) = self.history.timeline();
        let findings = concerning(scan, &p.devices);
        let (scenario, scenario_note) = match self.scenario(&p, start) {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e)),
        };
        let inc = Incident {
            schema: INCIDENT_SCHEMA,
            id: id.clone(),
            rule: p.rule.into(),
            title: p.title,
            created_unix: t,
            created: rfc3339(t),
            node: self.cfg.node.clone(),
            pod: p.pod.clone().map(pod_of),
            devices: p.devices,
            events: vec![p.event],
            repeats: 0,
            findings,
            timeline,
            timeline_start_unix: start,
            scenario,
            scenario_note,
        };
        self.store.write(&inc).map_err(|e| e.to_string())?;
        self.written.push_back(t);
        let (ns, pod) = p.pod.as_ref().map_or((String::new(), String::new()), |r| {
            (
                r.namespace.clone().unwrap_or_default(),
                r.name.clone().unwrap_or_default(),
            )
        });
        *self
            .counts
            .entry((p.rule.to_string(), ns, pod))
            .or_default() += 1;
        self.open
            .insert(p.key, (t + DEDUP_WINDOW.as_secs_f64(), inc));
        Ok(true)
    }

    /// The history turned into a scenario (`scenario from`'s converter): the pod's
    /// processes (or every process on the GPUs concerned) are the job.
    fn scenario(&self, p: &Pending, start: f64) -> Result<String, String> {
        let (timeline, _) = self.history.timeline();
        let mut tree: BTreeSet<u32> = match &p.pod {
            Some(pod) => self.history.pids_of_pod(&pod.uid).into_iter().collect(),
            None => BTreeSet::new(),
        };
        if tree.is_empty() {
            tree = timeline
                .processes
                .iter()
                .filter(|q| p.devices.contains(&q.device))
                .map(|q| q.pid)
                .collect();
        }
        let period_ms = self.cfg.period.as_secs_f64() * 1000.0;
        let timeline = before_the_job(timeline, &tree, period_ms.max(1.0));
        let t_ms = ((p.event.t_unix - start) * 1000.0).max(0.0) + period_ms.max(1.0);
        let src = Source {
            devices: timeline
                .devices
                .iter()
                .map(|s| SourceDevice {
                    index: s.device,
                    name: self
                        .history
                        .names
                        .get(&s.device)
                        .map(|n| n.0.clone())
                        .unwrap_or_default(),
                    total: s.total,
                })
                .collect(),
            series: timeline.devices.clone(),
            processes: timeline.processes.clone(),
            tree,
            markers: Vec::new(),
            errors: vec![SourceError {
                t_ms,
                out_of_memory: p.out_of_memory,
                device: p.event.device,
                requested: p.event.requested,
                // The state the line reports, which the scenario reproduces (issue 37).
                free: p
                    .event
                    .line
                    .as_deref()
                    .and_then(|l| crate::repro::source::stated_free(p.out_of_memory, l)),
            }],
            findings: Vec::new(),
            hostname: self.cfg.node.clone(),
            // Only an engine's claim scales with the card (issue 26): one named by the pod's
            // container or the recognised line.
            engine: crate::repro::engine_claim::detect(
                (p.pod.iter().filter_map(|r| r.container.as_deref()))
                    .chain(p.event.line.as_deref()),
            ),
            truncated: false,
            process_period_ms: period_ms,
            period_ms,
            exit_ms: None,
        };
        crate::repro::convert_source(&src, crate::backend::recorded_box_spec)
            .map(|c| c.toml)
            .map_err(|e| e.to_string())
    }

    /// The recorder's series for `/metrics`: `vramdoc_incidents_total{rule,namespace,pod}`,
    /// suppressed incidents, the history's size.
    pub fn exposition(&self, hostname: Option<&str>) -> String {
        use crate::report::prom::sanitize_kube;
        let host = hostname.map_or(String::new(), |h| {
            format!("hostname=\"{}\",", sanitize_kube(h))
        });
        let bare = hostname.map_or(String::new(), |h| {
            format!("{{hostname=\"{}\"}}", sanitize_kube(h))
        });
        let mut s = String::new();
        s.push_str("# HELP vramdoc_incidents_total Incidents the flight recorder wrote (serve --incidents), by rule and pod.\n");
        s.push_str("# TYPE vramdoc_incidents_total counter\n");
        for ((rule, ns, pod), n) in &self.counts {
            let _ = writeln!(
                s,
                "vramdoc_incidents_total{{{host}namespace=\"{}\",pod=\"{}\",rule=\"{}\"}} {n}",
                sanitize_kube(ns),
                sanitize_kube(pod),
                sanitize_kube(rule)
            );
        }
        s.push_str("# HELP vramdoc_incidents_suppressed_total Failure events not written as incidents (over the per-minute limit).\n");
        s.push_str("# TYPE vramdoc_incidents_suppressed_total counter\n");
        let _ = writeln!(
            s,
            "vramdoc_incidents_suppressed_total{bare} {}",
            self.suppressed
        );
        s.push_str(
            "# HELP vramdoc_incident_history_bytes Memory held by the flight recorder's history.\n",
        );
        s.push_str("# TYPE vramdoc_incident_history_bytes gauge\n");
        let _ = writeln!(
            s,
            "vramdoc_incident_history_bytes{bare} {}",
            self.history.approx_bytes()
        );
        s
    }

    /// Containers whose logs are followed now.
    pub fn followed(&self) -> usize {
        self.pod_logs.len()
    }
}

/// The history with one point put before it where the job (`tree`) holds nothing: each
/// GPU's used bytes are the other processes' there. The converter reads a recording's
/// first sample as what was there before the job (a `run` starts with it); in the history
/// the job already holds its memory, which would otherwise be replayed as a neighbour.
fn before_the_job(
    mut timeline: crate::model::Timeline,
    tree: &BTreeSet<u32>,
    shift_ms: f64,
) -> crate::model::Timeline {
    let first: Vec<crate::model::ProcessSample> = timeline
        .processes
        .iter()
        .filter(|q| q.t_ms == 0.0 && !tree.contains(&q.pid))
        .cloned()
        .collect();
    for s in &mut timeline.devices {
        let Some(&(_, used)) = s.samples.first() else {
            continue;
        };
        let others: u64 = first
            .iter()
            .filter(|q| q.device == s.device)
            .map(|q| q.used.unwrap_or(0))
            .fold(0, u64::saturating_add);
        for x in &mut s.samples {
            x.0 += shift_ms;
        }
        s.samples.insert(0, (0.0, others.min(used)));
    }
    for q in &mut timeline.processes {
        q.t_ms += shift_ms;
    }
    timeline.processes.splice(0..0, first);
    timeline
}

/// The scan's findings about `devices` (all of them when no device is known).
fn concerning(scan: Option<&ScanResult>, devices: &[u32]) -> Vec<crate::model::Finding> {
    scan.map(|s| {
        s.findings
            .iter()
            .filter(|f| {
                devices.is_empty()
                    || f.devices.is_empty()
                    || f.devices.iter().any(|d| devices.contains(d))
            })
            .cloned()
            .collect()
    })
    .unwrap_or_default()
}

fn scan_event(d: u32, rule: &'static str, title: String, t: f64) -> Pending {
    Pending {
        key: format!("gpu:{d}"),
        rule,
        title,
        pod: None,
        devices: vec![d],
        event: IncidentEvent {
            t_unix: t,
            source: "scan".into(),
            kind: rule.into(),
            line: None,
            device: Some(d),
            xid: None,
            meaning: None,
            pid: None,
            requested: None,
        },
        out_of_memory: false,
        joins_only: false,
    }
}

fn pod_of(p: PodRef) -> IncidentPod {
    IncidentPod {
        uid: p.uid,
        namespace: p.namespace,
        name: p.name,
        container: p.container,
    }
}

/// Seconds since the epoch now (for callers that do not pass their own clock).
pub fn now() -> f64 {
    now_unix()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sim::SimMonitor;
    use crate::inventory::PidNamespace;
    use crate::scan::ScanConfig;
    use std::io::Write;
    use vramdoc_sim::{InitOptions, SimBox};

    fn append(p: &std::path::Path, s: &str) {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .unwrap();
        f.write_all(s.as_bytes()).unwrap();
    }

    /// Xid lines of one GPU make one incident; a burst on many GPUs is cut at the
    /// per-minute limit and counted; the retention bound removes the oldest files.
    #[test]
    fn one_incident_per_failure_rate_limited_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let sim =
            SimBox::create(&dir.path().join("box"), "2x16GiB", &InitOptions::default()).unwrap();
        let monitor = SimMonitor::new(sim);
        let cfg = ScanConfig {
            sim_spec: None,
            vantage: crate::model::Vantage::new(
                PidNamespace {
                    host: true,
                    reason: "test".into(),
                },
                None,
            ),
            thresholds: Default::default(),
            pods: Default::default(),
            lists: crate::inventory::ProcessLists::AsNeeded,
        };
        let kern = dir.path().join("kern.log");
        let recorder = |sub: &str| {
            Incidents::new(IncidentsConfig {
                dir: dir.path().join(sub),
                max_count: 4,
                max_bytes: 1 << 30,
                history: Duration::from_secs(600),
                pod_log_dir: dir.path().join("pods"),
                kernel_log: Some(kern.clone()),
                period: Duration::from_secs(15),
                node: Some("n1".into()),
                per_minute: 6,
            })
            .unwrap()
        };
        let mut rec = recorder("incidents");
        let scan = crate::scan::scan(&monitor, &cfg)
            .unwrap()
            .scan()
            .cloned()
            .unwrap();
        let pci: Vec<String> = scan
            .devices
            .iter()
            .map(|d| kernel::normalise_pci(&d.pci_bus_id).unwrap())
            .collect();
        let t0 = 1_800_000_000.0;
        assert!(rec.observe(Some(&scan), t0).is_empty());
        // Xid 45 follows another Xid (NVIDIA's catalogue): alone it opens nothing.
        append(
            &kern,
            &format!(
                "NVRM: Xid (PCI:{}): 45, pid=1, name=x, Ch 0000000a\n",
                pci[0]
            ),
        );
        rec.observe(Some(&scan), t0 + 1.0);
        assert!(rec.store.list().is_empty(), "{:?}", rec.store.list());
        // Two lines of one failure on GPU 1 (48 then 63, as a DBE is followed by a
        // retirement): one incident.
        append(
            &kern,
            &format!("NVRM: Xid (PCI:{}): 48, pid=1, name=x, DBE\n", pci[1]),
        );
        append(
            &kern,
            &format!("NVRM: Xid (PCI:{}): 63, pid=1, name=x, Row\n", pci[1]),
        );
        rec.observe(Some(&scan), t0 + 15.0);
        let list = rec.store.list();
        assert_eq!(list.len(), 1, "{list:?}");
        assert_eq!(list[0].devices, vec![1]);
        let inc = rec.store.read(&list[0].id).unwrap();
        assert_eq!((inc.events.len(), inc.repeats), (2, 1));
        assert!(inc.timeline.devices[0].samples.len() >= 2);
        // Ten Xids for PCI addresses that are no GPU of this node (issue 37): no
        // incident, and the rate limit is not spent.
        let foreign = |kern: &std::path::Path| {
            for i in 0..10 {
                append(
                    kern,
                    &format!(
                        "NVRM: Xid (PCI:0000:{:02x}:00): 79, GPU has fallen off the bus.\n",
                        0x80 + i
                    ),
                );
            }
        };
        foreign(&kern);
        rec.observe(Some(&scan), t0 + 30.0);
        assert_eq!(rec.suppressed, 0);
        assert_eq!(rec.store.list().len(), 1);
        // Where the node's GPUs are not known yet (no scan), each address is a failure of
        // its own: in one minute 6 written (6 per minute), 4 suppressed; 4 files kept.
        let mut rec = recorder("incidents-unknown");
        foreign(&kern);
        rec.observe(None, t0 + 30.0);
        assert_eq!(rec.suppressed, 4);
        assert_eq!(rec.store.list().len(), 4, "the retention bound");
        let m = rec.exposition(Some("n1"));
        assert!(
            m.contains("vramdoc_incidents_total{hostname=\"n1\",namespace=\"\",pod=\"\",rule=\"gpu-lost\"} 6"),
            "{m}"
        );
        assert!(
            m.contains("vramdoc_incidents_suppressed_total{hostname=\"n1\"} 4"),
            "{m}"
        );
        // An Xid that is not critical makes none.
        append(
            &kern,
            &format!("NVRM: Xid (PCI:{}): 999, whatever\n", pci[0]),
        );
        rec.observe(None, t0 + 200.0);
        assert_eq!(rec.suppressed, 4);
    }
}
