//! The real NVML backend: [`NvmlMonitor`] over nvml-wrapper.
//! TODO(issue 2): implementation in progress.

use super::{CallCounts, DeviceInfo, GpuError, GpuProcess, MemoryInfo, Monitor, Result, Versions};

pub struct NvmlMonitor {}

impl NvmlMonitor {
    pub fn open() -> Result<NvmlMonitor> {
        Err(GpuError::LibraryMissing {
            library: "libnvidia-ml.so.1".into(),
            hint: "the NVML backend is not implemented yet".into(),
        })
    }
}

impl Monitor for NvmlMonitor {
    fn backend(&self) -> &'static str {
        "nvml"
    }
    fn versions(&self) -> Result<Versions> {
        unimplemented!()
    }
    fn devices(&self) -> Result<Vec<DeviceInfo>> {
        unimplemented!()
    }
    fn memory(&self, _index: u32) -> Result<MemoryInfo> {
        unimplemented!()
    }
    fn processes(&self, _index: u32) -> Result<Vec<GpuProcess>> {
        unimplemented!()
    }
    fn call_counts(&self) -> CallCounts {
        CallCounts::default()
    }
}
