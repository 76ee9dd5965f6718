"""A job with a fixed footprint, as a user's script has: GIB gibibytes of activations in
1 GiB tensors on cuda:0 (the first argument, default 20), then a matmul on them.

    python fixed_footprint.py 20
"""
import sys

import torch

gib = int(sys.argv[1]) if len(sys.argv) > 1 else 20
device = torch.device("cuda:0")
blocks = [torch.empty(1 << 30, dtype=torch.uint8, device=device) for _ in range(gib)]
a = torch.ones(512, 512, device=device)
print("fits:", gib, "GiB, reserved", torch.cuda.memory_reserved(device), (a @ a).shape)
