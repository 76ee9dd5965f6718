#!/usr/bin/env python3
"""Workloads of the node-shape corpus (tests/it/corpus/scan.rs).

Each runs on the simulated box through its C ABI (ctypes over libcuda.so.1, found through
LD_LIBRARY_PATH), calling the driver as the real program it stands for would: not
vramdoc's own worker. Each prints one line `ready` (after a JSON line of what it did) once
its state is in place, then holds it until its stdin closes.

  rank DEV SIZE          one DDP/TP rank: SIZE bytes on DEV, exported with cuIpcGetMemHandle;
                         opens every peer's handle read from stdin (NCCL's P2P transport)
  ddp N SIZE             N ranks (devices 0..N-1) wired to each other, as torchrun + NCCL
  engine DEV FRACTION    an inference engine claiming FRACTION x total at start (vLLM's
                         gpu_memory_utilization: the budget includes what is already used)
  monitor NAME           a daemon holding every GPU device file open without a context
                         (nvidia-persistenced, DCGM's nv-hostengine, a device plugin)
  managed DEV SIZE       a RAPIDS/RMM job on managed memory (rmm managed_memory_resource:
                         cudaMallocManaged): SIZE bytes from cuMemAllocManaged on DEV, resident
                         there, counted in the GPU's used but in no process's usage
"""
import ctypes
import json
import os
import subprocess
import sys


class Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


def driver():
    cu = ctypes.CDLL("libcuda.so.1")
    cu.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), Handle, ctypes.c_uint]
    assert cu.cuInit(0) == 0
    return cu


def context(cu, dev):
    d = ctypes.c_int()
    assert cu.cuDeviceGet(ctypes.byref(d), dev) == 0
    ctx = ctypes.c_void_p()
    assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), d) == 0
    assert cu.cuCtxSetCurrent(ctx) == 0


def alloc(cu, size):
    p = ctypes.c_uint64()
    rc = cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size))
    if rc != 0:
        sys.exit(f"cuMemAlloc_v2({size}) failed: {rc}")
    return p


def ready(what):
    print(json.dumps(what), flush=True)
    print("ready", flush=True)


def hold():
    sys.stdin.read()


def rank(dev, size):
    cu = driver()
    context(cu, dev)
    p = alloc(cu, size)
    h = Handle()
    assert cu.cuIpcGetMemHandle(ctypes.byref(h), p) == 0
    print(bytes(h.reserved).hex(), flush=True)
    peers = sys.stdin.readline().split()
    opened = []
    for hexed in peers:
        ph = Handle()
        ph.reserved = (ctypes.c_ubyte * 64)(*bytes.fromhex(hexed))
        q = ctypes.c_uint64()
        # CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, as NCCL opens its peers' buffers.
        assert cu.cuIpcOpenMemHandle_v2(ctypes.byref(q), ph, 1) == 0
        opened.append(q)
    ready({"pid": os.getpid(), "device": dev, "peers": len(opened)})
    hold()


def ddp(n, size):
    me = os.path.abspath(__file__)
    ranks = [
        subprocess.Popen(
            [sys.executable, me, "rank", str(r), str(size)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for r in range(n)
    ]
    handles = [r.stdout.readline().strip() for r in ranks]
    for i, r in enumerate(ranks):
        r.stdin.write(" ".join(h for j, h in enumerate(handles) if j != i) + "\n")
        r.stdin.flush()
    pids = []
    for r in ranks:
        pids.append(json.loads(r.stdout.readline())["pid"])
        assert r.stdout.readline().strip() == "ready"
    ready({"pid": os.getpid(), "ranks": pids})
    hold()
    for r in ranks:
        r.stdin.close()
    for r in ranks:
        r.wait()


def engine(dev, fraction):
    cu = driver()
    context(cu, dev)
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    assert cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)) == 0
    budget = int(fraction * total.value)
    claim = budget - (total.value - free.value)
    alloc(cu, claim)
    ready({"pid": os.getpid(), "claimed": claim})
    hold()


def managed(dev, size):
    cu = driver()
    context(cu, dev)
    p = ctypes.c_uint64()
    # CU_MEM_ATTACH_GLOBAL = 1
    rc = cu.cuMemAllocManaged(ctypes.byref(p), ctypes.c_size_t(size), ctypes.c_uint(1))
    if rc != 0:
        sys.exit(f"cuMemAllocManaged({size}) failed: {rc}")
    ready({"pid": os.getpid(), "managed": size})
    hold()
    assert cu.cuMemFree_v2(p) == 0


def monitor(name):
    libc = ctypes.CDLL(None)
    # PR_SET_NAME: the kernel's 15-byte comm, as the real daemon's.
    libc.prctl(15, name.encode()[:15], 0, 0, 0)
    box = os.environ["VRAMDOC_SIM_DIR"]
    dev = os.path.join(box, "dev")
    names = [f for f in sorted(os.listdir(dev)) if f.startswith("nvidia")]
    files = [open(os.path.join(dev, f), "rb") for f in names if os.path.isfile(os.path.join(dev, f))]
    ready({"pid": os.getpid(), "open": len(files)})
    hold()


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "rank":
        rank(int(args[0]), int(args[1]))
    elif cmd == "ddp":
        ddp(int(args[0]), int(args[1]))
    elif cmd == "engine":
        engine(int(args[0]), float(args[1]))
    elif cmd == "monitor":
        monitor(args[0])
    elif cmd == "managed":
        managed(int(args[0]), int(args[1]))
    else:
        sys.exit(f"unknown workload {cmd}")


if __name__ == "__main__":
    main()
