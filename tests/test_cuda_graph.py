"""machinery/cuda_graph.py: the regional step recorded as a CUDA graph. No GPU here, so CUDA's
streams and graphs are stood in on the CPU: a stand-in graph runs the recorded body again at
every replay and copies its outputs into the recorded ones, which is what a replay does. What
this checks is the bookkeeping around the recording - each new batch copied into the recorded
batch, the learning rate read from tensors filled in place, the statistics copied out before
the next replay, the warm-up steps, a batch of another shape run unrecorded - against the eager
train.training_step, step for step. That the recording itself is right on a GPU is checked there,
by benchmarks/selfcheck.py --regional (4 steps against eager, the last two recorded)."""
import contextlib
import copy
from dataclasses import replace

import pytest
import torch
from torch.utils._pytree import tree_leaves, tree_map

import train
from ablations import build_model
from benchmarks import bench
from config import SIZES, Config
from machinery import cuda_graph

CPU = torch.device("cpu")


class StandInGraph:
    """A CUDA graph on the CPU: the recording ran the body once (the real one runs nothing, and
    its first replay runs it: so the first replay here does nothing); every later replay runs
    the body again and writes its outputs where the recorded outputs are."""

    def __init__(self):
        self.replays = 0

    def replay(self):
        self.replays += 1
        if self.replays > 1:
            for held, new in zip(tree_leaves(self.outputs), tree_leaves(self.body())):
                if torch.is_tensor(held):
                    held.copy_(new)


def stand_in_record(graph, body):
    graph.body, graph.outputs = body, body()
    return graph.outputs


@pytest.fixture
def cpu_cuda(monkeypatch):
    class Stream:
        def __init__(self, device=None):
            pass

        def wait_stream(self, other):
            pass
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", StandInGraph)
    monkeypatch.setattr(cuda_graph, "record_into", stand_in_record)


def tiny_twins():
    """The tiny ELECTRA (one block) and an identical twin, each with its optimizer:
    (cfg, model, opt, twin, twin_opt)."""
    cfg = replace(Config(), **SIZES["tiny"], vocab_size=100)
    cfg = replace(cfg, disc=replace(cfg.disc, layers=1))
    torch.manual_seed(0)
    model = build_model(cfg)
    twin = copy.deepcopy(model)
    return (cfg, model, train.make_optimizer(model, cfg, CPU), twin,
            train.make_optimizer(twin, cfg, CPU))


def test_recorded_step_trains_as_the_eager_step(cpu_cuda):
    """Six steps at a learning rate that changes every step (two warm-up, the recording, three
    replays, one batch of another length run unrecorded in between): the losses equal the
    eager step's, and so do the weights after the last."""
    cfg, model, opt, twin, twin_opt = tiny_twins()
    batches = bench.make_batches(cfg, n=6)["electra"]
    batches[4] = tree_map(lambda t: t[:3].clone(), batches[4])   # 3 rows: run unrecorded
    step = cuda_graph.recorded_step(train.update, twin, twin_opt, cfg.grad_clip, CPU,
                                    contextlib.nullcontext)
    eager, got = [], []
    for i, batch in enumerate(batches):
        lr = 1e-3 * (i + 1)
        torch.manual_seed(i)                              # the sample x̂: the same draws
        eager.append(train.training_step(model, opt, batch, lr, cfg, CPU, "fp32"))
        torch.manual_seed(i)
        got.append(step(batch, lr))
    # (compared after the last step: a statistic the next replay overwrote would show here)
    for i, (e, g) in enumerate(zip(eager, got)):
        for k in e:
            for a, b in zip(tree_leaves(e[k]), tree_leaves(g[k])):
                if torch.is_floating_point(a):
                    torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7, msg=f"{i} {k}")
                else:
                    assert torch.equal(a, b), (i, k)
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert all(torch.is_tensor(g["lr"]) and g["lr"].item() == pytest.approx(6e-3)
               for g in twin_opt.param_groups)


def test_the_statistics_are_copies(cpu_cuda):
    """What a step returns is not overwritten by the next replay (the loop logs a step's
    statistics later)."""
    cfg, model, opt, _, _ = tiny_twins()
    step = cuda_graph.recorded_step(train.update, model, opt, cfg.grad_clip, CPU,
                                    contextlib.nullcontext, warmup=1)
    batches = bench.make_batches(cfg, n=4)["electra"]
    out = [step(b, 1e-3) for b in batches]
    kept = [o["disc_loss"].item() for o in out]
    assert len(set(kept)) == 4                       # each step's own value, none overwritten


def test_recorded_fp16_step_carries_the_loss_scale(cpu_cuda):
    """fp16 with loss scaling (machinery/loss_scale.py), the scale starting high enough that
    the first steps overflow and are skipped: six steps recorded (two warm-up, the recording,
    three replays) give the eager step's losses, skips and scales, and the same weights."""
    from machinery.device import pick_precision
    from machinery.loss_scale import LossScale
    cfg, model, opt, twin, twin_opt = tiny_twins()
    scale, twin_scale = LossScale(CPU, init_scale=2.0 ** 24), LossScale(CPU, init_scale=2.0 ** 24)
    step = cuda_graph.recorded_step(train.update, twin, twin_opt, cfg.grad_clip, CPU,
                                    pick_precision("fp16", CPU).autocast, loss_scale=twin_scale)
    eager, got = [], []
    for i, batch in enumerate(bench.make_batches(cfg, n=6)["electra"]):
        torch.manual_seed(i)
        eager.append(train.training_step(model, opt, batch, 1e-3, cfg, CPU, "fp16", scale))
        torch.manual_seed(i)
        got.append(step(batch, 1e-3))
    assert sum(e["skipped"].item() for e in eager) >= 1          # the case is exercised
    for i, (e, g) in enumerate(zip(eager, got)):
        for k in ("mlm_loss", "disc_loss", "skipped", "loss_scale"):
            assert g[k].item() == pytest.approx(e[k].item(), rel=1e-5), (i, k)
    for a, b in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
