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

import torch  # noqa: E402

print("recording:", torch.cuda.memory.recording, flush=True)
print("dump dir set:", "VRAMDOC_TORCH_MEMORY_DIR" in os.environ, flush=True)
print("chained:", os.environ.get("CHAINED_SITECUSTOMIZE", "no"), flush=True)
if len(sys.argv) > 2 and sys.argv[2] == "oom":
    torch.cuda._fake_oom(2 << 30)
