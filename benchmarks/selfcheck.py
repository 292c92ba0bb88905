"""The compiled step's self-check, about a minute on a GPU (machinery; no paper section - the
check that --compile trains the model train.py would train eagerly).

    python benchmarks/selfcheck.py                      # CUDA, Table 6's shape (batch 128 x 128)
    python benchmarks/selfcheck.py --layers 2           # the same, 2 of its 12 layers (G's too)
    python benchmarks/selfcheck.py --device cpu --size tiny --backend aot_eager    # the CPU test

Two copies of the model from the same weights take `--steps` steps on the same batches (made
as training makes them, benchmarks/bench.py), step i at i x --lr (1e-4, 2e-4, 3e-4): one eager
(train.training_step), one the whole compiled step of machinery/step.py (Inductor, and on CUDA its
CUDA graphs). Dropout is off and the sample x̂ is drawn with eager's random numbers
(fallback_random), so both copies compute the same thing; float32 with TF32 off, so they differ
only by the order of float32 sums. It passes when

  - every step's L_MLM and L_Disc agree within --rtol (default 2e-3, a stated tolerance:
    float32 summation order stays far below it - Inductor against eager on a CPU, 3.5e-6 at
    most at Table 6's size and ~1e-7 at the tiny size - while one update lost or wrong moves
    L_Disc by far more: 0.667 -> 0.425 -> 0.669 over these 3 steps at Table 6's size, 0.673 ->
    0.656 -> 0.608 at the tiny size; tests/test_compiled_step.py drops one update and sees it
    fail), and
  - on CUDA, Inductor ran every compiled step as a CUDA graph: a skip (a graph input that is
    written to and not marked static, machinery/step.py) is a failure here, not a note, since the
    compiled step's speed is the CUDA graph's. The regional step (--regional) is recorded as a
    CUDA graph after two warm-up steps (machinery/cuda_graph.py): on CUDA it is checked over 4
    steps, so that the recorded step and a replay on a new batch are compared with eager.

--layers N keeps N of the size's layers, all else the same: the compiled step is the same code
with fewer repeats of the same layer, and compiling it takes a fraction of the time (Inductor
compiles the whole step as one graph, every layer anew: the Table 6 step with its 12 layers ran
past 240 s of compiling on an H200 with an empty cache; benchmarks/gpu_measure.sh checks 2).

Why these learning rates, below Table 6's peak of 5e-4: at 1e-3, 2e-3 and 3e-3 the Table 6
model's L_Disc jumps to 0.91 at step 3, where float32 summation order alone is amplified - Inductor
against eager on a CPU differed there by 2.2e-3 in one run and 1.3e-2 in the next, the first two
steps within 5e-5 (2-core AMD EPYC, torch 2.13.0; at 1e-4 the three steps agreed within 3.5e-6).

--compile_cache FILE loads torch.compile's artifacts an earlier machine saved before compiling
(machinery/compile_cache.py), so that what was loaded is checked as a fresh compile is, and
saves them after a PASS only; after a FAILED check with artifacts loaded, FILE is moved to
FILE.failed, so that the next run compiles from scratch.

Prints one line per step and a last line `selfcheck: PASSED ...` or `selfcheck: FAILED ...`;
exits 0 or 1 (2 for bad flags).
"""
import copy
import sys
from dataclasses import replace
from pathlib import Path

import torch

if not __package__:   # run as a path (python benchmarks/selfcheck.py): import from the project root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablations import build_model
from config import SIZES, Config
from machinery import cli, compile_cache
from machinery.device import pick_device, refuse_unavailable
from machinery.step import compile_step
import train
from benchmarks.bench import bench_data, MASK_KW


def parse_args(argv=None):
    p = cli.Parser(description="The compiled step against eager: losses and CUDA graphs.")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--steps", type=cli.positive_int, default=None,
                   help="steps to compare (default 3; 4 for --regional on CUDA, whose step is "
                        "recorded as a CUDA graph at step 3 and replayed from then on)")
    p.add_argument("--lr", type=cli.positive_float, default=1e-4,
                   help="step i (from 1) runs at i x this learning rate (default 1e-4)")
    p.add_argument("--layers", type=cli.positive_int, default=None,
                   help="keep this many of the size's layers (default: all of them)")
    p.add_argument("--rtol", type=cli.float_range(0, 1, accepts="a relative tolerance in (0, 1)"),
                   default=2e-3)
    p.add_argument("--regional", action="store_true",
                   help="check the regional compile (each Transformer block compiled, one "
                        "for all its layers; the rest eager) instead of the whole step")
    p.add_argument("--compile_cache", type=cli.out_file, default=None, metavar="FILE",
                   help="load torch.compile's artifacts from FILE first and save them there "
                        "after the first step (machinery/compile_cache.py): a loaded artifact "
                        "is checked as a compiled one is")
    p.add_argument("--backend", choices=["inductor", "aot_eager"], default="inductor",
                   help="aot_eager: Dynamo and AOTAutograd without code generation (seconds)")
    args = p.parse_args(argv)
    refuse_unavailable(p, args.device)     # a GPU that is not there: one line now
    return args


