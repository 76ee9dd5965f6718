//! The simulated CUDA driver's operations on its state ([`Driver`]): handles, contexts, the
//! process's allocations and copies on the box, modules and the two emulated kernels.

use super::*;

impl Driver {
    pub(super) fn mint(&mut self) -> usize {
        let h = self.next_handle;
        self.next_handle += 0x10;
        h
    }

    pub(super) fn ordinal(&self, dev: CUdevice) -> Result<u32, CUresult> {
        if dev < 0 || dev as u32 >= self.proc.device_count() {
            return Err(CUDA_ERROR_INVALID_DEVICE);
        }
        Ok(dev as u32)
    }

    /// A live context handle, else `CUDA_ERROR_INVALID_CONTEXT`; its sticky error once a
    /// kernel fault poisoned it.
    pub(super) fn ctx(&self, h: usize) -> Result<&Context, CUresult> {
        let c = self.ctx_live(h)?;
        match c.sticky {
            Some(code) => Err(code),
            None => Ok(c),
        }
    }

    /// A live context handle, poisoned or not (to destroy or release it).
    pub(super) fn ctx_live(&self, h: usize) -> Result<&Context, CUresult> {
        match self.contexts.get(&h) {
            Some(c) if c.active => Ok(c),
            _ => Err(CUDA_ERROR_INVALID_CONTEXT),
        }
    }

    /// The context owning the allocation that contains `ptr`, checked as [`Driver::ctx`]
    /// does (`None`: not an allocation of this process).
    pub(super) fn ctx_of_ptr(&self, ptr: u64) -> Result<Option<usize>, CUresult> {
        let Some(base) = self.proc.allocation_base(ptr) else {
            return Ok(None);
        };
        match self.allocations.get(&base) {
            Some(h) => {
                self.ctx(*h)?;
                Ok(Some(*h))
            }
            None => Ok(None),
        }
    }

    /// The calling thread's current context, which must be live.
    pub(super) fn current(&self) -> Result<usize, CUresult> {
        let h = current_ctx().ok_or(CUDA_ERROR_INVALID_CONTEXT)?;
        self.ctx(h)?;
        Ok(h)
    }

    /// Whether `h` may be made current: a live context, or a primary context not (yet, or
    /// any more) in existence — the CUDA runtime sets the handle its interface table gave it
    /// before it retains the context; work on it fails until then.
    pub(super) fn settable(&self, h: usize) -> Result<(), CUresult> {
        match self.contexts.get(&h) {
            Some(c) if c.primary && !c.active => Ok(()),
            _ => self.ctx(h).map(|_| ()),
        }
    }

    /// Context of a stream handle (null and the special default streams: the current one).
    pub(super) fn stream_ctx(&mut self, stream: CUstream) -> Result<usize, CUresult> {
        let s = stream as usize;
        if s == 0 || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD {
            return self.current();
        }
        let st = self.streams.get(&s).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        self.ctx(st.ctx)?;
        Ok(st.ctx)
    }

    /// Create a context on `ordinal` (charging its overhead on that device only).
    pub(super) fn create_context(
        &mut self,
        ordinal: u32,
        primary: bool,
    ) -> Result<usize, CUresult> {
        self.proc.create_context(ordinal).map_err(code)?;
        let h = if primary {
            match self.primaries.get(&ordinal) {
                Some(h) => *h,
                None => {
                    let h = self.mint();
                    self.primaries.insert(ordinal, h);
                    h
                }
            }
        } else {
            self.mint()
        };
        self.contexts.insert(
            h,
            Context {
                ordinal,
                primary,
                active: true,
                retains: 1,
                sticky: None,
            },
        );
        Ok(h)
    }

