"""Training throughput, side by side: our ELECTRA-Small, our BERT-Small, Hugging Face's Electra.

    python benchmarks/bench.py                                  # Table 6 ELECTRA-Small, batch 128, all three
    python benchmarks/bench.py --steps 5 --warmup 2             # on a 2-core CPU (about 10 s a step each)
    python benchmarks/bench.py --device cuda --compile --json bench.json
    python benchmarks/bench.py --device cuda --which ours,ours_compiled,bert,hf   # ours eager and compiled
    python benchmarks/bench.py --size tiny --steps 2 --which ours,bert    # a smoke run (the test does this)

What is measured: full optimizer steps - forward, backward, gradient clipping, AdamW - on the
same synthetic batches (random ids from a fixed seed, [CLS] ... [SEP], masked by objectives.mask_tokens
exactly as training does), with the same config and the same optimizer (make_optimizer). Each
contender runs `--warmup` untimed steps (allocator, torch.compile), then `--steps` timed ones,
and gets a line: steps/s, tokens/s, ms/step (of the median step), MFU, and the memory one step
needs above what was held before it (peak CUDA allocation; peak RSS growth on a CPU) plus the
weights and Adam's state.

Then three lines, side by side, that say what a step costs wherever it runs (tools read them):
    eager ops per step: ours N, bert N, hf N        aten operations of one eager step (benchmarks/step_cost.py)
    activation memory at batch B: ours X MiB, ...    bytes saved for backward (benchmarks/step_cost.py)
    compiled step: G graph(s), B graph break(s), R recompile(s) over S steps     (ours, machinery/step.py)
Both eager counts depend on the device: on a CPU, attention with dropout takes PyTorch's
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

from objectives import mask_tokens
from machinery.device import DeviceError, pick_device, pick_precision
from machinery import cli
from config import SIZES, Config
from train import make_optimizer, training_step, update
from machinery.step import compile_step
from flops import hardware_flops_per_step, peak_flops
from ablations import build_model
from benchmarks.hf_electra import HFElectra
from benchmarks.step_cost import (OpCounter, compile_counters, measure_step_memory, saved_bytes,
                       sync)

# Each objective's masking, as Trainer's: BERT 80/10/10, ELECTRA 85 % [MASK] + 15 % kept.
MASK_KW = {"electra": dict(replace_prob=0.85, random_prob=0.0),
           "bert": dict(replace_prob=0.8, random_prob=0.1)}


def make_batches(cfg, n=4, seed=0):
    """n fixed synthetic batches (CPU), each masked for ELECTRA and for BERT from one seed."""
    V = cfg.vocab_size
    pad, cls, sep, mask = V - 4, V - 3, V - 2, V - 1     # machinery/tokenizer.py puts the specials last
    g = torch.Generator().manual_seed(seed)
    out = {k: [] for k in MASK_KW}
    for _ in range(n):
        x = torch.randint(0, V - 4, (cfg.batch_size, cfg.seq_len), generator=g)
        x[:, 0], x[:, -1] = cls, sep
        s = int(torch.randint(0, 2 ** 31, (1,), generator=g))
        for k, kw in MASK_KW.items():
            b = mask_tokens(x, (pad, cls, sep), mask, cfg.n_slots, cfg.mask_prob, n_random=V - 4,
                            generator=torch.Generator().manual_seed(s), **kw)
            out[k].append(dict(x=x, masked=b))
    return out


# ----------------------------------------------------------------------------- one contender

def check_compiled_step(cfg, device, precision, steps=3):
    """Without --compile: ours' whole step (machinery/step.py) for `steps` steps through Dynamo and
    AOTAutograd with backend aot_eager - the graphs Inductor would compile, run op by op, so no
    code is generated and it takes seconds. At batch <= 8: the graphs do not depend on it."""
    small = replace(cfg, batch_size=min(cfg.batch_size, 8))
    c = Contender("ours", small, make_batches(small, n=steps)["electra"], device, False,
                  precision)
    c.compiled, c.mode = compile_step(update, c.model, c.opt, cfg.grad_clip, device, precision,
                                      backend="aot_eager", fullgraph=False), "compiled"
    for _ in range(steps):
        c.step()
    return c


class Contender:
    """One model + optimizer + its batches, stepped by training_step exactly as training does."""

    def __init__(self, name, cfg, batches, device, compile_, precision="auto"):
        self.name, self.cfg, self.batches, self.device = name, cfg, batches, device
        self.precision = precision
        torch.manual_seed(0)
        self.model = (HFElectra(cfg) if name == "hf" else build_model(cfg)).to(device)
        self.opt = make_optimizer(self.model, cfg, device)
        self.compiled, self.mode = None, "eager"
        if compile_ and name != "hf":                    # HF runs eager, as its users do
            # the whole step as training's --compile runs it (machinery/step.py), except that a graph
            # break splits the step instead of failing it, so that graph_counts can count it
            self.compiled = compile_step(update, self.model, self.opt, cfg.grad_clip, device,
                                         precision, fullgraph=False)
            self.mode = "compiled"
        self.attention = self.model.attn if name == "hf" else "sdpa"
        self.i, self.times, self.mem, self.mem_kind = 0, [], None, "n/a"
        self.graphs, self.breaks = [], 0    # per compiled step: graphs compiled; graph breaks

    def next_batch(self):
        """The next batch, and a learning rate that changes every step as training's schedule
        does (a compiled step must not compile again for it)."""
        self.i += 1
        return self.batches[(self.i - 1) % len(self.batches)], self.cfg.lr * self.i / (self.i + 1)

    def step(self):
        b, lr = self.next_batch()
        if self.compiled is None:
            self.stats = training_step(self.model, self.opt, b, lr, self.cfg, self.device,
                                       self.precision)
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
                                       self.precision)

    def eager_costs(self):
        """Two more eager steps, measured: the aten operations one dispatches (OpCounter) and
        the bytes the other saves for backward (saved_bytes) - apart, because saved-tensor hooks
        change which operations autograd dispatches."""
        b, lr = self.next_batch()
        with OpCounter() as ops:
            training_step(self.model, self.opt, b, lr, self.cfg, self.device, self.precision)
        b, lr = self.next_batch()
        with saved_bytes(self.model) as saved:
            training_step(self.model, self.opt, b, lr, self.cfg, self.device, self.precision)
        return ops.n, saved.total

    def compile_counts(self):
        """Graphs compiled at the first compiled step, graph breaks, graphs compiled again at
        later steps (recompiles), and the number of compiled steps."""
        g = self.graphs
        return dict(graphs=g[0], breaks=self.breaks, recompiles=sum(g[1:]), steps=len(g))

    def timed_step(self):
        sync(self.device)
        t0 = time.perf_counter()
        self.step()
        sync(self.device)
        self.times.append(time.perf_counter() - t0)

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
    p.add_argument("--warmup", type=cli.positive_int, default=3,
                   help="untimed steps first (at least 1)")
    p.add_argument("--which", default="ours,bert,hf",
                   help="comma list of ours, ours_compiled (ours, its step compiled), bert, hf")
    p.add_argument("--compile", action="store_true",
                   help="ours and bert run their whole step compiled (machinery/step.py)")
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto",
                   help="auto: bf16 autocast where the hardware has native bf16 (machinery/device.py)")
    p.add_argument("--threads", type=cli.threads, default=None,
                   help=f"CPU threads for PyTorch (1 to {cli.MAX_THREADS})")
    p.add_argument("--json", type=cli.out_file, metavar="OUT.json",
                   help="also write the results here (its folder must exist)")
    args = p.parse_args(argv)
    args.which = [w.strip() for w in args.which.split(",") if w.strip()]
    if not args.which or set(args.which) - {"ours", "ours_compiled", "bert", "hf"}:
        p.error(f"--which {','.join(args.which)}: choose from ours, ours_compiled, bert, hf")
    try:                                # a GPU that is not there: one line now, not a traceback
        pick_device(args.device)
    except DeviceError as e:
        p.error(str(e))
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    cfg = replace(Config(), **SIZES[args.size])
    cfg = replace(cfg, batch_size=args.batch_size) if args.batch_size else cfg
    try:
        import transformers
        hf_version = transformers.__version__
    except ImportError:
        hf_version = None
        if "hf" in args.which:                           # an optional, benchmark-only extra
            print("transformers not installed: pip install transformers to compare (skipping hf)")
            args.which.remove("hf")
    peak, peak_note = peak_flops(device)
    h = dict(device=torch.cuda.get_device_name(device) if device.type == "cuda" else
             f"CPU, {torch.get_num_threads()} threads" if device.type == "cpu" else device.type,
             torch=torch.__version__, transformers=hf_version, size=args.size,
             batch_size=cfg.batch_size, seq_len=cfg.seq_len, vocab_size=cfg.vocab_size,
             steps=args.steps, warmup=args.warmup, compile=args.compile, peak_flops=peak,
             peak_note=peak_note, precision=pick_precision(args.precision, device)[0], load_avg=os.getloadavg()[0] if hasattr(os, "getloadavg") else -1)
    # the load average shows other jobs on the machine: they slow every contender alike
    print(f"{h['device']} | torch {h['torch']} | transformers {hf_version or 'not installed'} | "
          f"{args.size}: batch {cfg.batch_size} x seq {cfg.seq_len}, vocab {cfg.vocab_size} | "
          f"{args.warmup} warm-up + {args.steps} timed steps, interleaved | {h['precision']} "
          f"autocast for all | load avg "
          f"{h['load_avg']:.1f} | MFU vs {peak_note}" + (f" {peak:.3g} FLOP/s" if peak else ""),
          flush=True)
    batches = make_batches(cfg)
    runs = [Contender(n, replace(cfg, model="bert") if n == "bert" else cfg,
                      batches["bert" if n == "bert" else "electra"], device,
                      args.compile or n == "ours_compiled",
                      args.precision)
            for n in args.which]
    for c in runs:                       # warm-up; the last warm-up step also measures memory
        for _ in range(args.warmup - 1):
            c.step()
        c.mem, c.mem_kind = measure_step_memory(device, c.step)
        c.ops, c.saved = c.eager_costs()             # two more, untimed, eager steps
    for r in range(args.steps):          # round r: one step each, the order rotating
        for c in runs[r % len(runs):] + runs[:r % len(runs)]:
            c.timed_step()
    results = [c.result(peak) for c in runs]
    for r in results:
        print(line(r), flush=True)
    # The ratio pairs the steps of one round (timed seconds apart) and takes the median: what
    # a change in the machine's load does to one round, it does to both sides of its ratio.
    t = {c.name: c.times for c in runs}
    ratios = {f"{a}/hf tokens_per_s": statistics.median(h / o for o, h in zip(t[a], t["hf"]))
              for a in ("ours", "ours_compiled", "bert") if a in t and "hf" in t}
    for k, v in ratios.items():
        print(f"{k.split()[0].replace('/', ' / ')} tokens/s: {v:.2f}x (median over rounds)")
    # A step's costs, side by side (tools read these three lines: keep their words).
    by = {r["name"]: r for r in results}
    by.setdefault("ours", by.get("ours_compiled"))        # its eager costs are ours'
    by = {k: v for k, v in by.items() if v}
    side = lambda f: ", ".join(f"{n} {f(by[n]) if n in by else 'n/a'}"
                               for n in ("ours", "bert", "hf"))
    mib = lambda r: f"{r['activation_bytes'] / 2 ** 20:.0f} MiB"
    print(f"eager ops per step: {side(lambda r: r['eager_ops'])}")
    print(f"activation memory at batch {cfg.batch_size}: {side(mib)}")
    compiled = None
    if "ours" in by:
        ours = {c.name: c for c in runs}
        ours = ours.get("ours_compiled") or ours["ours"]
        if ours.mode == "compiled":
            # CUDA graphs that Inductor skipped (it says why only with TORCH_LOGS=cudagraphs)
            compiled = dict(ours.compile_counts(), backend="inductor", cudagraph_skips=int(
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
