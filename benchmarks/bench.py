"""Training throughput, side by side: our ELECTRA-Small, our BERT-Small, Hugging Face's Electra.

    python benchmarks/bench.py                                  # Table 6 ELECTRA-Small, batch 128, all three
    python benchmarks/bench.py --steps 5 --warmup 2             # on a 2-core CPU (about 10 s a step each)
    python benchmarks/bench.py --device cuda --compile --json bench.json
    python benchmarks/bench.py --device cuda --which ours,ours_compiled,bert,hf   # ours eager and compiled
    python benchmarks/bench.py --device cuda --which ours_compiled,ours_regional,hf_compiled   # compiled, each
    python benchmarks/bench.py --size tiny --steps 2 --which ours,bert    # a smoke run (the test does this)

What is measured is the training loop's own step (train.py), nothing less and nothing more:
batches made as training makes them - batches.PretrainingData's two-segment examples
([CLS] A [SEP] B [SEP], padded where a document ends early, with pad_mask and segment_ids),
masked by train.masked_batch - from a prepared corpus (--data) or, without one, from a
synthetic token stream with sentences and documents (batches.synthetic_arrays); the same
train.training_step or compiled step (machinery/step.py); on a CPU the batch made in line, inside
the timed step, on a GPU by batches.Prefetcher's thread into pinned memory, as training does.
Each contender runs `--warmup` untimed steps (allocator, torch.compile), then its timed steps
in blocks of `--block` (default 10 on a GPU, 1 elsewhere) with a device sync only at a block's
ends - training never syncs between log lines, so a per-step sync would time a slower step -
and gets a line: steps/s, tokens/s, ms/step (of the median block), MFU, and the memory one step
needs above what was held before it (peak CUDA allocation; peak RSS growth on a CPU) plus the
weights and Adam's state.

Then three lines, side by side, that say what a step costs wherever it runs (tools read them):
    eager ops per step: ours N, bert N, hf N        aten operations of one eager step (benchmarks/step_cost.py)
    activation memory at batch B: ours X MiB, ...    bytes saved for backward (benchmarks/step_cost.py)
    compiled step: G graph(s), B graph break(s), R recompile(s) over S steps     (ours, machinery/step.py)
and, for ours, a roofline *estimate* of its step on an H100 SXM, an H200 SXM, an RTX 4090, a V100 and a T4,
eager and as a CUDA graph, from the bytes and FLOPs of its counted operations (step_cost.roofline; docs/gpu.md
says what it is worth). Both eager counts depend on the device: on a CPU, attention with dropout takes PyTorch's
unfused "math" path (~45 operations and the saved attention probabilities per layer), where a
GPU runs one fused kernel. The compiled line comes from the compiled contender with --compile
(or ours_compiled), else from a quick trace of ours with backend aot_eager.

Why ratios, and why interleaved: an absolute step time says as much about the machine (clock,
threads, the BLAS library, other jobs) as about the code. Timed side by side, the contenders
share all of that, so "ours / HF tokens/s" is the number that carries over to another machine.
Side by side means *interleaved*: round r times one step of every contender (in a rotating
order), so a job that starts or stops on a shared machine slows everyone alike (timed one after
the other, such a change alone moved the ratio 3x here), and a ratio is the median over rounds
of the ratio within a round. No test asserts a speed: the tests check the wiring and the
output; the numbers are for people.

MFU uses flops.hardware_flops_per_step - the paper's count (Appendix E) without its "dense"
embedding lookups, as the trainer does - for HF's ELECTRA too, because both do the same
necessary work by that count. HF's generator projects *all* 128 positions onto
the 30k vocabulary (ElectraForMaskedLM has no notion of "only the masked slots"), ours only the
19 mask slots; that extra work is part of what is compared.
"""
import json
import os
import statistics
import sys
from pathlib import Path
import time
from dataclasses import replace

import torch

