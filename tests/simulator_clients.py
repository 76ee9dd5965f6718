#!/usr/bin/env python3
"""Third-party clients of the simulated driver libraries, as tests/simulator_clients.rs runs
them (LD_LIBRARY_PATH decides which libcuda.so.1 / libnvidia-ml.so.1 load):

  nvml [SYMBOL...]          pynvml's view of every device (+ whether each SYMBOL is exported)
  ipc-export DEV SIZE       allocate SIZE bytes on CUDA ordinal DEV, print its IPC handle;
                            hold until stdin closes
  ipc-open DEV HANDLE       open HANDLE from a context on DEV; print; on a stdin line `close`
                            close it and print again; hold until stdin closes
  peer                      cuDeviceCanAccessPeer and cuCtxEnable/DisablePeerAccess codes
  launch DEV PTX            load PTX, launch the fill kernel on DEV, then more calls on the
                            same context; print every code; hold until stdin closes
  procaddr                  a client that dlsyms only cuDriverGetVersion and
                            cuGetProcAddress_v2 (as NVIDIA's CUDA Python bindings do)
  cuda-python               NVIDIA's CUDA Python bindings (cuda.bindings.driver)
  numa                      CU_DEVICE_ATTRIBUTE_NUMA_CONFIG / NUMA_ID of every CUDA device
  nvml-time DEV [--announce] time one memory query of NVML index DEV (announce: print a
                            line just before it)
  session                   an NVML session driven by stdin lines (`query`, `shutdown`,
                            `init`), one JSON answer per line
  queries N                 N memory queries of device 0

Each prints JSON lines. Driver return codes are integers.
"""
import ctypes
import json
import os
import sys
import time


def emit(obj):
    print(json.dumps(obj), flush=True)


def wait_eof():
    sys.stdin.read()


def text(v):
    return v.decode() if isinstance(v, bytes) else v


def nvml(symbols):
    import pynvml as n

    n.nvmlInit()
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    out = {"driver": text(n.nvmlSystemGetDriverVersion()), "devices": []}
    out["symbols"] = {s: hasattr(lib, s) for s in symbols}
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        d = {"uuid": text(n.nvmlDeviceGetUUID(h)), "name": text(n.nvmlDeviceGetName(h))}

        def attempt(key, call):
            try:
                d[key] = call()
            except n.NVMLError as e:
                d[key + "_error"] = e.value
            except Exception as e:  # e.g. pynvml's NVMLLibraryMismatchError on old drivers
                d[key + "_error"] = type(e).__name__

        attempt("v1", lambda: list(vars_of(n.nvmlDeviceGetMemoryInfo(h), "total", "used", "free")))
        attempt(
            "v2",
            lambda: list(
                vars_of(n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2), "total", "reserved", "used", "free")
            ),
        )
        attempt("v2_bare_version", lambda: n.nvmlDeviceGetMemoryInfo(h, version=2).used)
        attempt("compute", lambda: [[p.pid, p.usedGpuMemory] for p in n.nvmlDeviceGetComputeRunningProcesses(h)])
        attempt("compute_v2", lambda: [[p.pid, p.usedGpuMemory] for p in n.nvmlDeviceGetComputeRunningProcesses_v2(h)])
        attempt("graphics", lambda: [[p.pid, p.usedGpuMemory] for p in n.nvmlDeviceGetGraphicsRunningProcesses(h)])
        attempt("numa", lambda: n.nvmlDeviceGetNumaNodeId(h))
        attempt("fan", lambda: n.nvmlDeviceGetFanSpeed(h))
        attempt("power_limit", lambda: n.nvmlDeviceGetEnforcedPowerLimit(h))
        attempt("pstate", lambda: n.nvmlDeviceGetPerformanceState(h))
        attempt("ecc", lambda: list(n.nvmlDeviceGetEccMode(h)))
        attempt("display_active", lambda: n.nvmlDeviceGetDisplayActive(h))
        out["devices"].append(d)
    n.nvmlShutdown()
    emit(out)


