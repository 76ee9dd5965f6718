"""Write PyTorch memory snapshots for vramdoc's tests, without PyTorch or a GPU.

The dict follows torch.cuda.memory._snapshot() (torch/cuda/memory.py, the Snapshot /
Segment / Block / Frame / TraceEntry TypedDicts in `_snapshot`'s docstring) and is written
with pickle.dump, as `_dump_snapshot` does. Frame dicts are shared between tracebacks as
PyTorch's `py_symbolize` shares them, so pickle memoizes them as a real dump does.

Field sets ("--format"):
  2.0  blocks carry `history: [{addr, real_size, frames}]` (read by torch/cuda/_memory_viz.py
       `_block_extra_legacy`); no `address`/`requested_size`/`frames` on blocks.
  2.1  blocks carry `address`, `size`, `requested_size`, `state`, `frames`; segments carry
       `device`, `address`, `total_size`, `stream`, `segment_type`, `allocated_size`,
       `active_size`, `requested_size`, `blocks`.
  2.6  2.1 plus `segment_pool_id`, `is_expandable`, segment `frames`, `time_us` on trace
       entries and the snapshot's `allocator_settings`.

usage: gen_snapshot.py CASE OUT.pickle [--format 2.0|2.1|2.6] [--protocol N]
CASE: fragmentation | live | other-stream | private-pool | growth | clean
"""
import pickle
import sys

MIB = 1 << 20
GIB = 1 << 30
SIDE = 0x7F00_0000_0000  # a second stream's handle

_frames = {}


def frame(filename, line, name):
    key = (filename, line, name)
    if key not in _frames:
        _frames[key] = {"filename": filename, "line": line, "name": name}
    return _frames[key]


TORCH_LINEAR = ("/opt/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", 116, "forward")
TORCH_EMPTY = ("/opt/venv/lib/python3.11/site-packages/torch/_tensor.py", 1512, "__torch_function__")


def stack(*user):
    return [frame(*TORCH_LINEAR)] + [frame(*f) for f in user]


SITES = {
    "forward": stack(("train.py", 88, "forward"), ("train.py", 140, "train_step")),
    "optimizer": stack(("train.py", 152, "step"), ("train.py", 170, "main")),
    "cache": stack(("train.py", 61, "remember"), ("train.py", 140, "train_step")),
    "loader": stack(("data.py", 33, "collate"), ("train.py", 120, "main")),
}


class Snap:
    def __init__(self, fmt):
        self.fmt = fmt
        self.segments = []
        self.trace = []
        self.addr = 0x7F10_0000_0000
        self.t = 1_700_000_000_000_000

    def segment(self, blocks, stream=0, pool=(0, 0), device=0, expandable=False):
        """blocks: [(size, state, site)]"""
        base = self.addr
        total = sum(b[0] for b in blocks)
        self.addr += total + 64 * MIB
        out = []
        at = base
        for size, state, site in blocks:
            frames = SITES.get(site, []) if site else []
            if self.fmt == "2.0":
                b = {"size": size, "state": state}
                if state != "inactive":
                    b["history"] = [{"addr": at, "real_size": size, "frames": frames}]
            else:
                b = {
                    "address": at,
                    "size": size,
                    "requested_size": size,
                    "state": state,
                    "frames": frames if state != "inactive" else [],
                }
            out.append(b)
            at += size
        alloc = sum(b[0] for b in blocks if b[1] == "active_allocated")
        seg = {
            "device": device,
            "address": base,
            "total_size": total,
            "stream": stream,
            "segment_type": "large" if total > MIB else "small",
            "allocated_size": alloc,
            "active_size": alloc,
            "blocks": out,
        }
        if self.fmt != "2.0":
            seg["requested_size"] = alloc
        if self.fmt == "2.6":
            seg["segment_pool_id"] = pool
            seg["is_expandable"] = expandable
            seg["frames"] = []
        self.segments.append(seg)
        return base

    def event(self, action, addr, size, stream=0, site=None, **extra):
        e = {"action": action, "addr": addr, "size": size, "stream": stream,
             "frames": SITES.get(site, []) if site else []}
        if self.fmt == "2.6":
            self.t += 1000
            e["time_us"] = self.t
        e.update(extra)
        self.trace.append(e)

    def oom(self, size, device_free, stream=0):
        e = {"action": "oom", "size": size, "stream": stream, "device_free": device_free,
             "frames": SITES["forward"]}
        if self.fmt == "2.6":
            self.t += 1000
            e["time_us"] = self.t
        self.trace.append(e)

    def dict(self, expandable=False):
        d = {"segments": self.segments, "device_traces": [self.trace]}
        if self.fmt == "2.6":
            d["allocator_settings"] = {"expandable_segments": expandable,
                                       "PYTORCH_CUDA_ALLOC_CONF": ""}
        return d