    /// Destroy a context: its allocations, streams, events, modules, opened IPC handles and
    /// peer mappings go with it.
    pub(super) fn destroy_context(&mut self, h: usize) -> Result<(), CUresult> {
        let ordinal = self.ctx_live(h)?.ordinal;
        let opened: Vec<u64> = self
            .imports
            .iter()
            .filter(|(_, c)| **c == h)
            .map(|(p, _)| *p)
            .collect();
        for p in opened {
            self.imports.remove(&p);
            while self.proc.import_at(p).is_some() {
                self.proc.ipc_close(p).map_err(code)?;
            }
        }
        self.peers.retain(|(a, b)| *a != h && *b != h);
        let mine: Vec<u64> = self
            .allocations
            .iter()
            .filter(|(_, c)| **c == h)
            .map(|(p, _)| *p)
            .collect();
        for p in mine {
            self.allocations.remove(&p);
            self.pooled.remove(&p);
            self.proc.free(p).map_err(code)?;
        }
        self.streams.retain(|_, s| s.ctx != h);
        self.events.retain(|_, e| e.ctx != h);
        let modules: Vec<usize> = self
            .modules
            .iter()
            .filter(|(_, m)| m.ctx == h)
            .map(|(k, _)| *k)
            .collect();
        self.functions.retain(|_, f| !modules.contains(&f.module));
        self.modules.retain(|_, m| m.ctx != h);
        // The runtime's context-local values: their destructors run once the lock is released.
        let stored: Vec<(usize, usize)> =
            self.cls.keys().filter(|(c, _)| *c == h).copied().collect();
        for k in stored {
            if let Some((value, Some(dtor))) = self.cls.remove(&k) {
                self.deferred.push(Deferred::ClsDtor(dtor, h, k.1, value));
            }
        }
        self.proc.destroy_context(ordinal).map_err(code)?;
        // Physical memory of the virtual-memory API went with the device's last context.
        let proc = &self.proc;
        self.vmm
            .physical
            .retain(|_, p| proc.allocation_base(p.base).is_some());
        let physical = &self.vmm.physical;
        self.vmm
            .mapped
            .retain(|_, m| physical.contains_key(&m.handle));
        if let Some(c) = self.contexts.get_mut(&h) {
            c.active = false;
            c.retains = 0;
            c.sticky = None;
        }
        if !self.contexts.get(&h).is_some_and(|c| c.primary) {
            self.contexts.remove(&h);
        }
        Ok(())
    }

    /// Allocate in context `h`.
    pub(super) fn alloc(&mut self, h: usize, bytes: usize) -> Result<u64, CUresult> {
        if bytes == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let ordinal = self.ctx(h)?.ordinal;
        let ptr = self.proc.alloc(ordinal, bytes as u64).map_err(code)?;
        self.allocations.insert(ptr, h);
        Ok(ptr)
    }

    /// `cuMemAllocManaged` in context `h`: the core's managed allocation (resident on the
    /// device, in its `used`, in no process's usage; the process maps its size of `nvidia-uvm`).
    pub(super) fn alloc_managed(&mut self, h: usize, bytes: usize) -> Result<u64, CUresult> {
        if bytes == 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let ordinal = self.ctx(h)?.ordinal;
        let ptr = self
            .proc
            .alloc_managed(ordinal, bytes as u64)
            .map_err(code)?;
        self.allocations.insert(ptr, h);
        Ok(ptr)
    }

    pub(super) fn free(&mut self, ptr: u64) -> Result<(), CUresult> {
        let Some(h) = self.allocations.get(&ptr).copied() else {
            return Err(CUDA_ERROR_INVALID_VALUE);
        };
        self.ctx(h)?;
        self.proc.free(ptr).map_err(code)?;
        self.allocations.remove(&ptr);
        self.pooled.remove(&ptr);
        Ok(())
    }

    /// Work that would run on the device behind an ordinal (the core's
    /// [`SimProcess::work`]: lost → `CUDA_ERROR_LAUNCH_FAILED`, contained).
    pub(super) fn check_device(&self, ordinal: u32) -> Result<(), CUresult> {
        self.proc.work(ordinal).map_err(code)
    }

    pub(super) fn check_ptr(&mut self, ptr: u64) -> Result<u32, CUresult> {
        if self.proc.import_at(ptr).is_some() {
            // Another process's memory: the simulator does not share contents.
            return Err(CUDA_ERROR_NOT_SUPPORTED);
        }
        self.ctx_of_ptr(ptr)?;
        let ordinal = self.proc.ordinal_of(ptr).map_err(code)?;
        self.proc.check(ordinal).map_err(code)?;
        Ok(ordinal)
    }

