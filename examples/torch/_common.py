"""Shared by the five failure scripts: phase markers for `vramdoc run` and sizes relative to
the device, so one script reproduces on a 16 GiB card and a 141 GiB one alike.

Plain PyTorch: nothing here knows it runs on vramdoc's simulated driver.
"""
import os
import time

import torch


def mark(text):
    """Append a phase marker for `vramdoc run` (VRAMDOC_MARKERS); a no-op elsewhere."""
    path = os.environ.get("VRAMDOC_MARKERS")
    if path:
        with open(path, "a") as f:
            f.write(text + "\n")


def compute(seconds=0.3):
    """The time a phase's kernels take on a GPU. On vramdoc's simulated driver kernels are
    no-ops, so a phase would otherwise last microseconds; this keeps phases as long as a
    short real one, for the sampler and the reader of the timeline."""
    torch.cuda.synchronize()
    time.sleep(seconds)


def free_bytes(device):
    """Free memory on `device` as the driver reports it (cudaMemGetInfo)."""
    free, _total = torch.cuda.mem_get_info(device)
    return free


def total_bytes(device):
    return torch.cuda.get_device_properties(device).total_memory


def weights(n_bytes, device):
    """A model's parameters of about `n_bytes` in fp16, loaded onto `device` as
    `model.to(device)` does: made on the host, then copied."""
    layer = 64 * 1024 * 1024  # bytes per layer
    layers = max(1, n_bytes // layer)
    model = torch.nn.ParameterList(
        torch.nn.Parameter(torch.empty(layer // 2, dtype=torch.float16), requires_grad=False)
        for _ in range(layers)
    )
    return model.to(device)
