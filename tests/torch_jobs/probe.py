"""Unmodified PyTorch jobs for tests/it/torch.rs, run on the simulated box. Each mode prints
one JSON line per step and, where the test reads the box between steps, waits for a line on
standard input (the test's go-ahead): no step depends on a sleep.

    python probe.py init        # is_available / device_count, then wait
    python probe.py sizes       # tensors of several sizes on cuda:1, reserved, then wait
    python probe.py expandable  # (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) grow, wait, shrink, wait
    python probe.py oom DIR     # allocate until PyTorch's own OOM; DIR/snap.pickle from _dump_snapshot
    python probe.py fill        # allocate until PyTorch's OOM, which ends the script
    python probe.py train       # nn.Linear forward and backward (cuBLAS), a convolution (cuDNN),
                                # 3 steps of an MLP with Adam, then wait
"""
import json
import sys

import torch


def say(**kv):
    print(json.dumps(kv), flush=True)


def wait():
    sys.stdin.readline()


mode = sys.argv[1]
if mode == "init":
    say(available=torch.cuda.is_available(), count=torch.cuda.device_count())
    wait()
elif mode == "sizes":
    keep = [
        torch.empty(n, dtype=torch.uint8, device="cuda:1")
        for n in (1000, 3 * 2**20, 7 * 2**20 + 5, 300 * 2**20, 2**30)
    ]
    say(reserved=torch.cuda.memory_reserved(1), allocated=torch.cuda.memory_allocated(1))
    wait()
elif mode == "expandable":
    a = torch.empty(2**30 + 12345, dtype=torch.uint8, device="cuda:0")
    say(reserved=torch.cuda.memory_reserved(0))
    wait()
    del a
    torch.cuda.empty_cache()
    say(reserved=torch.cuda.memory_reserved(0))
    wait()
elif mode == "oom":
    torch.cuda.memory._record_memory_history(max_entries=10000)
    keep = []
    try:
        while True:
            keep.append(torch.empty(8 * 2**30, dtype=torch.uint8, device="cuda:0"))
    except torch.OutOfMemoryError as e:
        torch.cuda.memory._dump_snapshot(sys.argv[2] + "/snap.pickle")
        free, total = torch.cuda.mem_get_info(0)
        say(message=str(e), free=free, total=total, held=len(keep))
elif mode == "fill":
    keep = []
    while True:
        keep.append(torch.empty(8 * 2**30, dtype=torch.uint8, device="cuda:0"))
elif mode == "train":
    dev = torch.device("cuda:0")
    lin = torch.nn.Linear(256, 128).to(dev)
    x = torch.randn(64, 256, device=dev, requires_grad=True)
    y = lin(x)
    y.sum().backward()
    conv = torch.nn.Conv2d(3, 8, 3).to(dev)
    z = conv(torch.randn(2, 3, 32, 32, device=dev))
    mlp = torch.nn.Sequential(
        torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
    ).to(dev)
    opt = torch.optim.Adam(mlp.parameters())
    for _ in range(3):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(
            mlp(torch.randn(32, 512, device=dev)), torch.zeros(32, dtype=torch.long, device=dev)
        )
        loss.backward()
        opt.step()
    say(
        linear=list(y.shape),
        grad=list(lin.weight.grad.shape),
        conv=list(z.shape),
        reserved=torch.cuda.memory_reserved(0),
        allocated=torch.cuda.memory_allocated(0),
    )
    wait()
else:
    sys.exit(f"unknown mode {mode}")
