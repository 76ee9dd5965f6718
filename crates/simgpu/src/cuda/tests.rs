//! Tests of the CUDA entry points through their C signatures, on fresh boxes.

use super::*;
use std::ptr::null_mut;

#[test]
fn entries_are_parsed_from_ptx() {
    let ptx = include_str!("../../../../kernels/vramdoc.ptx");
    assert_eq!(ptx_entries(ptx), vec![KERNEL_FILL, KERNEL_CHECKSUM]);
    assert_eq!(
        ptx_entries(".entry  foo (\n) .entry\tbar_1(\n.entryx baz("),
        vec!["foo", "bar_1"]
    );
}

#[test]
fn uuid_bytes_parse() {
    let b = uuid_bytes("GPU-01234567-89ab-cdef-0011-223344556677");
    assert_eq!(b[0], 0x01);
    assert_eq!(b[15], 0x77);
}

#[test]
fn error_names_and_strings() {
    let mut p: *const c_char = std::ptr::null();
    unsafe {
        assert_eq!(
            cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &mut p),
            CUDA_SUCCESS
        );
        assert_eq!(
            CStr::from_ptr(p).to_str().unwrap(),
            "CUDA_ERROR_OUT_OF_MEMORY"
        );
        assert_eq!(
            cuGetErrorString(CUDA_ERROR_INVALID_CONTEXT, &mut p),
            CUDA_SUCCESS
        );
        assert_eq!(
            CStr::from_ptr(p).to_str().unwrap(),
            "invalid device context"
        );
        assert_eq!(cuGetErrorName(12345, &mut p), CUDA_ERROR_INVALID_VALUE);
        assert!(p.is_null());
        assert_eq!(cuGetErrorName(0, null_mut()), CUDA_ERROR_INVALID_VALUE);
    }
}

