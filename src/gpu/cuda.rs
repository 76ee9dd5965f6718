//! The real CUDA backend: [`CudaDriver`] over cudarc's driver API (dynamic loading of
//! libcuda.so). Fill and checksum kernels come from kernels/vramdoc.ptx via cuModuleLoadData.
//! TODO(issue 2): implementation in progress.

use super::{AllocId, ContextId, Driver, GpuError, Result};

pub struct CudaDriver {}

impl CudaDriver {
    pub fn open() -> Result<CudaDriver> {
        Err(GpuError::LibraryMissing {
            library: "libcuda.so".into(),
            hint: "the CUDA backend is not implemented yet".into(),
        })
    }
}

impl Driver for CudaDriver {
    fn backend(&self) -> &'static str {
        "cuda"
    }
    fn device_count(&mut self) -> Result<u32> {
        unimplemented!()
    }
    fn create_context(&mut self, _ordinal: u32) -> Result<ContextId> {
        unimplemented!()
    }
    fn destroy_context(&mut self, _ctx: ContextId) -> Result<()> {
        unimplemented!()
    }
    fn alloc(&mut self, _ctx: ContextId, _bytes: u64) -> Result<AllocId> {
        unimplemented!()
    }
    fn free(&mut self, _alloc: AllocId) -> Result<()> {
        unimplemented!()
    }
    fn fill(&mut self, _alloc: AllocId, _value: u32) -> Result<u64> {
        unimplemented!()
    }
    fn mem_info(&mut self, _ctx: ContextId) -> Result<(u64, u64)> {
        unimplemented!()
    }
    fn synchronize(&mut self, _ctx: ContextId) -> Result<()> {
        unimplemented!()
    }
}
