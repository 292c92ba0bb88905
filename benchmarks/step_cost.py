"""What one training step costs, wherever it runs: time aside, the numbers that decide how fast
a small model can go on a GPU (machinery; no paper section - benchmarks/bench.py prints them).

A 14M-parameter model at batch 128 is bound less by its matrix products than by what surrounds
them: every aten operation of an eager step is a separate call and, on a GPU, a kernel launch;
every tensor saved for backward is memory the GPU must hold; every graph break or recompile of
a compiled step puts Python back between kernels. Each is counted here, and the memory one step
needs on top of what is already held.
"""
import contextlib
import ctypes.util
import gc
from types import SimpleNamespace

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def sync(device):
    if device.type in ("cuda", "mps"):                     # GPUs run asynchronously
        getattr(torch, device.type).synchronize()


def _vm_bytes(field):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(field + ":")) * 1024


def measure_step_memory(device, step):
    """Run one step; return (bytes it needed above what was held before it, how measured).
    CUDA: max_memory_allocated after reset_peak_memory_stats. CPU: the peak RSS (getrusage's
    ru_maxrss, but resettable: Linux's VmHWM after writing 5 to clear_refs), after handing freed
    heap back to the OS (malloc_trim) so the step cannot hide in memory another contender freed."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        step()
        return torch.cuda.max_memory_allocated(device) - before, "CUDA allocated"
    gc.collect()
    try:
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        before = _vm_bytes("VmRSS")
    except (OSError, AttributeError, TypeError):      # not Linux/glibc: no resettable peak
        before = None
    step()
    return (None, "n/a") if before is None else (_vm_bytes("VmHWM") - before, "peak RSS growth")



class OpCounter(TorchDispatchMode):
    """Counts the aten operations dispatched while active (after autograd, so backward's count
    too). In eager mode each is a separate call into PyTorch and, on a GPU, most are a kernel
    launch of ~5-10 us: at a few thousand per step that, not the matmuls, bounds a small model."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def saved_bytes(model):
    """Yields an object whose .total is, on exit, the bytes of the tensors autograd saved for
    backward while active: the activations a step holds between its forward and its backward -
    on a GPU, the memory it needs besides weights, gradients and Adam's state. Each storage
    counts once (a tensor saved by several operations, or a view of one, is held once); the
    model's weights do not count."""
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    held, out = {}, SimpleNamespace(total=0)

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            held[storage.data_ptr()] = storage.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        yield out
    out.total = sum(held.values())


def compile_counters():
    """(graphs compiled, graph breaks) so far in this process, from Dynamo's own counters."""
    counters = torch._dynamo.utils.counters
    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())



# ----------------------------------------------------------------------------- a roofline estimate

# Data-sheet figures of five cards (dense, no sparsity): memory bandwidth in bytes/s and the
# tensor-core peak with float32 accumulation in FLOP/s, in the precision --precision auto runs
# there (bf16; fp16 on the T4 and the V100, which have no bf16). An estimate's inputs, not
# measured.
CARDS = {"H100 SXM": dict(bandwidth=3.35e12, peak=989e12),
         "H200 SXM": dict(bandwidth=4.8e12, peak=989e12),
         "RTX 4090": dict(bandwidth=1.008e12, peak=165.2e12),
         "V100 SXM2": dict(bandwidth=900e9, peak=125e12),
         "T4": dict(bandwidth=320e9, peak=65e12)}
LAUNCH_S = 5e-6          # one eager kernel launch (the ~5-10 us of PyTorch's dispatch + CUDA's)


class RooflineCounter(TorchDispatchMode):
    """Per aten operation of a step: the bytes it must move at least (every tensor it reads
    and writes, once) and the FLOPs it must do (torch.utils.flop_counter's formulas: matrix
    products, attention, convolutions; 0 for the rest). roofline() turns them into a time."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch.utils._pytree import tree_leaves
        from torch.utils.flop_counter import flop_registry
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        # a view (view, t, slice, expand, detach ...) returns an alias and moves nothing
        alias = [r.alias_info for r in func._schema.returns]
        if alias and all(a is not None and not a.is_write for a in alias):
            self.ops.append((0, 0))
            return out
        moved = sum(t.numel() * t.element_size() for t in tree_leaves((args, kwargs, out))
                    if isinstance(t, torch.Tensor))
        count = flop_registry.get(func._overloadpacket)
        self.ops.append((moved, count(*args, **kwargs, out_val=out) if count else 0))
        return out


def roofline(ops, card):
    """An *estimate* of one step's time on `card` (a CARDS entry) from RooflineCounter.ops:
    each operation takes the longer of moving its bytes at the card's bandwidth and doing its
    FLOPs at its peak; eager adds one launch per operation, a CUDA graph none. Returns
    (eager seconds, CUDA-graph seconds). A floor more than a forecast: no kernel reaches the
    data sheet, and fused kernels (Inductor) move fewer bytes than the operations one by one."""
    work = sum(max(b / card["bandwidth"], f / card["peak"]) for b, f in ops)
    return work + LAUNCH_S * len(ops), work
