"""FAILURES.md 2, multi-size OOM (OneDiff): each new input size compiles a graph and keeps a
shape-specific workspace from the tuning warm-up; memory of earlier sizes stays, and the
loop dies with CUDA out of memory although the largest size alone fits.

    python multi_size_oom.py          # sizes 1024, 1152, 1360, 1536: out of memory
    python multi_size_oom.py --fixed  # largest first: its workspace serves the smaller ones
"""
import sys

import torch

from _common import compute, free_bytes, mark, total_bytes, weights

fixed = "--fixed" in sys.argv
device = torch.device("cuda:0")
sizes = [1024, 1152, 1360, 1536]
if fixed:
    sizes = sorted(sizes, reverse=True)

pipeline = weights(total_bytes(device) // 20, device)
compute()
mark("pipeline loaded")

# Bytes per pixel, scaled to this device: the largest size's workspace and activation take
# 60 % of free memory, so it fits alone, while the workspaces of all four sizes do not.
per_pixel = int(free_bytes(device) * 0.6 / (2 * max(sizes) ** 2))

workspaces = {}  # the tuning warm-up's workspaces, kept per input shape


def workspace(size):
    need = per_pixel * size * size
    for ws in workspaces.values():
        if ws.numel() >= need:
            return ws  # an existing workspace is large enough: reused
    ws = torch.empty(need, dtype=torch.uint8, device=device)
    workspaces[size] = ws
    return ws


for size in sizes:
    mark(f"size {size}x{size}")
    ws = workspace(size)
    activation = torch.empty(per_pixel * size * size, dtype=torch.uint8, device=device)
    activation.fill_(1)
    compute()
    del activation
    print(f"{size}x{size}: reserved {torch.cuda.memory_reserved(device) / 2**30:.2f} GiB", flush=True)
    torch.cuda.empty_cache()  # does not help: the workspaces are still referenced
print("all sizes rendered")
