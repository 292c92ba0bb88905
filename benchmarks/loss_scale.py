"""fp16's loss scaling two ways: this project's on-device skip (machinery/loss_scale.py
LossScale) against torch.amp.GradScaler (GradScalerReference), eager and compiled (machinery;
no paper section - what the compiled step's promise of no host read per step costs in fp16).

    python benchmarks/loss_scale.py                         # tiny model, CPU, aot_eager
    python benchmarks/loss_scale.py --device cuda --backend inductor --size small

For each way and each of eager / compiled (machinery/step.py, fullgraph=False so that a graph
break splits the step instead of failing): the host reads per step (aten._local_scalar_dense,
what .item() and `if tensor:` call; on a GPU each waits for every queued kernel), counted over
--steps steps after the first; Dynamo's graphs and graph breaks; seconds per step; or why it
failed. The first step overflows (--init_scale 2^30) so that the skip itself is exercised.
One JSON line per row with --json.
"""
import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import train  # noqa: E402
from ablations import build_model  # noqa: E402
from benchmarks import bench  # noqa: E402
from config import SIZES, Config  # noqa: E402
from machinery.device import pick_device  # noqa: E402
from machinery.loss_scale import GradScalerReference, LossScale  # noqa: E402
from machinery.step import compile_step  # noqa: E402


class HostReads(TorchDispatchMode):
    """Counts reads of a tensor's value by the host (.item(), bool(t), ...: aten's
    _local_scalar_dense), which on a GPU wait for every queued kernel."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.n += 1
        return func(*args, **(kwargs or {}))


def measure(kind, compiled, cfg, device, backend, steps, init_scale):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(0)
    model = build_model(cfg).to(device)
    opt = train.make_optimizer(model, cfg, device)
    scaler = kind(device, init_scale)
    batches = bench.make_batches(cfg, n=steps + 1)[cfg.model]
    if compiled:
        step = compile_step(train.update, model, opt, cfg.grad_clip, device, "fp16",
                            backend=backend, fullgraph=False, loss_scale=scaler,
                            # backward traced into the graph as training does, where the step
                            # can be one graph; GradScaler's breaks split it, and a traced
                            # backward across breaks computes nothing (machinery/step.py)
                            trace_backward=kind is LossScale)
    else:
        step = lambda b, lr: train.training_step(model, opt, b, lr, cfg, device, "fp16", scaler)
    row = dict(way=kind.__name__, step="compiled " + backend if compiled else "eager")
    try:
        step(batches[0], 1e-3)                           # (compiles)
        reads, t = HostReads(), time.perf_counter()
        for b in batches[1:]:
            if compiled:          # (a dispatch mode around a compiled call runs it eagerly)
                stats = step(b, 1e-3)
            else:
                with reads:
                    stats = step(b, 1e-3)
        if device.type == "cuda":
            torch.cuda.synchronize()
        row.update(s_per_step=round((time.perf_counter() - t) / steps, 4),
                   host_reads_per_step=None if compiled else reads.n / steps,
                   scale=float(scaler.scale), skipped_last=float(stats["skipped"]))
    except Exception as e:
        row["failed"] = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:150]}"
    counters = torch._dynamo.utils.counters
    row.update(graphs=counters["stats"]["unique_graphs"],
               graph_breaks=sum(counters["graph_break"].values()),
               break_reasons=sorted({r.splitlines()[0][:90] for r in counters["graph_break"]}))
    return row


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--size", choices=sorted(SIZES), default="tiny")
    p.add_argument("--backend", default="aot_eager", help="torch.compile backend")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--init_scale", type=float, default=2.0 ** 30)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    device = pick_device(args.device)
    cfg = replace(Config(), **SIZES[args.size], vocab_size=1000 if args.size == "tiny" else 30522)
    for kind in (LossScale, GradScalerReference):
        for compiled in (False, True):
            row = measure(kind, compiled, cfg, device, args.backend, args.steps, args.init_scale)
            print(json.dumps(row) if args.json else
                  " | ".join(f"{k} {v}" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()
