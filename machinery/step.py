"""The training step as one compiled graph, for GPUs (machinery; no paper section - read
train.training_step first: this file runs exactly its lines, compiled).

In eager mode every aten operation of a step is dispatched on its own and, on a GPU, is a kernel
launch: a few thousand per ELECTRA-Small step (benchmarks/bench.py counts them), at ~5-10 us each. A
14M-parameter model at batch 128 is bound by that, not by its matrix products.
torch.compile(fullgraph=True) turns the *whole* step - G, the sample x̂, x_corrupt, D, both
losses, backward, gradient clipping and Adam - into one graph that Inductor fuses into far fewer
kernels, and on CUDA, CUDA graphs replay it with one launch (mode "reduce-overhead").

What one graph, compiled once, needs - and where it is arranged:
- No Python number that changes between steps: the learning rate lives in a 0-dim tensor in every
  parameter group, filled in place before each step (a float would be a constant of the graph,
  so every step would compile a new graph).
- The same code on the first step as on every later one: Adam's moments exist before the first
  step (optim.py).
- No host reads (.item(), `if tensor:`): the statistics stay tensors; train.py reads them only
  when it logs.
- Backward traced into the graph: torch._dynamo.config.trace_autograd_ops (off by default).
- Random numbers (dropout, the sample x̂) drawn inside the graph from torch's generator, so every
  call - and every CUDA-graph replay - draws fresh ones. Inductor draws them with its own kernels
  seeded from that generator: the same distributions as eager, not the same numbers. With
  torch._inductor.config.fallback_random = True it draws eager's exact numbers, which
  tests/test_compiled_step.py uses to compare the two step for step.
- Adam in the graph: the official optimizer (optim.py) traces; torch.optim.AdamW's step breaks
  graphs on purpose, so with --optimizer torch train.py compiles the model only.
- zero_grad in the graph too (p.grad = None after Adam's step): left outside, every gradient
  (~306 tensors at Table 6's size) is a graph output that Dynamo writes back to p.grad, that
  Inductor must materialise and that a CUDA graph's replay rebuilds, only for the next line to
  drop it. Inside, the gradients are intermediates of the graph: its outputs are the few
  statistics (counted with the tiny model: 51 outputs for 42 parameters outside, 9 inside;
  tests/test_compiled_step.py checks it). torch.optim.Optimizer.zero_grad itself is skipped
  by Dynamo (its profiler hooks), hence the plain loop.
Outside the graph: masking (§2's mask step), which runs on the CPU with each batch's own generator
(batches.py), so a resumed run draws the same masks, compiled or not.
"""
import types

import torch
from torch.utils._pytree import tree_map

from machinery.device import pick_precision


def compile_step(update, model, opt, grad_clip, device, precision="auto", backend="inductor",
                 fullgraph=True, regional=False):
    """train.training_step compiled whole: returns step(batch, lr) -> statistics, taking and
    returning what training_step(model, opt, batch, lr, ...) does. `update` is train.update, the
    lines of training_step that the graph holds (passed in: train.py imports this file, not the
    other way round). The compilation itself
    happens on the first call, so errors (an unsupported setup) surface there. `backend`
    "aot_eager" traces the same graph without generating code (quick: the tests use it);
    fullgraph=False lets a graph break split the step instead of failing (bench.py counts).
    regional=True compiles the same lines as two graphs and one layer for all its repeats
    (`compile_regional`: seconds to compile where the whole step takes minutes)."""
    if regional:
        return compile_regional(update, model, opt, grad_clip, device, precision, backend)
    if hasattr(torch._dynamo.config, "trace_autograd_ops"):  # (else the first call fails,
        torch._dynamo.config.trace_autograd_ops = True     # and train.py goes on eagerly)
    lrs = [torch.tensor(float(g["lr"]), device=device) for g in opt.param_groups]
    # The tensors the step writes in place besides the weights - Adam's moments and step
    # counts, the learning rates - at fixed addresses: a CUDA graph replays writes to the
    # memory it recorded, so for a graph input that is written to, and not marked so, Inductor
    # quietly runs without CUDA graphs (counted as "cudagraph_skips"; bench.py prints it).
    # torch.optim's own optimizers get this from Dynamo through their _init_group; ours is
    # plain Python. guard=True: a tensor replaced later (a new state) compiles the step again.
    static_addresses(lrs, opt)
    autocast = pick_precision(precision, device)[1]
    # CUDA graphs replay the compiled step with one launch. They keep their outputs in buffers
    # that the next replay overwrites, hence the copies of the (few, scalar) statistics below.
    cuda_graphs = device.type == "cuda" and backend == "inductor"

    def whole_step(batch):
        stats = update(model, opt, batch, grad_clip, autocast)
        for group in opt.param_groups:                      # zero_grad(set_to_none=True),
            for p in group["params"]:                       # traced: the gradients stay
                p.grad = None                               # inside the graph
        return stats
    compiled = torch.compile(whole_step, fullgraph=fullgraph, backend=backend,
                             mode="reduce-overhead" if cuda_graphs else None)

    def step(batch, lr):
        batch = {k: v.to(device, non_blocking=device.type == "cuda") for k, v in batch.items()}
        for group, lr_tensor in zip(opt.param_groups, lrs):
            lr_tensor.fill_(lr)                             # in place: the graph's input
            group["lr"] = lr_tensor         # (again: an eager step may have put a float there)
        stats = compiled(batch)
        return tree_map(torch.clone, stats) if cuda_graphs else stats
    return step


