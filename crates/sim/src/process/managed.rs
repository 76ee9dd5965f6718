//! Managed (unified) memory of one process: `cuMemAllocManaged` and its `cuMemFree`.
//!
//! Model (docs/simulator.md, "Managed memory"): the whole allocation is resident on the
//! device of the current context from the moment it is made (a real driver migrates pages
//! on demand; resident-at-once is the simple bound tests need). Resident managed memory
//! counts in the device's `used` (`nvmlDeviceGetMemoryInfo`) but in no process's
//! `usedGpuMemory` (Syllo/nvtop#213, gpuopenanalytics/pynvml#63, rapidsai/rmm#2259), and
//! the process holds the box's `dev/nvidia-uvm` open, as a real UVM client holds
//! `/dev/nvidia-uvm`.

use super::SimProcess;
use crate::SimError;

impl SimProcess {
    /// `cuMemAllocManaged(bytes)` in the context on `ordinal` (one must exist): charged,
    /// rounded up to the 2 MiB granularity, to the device's `used` and to this process's
    /// managed bytes, never to its listed usage; opens `dev/nvidia-uvm` (creating the node
    /// in a box made before it existed). Freed by [`SimProcess::free`] or with the last
    /// context on the device. Returns the pointer.
    pub fn alloc_managed(&mut self, ordinal: u32, bytes: u64) -> Result<u64, SimError> {
        if !self.has_context(ordinal) {
            return Err(SimError::NoContext(ordinal));
        }
        self.open_uvm()?;
        self.alloc_as(ordinal, bytes, true)
    }

    /// Whether the allocation at `ptr` is managed.
    pub fn is_managed(&self, ptr: u64) -> bool {
        self.allocations.get(&ptr).is_some_and(|a| a.managed)
    }

    /// Open the box's `dev/nvidia-uvm` once (the driver files are open: a context exists).
    fn open_uvm(&mut self) -> Result<(), SimError> {
        let node = self.sim.dir().join(crate::DEV_DIR).join(crate::UVM_NODE);
        if let Some(files) = self.files.as_mut() {
            if files.uvm.is_none() {
                files.uvm = Some(crate::open_node(&node)?);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{InitOptions, SimBox, SimError, SimProcess};
    use vramdoc_gpu_spec::units::GIB;

    /// Whether this process holds `path` open (a link in /proc/self/fd names it).
    fn holds(path: &std::path::Path) -> bool {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .any(|e| std::fs::read_link(e.path()).is_ok_and(|t| t == path))
    }

    #[test]
    fn managed_memory_is_used_on_the_device_but_in_no_process_usage() {
        let dir = tempfile::tempdir().unwrap();
        let b = SimBox::create(dir.path(), "1x24GiB", &InitOptions::default()).unwrap();
        let mut p = SimProcess::new(b.clone(), None);
        assert!(matches!(
            p.alloc_managed(0, GIB),
            Err(SimError::NoContext(0))
        ));
        p.create_context(0).unwrap();
        let overhead = b.device(0).unwrap().context_overhead;
        let before = b.memory(0).unwrap();
        let uvm = std::fs::canonicalize(dir.path())
            .unwrap()
            .join(crate::DEV_DIR)
            .join(crate::UVM_NODE);
        assert!(!holds(&uvm));
        let ptr = p.alloc_managed(0, 2 * GIB).unwrap();
        assert!(p.is_managed(ptr));
        assert!(
            holds(&uvm),
            "a process with managed memory holds nvidia-uvm"
        );
        let m = b.memory(0).unwrap();
        assert_eq!(m.used, before.used + 2 * GIB);
        assert_eq!(m.total, m.reserved + m.used + m.free);
        let listed = b.processes(0).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(
            listed[0].used, overhead,
            "managed bytes are in no process's usage"
        );
        // cuMemFree gives it back.
        p.free(ptr).unwrap();
        assert_eq!(b.memory(0).unwrap().used, before.used);
        // And so does the last context on the device.
        p.alloc_managed(0, GIB).unwrap();
        p.destroy_context(0).unwrap();
        assert_eq!(b.memory(0).unwrap().used, 0);
        assert!(b.processes(0).unwrap().is_empty());
    }
}
