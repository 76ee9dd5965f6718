//! Managed (unified) memory of one process: `cuMemAllocManaged` and its `cuMemFree`, and the
//! mappings of the box's `dev/nvidia-uvm` a real driver makes.
//!
//! Model (docs/simulator.md, "Managed memory"): the whole allocation is resident on the
//! device of the current context from the moment it is made (a real driver migrates pages
//! on demand; resident-at-once is the simple bound tests need). Resident managed memory
//! counts in the device's `used` (`nvmlDeviceGetMemoryInfo`) but in no process's
//! `usedGpuMemory` (Syllo/nvtop#213, gpuopenanalytics/pynvml#63, rapidsai/rmm#2259). As on
//! a real driver (observed on an H200, 580.159.04, 2026-11-28), every client holds
//! `dev/nvidia-uvm` open from its first context, a context maps 2 MiB of it
//! ([`CONTEXT_UVM_MAPPING`](super::CONTEXT_UVM_MAPPING)) and each managed allocation maps
//! its size, so `/proc/PID/maps` is the evidence of managed memory, not the open file.

use super::{SimProcess, UvmMapping};
use crate::SimError;

impl SimProcess {
    /// `cuMemAllocManaged(bytes)` in the context on `ordinal` (one must exist): charged,
    /// rounded up to the 2 MiB granularity, to the device's `used` and to this process's
    /// managed bytes, never to its listed usage; maps that many bytes of `dev/nvidia-uvm`
    /// while it lives. Freed by [`SimProcess::free`] or with the last context on the device.
    /// Returns the pointer.
    pub fn alloc_managed(&mut self, ordinal: u32, bytes: u64) -> Result<u64, SimError> {
        if !self.has_context(ordinal) {
            return Err(SimError::NoContext(ordinal));
        }
        let size = vramdoc_gpu_spec::units::round_up(bytes.max(1), crate::GRANULARITY);
        let map = self.map_uvm(size)?;
        let ptr = self.alloc_as(ordinal, bytes, true)?;
        if let Some(a) = self.allocations.get_mut(&ptr) {
            a._uvm_map = map;
        }
        Ok(ptr)
    }

    /// Whether the allocation at `ptr` is managed.
    pub fn is_managed(&self, ptr: u64) -> bool {
        self.allocations.get(&ptr).is_some_and(|a| a.managed)
    }

    /// The context's own 2 MiB mapping of `dev/nvidia-uvm` and its ranges of `dev/nvidiactl`
    /// ([`CONTEXT_CTL_RANGES`](super::client::CONTEXT_CTL_RANGES)), made once while the
    /// process has a context (the driver files are open).
    pub(super) fn map_context_uvm(&mut self) -> Result<(), SimError> {
        if self.files.as_ref().is_some_and(|f| f.context_map.is_none()) {
            let Some(uvm) = self.map_uvm(super::CONTEXT_UVM_MAPPING)? else {
                return Ok(());
            };
            let ctl_path = self.sim.dir().join(crate::DEV_DIR).join("nvidiactl");
            if let Some(f) = self.files.as_mut() {
                let ctl = UvmMapping::ranges(
                    &f.ctl,
                    &ctl_path,
                    super::client::CONTEXT_CTL_RANGES,
                    super::client::CONTEXT_CTL_BYTES,
                )?;
                f.context_map = Some((uvm, ctl));
            }
        }
        Ok(())
    }

    /// A mapping of `len` bytes of the box's `dev/nvidia-uvm` (`None` before the driver
    /// files are open).
    fn map_uvm(&self, len: u64) -> Result<Option<UvmMapping>, SimError> {
        let Some(files) = self.files.as_ref() else {
            return Ok(None);
        };
        let path = self.sim.dir().join(crate::DEV_DIR).join(crate::UVM_NODE);
        UvmMapping::new(&files.uvm, &path, len).map(Some)
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

    /// Bytes this process maps of `path` (lines of /proc/self/maps naming it).
    fn mapped(path: &std::path::Path) -> u64 {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let name = path.to_str().unwrap();
        maps.lines()
            .filter(|l| l.ends_with(name))
            .map(|l| {
                let (a, b) = l.split(' ').next().unwrap().split_once('-').unwrap();
                u64::from_str_radix(b, 16).unwrap() - u64::from_str_radix(a, 16).unwrap()
            })
            .sum()
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
        // Every client holds nvidia-uvm and maps 2 MiB of it for its context, and nvidiactl
        // in many ranges.
        assert!(holds(&uvm), "a CUDA process holds nvidia-uvm");
        assert_eq!(mapped(&uvm), crate::process::CONTEXT_UVM_MAPPING);
        let ctl = uvm.with_file_name("nvidiactl");
        assert_eq!(ranges(&ctl), crate::process::client::CONTEXT_CTL_RANGES);
        let ptr = p.alloc_managed(0, 2 * GIB).unwrap();
        assert!(p.is_managed(ptr));
        assert_eq!(
            mapped(&uvm),
            crate::process::CONTEXT_UVM_MAPPING + 2 * GIB,
            "a managed allocation maps its size"
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
        // cuMemFree gives it back, and unmaps it.
        p.free(ptr).unwrap();
        assert_eq!(b.memory(0).unwrap().used, before.used);
        assert_eq!(mapped(&uvm), crate::process::CONTEXT_UVM_MAPPING);
        // And so does the last context on the device, with the context's mapping.
        p.alloc_managed(0, GIB).unwrap();
        p.destroy_context(0).unwrap();
        assert_eq!(b.memory(0).unwrap().used, 0);
        assert!(b.processes(0).unwrap().is_empty());
        assert_eq!(mapped(&uvm), 0);
        assert_eq!(ranges(&ctl), 0);
    }

    /// Ranges of `path` mapped by this process.
    fn ranges(path: &std::path::Path) -> u64 {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let name = path.to_str().unwrap();
        maps.lines().filter(|l| l.ends_with(name)).count() as u64
    }

    /// As on a real driver (H200, 580.159.04): a child forked after the context inherits its
    /// nvidiactl ranges but not its nvidia-uvm ones (libcuda marks those MADV_DONTFORK).
    #[test]
    fn a_forked_child_inherits_the_ctl_ranges_not_the_uvm_ones() {
        let dir = tempfile::tempdir().unwrap();
        let b = SimBox::create(dir.path(), "1x24GiB", &InitOptions::default()).unwrap();
        let mut p = SimProcess::new(b.clone(), None);
        p.create_context(0).unwrap();
        p.alloc_managed(0, GIB).unwrap();
        let dev = std::fs::canonicalize(dir.path())
            .unwrap()
            .join(crate::DEV_DIR);
        // SAFETY: the child only pauses until killed (async-signal-safe), touching nothing.
        let child = unsafe { libc::fork() };
        if child == 0 {
            loop {
                // SAFETY: pause has no preconditions.
                unsafe { libc::pause() };
            }
        }
        assert!(child > 0, "fork");
        let maps = std::fs::read_to_string(format!("/proc/{child}/maps")).unwrap();
        // SAFETY: kill and reap the child forked above.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
        let count = |name: &str| {
            let path = dev.join(name);
            let path = path.to_str().unwrap();
            maps.lines().filter(|l| l.ends_with(path)).count() as u64
        };
        assert_eq!(
            count("nvidiactl"),
            crate::process::client::CONTEXT_CTL_RANGES
        );
        assert_eq!(count(crate::UVM_NODE), 0, "{maps}");
        // The parent keeps its own.
        assert_eq!(ranges(&dev.join(crate::UVM_NODE)), 2);
    }
}