def static_addresses(lrs, opt):
    """The tensors the step writes in place besides the weights, at fixed addresses (above)."""
    for t in lrs + [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)]:
        torch._dynamo.mark_static_address(t, guard=True)


def repeated_blocks(model):
    """The modules that repeat: the members of every nn.ModuleList of two or more modules of
    one class (the Transformer blocks of G and of D)."""
    return [m for lst in model.modules() if isinstance(lst, torch.nn.ModuleList) and len(lst) > 1
            and len({type(b) for b in lst}) == 1 for m in lst]


_REGIONS = {}


def region_class(cls):
    """`cls` with its forward a nested compile region: a subclass made once per class, which
    the repeated blocks take as their class (their weights and state_dict unchanged; in eager
    mode the region is a no-op). Not the class itself, which would change every model in the
    process, the whole step's included; and not each block's bound forward, which Dynamo
    reused with the first block's weights (the losses moved by 1e-3 on the first step)."""
    if cls not in _REGIONS:
        if getattr(cls, "is_compile_region", False):
            return cls
        _REGIONS[cls] = type(cls.__name__, (cls,), dict(
            forward=torch.compiler.nested_compile_region(cls.forward), is_compile_region=True,
            __doc__=f"{cls.__name__}, its forward compiled once for all its repeats."))
    return _REGIONS[cls]


def compile_regional(update, model, opt, grad_clip, device, precision="auto", backend="inductor"):
    """The step of `compile_step`, compiled in a fraction of the time: returns step(batch, lr).

    Compiling time. Inductor compiles a graph's every operation anew, and the whole step holds
    12 copies of D's block and 12 of G's: at Table 6's size it compiled for minutes (about 3 on
    an H200). Here each repeated block's forward is a nested compile region
    (torch.compiler.nested_compile_region): traced and compiled once, then reused for every
    block of the same shapes, so G's and D's stacks cost one block each.

    Two graphs, not one. A region's backward must come from AOTAutograd's own
    forward-and-backward split: with the backward traced into the graph as the whole step does
    (torch._dynamo.config.trace_autograd_ops), torch 2.13 silently drops the gradients that flow
    through a nested region - every parameter below D's heads kept grad None, so Adam skipped
    them, the first step's losses matched eager's and the second's did not
    (tests/test_compiled_step.py keeps the check). So the model (forward, and its backward by
    AOTAutograd) is one compiled module, and clipping, Adam and zero_grad a second compiled
    function; on CUDA each is replayed as a CUDA graph. The gradients pass between the two as
    tensors in memory, where the whole step keeps them inside one graph."""
    for block in repeated_blocks(model):
        block.__class__ = region_class(type(block))
    lrs = [torch.tensor(float(g["lr"]), device=device) for g in opt.param_groups]
    static_addresses(lrs, opt)
    autocast = pick_precision(precision, device)[1]
    cuda_graphs = device.type == "cuda" and backend == "inductor"
    mode = "reduce-overhead" if cuda_graphs else None
    forward = torch.compile(model, fullgraph=True, backend=backend, mode=mode)

    def adam_step():                                         # Adam and zero_grad, compiled
        opt.step()
        for group in opt.param_groups:
            for p in group["params"]:
                p.grad = None
    compiled_adam = torch.compile(adam_step, fullgraph=True, backend=backend, mode=mode)
    # `update` runs its own lines: the compiled model, backward, clipping (eager: a few
    # kernels), then what it takes for the optimizer's step, the compiled Adam.
    adam = types.SimpleNamespace(step=compiled_adam)

    def step(batch, lr):
        batch = {k: v.to(device, non_blocking=device.type == "cuda") for k, v in batch.items()}
        for group, lr_tensor in zip(opt.param_groups, lrs):
            lr_tensor.fill_(lr)                             # in place: the graph's input
            group["lr"] = lr_tensor
        stats = update(forward, adam, batch, grad_clip, autocast)
        return tree_map(torch.clone, stats) if cuda_graphs else stats
    return step
