"""FAILURES.md 5, over-committed utilisation (WeClone on vLLM): an engine claims
`gpu_memory_utilization x total` up front for weights and KV cache; the dynamic work of
generation (activations, CUDA-graph capture) needs memory outside that budget, which is not
there.

    python overcommit.py          # gpu_memory_utilization=0.9: out of memory during generation
    python overcommit.py --fixed  # gpu_memory_utilization=0.5: generation fits
"""
import sys

import torch

from _common import compute, mark, total_bytes, weights

fixed = "--fixed" in sys.argv
utilization = 0.5 if fixed else 0.9
device = torch.device("cuda:0")
total = total_bytes(device)

weights_ = weights(total * 33 // 100, device)
compute()
mark("weights loaded")
# The engine's up-front claim: the KV cache fills the budget left after the weights.
budget = int(utilization * total) - torch.cuda.memory_reserved(device)
kv_cache = torch.empty(max(budget, 0), dtype=torch.uint8, device=device)
compute()
mark(f"kv cache claimed at gpu_memory_utilization={utilization}")

for step in range(8):
    mark(f"generate batch {step}")
    # Activations of one batch of prompts: about 12 % of the device, outside the budget.
    activations = torch.empty(total * 12 // 100, dtype=torch.uint8, device=device)
    activations.fill_(0)
    compute(0.1)
    del activations
print("generation done")
