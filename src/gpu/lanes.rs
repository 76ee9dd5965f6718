//! NVML under a deadline, for every command: each call of a recording goes through a
//! [`Lanes`], and scan, preflight and serve read through [`Deadlined`], a [`Monitor`] over
//! lanes. A [`Lanes`] has one worker thread per device and
//! kind of call (memory, process lists), each waited on with a deadline. A call that does not
//! answer in time (a GPU in a bad state, a driver call stuck in D state: leptonai/gpud PR
//! #117) leaves its worker blocked while the caller goes on with [`CallError::Hung`]; until
//! that call returns, that lane answers `Hung` at once and the other lanes (other GPUs, the
//! other kind) keep answering. So no NVML call ever runs on the caller's thread (the job's
//! main loop, the sampler, the process thread), and a hung driver costs a gap on that GPU,
//! never a hang of vramdoc. Workers are never joined: a worker still blocked when the
//! recording ends is left behind (it exits when its call returns or the process does).

use crate::gpu::device_read::{self, DeviceRead, ProcessLists};
use crate::gpu::{DeviceInfo, GpuError, GpuProcess, MemoryInfo, Monitor, ProcessKind};
use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use thiserror::Error;

/// How long a call may take before it counts as hung. Real drivers answer a memory query in
/// ~12 µs and a process list in ~4.5 ms (MangoHud PR #2104); a second is far beyond both.
pub const HUNG_AFTER: Duration = Duration::from_millis(1000);

/// How the reason of a gap left by a hung NVML call starts (`hung: no answer ...`): the
/// text of [`CallError::Hung`], read back by the `monitor-hang` rule (`model::GapReason`).
pub const HUNG_GAP_PREFIX: &str = "hung:";

/// Why a call through a lane gave no answer.
#[derive(Debug, Error)]
pub enum CallError {
    /// The driver answered with an error.
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// No answer within the deadline (or an earlier call on the lane is still blocked).
    #[error("{prefix} no answer from NVML within {} ms (GPU in a bad state?)", .after.as_millis(), prefix = HUNG_GAP_PREFIX)]
    Hung { after: Duration },
    /// The lane's worker could not be started or is gone.
    #[error("NVML worker thread unavailable")]
    NoWorker,
}

impl CallError {
    pub fn is_hung(&self) -> bool {
        matches!(self, CallError::Hung { .. })
    }
}

/// What a lane runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Memory,
    Processes,
}

type Job = Box<dyn FnOnce(&dyn Monitor) + Send>;

struct Lane {
    tx: Sender<(Instant, Job)>,
    /// When the call being run started (`None`: idle).
    busy_since: Arc<Mutex<Option<Instant>>>,
}

impl Lane {
    fn start(monitor: Arc<dyn Monitor>, name: String) -> Option<Lane> {
        let (tx, rx) = mpsc::channel::<(Instant, Job)>();
        let busy_since: Arc<Mutex<Option<Instant>>> = Arc::default();
        let busy = busy_since.clone();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                while let Ok((deadline, job)) = rx.recv() {
                    // A request whose caller gave up while an earlier call hung is dropped.
                    if Instant::now() > deadline {
                        continue;
                    }
                    set(&busy, Some(Instant::now()));
                    job(monitor.as_ref());
                    set(&busy, None);
                }
            })
            .ok()?;
        Some(Lane { tx, busy_since })
    }

    /// Whether a call has been running for longer than `HUNG_AFTER`.
    fn hung(&self, after: Duration) -> bool {
        let since = *self.busy_since.lock().unwrap_or_else(|e| e.into_inner());
        since.is_some_and(|s| s.elapsed() >= after)
    }
}

fn set(m: &Mutex<Option<Instant>>, v: Option<Instant>) {
    *m.lock().unwrap_or_else(|e| e.into_inner()) = v;
}

/// A pending answer.
pub struct Pending<T> {
    rx: Option<Receiver<Result<T, GpuError>>>,
    deadline: Instant,
    after: Duration,
}

