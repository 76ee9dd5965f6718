"""A PyTorch-like job for `vramdoc run --torch-memory` tests: holds GPU memory through the
simulated libcuda.so (so NVML sees the process), imports the stand-in `torch`, reports what
the injection did, then runs out of memory the way PyTorch does.

usage: torch_job.py HOLD_MIB [oom]
"""
import ctypes
import os
import sys

cu = ctypes.CDLL("libcuda.so")
assert cu.cuInit(0) == 0
dev = ctypes.c_int()
assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
ctx = ctypes.c_void_p()
assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
ptr = ctypes.c_uint64()
assert cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(int(sys.argv[1]) << 20)) == 0


def wait_until_seen(path, need, limit_s=60.0):
    """Wait until vramdoc's `--samples` stream shows this process holding `need` bytes."""
    import json
    import time

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                for line in f:
                    try:
                        v = json.loads(line)
                    except ValueError:
                        continue
                    if v.get("type") == "process" and v.get("pid") == os.getpid() \
                            and (v.get("used") or 0) >= need:
                        return
        except OSError:
            pass
        time.sleep(0.05)
    sys.exit("vramdoc never listed this process holding its memory")


if os.environ.get("TORCH_JOB_WAIT_SAMPLES"):
    wait_until_seen(os.environ["TORCH_JOB_WAIT_SAMPLES"], int(sys.argv[1]) << 20)

import torch  # noqa: E402

print("recording:", torch.cuda.memory.recording, flush=True)
print("dump dir set:", "VRAMDOC_TORCH_MEMORY_DIR" in os.environ, flush=True)
print("chained:", os.environ.get("CHAINED_SITECUSTOMIZE", "no"), flush=True)
if len(sys.argv) > 2 and sys.argv[2] == "oom":
    torch.cuda._fake_oom(2 << 30)
