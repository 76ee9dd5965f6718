"""A job shape for the `vramdoc run` corpus (tests/it/corpus/run.rs): drives the CUDA driver
API through ctypes, so it runs over crates/simgpu's libcuda.so as it would over NVIDIA's.
Sizes are fractions of the device (`30%`) or MiB, so a shape reproduces on any card.

usage: workload.py ACTION...   where ACTION is one of
  ctx:N            create a context on CUDA ordinal N (and make it current)
  torch            from now on, frees go to a PyTorch-style caching allocator: a freed block
                   stays reserved and serves a later request that fits in it (best fit)
  raw              frees go back to the driver (no cache; NCCL's and cuBLAS's own buffers)
  alloc:SIZE[@TAG] allocate SIZE (`30%` of total, or MiB); on out-of-memory print PyTorch
                   2.x's full line (in use, allocated, reserved-unallocated) and exit 1
  free[:TAG]       free the allocations tagged TAG (all without a tag)
  empty_cache      release the cached blocks to the driver (torch.cuda.empty_cache())
  claim:U          vLLM: allocate the KV cache so the device is U x total used
  ddp:N:W:A:MS     torchrun-like: N ranks, one process per GPU; each loads W of its GPU,
                   maps every other rank's buffer over CUDA IPC (0-byte peer listings,
                   pytorch/pytorch#64130), runs steps of A activations (cached) for MS ms
  say:KEY          print a canned line on stderr (see LINES)
  fork:MS          fork a worker that sleeps MS ms holding every descriptor it inherited (the
                   CUDA context's device files too, when forked after the context was made: a
                   DataLoader worker forked after CUDA init), its output sent to /dev/null,
                   then exits; the parent goes on
  mark:TEXT        write a marker line to $VRAMDOC_MARKERS (`_` stands for a space)
  sleep:MS         sleep
  abort            abort() (SIGABRT), as PyTorch's NCCL watchdog does
  kill9            SIGKILL itself, as the kernel's OOM killer does
  exit:N           exit with status N
"""
import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import time

MIB = 1 << 20
GIB = 1 << 30

# Lines as the cited issues show them.
LINES = {
    # hiyouga/LlamaFactory#7396
    "watchdog": "[rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog "
    "caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, "
    "NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds "
    "before timing out.",
    # NVIDIA/TensorRT-LLM#1670
    "nccl-oom": "VM-0-16-ubuntu:392:494 [2] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'",
    # QwenLM/Qwen3#873
    "cublas": "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
    "`cublasCreate(handle)`",
    # google-deepmind/alphafold#1023
    "jax-oom": "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while "
    "trying to allocate 7406166528 bytes.",
    # vllm-project/vllm#34076
    "vllm-kv": "(EngineCore_DP0 pid=1094) ValueError: To serve at least one request with the "
    "models's max seq len (262144), (24.0 GiB KV cache is needed, which is larger than the "
    "available KV cache memory (3.18 GiB). Based on the available memory, the estimated maximum "
    "model length is 34736.",
    # pytorch/pytorch#8976: a DataLoader worker killed by the host's OOM killer.
    "dataloader-killed": "RuntimeError: DataLoader worker (pid 1817) is killed by signal: "
    "Killed. ",
    # A JVM beside the job: never a GPU failure.
    "java": 'Exception in thread "main" java.lang.OutOfMemoryError: Java heap space',
}

cu = ctypes.CDLL("libcuda.so")


class Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


cu.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), Handle, ctypes.c_uint]


def check(r, what):
    if r != 0:
        sys.stderr.write(f"RuntimeError: CUDA error {r} in {what}\n")
        sys.exit(3)