def history(s, iterations, site, size, keep=0, keep_site="cache"):
    """alloc/free pairs per iteration; `keep` bytes per iteration never freed."""
    addr = 0x7F20_0000_0000
    for i in range(iterations):
        for k in range(4):
            a = addr + (i * 8 + k) * size
            s.event("alloc", a, size, site=site)
            s.event("free_requested", a, size, site=site)
            s.event("free_completed", a, size, site=site)
        if keep:
            s.event("alloc", addr + (10**6 + i) * keep, keep, site=keep_site)


def case(name, fmt):
    s = Snap(fmt)
    if name == "fragmentation":
        # 8 segments of 20 MiB, each 12 MiB live + 8 MiB free: 64 MiB free, no block > 8 MiB.
        for _ in range(8):
            s.segment([(12 * MIB, "active_allocated", "loader"), (8 * MIB, "inactive", None)])
        s.segment([(6 * GIB, "active_allocated", "forward")])
        history(s, 12, "loader", 2 * MIB)
        s.oom(32 * MIB, 10 * MIB)
    elif name == "live":
        s.segment([(6 * GIB, "active_allocated", "forward")])
        s.segment([(512 * MIB, "active_allocated", "optimizer"), (64 * MIB, "inactive", None)])
        s.segment([(256 * MIB, "active_allocated", "loader")])
        history(s, 12, "forward", 64 * MIB)
        s.oom(2 * GIB, 200 * MIB)
    elif name == "other-stream":
        s.segment([(4 * GIB, "active_allocated", "forward")])
        s.segment([(512 * MIB, "active_allocated", "loader"), (3 * GIB, "inactive", None)], stream=SIDE)
        history(s, 12, "forward", 64 * MIB)
        s.oom(GIB, 300 * MIB)
    elif name == "private-pool":
        s.segment([(4 * GIB, "active_allocated", "forward")])
        s.segment([(2 * GIB, "inactive", None)], pool=(1, 0))
        s.oom(GIB, 100 * MIB)
    elif name == "growth":
        s.segment([(2 * GIB, "active_allocated", "forward")])
        s.segment([(3 * GIB, "active_allocated", "cache")])
        history(s, 40, "forward", 16 * MIB, keep=64 * MIB)
        s.oom(GIB, 50 * MIB)
    elif name == "clean":
        s.segment([(GIB, "active_allocated", "forward"), (GIB, "inactive", None)])
        history(s, 12, "forward", 16 * MIB)
    else:
        raise SystemExit("unknown case " + name)
    return s.dict()


def main(argv):
    fmt, proto = "2.1", 4
    args = []
    i = 0
    while i < len(argv):
        if argv[i] == "--format":
            fmt = argv[i + 1]
            i += 2
        elif argv[i] == "--protocol":
            proto = int(argv[i + 1])
            i += 2
        else:
            args.append(argv[i])
            i += 1
    name, out = args
    with open(out, "wb") as f:
        pickle.dump(case(name, fmt), f, protocol=proto)


if __name__ == "__main__":
    main(sys.argv[1:])