/// The whole ABI in one sequence: the driver is one global per process, so one test owns it.
#[test]
fn driver_api_sequence_over_a_box() {
    let dir = tempfile::tempdir().unwrap();
    let b = vramdoc_sim::SimBox::create(dir.path(), "2x16GiB", &Default::default()).unwrap();
    unsafe {
        let mut n = 0;
        assert_eq!(cuDeviceGetCount(&mut n), CUDA_ERROR_NOT_INITIALIZED);
        std::env::set_var("VRAMDOC_SIM_DIR", dir.path());
        std::env::set_var("CUDA_VISIBLE_DEVICES", "1");
        assert_eq!(cuInit(1), CUDA_ERROR_INVALID_VALUE);
        assert_eq!(cuInit(0), CUDA_SUCCESS);
        assert_eq!(cuDeviceGetCount(&mut n), CUDA_SUCCESS);
        assert_eq!(n, 1, "CUDA_VISIBLE_DEVICES=1 leaves one ordinal");
        let mut dev = -1;
        assert_eq!(cuDeviceGet(&mut dev, 1), CUDA_ERROR_INVALID_DEVICE);
        assert_eq!(cuDeviceGet(&mut dev, 0), CUDA_SUCCESS);
        let mut name = [0 as c_char; 64];
        assert_eq!(cuDeviceGetName(name.as_mut_ptr(), 64, dev), CUDA_SUCCESS);
        assert_eq!(
            CStr::from_ptr(name.as_ptr()).to_str().unwrap(),
            b.devices()[1].name
        );
        let mut uuid = [0u8; 16];
        assert_eq!(cuDeviceGetUuid(&mut uuid, dev), CUDA_SUCCESS);
        assert_eq!(
            uuid,
            uuid_bytes(&b.devices()[1].uuid),
            "ordinal 0 is physical 1"
        );

        // No current context yet.
        let mut p: CUdeviceptr = 0;
        assert_eq!(cuMemAlloc_v2(&mut p, 1024), CUDA_ERROR_INVALID_CONTEXT);
        assert_eq!(
            cuDevicePrimaryCtxRelease_v2(dev),
            CUDA_ERROR_INVALID_CONTEXT
        );

        // Retain twice: one context, one overhead, on physical 1 only.
        let overhead = b.device(1).unwrap().context_overhead;
        let mut ctx: CUcontext = null_mut();
        let mut ctx2: CUcontext = null_mut();
        assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx, dev), CUDA_SUCCESS);
        assert_eq!(cuDevicePrimaryCtxRetain(&mut ctx2, dev), CUDA_SUCCESS);
        assert_eq!(ctx, ctx2);
        assert_eq!(b.memory(1).unwrap().used, overhead);
        assert_eq!(b.memory(0).unwrap().used, 0);
        assert_eq!(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
        let mut cur: CUcontext = null_mut();
        assert_eq!(cuCtxGetCurrent(&mut cur), CUDA_SUCCESS);
        assert_eq!(cur, ctx);

        // Streams, events, async alloc, copies, memset.
        let mut s: CUstream = null_mut();
        assert_eq!(cuStreamCreate(&mut s, 1), CUDA_SUCCESS);
        let (mut e0, mut e1): (CUevent, CUevent) = (null_mut(), null_mut());
        assert_eq!(cuEventCreate(&mut e0, 0), CUDA_SUCCESS);
        assert_eq!(cuEventCreate(&mut e1, 0), CUDA_SUCCESS);
        let mut ms = 0f32;
        assert_eq!(
            cuEventElapsedTime(&mut ms, e0, e1),
            CUDA_ERROR_INVALID_HANDLE,
            "not recorded"
        );
        assert_eq!(cuEventRecord(e0, s), CUDA_SUCCESS);
        assert_eq!(cuMemAllocAsync(&mut p, 3 << 20, s), CUDA_SUCCESS);
        assert_eq!(
            b.memory(1).unwrap().used,
            overhead + (4 << 20),
            "rounded to 2 MiB"
        );
        // Managed memory: in the device's used, not in the process's listed usage.
        let mut mp: CUdeviceptr = 0;
        assert_eq!(
            cuMemAllocManaged(&mut mp, 1 << 20, 0),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(cuMemAllocManaged(&mut mp, 0, 1), CUDA_ERROR_INVALID_VALUE);
        let (used0, listed0) = (b.memory(1).unwrap().used, b.processes(1).unwrap()[0].used);
        assert_eq!(cuMemAllocManaged(&mut mp, 1 << 20, 1), CUDA_SUCCESS);
        assert_eq!(b.memory(1).unwrap().used, used0 + (2 << 20));
        assert_eq!(b.processes(1).unwrap()[0].used, listed0);
        assert_eq!(cuMemFree_v2(mp), CUDA_SUCCESS);
        assert_eq!(b.memory(1).unwrap().used, used0);
        let words: Vec<u32> = (0..256).collect();
        assert_eq!(
            cuMemcpyHtoDAsync_v2(p, words.as_ptr() as _, 1024, s),
            CUDA_SUCCESS
        );
        let mut back = vec![0u32; 256];
        assert_eq!(
            cuMemcpyDtoH_v2(back.as_mut_ptr() as _, p, 1024),
            CUDA_SUCCESS
        );
        assert_eq!(back, words);
        assert_eq!(cuMemsetD32Async(p, 9, 256, s), CUDA_SUCCESS);
        assert_eq!(
            cuMemcpyDtoHAsync_v2(back.as_mut_ptr() as _, p, 1024, s),
            CUDA_SUCCESS
        );
        assert!(back.iter().all(|w| *w == 9));
        assert_eq!(
            cuMemcpyDtoH_v2(back.as_mut_ptr() as _, p + (3 << 20), 8),
            CUDA_ERROR_INVALID_VALUE
        );

        // Module, functions, launches.
        let ptx = std::ffi::CString::new(include_str!("../../../../kernels/vramdoc.ptx")).unwrap();
        let mut m: CUmodule = null_mut();
        assert_eq!(cuModuleLoadData(&mut m, ptx.as_ptr() as _), CUDA_SUCCESS);
        let (mut fill, mut sum): (CUfunction, CUfunction) = (null_mut(), null_mut());
        assert_eq!(
            cuModuleGetFunction(&mut fill, m, c"nope".as_ptr()),
            CUDA_ERROR_NOT_FOUND
        );
        assert_eq!(
            cuModuleGetFunction(&mut fill, m, c"vramdoc_fill_u32".as_ptr()),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuModuleGetFunction(&mut sum, m, c"vramdoc_checksum_u32".as_ptr()),
            CUDA_SUCCESS
        );
        let mut outp: CUdeviceptr = 0;
        assert_eq!(cuMemAlloc_v2(&mut outp, 8), CUDA_SUCCESS);
        assert_eq!(cuMemsetD8Async(outp, 0, 8, s), CUDA_SUCCESS);
        let n_words: u64 = (3 << 20) / 4;
        let value: u32 = 0xdead_beef;
        let mut args: [*mut c_void; 3] = [
            &p as *const u64 as _,
            &n_words as *const u64 as _,
            &value as *const u32 as _,
        ];
        assert_eq!(
            cuLaunchKernel(
                fill,
                64,
                1,
                1,
                2048,
                1,
                1,
                0,
                s,
                args.as_mut_ptr(),
                null_mut()
            ),
            CUDA_ERROR_INVALID_VALUE
        );
        assert_eq!(
            cuLaunchKernel(
                fill,
                64,
                1,
                1,
                256,
                1,
                1,
                0,
                s,
                args.as_mut_ptr(),
                null_mut()
            ),
            CUDA_SUCCESS
        );
        let mut args2: [*mut c_void; 3] = [
            &p as *const u64 as _,
            &n_words as *const u64 as _,
            &outp as *const u64 as _,
        ];
        assert_eq!(
            cuLaunchKernel(
                sum,
                64,
                1,
                1,
                256,
                1,
                1,
                0,
                s,
                args2.as_mut_ptr(),
                null_mut()
            ),
            CUDA_SUCCESS
        );
        let mut total = 0u64;
        assert_eq!(
            cuMemcpyDtoHAsync_v2(&mut total as *mut u64 as _, outp, 8, s),
            CUDA_SUCCESS
        );
        assert_eq!(cuStreamSynchronize(s), CUDA_SUCCESS);
        assert_eq!(total, kernel::expected_checksum(3 << 20, value));
        let other = std::ffi::CString::new(".version 8.0\n.target sm_52\n.visible .entry mine(\n)")
            .unwrap();
        let mut m2: CUmodule = null_mut();
        let mut mine: CUfunction = null_mut();
        assert_eq!(cuModuleLoadData(&mut m2, other.as_ptr() as _), CUDA_SUCCESS);
        assert_eq!(
            cuModuleGetFunction(&mut mine, m2, c"mine".as_ptr()),
            CUDA_SUCCESS
        );
        assert_eq!(
            cuLaunchKernel(mine, 1, 1, 1, 1, 1, 1, 0, s, args.as_mut_ptr(), null_mut()),
            CUDA_ERROR_NOT_FOUND
        );
        assert_eq!(
            cuModuleLoadData(&mut m2, c"garbage".as_ptr() as _),
            CUDA_ERROR_INVALID_PTX
        );

        assert_eq!(cuEventRecord(e1, s), CUDA_SUCCESS);
        assert_eq!(cuEventElapsedTime(&mut ms, e0, e1), CUDA_SUCCESS);
        assert!(ms >= 0.0);

        // mem info, OOM, free.
        let (mut free, mut tot) = (0usize, 0usize);
        assert_eq!(cuMemGetInfo_v2(&mut free, &mut tot), CUDA_SUCCESS);
        assert_eq!(tot as u64, b.device(1).unwrap().total);
        assert_eq!(free as u64, b.memory(1).unwrap().free);
        let mut big: CUdeviceptr = 0;
        assert_eq!(cuMemAlloc_v2(&mut big, free + 1), CUDA_ERROR_OUT_OF_MEMORY);
        assert_eq!(cuMemFreeAsync(p, s), CUDA_SUCCESS);
        assert_eq!(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE, "double free");
        // Freeing null succeeds: cuBLAS's static runtime calls it while initialising and stops
        // on an error (docs/simulator.md, "An unmodified CUDA runtime").
        assert_eq!(cuMemFree_v2(0), CUDA_SUCCESS);

        // Lost device: launches and syncs fail as launch failures, allocations as unknown.
        b.set_faults(&vramdoc_sim::Faults {
            lost_devices: vec![1],
            ..Default::default()
        })
        .unwrap();
        assert_eq!(cuCtxSynchronize(), CUDA_ERROR_LAUNCH_FAILED);
        assert_eq!(cuMemAlloc_v2(&mut big, 1024), CUDA_ERROR_UNKNOWN);
        b.set_faults(&Default::default()).unwrap();

        // A kernel fault (a pointer outside every allocation) is sticky: every later call on
        // the context returns it; the context can still be released.
        let bogus: u64 = 0x10;
        args[0] = &bogus as *const u64 as _;
        assert_eq!(
            cuLaunchKernel(fill, 1, 1, 1, 1, 1, 1, 0, s, args.as_mut_ptr(), null_mut()),
            CUDA_ERROR_ILLEGAL_ADDRESS
        );
        assert_eq!(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
        assert_eq!(cuMemAlloc_v2(&mut big, 1024), CUDA_ERROR_ILLEGAL_ADDRESS);
        assert_eq!(cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);

        // Release to zero destroys the context and everything in it.
        assert_eq!(cuDevicePrimaryCtxRelease_v2(dev), CUDA_SUCCESS);
        assert_eq!(
            b.memory(1).unwrap().used,
            overhead + (2 << 20),
            "outp still held"
        );
        assert_eq!(cuDevicePrimaryCtxRelease_v2(dev), CUDA_SUCCESS);
        assert_eq!(b.memory(1).unwrap().used, 0);
        assert!(b.state().unwrap().processes.is_empty());
        assert_eq!(
            cuMemAlloc_v2(&mut big, 1024),
            CUDA_ERROR_INVALID_CONTEXT,
            "current ctx is gone"
        );
        assert_eq!(cuEventRecord(e1, null_mut()), CUDA_ERROR_INVALID_CONTEXT);

        runtime_surface(&b, dev, overhead);
    }
}

/// What an unmodified CUDA runtime uses beyond cudarc's surface, on the same driver (the
/// primary context of `dev`, CUDA ordinal 0 = the box's GPU 1, released before).
unsafe fn runtime_surface(b: &vramdoc_sim::SimBox, dev: CUdevice, overhead: u64) {
    // The runtime's interface table: its primary-context slot makes nothing exist.
    let mut t: *const c_void = std::ptr::null();
    let id = export_table::CUDART_INTERFACE;
    assert_eq!(cuGetExportTable(&mut t, &id), CUDA_SUCCESS);
    let slots = t as *const usize;
    assert_eq!(
        *slots,
        13 * std::mem::size_of::<usize>(),
        "slot 0 is the table's size"
    );
    let primary: extern "C" fn(*mut CUcontext, CUdevice) -> CUresult =
        std::mem::transmute(*slots.add(2));
    let mut ctx: CUcontext = null_mut();
    assert_eq!(primary(&mut ctx, dev), CUDA_SUCCESS);
    assert!(!ctx.is_null());
    assert_eq!(b.memory(1).unwrap().used, 0, "no context until retained");
    // The runtime sets it current before retaining; work on it fails until then.
    assert_eq!(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    let mut p: CUdeviceptr = 0;
    assert_eq!(cuMemAlloc_v2(&mut p, 1024), CUDA_ERROR_INVALID_CONTEXT);
    let mut retained: CUcontext = null_mut();
    assert_eq!(cuDevicePrimaryCtxRetain(&mut retained, dev), CUDA_SUCCESS);
    assert_eq!(retained, ctx, "the same handle");
    assert_eq!(b.memory(1).unwrap().used, overhead);
    // An unknown table is refused and recorded, never a NULL table with success.
    let unknown = [0xf8u8; 16];
    assert_eq!(cuGetExportTable(&mut t, &unknown), CUDA_ERROR_INVALID_VALUE);
    assert!(t.is_null());
    // An unknown name is NULL with its status (asked at a version the box's driver has).
    let mut f: *mut c_void = null_mut();
    let mut st = -1;
    assert_eq!(
        cuGetProcAddress_v2(c"cuNoSuchCall".as_ptr(), &mut f, 12000, 0, &mut st),
        CUDA_SUCCESS
    );
    assert!(f.is_null());
    assert_eq!(st, 1, "CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND");
    // The 7.0 names the runtime asks for are served.
    assert_eq!(
        cuGetProcAddress_v2(
            c"cuDevicePrimaryCtxRelease".as_ptr(),
            &mut f,
            7000,
            0,
            &mut st
        ),
        CUDA_SUCCESS
    );
    assert!(!f.is_null() && st == 0);

    // Virtual memory: charged when made, free once released and unmapped.
    let mut prop = [0u32; 8];
    prop[0] = 1; // CU_MEM_ALLOCATION_TYPE_PINNED
    prop[2] = 1; // CU_MEM_LOCATION_TYPE_DEVICE
    prop[3] = dev as u32;
    let pp = prop.as_ptr() as *const c_void;
    let mut gran = 0usize;
    assert_eq!(
        cuMemGetAllocationGranularity(&mut gran, pp, 0),
        CUDA_SUCCESS
    );
    assert_eq!(gran, 2 << 20);
    let mut va: CUdeviceptr = 0;
    assert_eq!(
        cuMemAddressReserve(&mut va, 64 << 20, 0, 0, 0),
        CUDA_SUCCESS
    );
    assert_eq!(
        b.memory(1).unwrap().used,
        overhead,
        "a reservation costs nothing"
    );
    let mut h = 0u64;
    assert_eq!(cuMemCreate(&mut h, 20 << 20, pp, 0), CUDA_SUCCESS);
    assert_eq!(b.memory(1).unwrap().used, overhead + (20 << 20));
    assert_eq!(cuMemMap(va, 20 << 20, 0, h, 0), CUDA_SUCCESS);
    assert_eq!(
        cuMemMap(va, 20 << 20, 0, h, 0),
        CUDA_ERROR_INVALID_VALUE,
        "overlap"
    );
    // A copy into the mapped range reaches the physical memory behind it.
    let data = [7u8, 8, 9, 10];
    assert_eq!(
        cuMemcpyHtoD_v2(va + 100, data.as_ptr().cast(), 4),
        CUDA_SUCCESS
    );
    let mut back = [0u8; 4];
    assert_eq!(
        cuMemcpyDtoH_v2(back.as_mut_ptr().cast(), va + 100, 4),
        CUDA_SUCCESS
    );
    assert_eq!(back, data);
    // Pointer attributes under unified addressing: device memory, its ordinal.
    let mut ordinal: c_int = -1;
    assert_eq!(
        cuPointerGetAttribute((&mut ordinal as *mut c_int).cast(), 9, va + 100),
        CUDA_SUCCESS
    );
    assert_eq!(ordinal, dev);
    assert_eq!(cuMemRelease(h), CUDA_SUCCESS);
    assert_eq!(
        b.memory(1).unwrap().used,
        overhead + (20 << 20),
        "still mapped"
    );
    assert_eq!(cuMemUnmap(va, 20 << 20), CUDA_SUCCESS);
    assert_eq!(
        b.memory(1).unwrap().used,
        overhead,
        "released and unmapped: gone"
    );
    assert_eq!(cuMemAddressFree(va, 64 << 20), CUDA_SUCCESS);

    // Stream capture: a stream reports capturing between begin and end.
    let mut s: CUstream = null_mut();
    assert_eq!(cuStreamCreate(&mut s, 0), CUDA_SUCCESS);
    let (mut status, mut cid) = (9u32, 0u64);
    assert_eq!(
        cuStreamGetCaptureInfo(s, &mut status, &mut cid),
        CUDA_SUCCESS
    );
    assert_eq!(status, 0, "CU_STREAM_CAPTURE_STATUS_NONE");
    assert_eq!(cuStreamBeginCapture_v2(s, 0), CUDA_SUCCESS);
    assert_eq!(cuStreamIsCapturing(s, &mut status), CUDA_SUCCESS);
    assert_eq!(status, 1, "ACTIVE");
    let mut g = 0usize;
    assert_eq!(cuStreamEndCapture(s, &mut g), CUDA_SUCCESS);
    let mut exec = 0usize;
    assert_eq!(cuGraphInstantiateWithFlags(&mut exec, g, 0), CUDA_SUCCESS);
    assert_eq!(cuGraphLaunch(exec, s), CUDA_SUCCESS);
    assert_eq!(cuGraphExecDestroy(exec), CUDA_SUCCESS);
    assert_eq!(cuGraphDestroy(g), CUDA_SUCCESS);
    assert_eq!(cuStreamDestroy_v2(s), CUDA_SUCCESS);

    // Freeing null is a use of the current context (the `cudaFree(0)` idiom).
    assert_eq!(cuMemFree_v2(0), CUDA_SUCCESS);
    assert_eq!(cuDevicePrimaryCtxRelease_v2(dev), CUDA_SUCCESS);
    assert_eq!(b.memory(1).unwrap().used, 0);
}