impl<T> Pending<T> {
    /// Wait for the answer with a deadline that runs from now: the second answer of a job
    /// whose first one just came ([`Lanes::device_read`]).
    pub fn wait_again(mut self) -> Result<T, CallError> {
        self.deadline = Instant::now() + self.after;
        self.wait()
    }

    /// Wait for the answer until the deadline.
    pub fn wait(self) -> Result<T, CallError> {
        let Some(rx) = self.rx else {
            return Err(CallError::Hung { after: self.after });
        };
        let left = self.deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(r) => r.map_err(CallError::from),
            Err(RecvTimeoutError::Timeout) => Err(CallError::Hung { after: self.after }),
            Err(RecvTimeoutError::Disconnected) => Err(CallError::NoWorker),
        }
    }
}

/// The NVML lanes of a recording (one per device and kind of call), created on first use.
pub struct Lanes {
    monitor: Arc<dyn Monitor>,
    lanes: Mutex<BTreeMap<(u32, Kind), Arc<Lane>>>,
    after: Duration,
}

impl Lanes {
    pub fn new(monitor: Arc<dyn Monitor>) -> Lanes {
        Lanes::with_deadline(monitor, HUNG_AFTER)
    }

    /// Lanes whose calls count as hung after `after`.
    pub fn with_deadline(monitor: Arc<dyn Monitor>, after: Duration) -> Lanes {
        Lanes {
            monitor,
            lanes: Mutex::default(),
            after,
        }
    }

    /// The monitor behind the lanes.
    pub fn monitor(&self) -> &Arc<dyn Monitor> {
        &self.monitor
    }

    fn lane(&self, device: u32, kind: Kind) -> Option<Arc<Lane>> {
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = lanes.get(&(device, kind)) {
            return Some(l.clone());
        }
        let name = match kind {
            Kind::Memory => format!("vramdoc-nvml-mem{device}"),
            Kind::Processes => format!("vramdoc-nvml-proc{device}"),
        };
        let lane = Arc::new(Lane::start(self.monitor.clone(), name)?);
        lanes.insert((device, kind), lane.clone());
        Some(lane)
    }

