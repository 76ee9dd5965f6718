//! The CUDA driver's semantics beyond one process's memory (which [`crate::process`] owns):
//! whether the library initialises at all, whether a PTX module loads, whether work (a
//! launch, a synchronisation) on a device runs. Each answer is a typed [`SimError`] whose
//! `CUresult` is [`SimError::cuda_code`]; the C ABI (`vramdoc-simgpu`) and vramdoc's
//! in-process backend both call these, so a CUDA fault is decided here once.

use crate::{SimBox, SimError, SimProcess};

/// `cuInit`: the box's faults that make the library unusable as a whole — the CUDA
/// toolkit's stub shadowing the driver ([`SimError::StubLibrary`]), a library upgraded
/// without its kernel module ([`SimError::DriverMismatch`]).
pub fn init(sim: &SimBox) -> Result<(), SimError> {
    let faults = sim.faults()?;
    if faults.cuda_stub_library {
        return Err(SimError::StubLibrary);
    }
    if faults.driver_version_mismatch {
        return Err(SimError::DriverMismatch);
    }
    Ok(())
}

/// Whether the library is the toolkit's stub: then every entry point fails, even those that
/// need no `cuInit` (`cuDriverGetVersion`).
pub fn is_stub(sim: &SimBox) -> bool {
    sim.faults().is_ok_and(|f| f.cuda_stub_library)
}

impl SimProcess {
    /// Load a PTX module (`cuModuleLoadData`): the driver's JIT compiler must be there
    /// (`libnvidia-ptxjitcompiler`; [`SimError::NoPtxJit`] under the `no_ptx_jit` fault).
    pub fn load_ptx(&self) -> Result<(), SimError> {
        if self.sim().faults()?.no_ptx_jit {
            return Err(SimError::NoPtxJit);
        }
        Ok(())
    }

    /// Work on the device behind `ordinal` (a synchronisation, or a launch before it runs): a
    /// device that fell off the bus fails it with [`SimError::LaunchFailed`] ("unspecified
    /// launch failure"), a contained error with [`SimError::Contained`].
    pub fn work(&self, ordinal: u32) -> Result<(), SimError> {
        match self.check(ordinal) {
            Err(SimError::DeviceLost(d)) => Err(SimError::LaunchFailed(d)),
            other => other,
        }
    }

    /// A kernel launch on `ordinal`: [`work`](Self::work), then the injected kernel fault of
    /// its device, consumed ([`SimError::IllegalAddress`], which the caller makes stick to
    /// the context).
    pub fn launch(&self, ordinal: u32) -> Result<(), SimError> {
        self.work(ordinal)?;
        let phys = self.physical(ordinal)?;
        if self.sim().take_kernel_fault(phys)? {
            return Err(SimError::IllegalAddress(phys));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Faults, InitOptions};

    #[test]
    fn cuda_faults_are_decided_here() {
        let dir = tempfile::tempdir().unwrap();
        let sim = SimBox::create(dir.path(), "2x16GiB", &InitOptions::default()).unwrap();
        let set = |f: Faults| sim.set_faults(&f).unwrap();
        set(Faults {
            cuda_stub_library: true,
            ..Faults::default()
        });
        assert!(matches!(init(&sim), Err(SimError::StubLibrary)));
        assert!(is_stub(&sim));
        set(Faults {
            no_ptx_jit: true,
            illegal_address_devices: vec![1],
            contained_devices: vec![0],
            ..Faults::default()
        });
        assert!(init(&sim).is_ok());
        let mut p = SimProcess::new(sim.clone(), None);
        p.create_context(0).unwrap();
        p.create_context(1).unwrap();
        assert!(matches!(p.load_ptx(), Err(SimError::NoPtxJit)));
        assert!(matches!(p.work(0), Err(SimError::Contained(0))));
        // The injected kernel fault fires once.
        assert!(matches!(p.launch(1), Err(SimError::IllegalAddress(1))));
        assert!(p.launch(1).is_ok());
        set(Faults {
            lost_devices: vec![1],
            ..Faults::default()
        });
        let e = p.work(1).unwrap_err();
        assert!(matches!(e, SimError::LaunchFailed(1)));
        assert_eq!(e.cuda_code(), crate::codes::cuda::CUDA_ERROR_LAUNCH_FAILED);
        p.release_all().unwrap();
    }
}
