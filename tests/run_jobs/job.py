"""A GPU job for `vramdoc run` tests: drives the CUDA driver API through ctypes, so it runs
over crates/simgpu's libcuda.so exactly as it would over NVIDIA's (LD_LIBRARY_PATH decides).

usage: job.py ACTION...   where ACTION is one of
  ctx:N          create a context on CUDA ordinal N (and make it current)
  alloc:SIZE_MIB allocate on the current context; on out-of-memory print PyTorch 2.x's line
                 and exit 1
  free           free every allocation
  fork:MS        fork a child that sleeps MS ms holding every descriptor it inherited (the
                 CUDA context's device files too: a DataLoader worker forked after CUDA was
                 initialised), its output sent to /dev/null, then exits; the parent goes on
  forkout:MS     the same, but the child keeps the job's output open (a background process
                 holding the pipes vramdoc reads)
  mark:TEXT      write a marker line to $VRAMDOC_MARKERS (`_` stands for a space)
  sleep:MS       sleep
  exit:N         exit with status N
"""
import ctypes
import os
import sys
import time

MIB = 1 << 20
cu = ctypes.CDLL("libcuda.so")


def check(r, what):
    if r != 0:
        sys.stderr.write(f"RuntimeError: CUDA error {r} in {what}\n")
        sys.exit(3)


check(cu.cuInit(0), "cuInit")
current = None
allocs = []
for action in sys.argv[1:]:
    verb, _, arg = action.partition(":")
    if verb == "ctx":
        dev = ctypes.c_int()
        check(cu.cuDeviceGet(ctypes.byref(dev), int(arg)), "cuDeviceGet")
        ctx = ctypes.c_void_p()
        check(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
        current = int(arg)
    elif verb == "alloc":
        size = int(arg) * MIB
        ptr = ctypes.c_uint64()
        r = cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size))
        if r == 2:  # CUDA_ERROR_OUT_OF_MEMORY
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
            sys.stderr.write(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                f"{size / (1 << 30):.2f} GiB. GPU {current} has a total capacity of "
                f"{total.value / (1 << 30):.2f} GiB of which {free.value / MIB:.2f} MiB is "
                "free.\n"
            )
            sys.stderr.flush()
            sys.exit(1)
        check(r, "cuMemAlloc")
        allocs.append(ptr)
    elif verb == "free":
        for p in allocs:
            check(cu.cuMemFree_v2(p), "cuMemFree")
        allocs = []
    elif verb in ("fork", "forkout"):
        if os.fork() == 0:
            if verb == "fork":
                # Off the job's output: a background process holding it keeps it open for
                # whoever reads vramdoc's to the end (docs/run.md).
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, 1)
                os.dup2(null, 2)
            time.sleep(int(arg) / 1000)
            os._exit(0)
    elif verb == "mark":
        with open(os.environ["VRAMDOC_MARKERS"], "a") as f:
            f.write(arg.replace("_", " ") + "\n")
    elif verb == "sleep":
        time.sleep(int(arg) / 1000)
    elif verb == "exit":
        sys.exit(int(arg))
    else:
        sys.exit(f"unknown action {action}")
