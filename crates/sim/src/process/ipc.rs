//! CUDA IPC on the box: a process exports an allocation (`cuIpcGetMemHandle`), another opens
//! it (`cuIpcOpenMemHandle`) and gets its own pointer to the same memory. The memory stays
//! charged to the exporter once; the importer is listed on the exporter's device as a
//! process holding a mapping there (0 bytes of its own), as NVML lists every DDP rank on
//! every GPU once NCCL maps its peers' buffers (pytorch/pytorch#64130, NVIDIA/nccl#51).
//!
//! Contents are not shared between processes: the simulator keeps device memory contents in
//! the process that owns them, so copies from or to an opened handle are
//! `SimError::Unsupported`.

use super::SimProcess;
use crate::{IpcExport, SimError};

/// Bytes of a `CUipcMemHandle` (`CU_IPC_HANDLE_SIZE`).
pub const IPC_HANDLE_SIZE: usize = 64;
const MAGIC: &[u8; 8] = b"VDSIMIPC";

/// A handle this process opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    /// The box's id of the export.
    pub export: u64,
    /// Physical device of the memory.
    pub device: u32,
    pub size: u64,
    /// Times opened (each needs one close).
    pub refs: u32,
}

fn handle_bytes(id: u64, e: &IpcExport) -> [u8; IPC_HANDLE_SIZE] {
    let mut h = [0u8; IPC_HANDLE_SIZE];
    h[..8].copy_from_slice(MAGIC);
    h[8..16].copy_from_slice(&id.to_le_bytes());
    h[16..20].copy_from_slice(&e.pid.to_le_bytes());
    h[20..24].copy_from_slice(&e.device.to_le_bytes());
    h[24..32].copy_from_slice(&e.size.to_le_bytes());
    h
}

fn handle_id(h: &[u8; IPC_HANDLE_SIZE]) -> Option<u64> {
    if &h[..8] != MAGIC {
        return None;
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&h[8..16]);
    Some(u64::from_le_bytes(id))
}

/// Where imported mappings start in a process's address space (apart from its own).
const IMPORT_BASE: u64 = 0x7e00_0000_0000;

impl SimProcess {
    /// Export the allocation that starts at `ptr` (`cuIpcGetMemHandle`): the same handle for
    /// the same allocation every time.
    pub fn ipc_export(&mut self, ptr: u64) -> Result<[u8; IPC_HANDLE_SIZE], SimError> {
        let (ordinal, size) = self
            .allocations
            .get(&ptr)
            .map(|a| (a.ordinal, a.size))
            .ok_or(SimError::InvalidPointer(ptr))?;
        let device = self.physical(ordinal)?;
        let pid = self.pid;
        let sim = self.sim.clone();
        sim.update(|st, faults| {
            sim.check_device(device, faults)?;
            if let Some((id, e)) = st.ipc.iter().find(|(_, e)| e.pid == pid && e.ptr == ptr) {
                return Ok(handle_bytes(*id, e));
            }
            st.next_ipc = st.next_ipc.saturating_add(1);
            let id = st.next_ipc;
            let e = IpcExport {
                pid,
                device,
                size,
                ptr,
            };
            let h = handle_bytes(id, &e);
            st.ipc.insert(id, e);
            Ok(h)
        })
    }

    /// Open a handle exported by another process (`cuIpcOpenMemHandle`) from a context on
    /// `ordinal`. Returns the pointer in this process and the memory's physical device.
    /// Opening a handle again returns the same pointer (one more reference).
    pub fn ipc_open(
        &mut self,
        handle: &[u8; IPC_HANDLE_SIZE],
        ordinal: u32,
    ) -> Result<(u64, u32), SimError> {
        if !self.has_context(ordinal) {
            return Err(SimError::NoContext(ordinal));
        }
        let id = handle_id(handle).ok_or(SimError::IpcHandle)?;
        if let Some((va, imp)) = self.imports.iter_mut().find(|(_, i)| i.export == id) {
            imp.refs = imp.refs.saturating_add(1);
            return Ok((*va, imp.device));
        }
        let pid = self.pid;
        let sim = self.sim.clone();
        let export = sim.update(|st, faults| {
            let e = st.ipc.get(&id).cloned().ok_or(SimError::IpcHandle)?;
            if e.pid == pid {
                return Err(SimError::IpcSameProcess);
            }
            sim.check_device(e.device, faults)?;
            let entry = st.processes.entry(pid).or_default();
            let u = entry.devices.entry(e.device).or_default();
            u.peer_mappings = u.peer_mappings.saturating_add(1);
            Ok(e)
        })?;
        let va = self
            .imports
            .keys()
            .next_back()
            .map_or(IMPORT_BASE, |last| last + 0x1_0000_0000);
        self.imports.insert(
            va,
            Import {
                export: id,
                device: export.device,
                size: export.size,
                refs: 1,
            },
        );
        Ok((va, export.device))
    }

    /// Close one reference of an opened handle (`cuIpcCloseMemHandle`); the last close
    /// unmaps it, and the process leaves the device's list if nothing else keeps it there.
    pub fn ipc_close(&mut self, va: u64) -> Result<(), SimError> {
        let imp = self
            .imports
            .get_mut(&va)
            .ok_or(SimError::InvalidPointer(va))?;
        imp.refs = imp.refs.saturating_sub(1);
        if imp.refs > 0 {
            return Ok(());
        }
        let device = imp.device;
        self.imports.remove(&va);
        let pid = self.pid;
        self.sim.update(|st, _| {
            if let Some(entry) = st.processes.get_mut(&pid) {
                if let Some(u) = entry.devices.get_mut(&device) {
                    u.peer_mappings = u.peer_mappings.saturating_sub(1);
                    if !u.listed() {
                        entry.devices.remove(&device);
                    }
                }
                if entry.devices.is_empty() {
                    st.processes.remove(&pid);
                }
            }
            Ok(())
        })
    }

    /// The opened handle whose mapping contains `ptr`, if any: (base, import).
    pub fn import_at(&self, ptr: u64) -> Option<(u64, &Import)> {
        let (base, imp) = self.imports.range(..=ptr).next_back()?;
        (ptr - base < imp.size.max(1)).then_some((*base, imp))
    }
}
