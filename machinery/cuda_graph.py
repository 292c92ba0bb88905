"""The regional step recorded once as a CUDA graph and replayed (machinery; no paper section -
read train.training_step first: the graph holds exactly its lines).

Why: on a GPU a step of a 14M-parameter model at batch 128 is bound by the CPU that launches
its kernels, not by the GPU that runs them. Measured on one H200 (torch 2.11, the Table 6 model,
docs/gpu-runs/h200-2026-11-28): the regional step (each Transformer block compiled, the rest
eager) ran at 16.8 steps/s, the eager step at 17.4, while its profile counted 13 ms of GPU work
a step against about 60 ms of the CPU's; the whole step compiled by Inductor and replayed as a
CUDA graph ran at 86.7 steps/s but took about 3 minutes to compile.

A CUDA graph records the kernels of one step once and replays all of them with one launch, so
the CPU's cost per step disappears whatever made the kernels: here the regional step's own (a
block compiled in seconds, the rest eager). What recording asks of the step, and where it is
arranged:

- Fixed addresses for everything that changes between steps: the batch is copied into the
  recorded batch's tensors, and the learning rate lives in a 0-dim tensor per parameter group
  (Adam reads it as a tensor: optim.py), filled in place before each replay.
- No host reads inside the step (.item(), a shape that depends on values): the step has none,
  as the whole compiled step, which holds the same lines, proves (machinery/step.py).
- Random numbers from torch's default CUDA generator: a replay draws fresh ones (the graph
  reads the generator's seed and advances its offset at each replay), so dropout and the sample
  x̂ differ from step to step as in eager mode, and a checkpoint's random state stays right.
- Autocast without its weight cache (cache_enabled=False): a cached cast would be made once,
  inside the recording, and kept as it was when the weights change.
- Warm-up before recording, on a side stream (cuBLAS, cuDNN and the compiled blocks set
  themselves up on their first calls, which a recording must not contain): the first
  `warmup` steps run normally and are real training steps.
- The gradients are set to None at the start of the recorded step, so the backward pass
  allocates them inside the graph's memory, and every replay writes them there again.

A batch of another shape than the recorded one runs unrecorded, as a regional step.
"""
import contextlib

import torch
from torch.utils._pytree import tree_flatten, tree_map


def autocast_for_graphs(precision_name, device):
    """The autocast context a recorded step runs its forward passes in: autocast's weight
    cache off (above)."""
    if precision_name in ("bf16", "fp16"):
        dtype = torch.bfloat16 if precision_name == "bf16" else torch.float16
        return lambda: torch.autocast(device.type, dtype=dtype, cache_enabled=False)
    return contextlib.nullcontext


def record_into(graph, body):
    """body()'s kernels recorded into `graph` (not run: graph.replay() runs them); returns
    body()'s outputs, which every replay writes anew. (A function of its own so that the tests
    can stand in for CUDA on a CPU.)"""
    # thread_local: the batch-making thread may pin memory while the step is recorded
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        return body()


def learning_rates(opt, device):
    """(the 0-dim learning-rate tensors, set_lr(lr)): one tensor per parameter group, which
    set_lr fills in place and puts back in its group before each step. A compiled graph or a
    recorded CUDA graph reads the rate from that tensor's memory; a Python float there would be
    a constant of the graph (a new compile, or a stale rate, at every step)."""
    lrs = [torch.tensor(float(g["lr"]), device=device) for g in opt.param_groups]

    def set_lr(lr):
        for group, lr_tensor in zip(opt.param_groups, lrs):
            lr_tensor.fill_(lr)                  # in place: the graph reads it there
            group["lr"] = lr_tensor     # (again: an eager step may have put a float there)
    return lrs, set_lr


def recorded_step(update, model, opt, grad_clip, device, autocast, warmup=2, loss_scale=None):
    """step(batch, lr) -> statistics: `update(model, opt, batch, grad_clip, autocast,
    loss_scale)` (train.update: both losses, backward, clipping, Adam; in fp16 with the loss
    scale's on-device skip, machinery/loss_scale.py, which reads nothing back either) run
    `warmup` times, then recorded as one CUDA graph and replayed for every later batch of the
    same shapes."""
    _, set_lr = learning_rates(opt, device)
    side = torch.cuda.Stream(device)
    state = dict(calls=0, graph=None, batch=None, stats=None)

    def unrecorded(batch):
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            opt.zero_grad(set_to_none=True)   # (after a replay .grad is the graph's: drop it)
            stats = update(model, opt, batch, grad_clip, autocast, loss_scale)
            opt.zero_grad(set_to_none=True)
        torch.cuda.current_stream(device).wait_stream(side)
        return stats

    def record(batch):
        state["batch"] = tree_map(torch.clone, batch)      # the graph's own input tensors
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize(device)

        def body():
            opt.zero_grad(set_to_none=True)          # the gradients: the graph's own memory
            return update(model, opt, state["batch"], grad_clip, autocast, loss_scale)
        state["stats"] = record_into(graph, body)
        state["graph"] = graph

    def on_device(batch):
        return {k: v.to(device, non_blocking=device.type == "cuda") for k, v in batch.items()}

    def step(batch, lr):
        set_lr(lr)
        state["calls"] += 1
        if state["graph"] is None:
            if state["calls"] <= warmup:
                return unrecorded(on_device(batch))
            record(on_device(batch))     # (recording runs nothing: the replay below does)
        else:
            new, spec = tree_flatten(batch)
            held, held_spec = tree_flatten(state["batch"])
            if spec != held_spec or any(a.shape != b.shape or a.dtype != b.dtype
                                        for a, b in zip(new, held)):
                return unrecorded(on_device(batch))
            for a, b in zip(held, new):     # straight from the (pinned) batch into the graph's
                a.copy_(b, non_blocking=True)
        state["graph"].replay()
        # the next replay overwrites the recorded outputs: the (few, scalar) statistics copied
        return tree_map(lambda v: v.clone() if torch.is_tensor(v) else v, state["stats"])
    return step
