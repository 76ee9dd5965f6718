#!/usr/bin/env python3
"""Probe (real GPU only): which driver files a CUDA process and its forked child hold and map.

Reads /proc/self/{fd,maps,smaps} after cuInit, after cuCtxCreate + cuMemAlloc, and in a child
forked after that, right after the fork and again once the parent has exited. Prints one line
per step: descriptors and mappings of each /dev/nvidia* file, and how many of those mappings
carry VmFlags `dc` (not copied on fork: MADV_DONTFORK / VM_DONTCOPY).

Used for docs/simulator.md ("Who holds memory through the device files"). Not run by tests.
Run: python3 scripts/probe-devfiles.py > log 2>&1; sleep 8; cat log
"""
import collections
import ctypes
import os
import subprocess
import sys
import time


def fds():
    out = collections.Counter()
    for f in os.listdir("/proc/self/fd"):
        try:
            t = os.readlink("/proc/self/fd/" + f)
        except OSError:
            continue
        if t.startswith("/dev/nvidia"):
            out[t] += 1
    return dict(sorted(out.items()))


def maps():
    count, size, dc = collections.Counter(), collections.Counter(), collections.Counter()
    path = None
    with open("/proc/self/smaps") as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and len(parts) >= 5 and ":" in parts[3]:
                path = parts[5] if len(parts) >= 6 and parts[5].startswith("/dev/nvidia") else None
                if path:
                    a, b = parts[0].split("-")
                    count[path] += 1
                    size[path] += int(b, 16) - int(a, 16)
            elif parts[0] == "VmFlags:" and path and "dc" in parts[1:]:
                dc[path] += 1
    return {p: "%d maps %d KiB dc=%d" % (count[p], size[p] // 1024, dc[p]) for p in sorted(count)}


def report(step):
    print("%s pid=%d fds=%s maps=%s" % (step, os.getpid(), fds(), maps()), flush=True)


def check(r, what):
    if r != 0:
        print("%s failed: %d" % (what, r), flush=True)
        sys.exit(1)


cuda = ctypes.CDLL("libcuda.so.1")
check(cuda.cuInit(0), "cuInit")
report("after-cuInit")
dev = ctypes.c_int()
check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ctx = ctypes.c_void_p()
check(cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
ptr = ctypes.c_uint64()
check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), 1 << 30), "cuMemAlloc")
managed = ctypes.c_uint64()
check(cuda.cuMemAllocManaged(ctypes.byref(managed), 256 << 20, 1), "cuMemAllocManaged")
report("parent-ctx-1GiB-managed256MiB")
parent = os.getpid()
child = os.fork()
if child == 0:
    report("child-after-fork")
    for _ in range(100):
        if os.getppid() != parent:
            break
        time.sleep(0.1)
    time.sleep(1)
    report("child-after-parent-exit")
    smi = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
        capture_output=True, text=True)
    print("child-after-parent-exit nvidia-smi apps: %r" % smi.stdout.strip(), flush=True)
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader", "-i", "0"],
        capture_output=True, text=True)
    print("child-after-parent-exit used: %r" % smi.stdout.strip(), flush=True)
    os._exit(0)
time.sleep(1)
report("parent-after-fork")
os._exit(0)
