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
- No host reads (.item(), `if tensor:`): the statistics stay tensors; the loop reads them only
  when it logs (machinery/run_log.py).
- Backward traced into the graph: torch._dynamo.config.trace_autograd_ops (off by default),
  set only while this step runs and only where the step is one graph (fullgraph=True).
  Where a graph break splits the step (fullgraph=False), a traced backward that starts in
  one graph from a loss made in another computed no update at all: Hugging Face's Electra,
  compiled so by benchmarks/bench.py, moved none of its 82 weights (torch 2.13, a CPU).
  Untraced, AOTAutograd compiles each graph's backward beside its forward, as for any
  module; tests/test_compiled_step.py holds both to training every weight.
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
import torch
from torch.utils._pytree import tree_map

from machinery.cuda_graph import autocast_for_graphs, learning_rates, recorded_step
from machinery.device import pick_precision


def compile_step(update, model, opt, grad_clip, device, precision="auto", backend="inductor",
                 fullgraph=True, regional=False, loss_scale=None, trace_backward=None):
    """train.training_step compiled whole: returns step(batch, lr) -> statistics, taking and
    returning what training_step(model, opt, batch, lr, ...) does. `update` is train.update, the
    lines of training_step that the graph holds (passed in: train.py imports this file, not the
    other way round). The compilation itself
    happens on the first call, so errors (an unsupported setup) surface there. `backend`
    "aot_eager" traces the same graph without generating code (quick: the tests use it);
    fullgraph=False lets a graph break split the step instead of failing (bench.py counts).
    regional=True compiles only the Transformer blocks, one for all its repeats, and runs the
    rest eagerly (`compile_regional`: a fraction of the whole step's compiling time).
    loss_scale: fp16's (machinery/loss_scale.py): its scale and its skip of an overflowed
    step stay inside the graph, with no host read. trace_backward: backward traced into the
    graph; by default where fullgraph=True only (the module's notes say why). A caller that
    allows breaks and still traces must check that the step trains (benchmarks/bench.py does)."""
    if regional:
        return compile_regional(update, model, opt, grad_clip, device, precision, backend,
                                loss_scale)
    # Backward into the graph only where nothing can split it (the module's notes say why);
    # patched around each call, never left set for other code of the process to compile under.
    # (A torch without the option fails here, and train.py goes on eagerly.)
    tracing = torch._dynamo.config.patch(
        trace_autograd_ops=fullgraph if trace_backward is None else trace_backward)
    lrs, set_lr = learning_rates(opt, device)
    # The tensors the step writes in place besides the weights - Adam's moments and step
    # counts, the learning rates - at fixed addresses: a CUDA graph replays writes to the
    # memory it recorded, so for a graph input that is written to, and not marked so, Inductor
    # quietly runs without CUDA graphs (counted as "cudagraph_skips"; bench.py prints it).
    # torch.optim's own optimizers get this from Dynamo through their _init_group; ours is
    # plain Python. guard=True: a tensor replaced later (a new state) compiles the step again.
    # fp16's loss scale and its count of good steps likewise.
    for t in lrs + [t for s in opt.state.values() for t in s.values() if torch.is_tensor(t)] + \
            (loss_scale.tensors() if loss_scale is not None else []):
        torch._dynamo.mark_static_address(t, guard=True)
    autocast = pick_precision(precision, device)[1]
    # CUDA graphs replay the compiled step with one launch. They keep their outputs in buffers
    # that the next replay overwrites, hence the copies of the (few, scalar) statistics below.
    cuda_graphs = device.type == "cuda" and backend == "inductor"

    def whole_step(batch):
        stats = update(model, opt, batch, grad_clip, autocast, loss_scale)
        for group in opt.param_groups:                      # zero_grad(set_to_none=True),
            for p in group["params"]:                       # traced: the gradients stay
                p.grad = None                               # inside the graph
        return stats
    compiled = torch.compile(whole_step, fullgraph=fullgraph, backend=backend,
                             mode="reduce-overhead" if cuda_graphs else None)

    def step(batch, lr):
        batch = {k: v.to(device, non_blocking=device.type == "cuda") for k, v in batch.items()}
        set_lr(lr)                                          # in place: the graph's input
        with tracing:
            stats = compiled(batch)
        return tree_map(torch.clone, stats) if cuda_graphs else stats
    return step


def repeated_blocks(model):
    """The modules that repeat: the members of every nn.ModuleList of two or more modules of
    one class (the Transformer blocks of G and of D)."""
    return [m for lst in model.modules() if isinstance(lst, torch.nn.ModuleList) and len(lst) > 1
            and len({type(b) for b in lst}) == 1 for m in lst]


def compile_regional(update, model, opt, grad_clip, device, precision="auto", backend="inductor",
                     loss_scale=None):
    """The step of `compile_step`, ready in a fraction of the time: returns step(batch, lr).

    Inductor compiles a graph's every operation anew, and the whole step holds 12 copies of D's
    block and 12 of G's: at Table 6's size it compiled for minutes (about 3 on an H200; on a
    2-core CPU 205-252 s to the first step against this function's 23-37 s, docs/gpu.md). Here
    each repeated Transformer block is compiled on its own (nn.Module.compile: its forward, and
    its backward by AOTAutograd), and Dynamo reuses the code it compiled for the first block for
    every block of the same shapes - G's stack and D's cost one block each. Everything else - embeddings,
    G's head and the sample x̂, x_corrupt, D's head, both losses, clipping and Adam - runs
    eagerly, as `update`'s own lines.

    The price: the kernels between the blocks are not fused, and each is launched on its own.
    On a GPU that made the step no faster than eager (16.8 against 17.4 steps/s on an H200), so
    there the step is recorded as a CUDA graph (machinery/cuda_graph.py) and replayed with one
    launch; bench.py's ours_regional against ours_compiled measures what is left. What was tried first, and why not
    (docs/gpu.md): the blocks as nested compile regions inside one compiled graph
    (torch.compiler.nested_compile_region) - inside the whole step, whose backward is traced
    into the graph, torch 2.13 dropped the gradients through the regions; in a compiled model,
    Inductor's gradients of D's blocks were wrong (relative error about 1). Each block compiled
    alone gives eager's gradients (tests/test_compiled_step.py)."""
    # (fullgraph=False: a block called under a dispatch mode, as bench.py counts operations,
    # runs eagerly instead of failing; tests/test_compiled_step.py counts the graphs, so a
    # graph break inside a block would show there)
    for block in repeated_blocks(model):
        block.compile(fullgraph=False, backend=backend)
    name, autocast = pick_precision(precision, device)
    # On a GPU the step is then recorded as one CUDA graph and replayed (machinery/cuda_graph.py):
    # without it the step is bound by launching its kernels, no faster than eager (H200).
    # Not with two-stage training, whose second stage trains other parameters than the first.
    if device.type == "cuda" and backend == "inductor" and getattr(model, "stage", None) is None:
        return recorded_step(update, model, opt, grad_clip, device,
                             autocast_for_graphs(name, device), loss_scale=loss_scale)

    def step(batch, lr):
        batch = {k: v.to(device, non_blocking=device.type == "cuda") for k, v in batch.items()}
        for group in opt.param_groups:
            group["lr"] = lr                    # (eager Adam: a number, as training_step's)
        stats = update(model, opt, batch, grad_clip, autocast, loss_scale)
        opt.zero_grad(set_to_none=True)
        return stats
    return step