    pub(super) fn memcpy_htod(
        &mut self,
        dst: u64,
        src: *const c_void,
        n: usize,
    ) -> Result<(), CUresult> {
        if n == 0 {
            return Ok(());
        }
        nonnull(src)?;
        // SAFETY: src holds n bytes per the caller's contract, checked non-null.
        let data = unsafe { std::slice::from_raw_parts(src as *const u8, n) };
        self.write_dev(dst, data)
    }

    /// Write `data` at the device address `dst` (mapped memory through its pieces).
    fn write_dev(&mut self, dst: u64, data: &[u8]) -> Result<(), CUresult> {
        if let Some((buf, off)) = self.global_at(dst) {
            let end = off.checked_add(data.len()).filter(|e| *e <= buf.len());
            let end = end.ok_or(CUDA_ERROR_INVALID_VALUE)?;
            buf[off..end].copy_from_slice(data);
            return Ok(());
        }
        let mut done = 0;
        for (at, len) in self.pieces(dst, data.len())? {
            self.check_ptr(at)?;
            let r = self.proc.write(at, &data[done..done + len]);
            self.kept_or_discarded(at, r)?;
            done += len;
        }
        Ok(())
    }

    /// A write the core refused because it does not keep that allocation's contents (a
    /// partial write into a large one): the copy succeeds, the contents read as zeros from
    /// then on — an unmodified program (PyTorch loading weights) runs, and only the values
    /// are not faithful (docs/simulator.md, "What is faithful").
    fn kept_or_discarded(&mut self, at: u64, r: Result<(), SimError>) -> Result<(), CUresult> {
        match r {
            Err(SimError::Unsupported(_)) if self.proc.discard_contents(at) => Ok(()),
            other => other.map_err(code),
        }
    }

    /// Read `buf.len()` bytes at the device address `src`.
    fn read_dev(&mut self, src: u64, buf: &mut [u8]) -> Result<(), CUresult> {
        if let Some((g, off)) = self.global_at(src) {
            let end = off.checked_add(buf.len()).filter(|e| *e <= g.len());
            let end = end.ok_or(CUDA_ERROR_INVALID_VALUE)?;
            buf.copy_from_slice(&g[off..end]);
            return Ok(());
        }
        let mut done = 0;
        for (at, len) in self.pieces(src, buf.len())? {
            self.check_ptr(at)?;
            self.proc
                .read(at, &mut buf[done..done + len])
                .map_err(code)?;
            done += len;
        }
        Ok(())
    }

