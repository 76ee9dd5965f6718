//! MIG through NVML for [`NvmlMonitor`]: the instances of every GPU in MIG mode, opened
//! through nvml-wrapper's MIG API (`Device::mig_mode`, `mig_device_count`,
//! `mig_device_by_index`) and numbered after the GPUs (index `count + k`), so the monitor's
//! memory and process queries read them through their MIG device handles like any device.
//! nvml.h: in MIG mode the parent's process lists are aggregate data for privileged callers
//! only; "per-instance information can be queried by using specific MIG device handles".
//! The count reuses the last enumeration (`mig_count`); the full inventory (`devices`)
//! enumerates again (per GPU: `nvmlDeviceGetMigMode`, and in MIG mode the maximum count and
//! a handle, name and instance ids per instance). An instance this caller cannot open
//! (`NVML_ERROR_NO_PERMISSION`, `NOT_FOUND` in a container given other instances) is
//! skipped: it is not this caller's, never an error.

use super::NvmlMonitor;
use crate::gpu::{mig_profile_of_name, MigInfo, MigInstanceInfo};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings::{nvmlDevice_t, nvmlReturn_enum_NVML_SUCCESS};
use std::os::raw::c_uint;

/// `NVML_DEVICE_MIG_ENABLE`.
const MIG_ENABLE: u32 = 1;

/// The MIG instances a monitor enumerated: the first instance's index (the GPU count then)
/// and each instance's facts, in index order.
#[derive(Debug, Default)]
pub(super) struct MigSlots {
    /// Whether an enumeration ran (MIG layouts change only by an administrator's
    /// reconfiguration, which resets the GPUs).
    known: bool,
    base: u32,
    /// Whether each of the `base` GPUs was in MIG mode (read once per enumeration; `None`:
    /// its handle did not answer).
    modes: Vec<Option<bool>>,
    instances: Vec<MigInstanceInfo>,
}

impl NvmlMonitor {
    /// How many MIG instances follow `count` GPUs: those of the last enumeration when one
    /// ran for that many GPUs (a count asks no GPU, so one that hangs later never holds it
    /// up), else a first enumeration.
    pub(super) fn mig_count(&self, count: u32) -> u32 {
        {
            let s = self.mig.lock().unwrap_or_else(|e| e.into_inner());
            if s.known && s.base == count {
                return s.instances.len() as u32;
            }
        }
        self.enumerate_mig(count)
    }

    /// Enumerate the MIG instances of the first `count` GPUs, caching their handles at
    /// indices `count..`: how many there are.
    pub(super) fn enumerate_mig(&self, count: u32) -> u32 {
        let mut found: Vec<(usize, MigInstanceInfo)> = Vec::new();
        let mut modes = vec![None; count as usize];
        for p in 0..count {
            let Ok(d) = self.device(p) else { continue };
            let on = in_mig_mode(&d);
            modes[p as usize] = Some(on);
            if !on {
                continue;
            }
            let parent_uuid = d.uuid().unwrap_or_default();
            let max = d.mig_device_count().unwrap_or(7).min(8);
            for i in 0..max {
                // NOT_FOUND: no instance there; NO_PERMISSION: not this caller's.
                let Ok(m) = d.mig_device_by_index(i) else {
                    continue;
                };
                // SAFETY: reading the raw handle out of a live Device has no side effect.
                let raw = unsafe { m.handle() };
                found.push((
                    raw as usize,
                    MigInstanceInfo {
                        parent: p,
                        parent_uuid: parent_uuid.clone(),
                        gi: self.instance_id(raw, false),
                        ci: self.instance_id(raw, true),
                        profile: m
                            .name()
                            .map(|n| mig_profile_of_name(&n))
                            .unwrap_or_default(),
                    },
                ));
            }
        }
        let mut hs = self.handles.lock().unwrap_or_else(|e| e.into_inner());
        hs.resize(count as usize, 0);
        hs.extend(found.iter().map(|(raw, _)| *raw));
        drop(hs);
        let n = found.len() as u32;
        *self.mig.lock().unwrap_or_else(|e| e.into_inner()) = MigSlots {
            known: true,
            base: count,
            modes,
            instances: found.into_iter().map(|(_, i)| i).collect(),
        };
        n
    }

    /// The handle to read inventory entry `index` through: the cached one (a MIG
    /// instance's, or a GPU's looked up by the enumeration), else one lookup.
    pub(super) fn info_handle(&self, index: u32) -> Result<Device<'_>, NvmlError> {
        let raw = self
            .handles
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(index as usize)
            .copied()
            .unwrap_or(0);
        if raw != 0 {
            // SAFETY: the handle came from this NVML session, which lives as long as `self`.
            return Ok(unsafe { Device::new(raw as nvmlDevice_t, &self.nvml) });
        }
        self.nvml.device_by_index(index)
    }

    /// The MIG part of inventory entry `index` read through `d`: its mode as the last
    /// enumeration read it (one `nvmlDeviceGetMigMode` per GPU and inventory), else asked.
    pub(super) fn mig_role(&self, index: u32, d: &Device<'_>) -> Option<MigInfo> {
        if let Some(i) = self.mig_slot(index) {
            return Some(MigInfo::Instance(i));
        }
        let known = self.known_mode(index);
        known
            .unwrap_or_else(|| in_mig_mode(d))
            .then_some(MigInfo::Parent)
    }

    /// `Parent` for a GPU in MIG mode whose own queries failed (its mode still answers).
    pub(super) fn parent_role(&self, index: u32) -> Option<MigInfo> {
        if self.mig_slot(index).is_some() {
            return None;
        }
        if let Some(known) = self.known_mode(index) {
            return known.then_some(MigInfo::Parent);
        }
        let d = self.device(index).ok()?;
        in_mig_mode(&d).then_some(MigInfo::Parent)
    }

    /// GPU `index`'s MIG mode as the last enumeration read it.
    fn known_mode(&self, index: u32) -> Option<bool> {
        let s = self.mig.lock().unwrap_or_else(|e| e.into_inner());
        s.modes
            .get(index as usize)
            .copied()
            .flatten()
            .filter(|_| s.known)
    }

    fn mig_slot(&self, index: u32) -> Option<MigInstanceInfo> {
        let s = self.mig.lock().unwrap_or_else(|e| e.into_inner());
        let k = index.checked_sub(s.base)?;
        s.instances.get(k as usize).cloned()
    }

    /// `nvmlDeviceGetGpuInstanceId` / `nvmlDeviceGetComputeInstanceId` of a MIG handle (not
    /// wrapped by nvml-wrapper 0.13; read from its loaded library), `None` where missing.
    fn instance_id(&self, raw: nvmlDevice_t, ci: bool) -> Option<u32> {
        let lib = self.nvml.lib();
        let f = if ci {
            lib.nvmlDeviceGetComputeInstanceId.as_ref().ok()?
        } else {
            lib.nvmlDeviceGetGpuInstanceId.as_ref().ok()?
        };
        let mut id: c_uint = 0;
        // SAFETY: a live handle of this session and a valid out pointer.
        let rc = unsafe { f(raw, &mut id) };
        (rc == nvmlReturn_enum_NVML_SUCCESS).then_some(id)
    }
}

/// Whether `d` is a GPU in MIG mode (any error: not).
fn in_mig_mode(d: &Device<'_>) -> bool {
    d.mig_mode().is_ok_and(|m| m.current == MIG_ENABLE)
}