def main(argv=None):
    args = parse_args(argv)
    device = pick_device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    cfg = replace(Config(), **SIZES[args.size])
    full, layers = cfg.disc.layers, args.layers or cfg.disc.layers   # G takes D's depth and
    cfg = replace(cfg, disc=replace(cfg.disc, dropout=0.0, layers=layers))  # dropout (config.py)
    data = bench_data(cfg)
    if args.steps is None:   # the recorded regional step: two warm-up steps, a recording, a replay
        args.steps = 4 if args.regional and device.type == "cuda" else 3
    batches = [train.masked_batch(data, cfg, MASK_KW["electra"])[0] for _ in range(args.steps)]
    torch.manual_seed(0)
    model = build_model(cfg).to(device)
    twin = copy.deepcopy(model)
    opt, twin_opt = train.make_optimizer(model, cfg, device), train.make_optimizer(twin, cfg, device)
    loaded = compile_cache.load(args.compile_cache, device) if args.compile_cache else 0
    torch._dynamo.utils.counters.clear()
    worst, failures = 0.0, []
    with torch._inductor.config.patch(fallback_random=True):
        step = compile_step(train.update, twin, twin_opt, cfg.grad_clip, device, "fp32",
                            backend=args.backend, regional=args.regional)
        for i, batch in enumerate(batches):
            lr = args.lr * (i + 1)
            torch.manual_seed(i)
            eager = train.training_step(model, opt, batch, lr, cfg, device, "fp32")
            torch.manual_seed(i)
            try:
                compiled = step(batch, lr)
            except Exception as e:                       # compiling failed: that is the answer
                print(f"selfcheck: FAILED: the compiled step raised {type(e).__name__}: "
                      f"{(str(e).splitlines() or [''])[0][:200]}"
                      + (f"; {set_aside(args.compile_cache, loaded)}" if loaded else ""))
                return 1
            diffs = {k: abs(compiled[k].item() - eager[k].item()) / abs(eager[k].item())
                     for k in ("mlm_loss", "disc_loss")}
            worst = max(worst, *diffs.values())
            print(f"step {i + 1}: " + " | ".join(
                f"{k} eager {eager[k].item():.6f} compiled {compiled[k].item():.6f} "
                f"(rel {d:.1e})" for k, d in diffs.items()), flush=True)
    if worst > args.rtol:
        failures.append(f"losses differ by {worst:.1e} relative, above --rtol {args.rtol:g}")
    skips = int(torch._dynamo.utils.counters["inductor"]["cudagraph_skips"])
    graphs = "n/a (not CUDA)"
    if device.type == "cuda" and args.backend == "inductor" and args.regional:
        graphs = ("recorded at step 3 and replayed (machinery/cuda_graph.py)" if args.steps >= 3
                  else "not reached (the regional step is recorded at step 3)")
    elif device.type == "cuda" and args.backend == "inductor":
        graphs = f"skipped {skips} time(s)"
        if skips:
            failures.append(f"Inductor ran the step without CUDA graphs {skips} time(s) "
                            "(TORCH_LOGS=cudagraphs says why)")
    depth = f", {layers} of its {full} layers" if args.layers else ""
    where = (f"{args.size}{depth} (batch {cfg.batch_size} x {cfg.seq_len}), {args.backend}"
             f"{', regional' if args.regional else ''}, {device.type}")
    if failures:
        if loaded:
            failures.append(set_aside(args.compile_cache, loaded))
        print(f"selfcheck: FAILED at {where}: " + "; ".join(failures))
        return 1
    if args.compile_cache:          # only artifacts that passed are kept for the next machine
        compile_cache.save(args.compile_cache, device)
    print(f"selfcheck: PASSED at {where}: {args.steps} steps, losses within {worst:.1e} relative "
          f"(tolerance {args.rtol:g}); CUDA graphs {graphs}")
    return 0


def set_aside(cache, loaded):
    """A check failed with `loaded` artifacts from `cache`: the file moved to cache.failed, so
    that the next run compiles from scratch; the line that says so."""
    cache = Path(cache)
    aside = cache.with_name(cache.name + ".failed")
    try:
        cache.replace(aside)
    except OSError:
        return f"with {loaded} artifacts loaded from {cache}: delete it and run again"
    return (f"with {loaded} artifacts loaded from {cache}, now moved to {aside}: run again, "
            "compiling from scratch, to tell a stale cache from a compiler's error")


if __name__ == "__main__":
    sys.exit(main())