if not __package__:   # run as a path (python benchmarks/bench.py): import from the project root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from data import DataError
from machinery.device import PRECISIONS, pick_device, pick_precision, refuse_unavailable
from machinery.loss_scale import make_loss_scale
from machinery import cli
from config import SIZES, Config
from train import make_optimizer, masked_batch, training_step, update
from batches import PretrainingData, Prefetcher, synthetic_arrays
from machinery.step import compile_step
from flops import hardware_flops_per_step, peak_flops
from ablations import build_model
from benchmarks.hf_electra import HFElectra
from benchmarks.step_cost import (CARDS, OpCounter, RooflineCounter, compile_counters,
                                  measure_step_memory, roofline, saved_bytes, sync)

# Each objective's masking, as Trainer's: BERT 80/10/10, ELECTRA 85 % [MASK] + 15 % kept.
MASK_KW = {"electra": dict(replace_prob=0.85, random_prob=0.0),
           "bert": dict(replace_prob=0.8, random_prob=0.1)}


def bench_data(cfg, data_dir=None, seed=0):
    """A batches.PretrainingData that serves training's batches: of the prepared corpus at
    data_dir, or of a synthetic stream of about 64 batches' tokens (enough examples that no
    batch repeats within a benchmark)."""
    if data_dir:
        return PretrainingData(data_dir, "train", cfg.batch_size, cfg.seq_len, seed)
    arrays = synthetic_arrays(cfg.vocab_size, 64 * cfg.batch_size * cfg.seq_len, seed)
    return PretrainingData("(synthetic)", "train", cfg.batch_size, cfg.seq_len, seed,
                           arrays=arrays)


def make_batches(cfg, n=4, seed=0):
    """n batches as training makes them (x, segment_ids, pad_mask, masked), masked for ELECTRA
    and for BERT: the same examples and mask positions for both, each with its own rule."""
    out = {}
    for k, kw in MASK_KW.items():
        data = bench_data(cfg, seed=seed)
        out[k] = [masked_batch(data, cfg, kw)[0] for _ in range(n)]
    return out


def in_turn(items, rounds):
    """The order of each round: every item once, the first one rotating, so that a change in
    the machine's load during a round slows them all alike."""
    for r in range(rounds):
        k = r % len(items)
        yield items[k:] + items[:k]


def speed_ratio(times, others):
    """How much faster `times` ran than `others` (seconds, round by round): the median over
    rounds of the ratio within a round, which a change in load between rounds leaves alone."""
    return statistics.median(o / t for t, o in zip(times, others))


# ----------------------------------------------------------------------------- one contender

def check_compiled_step(cfg, device, precision, steps=3):
    """Without --compile: ours' whole step (machinery/step.py) for `steps` steps through Dynamo and
    AOTAutograd with backend aot_eager - the graphs Inductor would compile, run op by op, so no
    code is generated and it takes seconds. At batch <= 8: the graphs do not depend on it."""
    small = replace(cfg, batch_size=min(cfg.batch_size, 8))
    c = Contender("ours", small, bench_data(small), device, False, precision)
    c.compiled, c.mode = compile_step(update, c.model, c.opt, cfg.grad_clip, device, precision,
                                      backend="aot_eager", fullgraph=False,
                                      loss_scale=c.loss_scale, trace_backward=True), "compiled"
    for _ in range(steps):
        c.step()
    return c


# A contender's name: the model (ours, bert, hf), then how its step runs: eager (no suffix),
# "_compiled" the whole step one graph, "_regional" one block compiled for all its repeats
# (machinery/step.py: compile_step, compile_regional).
CONTENDERS = ("ours", "ours_compiled", "ours_regional", "bert", "hf", "hf_compiled",
              "hf_regional")


