# Injected by `vramdoc run --torch-memory` (docs/explain.md "run --torch-memory").
# Inert unless this process imports torch and CUDA is available. Then: record the CUDA
# caching allocator's history with Python stacks (bounded by max_entries) and, at an
# out-of-memory error, dump a snapshot into vramdoc's directory for this run.
# Any other sitecustomize on sys.path runs as it would without vramdoc.
import os
import sys


def _vramdoc_chain():
    here = os.path.dirname(os.path.abspath(__file__))
    me = sys.modules.get("sitecustomize")
    # The job's sys.path, as without vramdoc (PYTHONPATH still carries the hook to children).
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.modules.pop("sitecustomize", None)
    try:
        import importlib

        importlib.import_module("sitecustomize")
    except ModuleNotFoundError as e:
        if e.name != "sitecustomize":
            raise
    finally:
        if "sitecustomize" not in sys.modules and me is not None:
            sys.modules["sitecustomize"] = me


def _vramdoc_setup(torch):
    try:
        if not torch.cuda.is_available():
            return
        out = os.environ.get("VRAMDOC_TORCH_MEMORY_DIR")
        if not out:
            return
        n = int(os.environ.get("VRAMDOC_TORCH_MEMORY_MAX_ENTRIES", "100000"))
        memory = torch.cuda.memory
        try:
            memory._record_memory_history(
                enabled="all", context="all", stacks="python", max_entries=n
            )
        except TypeError:
            # PyTorch 2.0: the boolean form.
            memory._record_memory_history(
                True, trace_alloc_max_entries=n, trace_alloc_record_context=True
            )
        path = os.path.join(out, "torch-memory-%d.pickle" % os.getpid())

        def observer(device, alloc, device_alloc, device_free):
            tmp = path + ".part"
            memory._dump_snapshot(tmp)
            os.replace(tmp, path)

        torch._C._cuda_attach_out_of_memory_observer(observer)
    except Exception as e:  # never break the job
        sys.stderr.write("vramdoc --torch-memory: not recording (%s)\n" % type(e).__name__)


def _vramdoc_hook():
    import importlib.abc
    import importlib.util

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name != "torch":
                return None
            try:
                sys.meta_path.remove(self)
            except ValueError:
                return None
            spec = importlib.util.find_spec("torch")
            if spec is None or spec.loader is None:
                return spec
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                _vramdoc_setup(module)

            spec.loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Finder())


if "torch" in sys.modules:
    _vramdoc_setup(sys.modules["torch"])
else:
    _vramdoc_hook()
_vramdoc_chain()
