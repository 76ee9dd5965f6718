"""FAILURES.md 4, double model load (CogVLM composite demo): the demo loads a full copy of the
model on its GPU, and `device_map="auto"` then splits one more copy across the GPUs: the
model is in memory twice (per device, a shard plus a full copy).

    python double_load.py          # a full copy, then an auto-split copy
    python double_load.py --fixed  # one loading path: the auto split only
"""
import sys

import torch

from _common import compute, mark, total_bytes, weights

fixed = "--fixed" in sys.argv
gpus = [torch.device("cuda:0"), torch.device("cuda:1")]
model_bytes = total_bytes(gpus[0]) * 4 // 10

copy = None
if not fixed:
    # The demo's own path: a full copy on its GPU.
    copy = weights(model_bytes, gpus[0])
    compute()
    mark(f"full copy on {gpus[0]}")
# device_map="auto": half the layers on each GPU.
shards = [weights(model_bytes // len(gpus), g) for g in gpus]
compute()
mark("auto device map loaded")
for g in gpus:
    print(g, "reserved", torch.cuda.memory_reserved(g))