class Contender:
    """One model + optimizer + its data, stepped as training steps: the batch made in line on a
    CPU, by a Prefetcher thread on a GPU; training_step or the compiled step."""

    def __init__(self, name, cfg, data, device, compile_, precision="auto"):
        self.name, self.cfg, self.device = name, cfg, device
        self.precision = precision
        masking = MASK_KW["bert" if cfg.model == "bert" else "electra"]
        make = lambda: masked_batch(data, cfg, masking)
        self.fetch = Prefetcher(make) if device.type == "cuda" else make
        torch.manual_seed(0)
        hf = name.startswith("hf")
        self.model = (HFElectra(cfg) if hf else build_model(cfg)).to(device)
        self.opt = make_optimizer(self.model, cfg, device)
        # fp16 (--precision fp16, or auto on a T4 / V100): training's loss scaling, skip included
        self.loss_scale = make_loss_scale(pick_precision(precision, device).name, self.opt,
                                          device)
        self.compiled, self.mode = None, "eager"
        regional = name.endswith("_regional")
        if compile_ or regional or name.endswith("_compiled"):
            # the step as training's --compile runs it (machinery/step.py), except that a graph
            # break splits the whole step instead of failing it, so that graph_counts can count
            # it; HF's Electra compiled by the same function. Ours traces backward into its
            # graph, as training does; HF's, whose graph breaks split its step, must not (a
            # traced backward across its breaks trained nothing: machinery/step.py), so
            # AOTAutograd compiles its backward. `trains()` checks both after the warm-up.
            self.compiled = compile_step(update, self.model, self.opt, cfg.grad_clip, device,
                                         precision, fullgraph=False, regional=regional,
                                         loss_scale=self.loss_scale, trace_backward=not hf)
            self.mode = "regional" if regional else "compiled"
        self.attention = self.model.attn if hf else "sdpa"
        self.i, self.times, self.mem, self.mem_kind = 0, [], None, "n/a"
        self.graphs, self.breaks = [], 0    # per compiled step: graphs compiled; graph breaks

    def next_batch(self):
        """The next batch, and a learning rate that changes every step as training's schedule
        does (a compiled step must not compile again for it)."""
        self.i += 1
        return self.fetch()[0], self.cfg.lr * self.i / (self.i + 1)

    def weights(self):
        return [p.detach().clone() for p in self.model.parameters()]

    def trains(self, before):
        """Whether every weight moved since `before` (self.weights()): a step that times well
        but updates nothing would win any benchmark."""
        return all(not torch.equal(a, p) for a, p in zip(before, self.model.parameters()))

    def close(self):
        if isinstance(self.fetch, Prefetcher):
            self.fetch.close()

    def step(self):
        b, lr = self.next_batch()
        if self.compiled is None:
            self.stats = training_step(self.model, self.opt, b, lr, self.cfg, self.device,
                                       self.precision, self.loss_scale)
            return
        try:
            graphs, breaks = compile_counters()
            self.stats = self.compiled(b, lr)
            self.graphs.append(compile_counters()[0] - graphs)
            self.breaks += compile_counters()[1] - breaks
        except Exception as e:                       # compile errors surface on the first call
            print(f"{self.name}: torch.compile failed, falling back to eager: {type(e).__name__}: "
                  + (str(e).strip().splitlines() or [""])[0], flush=True)
            self.opt.zero_grad(set_to_none=True)
            self.compiled, self.mode = None, "eager (compile failed)"
            self.stats = training_step(self.model, self.opt, b, lr, self.cfg, self.device,
                                       self.precision, self.loss_scale)

    def eager_costs(self):
        """Two more eager steps, measured: the aten operations one dispatches (OpCounter) and
        the bytes the other saves for backward (saved_bytes) - apart, because saved-tensor hooks
        change which operations autograd dispatches. Eager even where blocks were compiled
        (regional): Dynamo would otherwise trace the hooks, and recompile for them."""
        with torch.compiler.set_stance("force_eager"):
            return self._eager_costs()

    def _eager_costs(self):
        b, lr = self.next_batch()
        with OpCounter() as ops:
            training_step(self.model, self.opt, b, lr, self.cfg, self.device, self.precision,
                          self.loss_scale)
        b, lr = self.next_batch()
        with saved_bytes(self.model) as saved:
            training_step(self.model, self.opt, b, lr, self.cfg, self.device, self.precision,
                          self.loss_scale)
        b, lr = self.next_batch()
        with RooflineCounter() as moved:
            training_step(self.model, self.opt, b, lr, self.cfg, self.device, self.precision,
                          self.loss_scale)
        self.roofline = {card: dict(zip(("eager_s", "cuda_graph_s"), roofline(moved.ops, spec)))
                         for card, spec in CARDS.items()}
        return ops.n, saved.total

    def compile_counts(self):
        """Graphs compiled at the first compiled step, graph breaks, graphs compiled again at
        later steps (recompiles), and the number of compiled steps."""
        g = self.graphs
        return dict(graphs=g[0], breaks=self.breaks, recompiles=sum(g[1:]), steps=len(g))

    def timed_block(self, n):
        """n steps back to back, as training runs them: a device sync at the ends only."""
        sync(self.device)
        t0 = time.perf_counter()
        for _ in range(n):
            self.step()
        sync(self.device)
        self.times.append((time.perf_counter() - t0) / n)

    def result(self, peak):
        c, dt = self.cfg, statistics.median(self.times)
        flops = hardware_flops_per_step(c)
        tensors = [*self.model.parameters(), *(t for s in self.opt.state.values()
                                              for t in s.values() if torch.is_tensor(t))]
        state = sum(t.numel() * t.element_size() for t in tensors)    # weights, Adam's m and v
        return dict(name=self.name, model=c.model, mode=self.mode, attention=self.attention,
                    params=sum(p.numel() for p in self.model.parameters()),
                    steps_per_s=1 / dt, tokens_per_s=c.batch_size * c.seq_len / dt,
                    ms_per_step=1000 * dt, step_times_s=self.times, flops_per_step=flops,
                    mfu=flops / dt / peak if peak else None, state_bytes=state,
                    step_mem_bytes=self.mem, mem_kind=self.mem_kind,
                    eager_ops=self.ops, activation_bytes=self.saved,
                    roofline_estimate=self.roofline,
                    last_mlm_loss=self.stats["mlm_loss"].item())