    fn send<T: Send + 'static>(
        &self,
        device: u32,
        kind: Kind,
        call: impl FnOnce(&dyn Monitor) -> Result<T, GpuError> + Send + 'static,
    ) -> Pending<T> {
        let (tx, rx) = mpsc::channel();
        self.dispatch(device, kind, rx, move |m: &dyn Monitor| {
            let _ = tx.send(call(m));
        })
    }

    /// Queue `job` on the lane of `device` and `kind`: the answer `rx` will carry, or one
    /// that says hung when the lane is blocked or cannot start.
    fn dispatch<T>(
        &self,
        device: u32,
        kind: Kind,
        rx: Receiver<Result<T, GpuError>>,
        job: impl FnOnce(&dyn Monitor) + Send + 'static,
    ) -> Pending<T> {
        let deadline = Instant::now() + self.after;
        let hung = Pending {
            rx: None,
            deadline,
            after: self.after,
        };
        let Some(lane) = self.lane(device, kind) else {
            return hung;
        };
        if lane.hung(self.after) {
            return hung;
        }
        if lane.tx.send((deadline, Box::new(job))).is_err() {
            return hung;
        }
        Pending {
            rx: Some(rx),
            deadline,
            after: self.after,
        }
    }

    /// What a scan reads of `device`, as one job on its lane: its inventory entry answers
    /// first, then (where it is counted) its lists under `lists`, so a GPU whose lists hang
    /// still has its entry. Wait for the lists with [`Pending::wait_again`]: their deadline
    /// runs from when the entry came.
    pub fn device_read(
        &self,
        device: u32,
        lists: ProcessLists,
    ) -> (Pending<DeviceInfo>, Pending<Option<Vec<GpuProcess>>>) {
        let (entry_tx, entry_rx) = mpsc::channel();
        let (lists_tx, lists_rx) = mpsc::channel();
        let entry = self.dispatch(device, Kind::Memory, entry_rx, move |m: &dyn Monitor| {
            let info = match m.inventory_entry(device) {
                Ok(info) => info,
                Err(e) => {
                    let _ = entry_tx.send(Err(e));
                    return;
                }
            };
            let _ = entry_tx.send(Ok(info.clone()));
            let read = device_read::read_device(m, info, lists);
            let _ = lists_tx.send(read.lists.transpose());
        });
        let lists = Pending {
            rx: entry.rx.is_some().then_some(lists_rx),
            deadline: entry.deadline,
            after: entry.after,
        };
        (entry, lists)
    }

    /// Start a memory query of `device`.
    pub fn memory(&self, device: u32) -> Pending<MemoryInfo> {
        self.send(device, Kind::Memory, move |m| m.memory(device))
    }

    /// Start one process list of `device` (one NVML list call: compute, graphics or MPS).
    pub fn process_list(&self, device: u32, kind: ProcessKind) -> Pending<Vec<GpuProcess>> {
        self.send(device, Kind::Processes, move |m| {
            m.process_list(device, kind)
        })
    }

    /// CUDA's speed key of `device` ([`Monitor::cuda_speed`]).
    pub fn speed(&self, device: u32) -> Pending<Option<(i32, i32, i32)>> {
        self.send(device, Kind::Memory, move |m| Ok(m.cuda_speed(device)))
    }

    /// Every list of `device` (compute, graphics and MPS) in one call.
    pub fn processes(&self, device: u32) -> Pending<Vec<GpuProcess>> {
        self.send(device, Kind::Processes, move |m| m.processes(device))
    }

    /// [`Lanes::processes`] with the moment the call started on its lane: what the list
    /// says was true from then on, however late the answer reaches the caller (a loaded
    /// machine delays the answer, not the driver's state).
    pub fn processes_at(&self, device: u32) -> Pending<(Instant, Vec<GpuProcess>)> {
        self.send(device, Kind::Processes, move |m| {
            let ran = Instant::now();
            m.processes(device).map(|l| (ran, l))
        })
    }

    /// [`Lanes::process_list`] with the moment the call started (see
    /// [`Lanes::processes_at`]).
    pub fn process_list_at(
        &self,
        device: u32,
        kind: ProcessKind,
    ) -> Pending<(Instant, Vec<GpuProcess>)> {
        self.send(device, Kind::Processes, move |m| {
            let ran = Instant::now();
            m.process_list(device, kind).map(|l| (ran, l))
        })
    }

    /// [`Lanes::memory_all`] with the moment each call started on its lane: the reading is
    /// the state from then on, however late a loaded machine hands it over (a reading
    /// stamped before its call ran would show a later change, a worker's memory returned at
    /// its exit, as if it came earlier).
    pub fn memory_all_at(&self, devices: &[u32]) -> Vec<Result<(Instant, MemoryInfo), CallError>> {
        let pending: Vec<_> = devices
            .iter()
            .map(|&d| {
                self.send(d, Kind::Memory, move |m| {
                    let ran = Instant::now();
                    m.memory(d).map(|x| (ran, x))
                })
            })
            .collect();
        pending.into_iter().map(Pending::wait).collect()
    }

    /// Used bytes of every device in `devices`, queried in parallel: one result per device.
    pub fn memory_all(&self, devices: &[u32]) -> Vec<Result<MemoryInfo, CallError>> {
        self.memory_all_at(devices)
            .into_iter()
            .map(|r| r.map(|(_, m)| m))
            .collect()
    }
}

/// A [`Monitor`] whose every NVML call runs in its lane under the per-GPU deadline `run`
/// uses ([`HUNG_AFTER`]): for `scan`, `preflight` and `serve`, a GPU whose calls hang costs
/// one deadline and answers an error naming the hang (its lists unreadable: a finding for
/// scan, a problem for preflight), while every other GPU answers. The inventory call
/// (`devices`) has a lane of its own: where the driver answers it for every GPU at once and
/// that hangs, the whole inventory is an error, never a hang.
pub struct Deadlined {
    lanes: Lanes,
    /// The device count read when the monitor was opened, for the first inventory to use
    /// instead of asking again (taken once: later inventories ask).
    opened_count: Mutex<Option<u32>>,
}

/// The lane key of calls about no one device.
const NO_DEVICE: u32 = u32::MAX;

