"""How long the compiled step takes to be ready, from an empty compile cache (machinery; no paper
section - what a fresh GPU machine pays before its first training step).

    python benchmarks/compile_time.py --device cpu --size small --batch_size 8
    python benchmarks/compile_time.py --device cuda                   # Table 6, batch 128

For each way of compiling (--which: regional, whole; machinery/step.py) a fresh Python process
with an empty Inductor cache of its own builds the model, compiles the step and times its first
call (compiling, and on CUDA the first run, included) and the two calls after it. One line each,
and the seconds of CPU time the process and its compile workers spent, which a busy machine
changes less than wall-clock time. Both run one after the other: compare them from the same
run, on the same machine.

--cache adds, for each way, a third process: again an empty Inductor cache, but first it loads
the artifacts the cold process saved (machinery/compile_cache.py, as --compile_cache does on a
fresh machine), and its losses must equal the cold process's.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(mode, device, size, batch_size, layers, cache=None, cache_action=None):
    """In this process: the seconds of the first three compiled steps (with `cache`: after
    loading it, or saving to it after them)."""
    sys.path.insert(0, str(ROOT))
    from dataclasses import replace
    import torch
    import train
    from ablations import build_model
    from benchmarks.bench import MASK_KW, bench_data
    from config import SIZES, Config
    from machinery import compile_cache
    from machinery.device import pick_precision
    from machinery.loss_scale import make_loss_scale
    from machinery.step import compile_step
    cfg = replace(Config(), **SIZES[size])
    cfg = replace(cfg, batch_size=batch_size or cfg.batch_size,
                  disc=replace(cfg.disc, layers=layers or cfg.disc.layers))
    dev = torch.device(device)
    loaded = compile_cache.load(cache, dev) if cache_action == "load" else 0
    data = bench_data(cfg)
    batches = [train.masked_batch(data, cfg, MASK_KW["electra"])[0] for _ in range(3)]
    torch.manual_seed(0)
    model = build_model(cfg).to(dev)
    opt = train.make_optimizer(model, cfg, dev)
    # (fp16 where auto picks it: training's loss scaling inside the graph, as training compiles)
    scale = make_loss_scale(pick_precision("auto", dev).name, opt, dev)
    step = compile_step(train.update, model, opt, cfg.grad_clip, dev, "auto",
                        regional=mode == "regional", loss_scale=scale)
    times, losses = [], []
    for i, b in enumerate(batches):
        t0 = time.perf_counter()
        stats = step(b, cfg.lr * (i + 1) / 4)
        losses.append(stats["disc_loss"].item())           # waits for the device
        times.append(time.perf_counter() - t0)
    if cache_action == "save":
        compile_cache.save(cache, dev)
    cpu = sum(getattr(r, f) for r in (resource.getrusage(resource.RUSAGE_SELF),
                                       resource.getrusage(resource.RUSAGE_CHILDREN))
              for f in ("ru_utime", "ru_stime"))
    return dict(mode=mode + ("+cache" if cache_action == "load" else ""), first_step_s=times[0],
                next_steps_s=times[1:], cpu_s=cpu, disc_losses=losses, artifacts_loaded=loaded,
                device=device, size=size, batch_size=cfg.batch_size, layers=cfg.disc.layers,
                torch=torch.__version__)


def main(argv=None):
    p = argparse.ArgumentParser(description="Seconds to the first compiled step, cold cache.")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--size", default="small")
    p.add_argument("--batch_size", type=int, default=None)
    p.add_argument("--layers", type=int, default=None, help="default: the size's")
    p.add_argument("--which", default="regional,whole")
    p.add_argument("--cache", action="store_true",
                   help="also time each way from the artifacts its cold run saved")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)       # (the child process)
    p.add_argument("--artifacts", nargs=2, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, args.device, args.size, args.batch_size, args.layers,
                             *(args.artifacts or (None, None)))))
        return 0
    results = []
    with tempfile.TemporaryDirectory() as keep:
        for mode in [w.strip() for w in args.which.split(",") if w.strip()]:
            artifacts = str(Path(keep) / f"{mode}.bin")
            for action in ["save", "load"] if args.cache else [None]:
                r = run_one(mode, args, ["--artifacts", artifacts, action] if action else [])
                if r is None:
                    break
                results.append(r)
    by = {r["mode"]: r for r in results}
    for mode in [m for m in by if m + "+cache" in by]:
        same = by[mode]["disc_losses"] == by[mode + "+cache"]["disc_losses"]
        print(f"{mode}+cache / {mode}, first step: "
              f"{by[mode + '+cache']['first_step_s'] / by[mode]['first_step_s']:.2f} "
              f"({by[mode + '+cache']['artifacts_loaded']} artifacts loaded); losses "
              + ("equal" if same else f"DIFFER: {by[mode]['disc_losses']} against "
                                      f"{by[mode + '+cache']['disc_losses']}"))
    if "whole" in by and "regional" in by:
        print(f"regional / whole, first step: {by['regional']['first_step_s'] / by['whole']['first_step_s']:.2f}"
              f" (CPU time {by['regional']['cpu_s'] / by['whole']['cpu_s']:.2f})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0 if results else 1


def run_one(mode, args, extra):
    """One fresh process with an empty Inductor cache: its result, printed, or None."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache, TRITON_CACHE_DIR=cache + "/t")
        cmd = [sys.executable, __file__, "--one", mode, "--device", args.device, "--size",
               args.size] + (["--batch_size", str(args.batch_size)] if args.batch_size
                             else []) + (["--layers", str(args.layers)] if args.layers else [])
        t0 = time.perf_counter()
        out = subprocess.run(cmd + extra, env=env, capture_output=True, text=True)
        if out.returncode:
            print(f"{mode}: FAILED (exit {out.returncode}): "
                  + (out.stderr.strip().splitlines() or [""])[-1][:200])
            return None
        r = json.loads(out.stdout.strip().splitlines()[-1])
        r["process_s"] = time.perf_counter() - t0
        print(f"{r['mode']}: first step {r['first_step_s']:.1f} s (compiling included), next "
              + ", ".join(f"{t:.2f}" for t in r["next_steps_s"])
              + f" s | process {r['process_s']:.1f} s, CPU time {r['cpu_s']:.1f} s | "
              f"{r['size']}, {r['layers']} layers, batch {r['batch_size']}, {r['device']}, "
              f"torch {r['torch']}, load average {os.getloadavg()[0]:.1f}", flush=True)
        return r


if __name__ == "__main__":
    sys.exit(main())
