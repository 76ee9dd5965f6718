"""A stand-in for the `torch` package, for `vramdoc run --torch-memory` tests without
PyTorch or a GPU. It mimics the APIs the injected sitecustomize calls, with PyTorch's
signatures (torch/cuda/memory.py `_record_memory_history`, `_dump_snapshot`;
`torch._C._cuda_attach_out_of_memory_observer`), and writes a snapshot in PyTorch's format
(tests/explain/gen_snapshot.py) when the job "runs out of memory".
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import gen_snapshot  # noqa: E402

sys.path.pop(0)


class OutOfMemoryError(RuntimeError):
    pass


OutOfMemoryError.__module__ = "torch"


class _C:
    observers = []

    @staticmethod
    def _cuda_attach_out_of_memory_observer(fn):
        _C.observers.append(fn)


class _Memory:
    recording = None  # the arguments _record_memory_history was called with

    @staticmethod
    def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
                               device=None, clear_history=False, compile_context=False,
                               global_record_annotations=False, skip_actions=None):
        _Memory.recording = {"enabled": enabled, "context": context, "stacks": stacks,
                             "max_entries": max_entries}

    @staticmethod
    def _dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False):
        import pickle

        snap = gen_snapshot.case(os.environ.get("FAKE_TORCH_CASE", "live"), "2.6")
        with open(filename, "wb") as f:
            pickle.dump(snap, f)


class _Cuda:
    memory = _Memory

    @staticmethod
    def is_available():
        return os.environ.get("FAKE_TORCH_CUDA", "1") == "1"

    @staticmethod
    def _fake_oom(size):
        """What the caching allocator does when cudaMalloc fails: call the observers, raise."""
        for fn in _C.observers:
            fn(0, size, 0, 200 << 20)
        raise OutOfMemoryError(
            "CUDA out of memory. Tried to allocate %.2f GiB. GPU 0 has a total capacity of "
            "16.00 GiB of which 200.00 MiB is free." % (size / (1 << 30))
        )


cuda = _Cuda