def mem_info():
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    check(cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
    return free.value, total.value


class Job:
    def __init__(self):
        self.current = None
        self.ctx_bytes = 0
        self.live = {}  # tag -> [(ptr, size)]
        self.cache = []  # (size, ptr) reserved but unallocated
        self.caching = False

    def ctx(self, ordinal):
        dev = ctypes.c_int()
        check(cu.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
        ctx = ctypes.c_void_p()
        check(cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
        self.current = ordinal
        return ctx

    def size(self, spec):
        if spec.endswith("%"):
            return int(float(spec[:-1]) / 100 * mem_info()[1])
        return int(float(spec) * MIB)

    def reserved(self):
        live = sum(s for v in self.live.values() for _, s in v)
        return live, sum(s for s, _ in self.cache)

    def oom(self, size):
        free, total = mem_info()
        live, cached = self.reserved()
        in_use = live + cached + 500 * MIB
        sys.stderr.write(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            f"{size / GIB:.2f} GiB. GPU {self.current} has a total capacity of "
            f"{total / GIB:.2f} GiB of which {free / MIB:.2f} MiB is free. Including "
            f"non-PyTorch memory, this process has {in_use / GIB:.2f} GiB memory in use. Of "
            f"the allocated memory {live / GIB:.2f} GiB is allocated by PyTorch, and "
            f"{cached / MIB:.2f} MiB is reserved by PyTorch but unallocated. If reserved but "
            "unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
        )
        sys.stderr.flush()
        sys.exit(1)

    def alloc(self, size, tag=""):
        if self.caching:
            fits = [c for c in self.cache if c[0] >= size]
            if fits:
                best = min(fits)
                self.cache.remove(best)
                self.live.setdefault(tag, []).append((best[1], best[0]))
                return
        ptr = ctypes.c_uint64()
        r = cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size))
        if r == 2:  # CUDA_ERROR_OUT_OF_MEMORY
            self.oom(size)
        check(r, "cuMemAlloc")
        self.live.setdefault(tag, []).append((ptr, size))

    def free(self, tag=""):
        for ptr, size in self.live.pop(tag, []):
            if self.caching:
                self.cache.append((size, ptr))
            else:
                check(cu.cuMemFree_v2(ptr), "cuMemFree")

    def empty_cache(self):
        for _, ptr in self.cache:
            check(cu.cuMemFree_v2(ptr), "cuMemFree")
        self.cache = []


def rank_main(rank, world, weights, act, ms, share):
    """One DDP rank: its GPU, its weights, every peer's buffer mapped, steady steps."""
    job = Job()
    job.ctx(rank)
    job.caching = True
    job.alloc(job.size(weights), "weights")
    buf = ctypes.c_uint64()
    check(cu.cuMemAlloc_v2(ctypes.byref(buf), ctypes.c_size_t(64 * MIB)), "cuMemAlloc")
    h = Handle()
    check(cu.cuIpcGetMemHandle(ctypes.byref(h), buf), "cuIpcGetMemHandle")
    with open(os.path.join(share, f"h{rank}.tmp"), "wb") as f:
        f.write(bytes(h.reserved))
    os.rename(os.path.join(share, f"h{rank}.tmp"), os.path.join(share, f"h{rank}"))
    for peer in range(world):
        if peer == rank:
            continue
        path = os.path.join(share, f"h{peer}")
        while not os.path.exists(path):
            time.sleep(0.01)
        ph = Handle()
        ph.reserved = open(path, "rb").read()
        p = ctypes.c_uint64()
        check(cu.cuIpcOpenMemHandle_v2(ctypes.byref(p), ph, 1), "cuIpcOpenMemHandle")
    end = time.time() + ms / 1000
    while time.time() < end:
        job.alloc(job.size(act), "act")
        time.sleep(0.05)
        job.free("act")
        time.sleep(0.05)


def ddp(arg):
    world, weights, act, ms = arg.split(":")
    # Removed when the ranks are done: a test leaves nothing in the temp dir (issue 39).
    with tempfile.TemporaryDirectory(prefix="ddp") as share:
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "rank", str(r), world, weights, act, ms, share]
            )
            for r in range(int(world))
        ]
        codes = [p.wait() for p in procs]
    if any(codes):
        sys.exit(f"ranks exited {codes}")


def main(argv):
    if argv and argv[0] == "rank":
        check(cu.cuInit(0), "cuInit")
        r, world, weights, act, ms, share = argv[1:]
        rank_main(int(r), int(world), weights, act, int(ms), share)
        return
    check(cu.cuInit(0), "cuInit")
    job = Job()
    for action in argv:
        verb, _, arg = action.partition(":")
        if verb == "ctx":
            job.ctx(int(arg))
        elif verb == "torch":
            job.caching = True
        elif verb == "raw":
            job.caching = False
        elif verb == "alloc":
            spec, _, tag = arg.partition("@")
            job.alloc(job.size(spec), tag)
        elif verb == "free":
            job.free(arg)
        elif verb == "empty_cache":
            job.empty_cache()
        elif verb == "claim":
            free, total = mem_info()
            want = int(float(arg) * total) - (total - free)
            if want > 0:
                job.alloc(want, "kv")
        elif verb == "ddp":
            ddp(arg)
        elif verb == "say":
            sys.stderr.write(LINES[arg] + "\n")
            sys.stderr.flush()
        elif verb == "fork":
            if os.fork() == 0:
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
        elif verb == "abort":
            os.abort()
        elif verb == "kill9":
            os.kill(os.getpid(), signal.SIGKILL)
        elif verb == "exit":
            sys.exit(int(arg))
        else:
            sys.exit(f"unknown action {action}")


main(sys.argv[1:])
