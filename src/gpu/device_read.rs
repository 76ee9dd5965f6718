//! What one scan reads of every device, as one request per GPU: its inventory entry, then
//! the process lists [`ProcessLists`] picks for it ([`read_lists`]), handed to the caller
//! as each GPU's arrives. [`Monitor::read_devices`] asks the devices in turn by default; a monitor over lanes (`lanes::Deadlined`) sends each
//! GPU's whole read to that GPU's lane at once, so a scan costs one hand-over per GPU, not
//! one per NVML call (issue 34: each hand-over waits for a CPU on a loaded machine).

use super::{DeviceInfo, GpuProcess, Monitor, ProcessKind, Result};

/// Which of NVML's three process lists (compute, graphics, MPS) a scan reads per device.
/// Each list is one call under the driver's lock (~4.5 ms on real drivers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProcessLists {
    /// The compute list; the graphics and MPS lists only where the compute list leaves some
    /// of the device's used memory unexplained (a process's usage not available, or used
    /// memory beyond the sum of the compute processes'). Per-process numbers are the same as
    /// with [`ProcessLists::All`]: a process the other lists would add holds memory that the
    /// compute list does not explain.
    #[default]
    AsNeeded,
    /// All three lists of every device (`scan --all-lists`).
    All,
}

/// One device as a scan read it: its entry, and its process lists (`None`: not read, a MIG
/// parent, whose processes are its instances'; `Err`: they could not be read).
#[derive(Debug)]
pub struct DeviceRead {
    pub info: DeviceInfo,
    pub lists: Option<Result<Vec<GpuProcess>>>,
}

/// The process lists of device `d` under `lists` (one call per list read).
pub fn read_lists<M: Monitor + ?Sized>(
    monitor: &M,
    d: &DeviceInfo,
    lists: ProcessLists,
) -> Result<Vec<GpuProcess>> {
    if lists == ProcessLists::All {
        return monitor.processes(d.index);
    }
    let mut list = monitor.process_list(d.index, ProcessKind::Compute)?;
    if !compute_explains(d, &list) {
        for kind in [ProcessKind::Graphics, ProcessKind::Mps] {
            list.extend(monitor.process_list(d.index, kind)?);
        }
    }
    Ok(list)
}

/// What a scan reads of one device whose entry is `info`: its lists where it is counted (a
/// MIG parent's processes are its instances', listed per instance: its own lists are
/// aggregate data that unprivileged callers may not read).
pub fn read_device<M: Monitor + ?Sized>(
    monitor: &M,
    info: DeviceInfo,
    lists: ProcessLists,
) -> DeviceRead {
    let lists = info.is_counted().then(|| read_lists(monitor, &info, lists));
    DeviceRead { info, lists }
}

/// Every device in turn: the inventory, then each one's lists, handed to `each` (the default
/// of [`Monitor::read_devices`]).
pub fn read_in_turn<M: Monitor + ?Sized>(
    monitor: &M,
    lists: ProcessLists,
    each: &mut dyn FnMut(DeviceRead),
) -> Result<()> {
    for d in monitor.devices()? {
        each(read_device(monitor, d, lists));
    }
    Ok(())
}

/// Whether the compute list accounts for every byte the device reports used: each entry's
/// usage known, and their sum at least the device's `used`.
fn compute_explains(d: &DeviceInfo, compute: &[GpuProcess]) -> bool {
    let mut sum: u64 = 0;
    for p in compute {
        match p.used {
            Some(u) => sum = sum.saturating_add(u),
            None => return false,
        }
    }
    sum >= d.memory.used
}