    pub(super) fn memcpy_dtoh(
        &mut self,
        dst: *mut c_void,
        src: u64,
        n: usize,
    ) -> Result<(), CUresult> {
        if n == 0 {
            return Ok(());
        }
        nonnull(dst)?;
        // SAFETY: dst holds n bytes per the caller's contract, checked non-null.
        let buf = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, n) };
        self.read_dev(src, buf)
    }

    pub(super) fn memcpy_dtod(&mut self, dst: u64, src: u64, n: usize) -> Result<(), CUresult> {
        if n == 0 {
            return Ok(());
        }
        // Through a bounded buffer: a copy of gigabytes costs no more host memory than this.
        const CHUNK: usize = 4 << 20;
        let mut buf = vec![0u8; n.min(CHUNK)];
        let mut done = 0;
        while done < n {
            let len = (n - done).min(CHUNK);
            self.read_dev(src + done as u64, &mut buf[..len])?;
            self.write_dev(dst + done as u64, &buf[..len])?;
            done += len;
        }
        Ok(())
    }

    pub(super) fn memset8(&mut self, dst: u64, v: u8, n: usize) -> Result<(), CUresult> {
        if self.global_at(dst).is_some() {
            return self.write_dev(dst, &vec![v; n]);
        }
        if n == 0 {
            return Ok(());
        }
        for (at, len) in self.pieces(dst, n)? {
            self.check_ptr(at)?;
            let r = self.proc.memset8(at, v, len as u64);
            self.kept_or_discarded(at, r)?;
        }
        Ok(())
    }

    pub(super) fn memset32(&mut self, dst: u64, v: u32, n: usize) -> Result<(), CUresult> {
        if self.global_at(dst).is_some() {
            let bytes: Vec<u8> = std::iter::repeat_n(v.to_le_bytes(), n).flatten().collect();
            return self.write_dev(dst, &bytes);
        }
        if !dst.is_multiple_of(4) {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if n == 0 {
            return Ok(());
        }
        for (at, len) in self.pieces(dst, n.saturating_mul(4))? {
            self.check_ptr(at)?;
            let r = self.proc.fill_u32(at, v, (len / 4) as u64);
            self.kept_or_discarded(at, r)?;
        }
        Ok(())
    }

    pub(super) fn load_module(&mut self, image: &str) -> Result<usize, CUresult> {
        let ctx = self.current()?;
        let entries = ptx_entries(image);
        if !image.contains(".version") || !image.contains(".target") {
            return Err(CUDA_ERROR_INVALID_PTX);
        }
        // PTX needs the JIT compiler library (the core's `load_ptx`).
        self.proc.load_ptx().map_err(code)?;
        let h = self.mint();
        self.modules.insert(
            h,
            Module {
                ctx,
                entries,
                fatbin: false,
            },
        );
        Ok(h)
    }

    /// A module of the current context from a fatbin the CUDA runtime registered: no code is
    /// read (no kernel runs on the simulator); every kernel name resolves.
    pub(super) fn load_fatbin(&mut self) -> Result<usize, CUresult> {
        let ctx = self.current()?;
        let h = self.mint();
        self.modules.insert(
            h,
            Module {
                ctx,
                entries: Vec::new(),
                fatbin: true,
            },
        );
        Ok(h)
    }

    /// Whether `f` is a kernel of a runtime fatbin (launched as a no-op, any parameters).
    pub(super) fn is_fatbin_function(&self, f: usize) -> bool {
        self.functions
            .get(&f)
            .and_then(|func| self.modules.get(&func.module))
            .is_some_and(|m| m.fatbin)
    }

    /// The primary context handle of `ordinal`, minted (not activated, nothing charged) if
    /// none exists yet.
    pub(super) fn primary_handle(&mut self, ordinal: u32) -> usize {
        if let Some(h) = self.primaries.get(&ordinal) {
            return *h;
        }
        let h = self.mint();
        self.primaries.insert(ordinal, h);
        self.contexts.insert(
            h,
            Context {
                ordinal,
                primary: true,
                active: false,
                retains: 0,
                sticky: None,
            },
        );
        h
    }

    /// The context a context-local-storage call names (null: the current one); the
    /// runtime may store into a primary context it has not activated yet.
    pub(super) fn cls_context(&self, ctx: CUcontext) -> Result<usize, CUresult> {
        if ctx.is_null() {
            return current_ctx().ok_or(CUDA_ERROR_INVALID_CONTEXT);
        }
        let h = ctx as usize;
        if self.contexts.contains_key(&h) {
            Ok(h)
        } else {
            Err(CUDA_ERROR_INVALID_CONTEXT)
        }
    }

    /// Run an emulated kernel. Kernel faults (bad pointer, wrong device) give
    /// `CUDA_ERROR_ILLEGAL_ADDRESS` as a real launch would report them.
    pub(super) fn launch(
        &mut self,
        f: usize,
        stream: CUstream,
        params: *mut *mut c_void,
    ) -> Result<(), CUresult> {
        let func = self.functions.get(&f).ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let module = self
            .modules
            .get(&func.module)
            .ok_or(CUDA_ERROR_INVALID_HANDLE)?;
        let ctx = module.ctx;
        let fatbin = module.fatbin;
        let name = func.name.clone();
        let ordinal = self.ctx(ctx)?.ordinal;
        let sctx = self.stream_ctx(stream)?;
        if sctx != ctx {
            return Err(CUDA_ERROR_INVALID_HANDLE);
        }
        self.check_device(ordinal)?;
        if fatbin {
            // A kernel of the runtime's fatbins: it would compute; the simulator keeps only
            // the memory it was given (docs/simulator.md, "What is faithful").
            return match self.proc.launch(ordinal) {
                Ok(()) => Ok(()),
                Err(e @ SimError::IllegalAddress(_)) => Err(self.poison(ctx, code(e))),
                Err(e) => Err(code(e)),
            };
        }
        nonnull(params)?;
        // The core decides whether the launch runs (lost, contained, an injected fault).
        match self.proc.launch(ordinal) {
            Ok(()) => {}
            Err(e @ SimError::IllegalAddress(_)) => return Err(self.poison(ctx, code(e))),
            Err(e) => return Err(code(e)),
        }
        let r = self.run_kernel(&name, ordinal, ctx, params);
        match r {
            Err(CUDA_ERROR_ILLEGAL_ADDRESS) => Err(self.poison(ctx, CUDA_ERROR_ILLEGAL_ADDRESS)),
            other => other,
        }
    }

    /// Make `code` stick to context `h` (a kernel fault): every later call on it fails so.
    pub(super) fn poison(&mut self, h: usize, code: CUresult) -> CUresult {
        if let Some(c) = self.contexts.get_mut(&h) {
            c.sticky = Some(code);
        }
        code
    }

    /// Whether a kernel in context `h` on `ordinal` may touch memory on `other`: its own
    /// device, or a peer whose context it enabled peer access to.
    fn reaches(&self, h: usize, ordinal: u32, other: u32) -> bool {
        other == ordinal
            || self
                .peers
                .iter()
                .any(|(a, b)| *a == h && self.contexts.get(b).is_some_and(|c| c.ordinal == other))
    }

    fn run_kernel(
        &mut self,
        name: &str,
        ordinal: u32,
        ctx: usize,
        params: *mut *mut c_void,
    ) -> Result<(), CUresult> {
        // SAFETY: kernelParams holds one pointer per kernel parameter (cuda.h contract); both
        // emulated kernels take three, each pointing at a value of the PTX parameter's type.
        let arg = |i: usize| -> Result<*mut c_void, CUresult> {
            let p = unsafe { *params.add(i) };
            if p.is_null() {
                Err(CUDA_ERROR_INVALID_VALUE)
            } else {
                Ok(p)
            }
        };
        let on_device = |d: &mut Driver, ptr: u64| -> Result<(), CUresult> {
            match d.proc.ordinal_of(ptr) {
                Ok(o) if d.reaches(ctx, ordinal, o) => Ok(()),
                _ => Err(CUDA_ERROR_ILLEGAL_ADDRESS),
            }
        };
        let fault = |e: SimError| match e {
            SimError::InvalidPointer(_) | SimError::OutOfBounds { .. } => {
                CUDA_ERROR_ILLEGAL_ADDRESS
            }
            SimError::DeviceLost(d) => code(SimError::LaunchFailed(d)),
            other => code(other),
        };
        match name {
            KERNEL_FILL => {
                // SAFETY: parameter types per kernels/vramdoc.cu: (u32*, u64, u32).
                let (ptr, n, value) = unsafe {
                    (
                        *(arg(0)? as *const u64),
                        *(arg(1)? as *const u64),
                        *(arg(2)? as *const u32),
                    )
                };
                if n == 0 {
                    return Ok(());
                }
                on_device(self, ptr)?;
                self.proc.fill_u32(ptr, value, n).map_err(fault)
            }
            KERNEL_CHECKSUM => {
                // SAFETY: parameter types per kernels/vramdoc.cu: (const u32*, u64, u64*).
                let (ptr, n, outp) = unsafe {
                    (
                        *(arg(0)? as *const u64),
                        *(arg(1)? as *const u64),
                        *(arg(2)? as *const u64),
                    )
                };
                on_device(self, outp)?;
                let sum = if n == 0 {
                    0
                } else {
                    on_device(self, ptr)?;
                    self.proc.checksum_u32(ptr, n).map_err(fault)?
                };
                let mut cur = [0u8; 8];
                self.proc.read(outp, &mut cur).map_err(fault)?;
                let total = u64::from_le_bytes(cur).wrapping_add(sum);
                self.proc.write(outp, &total.to_le_bytes()).map_err(fault)
            }
            _ => Err(CUDA_ERROR_NOT_FOUND),
        }
    }
}