def vars_of(m, *names):
    return (getattr(m, k) for k in names)


class Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


def cuda():
    cu = ctypes.CDLL("libcuda.so.1")
    cu.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), Handle, ctypes.c_uint]
    return cu


def context(cu, dev):
    """Init, primary context on ordinal `dev` made current; returns (device, context)."""
    assert cu.cuInit(0) == 0
    d = ctypes.c_int()
    assert cu.cuDeviceGet(ctypes.byref(d), dev) == 0
    ctx = ctypes.c_void_p()
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), d) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0
    return d, ctx


def ipc_export(dev, size):
    cu = cuda()
    context(cu, dev)
    p = ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size)) == 0
    h = Handle()
    rc = cu.cuIpcGetMemHandle(ctypes.byref(h), p)
    # Memory from a stream-ordered pool cannot be exported this way.
    q = ctypes.c_uint64()
    assert cu.cuMemAllocAsync(ctypes.byref(q), ctypes.c_size_t(1 << 20), None) == 0
    pool = cu.cuIpcGetMemHandle(ctypes.byref(Handle()), q)
    # Opening one's own handle is refused.
    own = cu.cuIpcOpenMemHandle_v2(ctypes.byref(ctypes.c_uint64()), h, 1)
    emit({"rc": rc, "handle": bytes(h.reserved).hex(), "pool_export": pool, "own_open": own, "pid": os.getpid()})
    wait_eof()


def ipc_open(dev, handle):
    cu = cuda()
    context(cu, dev)
    h = Handle()
    h.reserved = bytes.fromhex(handle)
    p = ctypes.c_uint64()
    rc = cu.cuIpcOpenMemHandle_v2(ctypes.byref(p), h, 1)
    again = ctypes.c_uint64()
    rc2 = cu.cuIpcOpenMemHandle_v2(ctypes.byref(again), h, 1)
    buf = ctypes.create_string_buffer(16)
    copy = cu.cuMemcpyDtoH_v2(buf, p, ctypes.c_size_t(16))
    emit({"rc": rc, "ptr": p.value, "again": rc2, "same_ptr": again.value == p.value, "copy": copy, "pid": os.getpid()})
    for line in sys.stdin:
        if line.strip() == "close":
            first = cu.cuIpcCloseMemHandle(p)
            second = cu.cuIpcCloseMemHandle(p)
            third = cu.cuIpcCloseMemHandle(p)
            emit({"close": [first, second, third]})
    wait_eof()


def peer():
    cu = cuda()
    assert cu.cuInit(0) == 0
    n = ctypes.c_int()
    assert cu.cuDeviceGetCount(ctypes.byref(n)) == 0
    can = []
    for a in range(n.value):
        row = []
        for b in range(n.value):
            v = ctypes.c_int(-1)
            assert cu.cuDeviceCanAccessPeer(ctypes.byref(v), a, b) == 0
            row.append(v.value)
        can.append(row)
    _, c1 = context(cu, 1)
    _, c0 = context(cu, 0)
    out = {"can": can}
    out["enable"] = cu.cuCtxEnablePeerAccess(c1, 0)
    out["enable_again"] = cu.cuCtxEnablePeerAccess(c1, 0)
    out["disable"] = cu.cuCtxDisablePeerAccess(c1)
    out["disable_again"] = cu.cuCtxDisablePeerAccess(c1)
    out["enable_self"] = cu.cuCtxEnablePeerAccess(c0, 0)
    # A copy between the two contexts' memory works without peer access.
    a, b = ctypes.c_uint64(), ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ctypes.byref(a), ctypes.c_size_t(4096)) == 0
    assert cu.cuCtxSetCurrent(c1) == 0
    assert cu.cuMemAlloc_v2(ctypes.byref(b), ctypes.c_size_t(4096)) == 0
    src = ctypes.create_string_buffer(b"peer-bytes", 4096)
    assert cu.cuMemcpyHtoD_v2(a, src, ctypes.c_size_t(4096)) == 0
    out["memcpy_peer"] = cu.cuMemcpyPeer(b, c1, a, c0, ctypes.c_size_t(4096))
    back = ctypes.create_string_buffer(4096)
    assert cu.cuMemcpyDtoH_v2(back, b, ctypes.c_size_t(4096)) == 0
    out["copied"] = back.raw[:10].decode()
    emit(out)


