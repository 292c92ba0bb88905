"""Ours compiled against Hugging Face's Electra compiled, taken apart: the whole step in its
variants, and each network alone, timed side by side (machinery; no paper section - benchmarks/bench.py
times the steps as training runs them, this file takes them apart).

    python benchmarks/compiled_gap.py --threads 2                       # Table 6 model, batch 8
    python benchmarks/compiled_gap.py --threads 2 --precision fp32
    python benchmarks/compiled_gap.py --threads 2 --fallback_random     # eager's dropout draws
    python benchmarks/compiled_gap.py --size tiny --backend aot_eager   # a smoke run (the test)

Two tables, each timed interleaved (round r runs one step of every contender, the order
rotating) and reported as the median over rounds of the speed ratio within a round, so that
what another job does to the machine during a round does it to both sides:

- steps: the training step of bench.py's contenders, each compiled by machinery/step.py's
  compile_step and checked to train every weight: ours, with backward traced into its one
  graph (training's `--compile`); ours with backward *not* traced, so that AOTAutograd
  compiles forward and backward as it does for any module (`ours_split`); Hugging Face's,
  whose graph breaks split its step, so that its backward is AOTAutograd's too.
- networks: D alone (forward, a binary cross-entropy, backward) and G's encoder alone, ours
  against Hugging Face's, each forward compiled with torch.compile and its backward by
  AOTAutograd: the same Transformer at the same shape, without the objective or the optimizer
  around it.

Needs the optional `transformers`. Prints times for people; no test asserts a speed.
"""
import argparse
import collections
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

if not __package__:   # run as a path (python benchmarks/compiled_gap.py): import from the root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench import in_turn, speed_ratio
from machinery import cli
from machinery.device import pick_precision
from config import SIZES, Config


def interleaved(fns, rounds):
    """{name: [seconds of each round]}: each round times one call of every fn, in bench.py's
    rotating order."""
    times = collections.defaultdict(list)
    for order in in_turn(list(fns), rounds):
        for n in order:
            t0 = time.perf_counter()
            fns[n]()
            times[n].append(time.perf_counter() - t0)
    return times


def report(title, times, pairs):
    print(title)
    for n, t in times.items():
        print(f"  {n:<12} {1000 * statistics.median(t):9.1f} ms (median of {len(t)})")
    for a, b in pairs:
        print(f"  {a} / {b} speed: {speed_ratio(times[a], times[b]):.2f}x (median over rounds)")


def steps(cfg, args, device):
    """The whole training step: ours (backward traced), ours split (AOTAutograd), HF's."""
    from benchmarks.bench import Contender, bench_data
    from machinery.step import compile_step
    from train import update
    runs = {}
    for tag, name in (("ours", "ours"), ("ours_split", "ours"), ("hf", "hf")):
        c = Contender(name, cfg, bench_data(cfg), device, False, args.precision)
        c.compiled = compile_step(update, c.model, c.opt, cfg.grad_clip, device, args.precision,
                                  backend=args.backend, fullgraph=False,
                                  loss_scale=c.loss_scale, trace_backward=tag == "ours")
        before, t0 = c.weights(), time.time()
        for _ in range(args.warmup):
            c.step()
        print(f"{tag}: {args.warmup} warm-up steps (compiling) {time.time() - t0:.1f} s",
              flush=True)
        if not c.trains(before):
            print(f"error: {tag}'s compiled step left weights unchanged: it does not train",
                  file=sys.stderr)
            return 1
        runs[tag] = c.step
    report("steps", interleaved(runs, args.rounds), [("ours", "hf"), ("ours_split", "hf")])
    return 0


def networks(cfg, args, device):
    """D alone and G's encoder alone, ours against HF's, forward compiled, backward by AOT."""
    from ablations import build_model
    from benchmarks.hf_electra import HFElectra
    torch.manual_seed(0)
    ours, hf = build_model(cfg).to(device), HFElectra(cfg).to(device)
    B, T = cfg.batch_size, cfg.seq_len
    x = torch.randint(0, cfg.vocab_size - 4, (B, T), device=device)
    segments = (torch.arange(T, device=device) >= T // 2).long().expand(B, T)
    pad = torch.ones(B, T, dtype=torch.bool, device=device)
    pad[0, T * 3 // 4:] = False                           # one example ends early
    y = (torch.rand(B, T, device=device) < 0.15).float()
    autocast = pick_precision(args.precision, device)[1]

    def ours_d():
        with autocast():
            d = ours.discriminator(x, pad, segments)
        return F.binary_cross_entropy_with_logits(d.float(), y)

    def hf_d():
        with autocast():
            d = hf.discriminator(input_ids=x, attention_mask=pad.long(), token_type_ids=segments)
        return F.binary_cross_entropy_with_logits(d.logits.float(), y)

    def ours_g():
        with autocast():
            h = ours.generator.hidden(x, pad, segments)
        return h.float().square().mean()

    def hf_g():
        with autocast():
            h = hf.generator.electra(input_ids=x, attention_mask=pad.long(),
                                     token_type_ids=segments).last_hidden_state
        return h.float().square().mean()

    runs = {}
    for name, f in (("ours_D", ours_d), ("hf_D", hf_d), ("ours_G", ours_g), ("hf_G", hf_g)):
        compiled = torch.compile(f, backend=args.backend)

        def step(compiled=compiled):
            compiled().backward()
        for _ in range(args.warmup):
            step()
        runs[name] = step
    report("networks", interleaved(runs, args.rounds), [("ours_D", "hf_D"), ("ours_G", "hf_G")])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--batch_size", type=cli.batch_size, default=8)
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto")
    p.add_argument("--rounds", type=cli.positive_int, default=10)
    p.add_argument("--warmup", type=cli.positive_int, default=3)
    p.add_argument("--threads", type=cli.threads, default=None)
    p.add_argument("--backend", choices=["inductor", "aot_eager"], default="inductor",
                   help="aot_eager: trace without generating code (quick; the test uses it)")
    p.add_argument("--fallback_random", action="store_true",
                   help="Inductor draws dropout's numbers with eager's kernels, not its own")
    p.add_argument("--which", choices=["steps", "networks", "both"], default="both")
    args = p.parse_args(argv)
    try:
        import transformers
    except ImportError:
        print("error: needs the optional transformers: pip install transformers", file=sys.stderr)
        return 1
    if args.threads:
        torch.set_num_threads(args.threads)
    torch._inductor.config.fallback_random = args.fallback_random
    device = torch.device("cpu")
    cfg = replace(Config(), **SIZES[args.size])
    cfg = replace(cfg, batch_size=args.batch_size)
    print(f"CPU, {torch.get_num_threads()} thread(s) | torch {torch.__version__} | transformers "
          f"{transformers.__version__} | {args.size}: batch {cfg.batch_size} x {cfg.seq_len} | "
          f"{pick_precision(args.precision, device)[0]} | backend {args.backend}"
          f"{' | fallback_random' if args.fallback_random else ''} | load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    if args.which in ("steps", "both") and steps(cfg, args, device):
        return 1
    if args.which in ("networks", "both"):
        networks(cfg, args, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
