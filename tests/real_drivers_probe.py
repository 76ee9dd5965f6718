#!/usr/bin/env python3
"""Third-party clients of the simulated driver, as tests/real_drivers.rs runs them:

  real_drivers_probe.py nvml        NVIDIA's Python NVML bindings (pynvml)
  real_drivers_probe.py cuda [hold] a plain ctypes client of the CUDA driver API (libcuda.so.1)

Each prints one JSON object of what it read (driver return codes as integers, names and
UUIDs as strings). `cuda hold` keeps its context until stdin closes (a second process for the
exclusive-process test). Whatever libraries LD_LIBRARY_PATH finds are used.
"""
import ctypes
import json
import sys


def text(v):
    return v.decode() if isinstance(v, bytes) else v


def nvml():
    import pynvml as n

    out = {}
    try:
        n.nvmlInit()
    except n.NVMLError as e:
        out["init_error"] = e.value
        return out
    out["driver"] = text(n.nvmlSystemGetDriverVersion())
    out["nvml"] = text(n.nvmlSystemGetNVMLVersion())
    out["cuda"] = n.nvmlSystemGetCudaDriverVersion()
    devices = []
    for i in range(n.nvmlDeviceGetCount()):
        h = n.nvmlDeviceGetHandleByIndex(i)
        d = {"index": i}
        for key, call in [
            ("uuid", lambda: text(n.nvmlDeviceGetUUID(h))),
            ("name", lambda: text(n.nvmlDeviceGetName(h))),
            ("total", lambda: n.nvmlDeviceGetMemoryInfo(h).total),
            (
                "compute",
                lambda: [[p.pid, p.usedGpuMemory] for p in n.nvmlDeviceGetComputeRunningProcesses(h)],
            ),
            (
                "graphics",
                lambda: [[p.pid, p.usedGpuMemory] for p in n.nvmlDeviceGetGraphicsRunningProcesses(h)],
            ),
            (
                "mps",
                lambda: [[p.pid, p.usedGpuMemory] for p in n.nvmlDeviceGetMPSComputeRunningProcesses(h)],
            ),
            (
                "detail",
                lambda: [
                    [p.pid, p.usedGpuMemory]
                    for p in n.nvmlDeviceGetRunningProcessDetailList(
                        h, n.nvmlProcessDetailList_v1, n.NVML_PROCESS_MODE_COMPUTE
                    )
                ],
            ),
        ]:
            try:
                d[key] = call()
            except n.NVMLError as e:
                d[key + "_error"] = e.value
        devices.append(d)
    out["devices"] = devices
    n.nvmlShutdown()
    return out


PTX = b""".version 8.0
.target sm_70
.address_size 64
.visible .entry probe_kernel()
{
    ret;
}
\0"""


def cuda(hold):
    lib = ctypes.CDLL("libcuda.so.1")
    c_int, c_uint, c_size_t, c_void_p = ctypes.c_int, ctypes.c_uint, ctypes.c_size_t, ctypes.c_void_p
    out = {"init": lib.cuInit(c_uint(0))}
    if out["init"] != 0:
        return out
    count = c_int(0)
    lib.cuDeviceGetCount(ctypes.byref(count))
    devices = []
    for o in range(count.value):
        name = ctypes.create_string_buffer(256)
        lib.cuDeviceGetName(name, c_int(256), c_int(o))
        raw = (ctypes.c_ubyte * 16)()
        lib.cuDeviceGetUuid(raw, c_int(o))
        h = bytes(raw).hex()
        uuid = "GPU-%s-%s-%s-%s-%s" % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])
        devices.append({"name": text(name.value), "uuid": uuid})
    out["devices"] = devices
    ctx = c_void_p()
    out["retain"] = lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), c_int(0))
    if out["retain"] == 0:
        lib.cuCtxSetCurrent(ctx)
        free, total = c_size_t(0), c_size_t(0)
        out["mem_get_info"] = lib.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
        out["free"], out["total"] = free.value, total.value
        module = c_void_p()
        out["module_load"] = lib.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(PTX))
        out["synchronize"] = lib.cuCtxSynchronize()
        name = ctypes.c_char_p()
        lib.cuGetErrorName(c_int(out["synchronize"]), ctypes.byref(name))
        out["synchronize_name"] = text(name.value) if name.value else None
    if hold:
        print(json.dumps(out), flush=True)
        sys.stdin.read()
        return None
    return out


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else "nvml"
    result = nvml() if what == "nvml" else cuda("hold" in sys.argv[2:])
    if result is not None:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
