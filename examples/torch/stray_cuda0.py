"""FAILURES.md 1, stray cuda:0 allocation (OneDiff/OneFlow): the model lives on cuda:1, but a
warm-up runs on the default device and makes a CUDA context on GPU 0 as well.

    python stray_cuda0.py          # the bug: a context on GPU 0 too
    python stray_cuda0.py --fixed  # the warm-up runs on the model's device
"""
import sys

import torch

from _common import mark, total_bytes, weights

fixed = "--fixed" in sys.argv
device = torch.device("cuda:1")
model = weights(total_bytes(device) // 10, device)
mark("model loaded")

# The tuning warm-up: on the default device (cuda:0) in the bug, on the model's in the fix.
warmup_device = device if fixed else torch.device("cuda")
probe = torch.zeros(1024, device=warmup_device)
torch.cuda.synchronize(warmup_device)
mark("warm-up done")

x = torch.ones(1024, device=device)
y = x * 2
mark("inference done")
print("reserved on cuda:1:", torch.cuda.memory_reserved(1))