def launch(dev, ptx):
    cu = cuda()
    context(cu, dev)
    image = open(ptx, "rb").read() + b"\0"
    m = ctypes.c_void_p()
    assert cu.cuModuleLoadData(ctypes.byref(m), image) == 0
    f = ctypes.c_void_p()
    assert cu.cuModuleGetFunction(ctypes.byref(f), m, b"vramdoc_fill_u32") == 0
    p = ctypes.c_uint64()
    assert cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1 << 20)) == 0
    ptr, n, value = ctypes.c_uint64(p.value), ctypes.c_uint64(1 << 18), ctypes.c_uint32(7)
    args = (ctypes.c_void_p * 3)(
        ctypes.cast(ctypes.byref(ptr), ctypes.c_void_p),
        ctypes.cast(ctypes.byref(n), ctypes.c_void_p),
        ctypes.cast(ctypes.byref(value), ctypes.c_void_p),
    )
    out = {"pid": os.getpid()}
    out["launch"] = cu.cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, None, args, None)
    out["sync"] = cu.cuCtxSynchronize()
    q = ctypes.c_uint64()
    out["alloc"] = cu.cuMemAlloc_v2(ctypes.byref(q), ctypes.c_size_t(4096))
    buf = ctypes.create_string_buffer(4)
    out["copy"] = cu.cuMemcpyDtoH_v2(buf, p, ctypes.c_size_t(4))
    out["launch_again"] = cu.cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, None, args, None)
    emit(out)
    wait_eof()


def procaddr():
    lib = ctypes.CDLL("libcuda.so.1")
    version = ctypes.c_int()
    assert lib.cuDriverGetVersion(ctypes.byref(version)) == 0
    gpa = lib.cuGetProcAddress_v2
    gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_uint64, ctypes.POINTER(ctypes.c_int)]

    def resolve(name, ver, flags=0):
        pfn, status = ctypes.c_void_p(), ctypes.c_int(-1)
        rc = gpa(name.encode(), ctypes.byref(pfn), ver, flags, ctypes.byref(status))
        return rc, pfn.value, status.value

    out = {"version": version.value}
    out["unknown"] = resolve("cuNoSuchFunction", 12000)
    out["too_old"] = resolve("cuCtxCreate", 2000)
    out["newer_than_driver"] = resolve("cuInit", version.value + 10)
    out["per_thread"] = resolve("cuMemcpyHtoD", 7000, 2)
    fn = {}
    for name, ver in [("cuInit", 2000), ("cuDeviceGetCount", 2000), ("cuDeviceGet", 2000),
                      ("cuDevicePrimaryCtxRetain", 7000), ("cuCtxSetCurrent", 4000),
                      ("cuMemAlloc", 3020), ("cuMemFree", 3020)]:
        rc, p, st = resolve(name, ver)
        assert rc == 0 and p and st == 0, (name, rc, p, st)
        fn[name] = ctypes.CFUNCTYPE(ctypes.c_int)(p)
    ci = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint)(resolve("cuInit", 2000)[1])
    assert ci(0) == 0
    count = ctypes.c_int()
    assert ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))(resolve("cuDeviceGetCount", 2000)[1])(ctypes.byref(count)) == 0
    out["count"] = count.value
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    assert ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_int)(resolve("cuDeviceGet", 2000)[1])(ctypes.byref(dev), 0) == 0
    assert ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int)(resolve("cuDevicePrimaryCtxRetain", 7000)[1])(ctypes.byref(ctx), dev) == 0
    assert ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(resolve("cuCtxSetCurrent", 4000)[1])(ctx) == 0
    p = ctypes.c_uint64()
    alloc = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t)(resolve("cuMemAlloc", 3020)[1])
    out["alloc"] = alloc(ctypes.byref(p), 256 << 20)
    out["pid"] = os.getpid()
    emit(out)
    sys.stdin.readline()
    free = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64)(resolve("cuMemFree", 3020)[1])
    emit({"free": free(p)})
    wait_eof()


