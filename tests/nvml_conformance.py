#!/usr/bin/env python3
"""Conformance probe: NVIDIA's own Python NVML bindings (nvidia-ml-py, module `pynvml`)
read the machine through whatever libnvidia-ml.so.1 the loader finds, and print it as JSON.

tests/nvml_python.rs runs this over the simulated library (LD_LIBRARY_PATH) and compares
every field with what vramdoc reports for the same box. Exit 3 if pynvml is missing.
"""
import json
import sys

try:
    import pynvml
except ImportError:
    sys.stderr.write(
        "nvml_conformance.py: the Python module pynvml is missing; "
        "install NVIDIA's bindings with `pip install nvidia-ml-py`\n"
    )
    sys.exit(3)


def text(v):
    return v.decode() if isinstance(v, bytes) else v


def procs(entries):
    return sorted(
        ({"pid": p.pid, "used": p.usedGpuMemory} for p in entries),
        key=lambda p: p["pid"],
    )


def package_version():
    try:
        from importlib.metadata import version

        return version("nvidia-ml-py")
    except Exception:  # not installed as a distribution (e.g. vendored): unknown
        return None


def main():
    pynvml.nvmlInit()
    try:
        out = {
            "pynvml_version": package_version(),
            "driver_version": text(pynvml.nvmlSystemGetDriverVersion()),
            "nvml_version": text(pynvml.nvmlSystemGetNVMLVersion()),
            "cuda_driver_version": pynvml.nvmlSystemGetCudaDriverVersion(),
            "cuda_driver_version_v2": pynvml.nvmlSystemGetCudaDriverVersion_v2(),
            "devices": [],
        }
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = text(pynvml.nvmlDeviceGetUUID(h))
            pci = pynvml.nvmlDeviceGetPciInfo(h)
            bus_id = text(pci.busId)
            m1 = pynvml.nvmlDeviceGetMemoryInfo(h)
            m2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
            compute = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
            util = pynvml.nvmlDeviceGetUtilizationRates(h)
            out["devices"].append(
                {
                    "index": pynvml.nvmlDeviceGetIndex(h),
                    "name": text(pynvml.nvmlDeviceGetName(h)),
                    "uuid": uuid,
                    "pci_bus_id": bus_id,
                    "pci_bus_id_legacy": text(pci.busIdLegacy),
                    "same_handle_by_uuid": pynvml.nvmlDeviceGetIndex(
                        pynvml.nvmlDeviceGetHandleByUUID(uuid)
                    )
                    == i,
                    "same_handle_by_pci": pynvml.nvmlDeviceGetIndex(
                        pynvml.nvmlDeviceGetHandleByPciBusId(bus_id)
                    )
                    == i,
                    "memory_v1": {"total": m1.total, "used": m1.used, "free": m1.free},
                    "memory_v2": {
                        "version": m2.version,
                        "total": m2.total,
                        "reserved": m2.reserved,
                        "used": m2.used,
                        "free": m2.free,
                    },
                    "processes": procs(compute),
                    "processes_v2": procs(pynvml.nvmlDeviceGetComputeRunningProcesses_v2(h)),
                    "graphics_processes": procs(pynvml.nvmlDeviceGetGraphicsRunningProcesses(h)),
                    "process_names": {
                        str(p.pid): text(pynvml.nvmlSystemGetProcessName(p.pid)) for p in compute
                    },
                    "temperature": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
                    "utilization_gpu": util.gpu,
                }
            )
        print(json.dumps(out, indent=1, sort_keys=True))
    finally:
        pynvml.nvmlShutdown()


if __name__ == "__main__":
    main()
