"""FAILURES.md 3, sharded model not released (xDiT, USP + FSDP): a model split over two GPUs is
deleted, but state of the distributed runtime keeps references to its shards on every GPU,
so the memory stays and the next model does not fit.

    python sharded_release.py          # del model; gc.collect(); empty_cache(): memory stays
    python sharded_release.py --fixed  # the runtime's state goes first, then the model
"""
import gc
import sys

import torch

from _common import mark, total_bytes, weights

fixed = "--fixed" in sys.argv
gpus = [torch.device("cuda:0"), torch.device("cuda:1")]
shard_bytes = total_bytes(gpus[0]) * 6 // 10


class ProcessGroup:
    """Stands for the process group and its communicators: it keeps the shards it saw."""

    def __init__(self):
        self.buffers = []

    def register(self, shard):
        self.buffers.append(list(shard.parameters()))

    def destroy(self):
        self.buffers.clear()


group = ProcessGroup()
model = [weights(shard_bytes, g) for g in gpus]
for part in model:
    group.register(part)
del part
mark("model loaded")

if fixed:
    group.destroy()  # torch.distributed.destroy_process_group()
del model
gc.collect()
torch.cuda.empty_cache()
mark("release model")
for g in gpus:
    print(g, "reserved after release", torch.cuda.memory_reserved(g))

# The next model: fits only if the first one really went.
try:
    nxt = [weights(shard_bytes, g) for g in gpus]
    mark("next model loaded")
    print("next model loaded")
except torch.OutOfMemoryError as e:
    print("next model:", str(e).split(".")[0], file=sys.stderr)
    raise