impl Deadlined {
    pub fn new(monitor: Box<dyn Monitor>) -> Deadlined {
        Deadlined {
            lanes: Lanes::new(Arc::from(monitor)),
            opened_count: Mutex::new(None),
        }
    }

    /// `monitor` under the deadline, whose device count `count` was just read (by the open
    /// that checks the driver answers): the first inventory uses it.
    pub fn counted(monitor: Box<dyn Monitor>, count: u32) -> Deadlined {
        Deadlined {
            opened_count: Mutex::new(Some(count)),
            ..Deadlined::new(monitor)
        }
    }

    /// `monitor` under the deadline, as a monitor.
    pub fn boxed(monitor: Box<dyn Monitor>) -> Box<dyn Monitor> {
        Box::new(Deadlined::new(monitor))
    }
}

/// A lane's failure as the driver error a caller handles: a hang is a driver error (never
/// an environment one: the other GPUs still answer).
fn as_gpu(e: CallError) -> GpuError {
    match e {
        CallError::Gpu(g) => g,
        other => GpuError::Driver {
            call: "NVML".into(),
            code: "hung".into(),
            message: other.to_string(),
        },
    }
}

/// The inventory entry of a device whose call hung: its status says so (zeroed memory).
fn unanswered(index: u32, hung: CallError) -> DeviceInfo {
    DeviceInfo::unanswered(
        index,
        Default::default(),
        crate::gpu::DeviceStatus::Error {
            message: as_gpu(hung).to_string(),
        },
    )
}