def cuda_python():
    from cuda.bindings import driver as cu

    def ok(r):
        assert r[0] == cu.CUresult.CUDA_SUCCESS, r
        return r[1] if len(r) == 2 else r[1:]

    ok(cu.cuInit(0))
    out = {"version": ok(cu.cuDriverGetVersion()), "count": ok(cu.cuDeviceGetCount())}
    dev = ok(cu.cuDeviceGet(0))
    out["name"] = ok(cu.cuDeviceGetName(64, dev)).split(b"\0")[0].decode()
    ctx = ok(cu.cuDevicePrimaryCtxRetain(dev))
    ok(cu.cuCtxSetCurrent(ctx))
    p = ok(cu.cuMemAlloc(1 << 30))
    free, total = ok(cu.cuMemGetInfo())
    out["free"], out["total"], out["pid"] = int(free), int(total), os.getpid()
    emit(out)
    sys.stdin.readline()
    ok(cu.cuMemFree(p))
    emit({"freed": True})
    wait_eof()


def numa():
    cu = cuda()
    assert cu.cuInit(0) == 0
    n = ctypes.c_int()
    assert cu.cuDeviceGetCount(ctypes.byref(n)) == 0
    out = []
    for d in range(n.value):
        config, node = ctypes.c_int(), ctypes.c_int()
        assert cu.cuDeviceGetAttribute(ctypes.byref(config), 130, d) == 0
        assert cu.cuDeviceGetAttribute(ctypes.byref(node), 131, d) == 0
        out.append([config.value, node.value])
    emit(out)


def nvml_time(dev, announce):
    import pynvml as n

    start = time.monotonic()
    try:
        n.nvmlInit()
    except n.NVMLError as e:
        emit({"seconds": time.monotonic() - start, "init_error": e.value})
        return
    h = n.nvmlDeviceGetHandleByIndex(dev)
    if announce:
        emit({"start": True})
    start = time.monotonic()
    try:
        n.nvmlDeviceGetMemoryInfo(h)
        err = None
    except n.NVMLError as e:
        err = e.value
    emit({"seconds": time.monotonic() - start, "error": err})


def session():
    import pynvml as n

    n.nvmlInit()
    emit({"init": 0, "pid": os.getpid()})
    for line in sys.stdin:
        cmd = line.strip()
        try:
            if cmd == "query":
                n.nvmlDeviceGetMemoryInfo(n.nvmlDeviceGetHandleByIndex(0))
            elif cmd == "shutdown":
                n.nvmlShutdown()
            elif cmd == "init":
                n.nvmlInit()
            emit({cmd: 0})
        except n.NVMLError as e:
            emit({cmd: e.value})


def queries(count):
    import pynvml as n

    n.nvmlInit()
    h = n.nvmlDeviceGetHandleByIndex(0)
    for _ in range(count):
        n.nvmlDeviceGetMemoryInfo(h)
    n.nvmlShutdown()
    emit({"pid": os.getpid()})


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "nvml":
        nvml(args)
    elif cmd == "ipc-export":
        ipc_export(int(args[0]), int(args[1]))
    elif cmd == "ipc-open":
        ipc_open(int(args[0]), args[1])
    elif cmd == "peer":
        peer()
    elif cmd == "launch":
        launch(int(args[0]), args[1])
    elif cmd == "procaddr":
        procaddr()
    elif cmd == "cuda-python":
        cuda_python()
    elif cmd == "numa":
        numa()
    elif cmd == "nvml-time":
        nvml_time(int(args[0]), "--announce" in args)
    elif cmd == "session":
        session()
    elif cmd == "queries":
        queries(int(args[0]))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
