#!/usr/bin/env python3
"""Regenerate kernels/vramdoc.ptx from kernels/vramdoc.cu with NVIDIA's NVRTC.

NVRTC comes from PyPI (nvidia-cuda-nvrtc-cu12, pinned to the CUDA 12.0 release), installed into
kernels/.nvrtc/ on first use; no GPU, no CUDA toolkit and no nvcc are needed. NVRTC 12.0 emits
PTX ISA 8.0, which every CUDA 12 driver (>= 525) can JIT; the target is compute_52, so any GPU
from Maxwell on runs it.

Usage: python3 kernels/build_ptx.py [--check] [--ptxas]
  --check  compile and compare with the committed PTX; exit 1 when they differ.
  --ptxas  also assemble the PTX with ptxas 12.0 (nvidia-cuda-nvcc-cu12 from PyPI, installed
           into kernels/.nvcc/) for every architecture in PTXAS_ARCHS, as a driver's JIT would.
"""
import ctypes
import glob
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "vramdoc.cu")
OUT = os.path.join(HERE, "vramdoc.ptx")
PKG = "nvidia-cuda-nvrtc-cu12==12.0.76"
PREFIX = os.path.join(HERE, ".nvrtc")
OPTIONS = [b"--gpu-architecture=compute_52", b"--std=c++11"]
NVCC_PKG = "nvidia-cuda-nvcc-cu12==12.0.76"
NVCC_PREFIX = os.path.join(HERE, ".nvcc")
PTXAS_ARCHS = ["sm_52", "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90"]


def nvrtc_library():
    libs = glob.glob(os.path.join(PREFIX, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*"))
    if not libs:
        subprocess.check_call(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
             "--target", PREFIX, PKG])
        libs = glob.glob(os.path.join(PREFIX, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so*"))
    # libnvrtc.so.12, not the builtins library.
    libs = [l for l in libs if "builtins" not in l]
    if not libs:
        sys.exit(f"build_ptx.py: libnvrtc.so not found under {PREFIX} after installing {PKG}")
    return ctypes.CDLL(sorted(libs)[0])


def check(nvrtc, rc, what, prog=None):
    if rc == 0:
        return
    nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
    msg = nvrtc.nvrtcGetErrorString(rc).decode()
    log = ""
    if prog is not None:
        size = ctypes.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        nvrtc.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
    sys.exit(f"build_ptx.py: {what} failed: {msg}\n{log}")


def compile_ptx():
    nvrtc = nvrtc_library()
    with open(SRC, "rb") as f:
        source = f.read()
    prog = ctypes.c_void_p()
    check(nvrtc, nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source, b"vramdoc.cu", 0, None,
                                          None), "nvrtcCreateProgram")
    opts = (ctypes.c_char_p * len(OPTIONS))(*OPTIONS)
    check(nvrtc, nvrtc.nvrtcCompileProgram(prog, len(OPTIONS), opts), "nvrtcCompileProgram",
          prog)
    size = ctypes.c_size_t()
    check(nvrtc, nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
    buf = ctypes.create_string_buffer(size.value)
    check(nvrtc, nvrtc.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    major, minor = ctypes.c_int(), ctypes.c_int()
    nvrtc.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return buf.value.decode(), f"{major.value}.{minor.value}"


def ptxas_check():
    ptxas = os.path.join(NVCC_PREFIX, "nvidia", "cuda_nvcc", "bin", "ptxas")
    if not os.path.exists(ptxas):
        subprocess.check_call(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
             "--target", NVCC_PREFIX, NVCC_PKG])
    for arch in PTXAS_ARCHS:
        cubin = os.path.join(NVCC_PREFIX, f"vramdoc_{arch}.cubin")
        subprocess.check_call([ptxas, f"-arch={arch}", OUT, "-o", cubin])
        print(f"ptxas -arch={arch}: ok ({os.path.getsize(cubin)} bytes)")


def main():
    args = sys.argv[1:]
    ptx, version = compile_ptx()
    if "--check" in args:
        with open(OUT) as f:
            same = f.read() == ptx
        print(f"vramdoc.ptx {'matches' if same else 'DIFFERS from'} NVRTC {version} output")
        if not same:
            sys.exit(1)
    else:
        with open(OUT, "w") as f:
            f.write(ptx)
        print(f"wrote {OUT} ({len(ptx)} bytes, NVRTC {version}, {OPTIONS[0].decode()})")
    if "--ptxas" in args:
        ptxas_check()


if __name__ == "__main__":
    main()