def line(r):
    mfu = "  -  " if r["mfu"] is None else f"{100 * r['mfu']:5.1f}%"
    mem = "n/a" if r["step_mem_bytes"] is None else f"{r['step_mem_bytes'] / 2 ** 20:,.0f} MiB"
    return (f"{r['name']:<5} {r['mode']:<9} attn={r['attention']:<5} {r['params'] / 1e6:5.2f}M | "
            f"{r['steps_per_s']:7.3f} steps/s | {r['tokens_per_s']:9,.0f} tok/s | "
            f"{r['ms_per_step']:9.1f} ms/step | MFU {mfu} | one step: {mem} ({r['mem_kind']})"
            f" + {r['state_bytes'] / 2 ** 20:,.0f} MiB weights & Adam")


def parse_args(argv=None):
    p = cli.Parser(description="Training throughput: ours, BERT-Small, HF Electra.")
    p.add_argument("--device", choices=["cpu", "cuda", "mps"], help="default: best available")
    p.add_argument("--size", choices=sorted(SIZES), default="small")
    p.add_argument("--batch_size", type=cli.batch_size, default=None,
                   help=f"default: the size's (128); at most {cli.MAX_BATCH}")
    p.add_argument("--steps", type=cli.positive_int, default=20, help="timed steps per contender")
    p.add_argument("--block", type=cli.positive_int, default=None,
                   help="steps timed together, a device sync at their ends only (default: 10 on "
                        "a GPU, 1 elsewhere); --steps is rounded down to whole blocks, at least one")
    p.add_argument("--data", type=cli.nonempty, default=None,
                   help="a prepared data folder to take the batches from (default: a synthetic "
                        "stream of two-segment examples, as PretrainingData cuts them)")
    p.add_argument("--warmup", type=cli.positive_int, default=3,
                   help="untimed steps first (at least 1)")
    p.add_argument("--which", default="ours,bert,hf",
                   help="comma list of " + ", ".join(CONTENDERS) + " (_compiled: the whole step "
                        "one graph; _regional: one block compiled for all its layers)")
    p.add_argument("--compile", action="store_true",
                   help="ours and bert run their whole step compiled (machinery/step.py); hf "
                        "stays eager unless named hf_compiled")
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="auto: bf16 autocast where the hardware has native bf16, fp16 with loss "
                        "scaling on sm_70-sm_75 GPUs (machinery/device.py)")
    p.add_argument("--threads", type=cli.threads, default=None,
                   help=f"CPU threads for PyTorch (1 to {cli.MAX_THREADS})")
    p.add_argument("--json", type=cli.out_file, metavar="OUT.json",
                   help="also write the results here (its folder must exist)")
    args = p.parse_args(argv)
    args.which = [w.strip() for w in args.which.split(",") if w.strip()]
    if not args.which or set(args.which) - set(CONTENDERS):
        p.error(f"--which {','.join(args.which)}: choose from {', '.join(CONTENDERS)}")
    refuse_unavailable(p, args.device)     # a GPU that is not there: one line now
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    cfg = replace(Config(), **SIZES[args.size])
    cfg = replace(cfg, batch_size=args.batch_size) if args.batch_size else cfg
    block = args.block or (10 if device.type == "cuda" else 1)
    rounds = max(1, args.steps // block)
    try:
        data = bench_data(cfg, args.data)            # (checked before any model is built)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    cfg = replace(cfg, vocab_size=data.meta["vocab_size"])     # --data: the corpus' vocabulary
    try:
        import transformers
        hf_version = transformers.__version__
    except ImportError:
        hf_version = None
        hf = [w for w in args.which if w.startswith("hf")]
        if hf:                                           # an optional, benchmark-only extra
            print("transformers not installed: pip install transformers to compare (skipping "
                  f"{', '.join(hf)})")
            args.which = [w for w in args.which if w not in hf]
    peak, peak_note = peak_flops(device)
    h = dict(device=torch.cuda.get_device_name(device) if device.type == "cuda" else
             f"CPU, {torch.get_num_threads()} thread{'s' * (torch.get_num_threads() != 1)}"
             if device.type == "cpu" else device.type,
             torch=torch.__version__, transformers=hf_version, size=args.size,
             batch_size=cfg.batch_size, seq_len=cfg.seq_len, vocab_size=cfg.vocab_size,
             steps=rounds * block, block=block, rounds=rounds,
             data=args.data or "synthetic", warmup=args.warmup, compile=args.compile, peak_flops=peak,
             peak_note=peak_note, precision=pick_precision(args.precision, device)[0], load_avg=os.getloadavg()[0] if hasattr(os, "getloadavg") else -1)
    # the load average shows other jobs on the machine: they slow every contender alike
    print(f"{h['device']} | torch {h['torch']} | transformers {hf_version or 'not installed'} | "
          f"{args.size}: batch {cfg.batch_size} x seq {cfg.seq_len}, vocab {cfg.vocab_size} | "
          f"{args.warmup} warm-up + {rounds} x {block} timed steps, interleaved | data "
          f"{h['data']} | {h['precision']} "
          f"autocast for all | load avg "
          f"{h['load_avg']:.1f} | MFU vs {peak_note}" + (f" {peak:.3g} FLOP/s" if peak else ""),
          flush=True)
    # every contender its own copy of the data, from the same seed: the same batches for all
    runs = [Contender(n, replace(cfg, model="bert") if n == "bert" else cfg,
                      bench_data(cfg, args.data), device, args.compile and n in ("ours", "bert"),
                      args.precision)
            for n in args.which]
    for c in runs:                       # warm-up; the last warm-up step also measures memory
        before = c.weights()
        for _ in range(args.warmup - 1):
            c.step()
        c.mem, c.mem_kind = measure_step_memory(device, c.step)
        # (fp16 may skip its first steps on overflow, as training does: not checked there)
        if c.loss_scale is None and not c.trains(before):
            print(f"error: {c.name}'s {c.mode} step left some weights unchanged over its "
                  f"{args.warmup} warm-up steps: it does not train, so its speed means "
                  "nothing", file=sys.stderr)
            return 1
        c.ops, c.saved = c.eager_costs()             # two more, untimed, eager steps
    for order in in_turn(runs, rounds):  # round r: one block each, the order rotating
        for c in order:
            c.timed_block(block)
    for c in runs:
        c.close()
    results = [c.result(peak) for c in runs]
    for r in results:
        print(line(r), flush=True)
    # The ratio pairs the steps of one round (timed seconds apart) and takes the median: what
    # a change in the machine's load does to one round, it does to both sides of its ratio.
    t = {c.name: c.times for c in runs}
    ratios = {f"{a}/{b} tokens_per_s": speed_ratio(t[a], t[b])
              for b in ("hf", "hf_compiled") for a in CONTENDERS
              if a in t and b in t and not a.startswith("hf")}
    for k, v in ratios.items():
        print(f"{k.split()[0].replace('/', ' / ')} tokens/s: {v:.2f}x (median over rounds)")
    # A step's costs, side by side (tools read these three lines: keep their words).
    by = {r["name"]: r for r in results}
    by.setdefault("ours", by.get("ours_compiled") or by.get("ours_regional"))   # (eager costs)
    by = {k: v for k, v in by.items() if v}
    side = lambda f: ", ".join(f"{n} {f(by[n]) if n in by else 'n/a'}"
                               for n in ("ours", "bert", "hf"))
    mib = lambda r: f"{r['activation_bytes'] / 2 ** 20:.0f} MiB"
    print(f"eager ops per step: {side(lambda r: r['eager_ops'])}")
    print(f"activation memory at batch {cfg.batch_size}: {side(mib)}")
    # A prediction to hold a GPU's measurement against (step_cost.roofline): an estimate.
    if "ours" in by:
        for card, t in by["ours"]["roofline_estimate"].items():
            print(f"roofline estimate (not measured) of ours' step on {card}: eager "
                  f"{1000 * t['eager_s']:.2f} ms, CUDA graph {1000 * t['cuda_graph_s']:.2f} ms; "
                  f"1M steps in {t['cuda_graph_s'] * 1e6 / 3600:.1f} h (graph)")
    compiled = None
    ours = next((c for n in ("ours_compiled", "ours_regional", "ours") for c in runs
                 if c.name == n), None)
    if ours is not None:
        if ours.mode in ("compiled", "regional"):
            # CUDA graphs that Inductor skipped (it says why only with TORCH_LOGS=cudagraphs)
            compiled = dict(ours.compile_counts(), backend="inductor", mode=ours.mode,
                            cudagraph_skips=int(
                torch._dynamo.utils.counters["inductor"]["cudagraph_skips"]))
        elif ours.mode == "eager":
            compiled = dict(check_compiled_step(cfg, device, args.precision).compile_counts(),
                            backend="aot_eager")
    if compiled and compiled["steps"]:
        print(f"compiled step: {compiled['graphs']} graph(s), {compiled['breaks']} graph "
              f"break(s), {compiled['recompiles']} recompile(s) over {compiled['steps']} steps")
        print(f"  (backend {compiled['backend']}" + (": Dynamo and AOTAutograd only, the graphs "
              "Inductor would compile; --compile times the real thing)"
              if compiled["backend"] == "aot_eager" else ")"))
        if device.type == "cuda" and compiled["backend"] == "inductor":
            print(f"  CUDA graphs: skipped {compiled['cudagraph_skips']} time(s)" +
                  (" (TORCH_LOGS=cudagraphs says why)" if compiled["cudagraph_skips"] else ""))
    else:
        print("compiled step: not measured (" + ("ours did not run" if "ours" not in by else
                                                   "torch.compile failed") + ")")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(header=h, results=results, ratios=ratios, compiled_step=compiled),
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