impl Monitor for Deadlined {
    fn backend(&self) -> &'static str {
        self.lanes.monitor().backend()
    }
    fn versions(&self) -> crate::gpu::Result<crate::gpu::Versions> {
        self.lanes
            .send(NO_DEVICE, Kind::Memory, |m| m.versions())
            .wait()
            .map_err(as_gpu)
    }
    /// Each device asked in its own lane under the deadline: a GPU whose calls hang is an
    /// entry whose status says so (zeroed memory), and the others answer (issue 29 item 5).
    /// Each GPU's whole read (entry, then lists) as one job on its lane, all GPUs at once:
    /// one hand-over per GPU (issue 34). A GPU that hangs is an entry whose status says so,
    /// or, where its entry came, lists that say so.
    fn read_devices(
        &self,
        lists: ProcessLists,
        each: &mut dyn FnMut(DeviceRead),
    ) -> crate::gpu::Result<()> {
        let count = self.device_count()?;
        let pending: Vec<_> = (0..count)
            .map(|i| (i, self.lanes.device_read(i, lists)))
            .collect();
        for (index, (entry, lists)) in pending {
            let info = match entry.wait() {
                Ok(info) => info,
                Err(CallError::Gpu(e)) => return Err(e),
                Err(hung) => {
                    each(DeviceRead {
                        info: unanswered(index, hung),
                        lists: None,
                    });
                    continue;
                }
            };
            let lists = lists.wait_again().map_err(as_gpu).transpose();
            each(DeviceRead { info, lists });
        }
        Ok(())
    }
    fn devices(&self) -> crate::gpu::Result<Vec<crate::gpu::DeviceInfo>> {
        let count = self.device_count()?;
        let pending: Vec<_> = (0..count)
            .map(|i| {
                (
                    i,
                    self.lanes
                        .send(i, Kind::Memory, move |m| m.inventory_entry(i)),
                )
            })
            .collect();
        let mut out = Vec::with_capacity(pending.len());
        for (index, p) in pending {
            out.push(match p.wait() {
                Ok(info) => info,
                Err(CallError::Gpu(e)) => return Err(e),
                Err(hung) => unanswered(index, hung),
            });
        }
        Ok(out)
    }
    fn device_count(&self) -> crate::gpu::Result<u32> {
        let opened = self
            .opened_count
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(count) = opened {
            return Ok(count);
        }
        self.lanes
            .send(NO_DEVICE, Kind::Memory, |m| m.device_count())
            .wait()
            .map_err(as_gpu)
    }
    fn inventory_entry(&self, index: u32) -> crate::gpu::Result<crate::gpu::DeviceInfo> {
        (self.lanes)
            .send(index, Kind::Memory, move |m| m.inventory_entry(index))
            .wait()
            .map_err(as_gpu)
    }
    fn memory(&self, index: u32) -> crate::gpu::Result<MemoryInfo> {
        self.lanes.memory(index).wait().map_err(as_gpu)
    }
    fn processes(&self, index: u32) -> crate::gpu::Result<Vec<GpuProcess>> {
        self.lanes.processes(index).wait().map_err(as_gpu)
    }
    fn process_list(&self, index: u32, kind: ProcessKind) -> crate::gpu::Result<Vec<GpuProcess>> {
        self.lanes.process_list(index, kind).wait().map_err(as_gpu)
    }
    fn call_counts(&self) -> crate::gpu::CallCounts {
        self.lanes.monitor().call_counts()
    }
    fn cuda_speed(&self, index: u32) -> Option<(i32, i32, i32)> {
        self.lanes.speed(index).wait().ok().flatten()
    }
    fn device_nodes(&self) -> Vec<std::path::PathBuf> {
        self.lanes.monitor().device_nodes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::{CallCounts, DeviceInfo, Result, Versions};
    use crate::record::tests::{until, GUARD};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    /// A monitor whose device 1 blocks while `hang` is set, counting the calls on device 1
    /// that began and those that returned; its process lists say when they returned.
    #[derive(Default)]
    struct Hanging {
        hang: AtomicBool,
        began: AtomicU64,
        returned: AtomicU64,
        listed: Mutex<Option<Instant>>,
    }

    impl Monitor for Hanging {
        fn backend(&self) -> &'static str {
            "test"
        }
        fn versions(&self) -> Result<Versions> {
            Err(GpuError::NoDevice("test".into()))
        }
        fn devices(&self) -> Result<Vec<DeviceInfo>> {
            Ok(Vec::new())
        }
        fn memory(&self, index: u32) -> Result<MemoryInfo> {
            if index == 1 {
                self.began.fetch_add(1, Ordering::SeqCst);
                while self.hang.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                self.returned.fetch_add(1, Ordering::SeqCst);
            }
            Ok(MemoryInfo {
                total: 100,
                reserved: 0,
                used: index as u64,
                free: 100 - index as u64,
            })
        }
        fn processes(&self, _: u32) -> Result<Vec<GpuProcess>> {
            *self.listed.lock().unwrap() = Some(Instant::now());
            Ok(Vec::new())
        }
        fn call_counts(&self) -> CallCounts {
            CallCounts::default()
        }
    }

    /// Issue 29 item 16: a list is stamped with when its call ran, not when its answer
    /// reached a caller that was late to wait for it (a loaded machine): an answer read
    /// after the call returned still says when the driver was asked.
    #[test]
    fn a_list_carries_when_its_call_ran_not_when_it_was_read() {
        let monitor = Arc::new(Hanging::default());
        let lanes = Lanes::with_deadline(monitor.clone(), GUARD);
        let asked = Instant::now();
        let pending = lanes.processes_at(0);
        // The caller is late: it waits only once the driver has answered.
        let returned = until("the list call to return", || {
            *monitor.listed.lock().unwrap()
        });
        let (ran, _) = pending.wait().unwrap();
        assert!(ran >= asked, "stamped before it was asked");
        assert!(
            ran <= returned,
            "stamped when read, after the call returned"
        );
    }

    /// A monitor of two GPUs whose entries answer and whose GPU 1 lists block while `hang`.
    #[derive(Default)]
    struct ListsHang {
        hang: AtomicBool,
        entries: AtomicU64,
    }

    impl Monitor for ListsHang {
        fn backend(&self) -> &'static str {
            "test"
        }
        fn versions(&self) -> Result<Versions> {
            Err(GpuError::NoDevice("test".into()))
        }
        fn devices(&self) -> Result<Vec<DeviceInfo>> {
            Ok((0..2).map(|i| self.inventory_entry(i).unwrap()).collect())
        }
        fn device_count(&self) -> Result<u32> {
            Ok(2)
        }
        fn inventory_entry(&self, index: u32) -> Result<DeviceInfo> {
            self.entries.fetch_add(1, Ordering::SeqCst);
            Ok(DeviceInfo::unanswered(
                index,
                Default::default(),
                crate::gpu::DeviceStatus::Ok,
            ))
        }
        fn memory(&self, _: u32) -> Result<MemoryInfo> {
            Err(GpuError::NoDevice("test".into()))
        }
        fn processes(&self, index: u32) -> Result<Vec<GpuProcess>> {
            while index == 1 && self.hang.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            Ok(vec![GpuProcess {
                pid: 100 + index,
                used: Some(1),
                kind: ProcessKind::Compute,
            }])
        }
        fn call_counts(&self) -> CallCounts {
            CallCounts::default()
        }
    }

    /// Issue 34: a scan's read of each GPU is one job on its lane (entry, then lists); a GPU
    /// whose lists hang keeps its entry and says its lists hung, and the others answer.
    #[test]
    fn a_scan_read_keeps_the_entry_of_a_gpu_whose_lists_hang() {
        let monitor = Arc::new(ListsHang::default());
        monitor.hang.store(true, Ordering::SeqCst);
        let d = Deadlined {
            lanes: Lanes::with_deadline(monitor.clone(), HUNG_AFTER),
            opened_count: Mutex::new(Some(2)),
        };
        let mut read = Vec::new();
        d.read_devices(ProcessLists::All, &mut |r| read.push(r))
            .unwrap();
        monitor.hang.store(false, Ordering::SeqCst);
        assert_eq!(read.len(), 2);
        assert_eq!(monitor.entries.load(Ordering::SeqCst), 2, "one entry each");
        assert_eq!(read[1].info.index, 1);
        assert_eq!(
            read[0].lists.as_ref().unwrap().as_ref().unwrap()[0].pid,
            100
        );
        let err = read[1].lists.as_ref().unwrap().as_ref().unwrap_err();
        assert!(err.to_string().contains(HUNG_GAP_PREFIX), "{err}");
        // The opened count served the read: a second one asks the monitor.
        assert!(d.opened_count.lock().unwrap().is_none());
    }

    #[test]
    fn a_hung_device_answers_hung_and_the_others_still_answer() {
        let monitor = Arc::new(Hanging::default());
        monitor.hang.store(true, Ordering::SeqCst);
        // The deadline the recordings use: the other GPUs answer within it.
        let lanes = Lanes::with_deadline(monitor.clone(), HUNG_AFTER);
        let got = lanes.memory_all(&[0, 1, 2]);
        // The caller went on while GPU 1's call was blocked in the driver.
        until("GPU 1's call to reach the driver", || {
            (monitor.began.load(Ordering::SeqCst) == 1).then_some(())
        });
        assert_eq!(monitor.returned.load(Ordering::SeqCst), 0);
        assert_eq!(got[0].as_ref().unwrap().used, 0);
        assert!(got[1].as_ref().unwrap_err().is_hung());
        assert_eq!(got[2].as_ref().unwrap().used, 2);
        // While the call stays blocked (past the deadline), the lane answers at once: no
        // call is queued behind the blocked one.
        let lane = lanes.lane(1, Kind::Memory).unwrap();
        until("the blocked call to pass its deadline", || {
            lane.hung(HUNG_AFTER).then_some(())
        });
        let pending = lanes.memory(1);
        assert!(pending.rx.is_none(), "answered without asking the driver");
        assert!(pending.wait().unwrap_err().is_hung());
        assert_eq!(monitor.began.load(Ordering::SeqCst), 1);
        assert_eq!(lanes.memory(0).wait().unwrap().used, 0);
        // Once the driver answers again, so does the lane.
        monitor.hang.store(false, Ordering::SeqCst);
        until("the blocked call to return and its lane to be idle", || {
            let idle = lane.busy_since.lock().unwrap().is_none();
            (monitor.returned.load(Ordering::SeqCst) == 1 && idle).then_some(())
        });
        assert_eq!(lanes.memory(1).wait().unwrap().used, 1);
        assert_eq!(monitor.began.load(Ordering::SeqCst), 2);
    }
}
