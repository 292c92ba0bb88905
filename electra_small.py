"""ELECTRA-Small pre-training: the command line.

Paper §2 (the algorithm: objectives.py), §3.3 (small models), Appendix A / Table 6 (the
hyperparameters: config.py), Appendix E (FLOPs: flops.py). The loop itself is train.py: plain
PyTorch, Adam without bias correction (optim.py), gradient clipping at 1.0, warm-up then linear
decay. This file turns the arguments into a Config, checks them and a checkpoint to resume
(one-line errors, never a traceback), and calls train.train.

    python electra_small.py --hours 6                  # the demo corpus, prepared on first use
    python electra_small.py --data data/wiki00 --max_steps 1000000    # the paper's full run
    python electra_small.py --model bert --hours 6     # BERT-Small at equal compute (§3.3)
    torchrun --nproc_per_node=4 electra_small.py ...   # data parallel (machinery/distributed.py)

Time budget: with --hours the learning-rate schedule is laid over the *wall-clock* budget, so a
6-hour run warms up, decays to zero and stops at the deadline, whatever the hardware does.
That is the paper's Table 1 question - what does a given amount of compute buy? - and it makes
ELECTRA and BERT comparable at equal time without counting steps by hand.
"""
import signal
import sys
from dataclasses import replace
from pathlib import Path

import torch

from machinery import cli
from ablations import ConfigError, build_model
from machinery.checkpoint import CheckpointError, load_checkpoint, remove_stale_temporaries
from config import DEMO_VOCAB, SIZES, Config
from data import DataError, demo_dir, load_meta, load_tokenizer, prepare_demo
from machinery.device import PRECISIONS, DeviceError, pick_device, pick_precision
from machinery.distributed import Dist
from flops import train_flops_per_step
from machinery.divergence import TrainingDiverged
from train import train


def count_params(cfg):
    """(generator-only, discriminator incl. embeddings, shared embeddings, total) in parameters.
    The model is built on the "meta" device: shapes only, no memory, no random numbers drawn."""
    with torch.device("meta"):
        model = build_model(cfg)
    n = lambda m: sum(p.numel() for p in m.parameters())
    if cfg.model == "bert":
        shared = n(model.mlm.embeddings)
        return 0, n(model.mlm), shared, n(model)
    shared = n(model.discriminator.embeddings)
    d_ids = {id(p) for p in model.discriminator.parameters()}
    g_only = sum(p.numel() for p in model.generator.parameters() if id(p) not in d_ids)
    return g_only, n(model.discriminator), shared, n(model)


# G's width as a share of D's: Figure 3 finds 1/4 to 1/2 best; beyond 4x D it is only memory.
GEN_SIZE = cli.float_range(0, 4, hi_open=False, accepts="a share of D's width in (0, 4], e.g. 0.25")


GUMBEL_START = cli.float_range(0, 1, lo_open=False, accepts="a share of the budget in [0, 1)")
GUMBEL_WEIGHT = cli.float_range(0, 1, hi_open=False, accepts="a weight in (0, 1], e.g. 0.5")


def parse_args(argv=None):
    p = cli.Parser(description="Pre-train ELECTRA-Small (or BERT-Small).")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--hours", type=cli.positive_float,
                        help="wall-clock budget; LR schedule spans it")
    budget.add_argument("--max_steps", type=cli.positive_int,
                        help="step budget (default: Table 6's steps)")
    budget.add_argument("--flops", type=cli.positive_float,
                        help="compute budget in training FLOPs (the paper's count, Appendix "
                        "E): equal-compute comparisons as Table 1")
    p.add_argument("--data", type=cli.nonempty,
                   help="prepared data folder (default: the demo corpus)")
    p.add_argument("--out_dir", type=cli.out_folder, default="out",
                   help="checkpoints and log.jsonl go here")
    p.add_argument("--resume", action="store_true", help="continue from out_dir/ckpt.pt")
    p.add_argument("--save_at", default="", help="also keep ckpt_F.pt at these budget fractions")
    p.add_argument("--device", choices=["cpu", "cuda", "mps"], help="default: best available")
    p.add_argument("--seed", type=cli.seed, default=0, help=f"0 to {cli.MAX_SEED}")
    p.add_argument("--model", choices=["electra", "bert"], default=None)
    p.add_argument("--size", choices=sorted(SIZES), default=None,
                   help="small: Table 6 (default); laptop: watch D learn in 10 CPU minutes; "
                        "laptop_deep: laptop with two blocks of D, for runs of 20-60 minutes; "
                        "mini: CPU experiments; tiny: tests")
    ab = p.add_argument_group("ablations (paper §3.2, §3.5, Appendix F)")
    ab.add_argument("--objective", choices=["electra", "electra15", "replace_mlm",
                                            "all_tokens_mlm"], default=None)
    ab.add_argument("--generator", choices=["mlm", "unigram", "adversarial", "gumbel"],
                    default=None)
    # A blog review's idea (docs/reviewers-questions.md) with a straight-through Gumbel-softmax
    # gradient where the review proposed REINFORCE (ablations.GumbelELECTRA). Defaults: half the
    # budget of pure maximum likelihood (the review's "pretraining the generator as a masked
    # language model", as §2 trains it), then w rises to 0.5, so G stays
    # half a language model (at w = 1 it is Appendix F's adversarial G, which the paper found
    # worse); τ = 1, where Jang et al. (2017) start, the soft sample's gradient at p_G's scale.
    ab.add_argument("--gumbel_tau", type=cli.positive_float, default=None,
                    help="--generator gumbel: Gumbel-softmax temperature τ of the backward (1)")
    ab.add_argument("--gumbel_start", type=GUMBEL_START, default=None,
                    help="--generator gumbel: share of the budget of pure maximum likelihood "
                         "before the adversarial weight w starts to rise (0.5)")
    ab.add_argument("--gumbel_weight", type=GUMBEL_WEIGHT, default=None,
                    help="--generator gumbel: w at the end of the budget; G's gradient is "
                         "(1 - w) L_MLM - w λ L_Disc (0.5)")
    ab.add_argument("--gen_size", type=GEN_SIZE, default=None,
                    help="G width / D width (0.25; at most 4)")
    ab.add_argument("--two_stage", action="store_true", default=None,
                    help="G alone for half the budget, then D from G with G frozen")
    ab.add_argument("--disc_weight", type=cli.non_negative_float, default=None, help="λ (50)")
    ab.add_argument("--mask_prob", type=cli.share, default=None,
                    help="share of tokens masked (Table 6 'Mask percent': 0.15; Large: 0.25)")
    p.add_argument("--batch_size", type=cli.batch_size, default=None,
                   help=f"sequences per step (Table 6: 128; at most {cli.MAX_BATCH})")
    p.add_argument("--lr", type=cli.positive_float, default=None,
                   help="peak learning rate (Table 6: 5e-4)")
    p.add_argument("--optimizer", choices=["official", "torch"], default=None,
                   help="official: Adam without bias correction, as the official code (default); "
                        "torch: torch.optim.AdamW")
    p.add_argument("--log_every", type=cli.positive_int, default=100,
                   help="steps between progress lines")
    p.add_argument("--ckpt_every_min", type=cli.positive_float, default=15.0,
                   help="minutes between periodic checkpoints")
    p.add_argument("--save_every", type=cli.non_negative_int, default=0,
                   help="also checkpoint every N steps (0: off)")
    p.add_argument("--threads", type=cli.threads, default=None,
                   help=f"CPU threads for PyTorch (1 to {cli.MAX_THREADS})")
    p.add_argument("--compile", nargs="?", const="whole", choices=["whole", "regional"],
                   default=None,
                   help="compile the step (machinery/step.py), for GPU speed: whole (the "
                        "default) makes the whole step one graph replayed as a CUDA graph, the "
                        "fastest step, minutes to compile; regional compiles each Transformer "
                        "block, one for all its layers, and runs the rest eagerly: a fraction "
                        "of the compiling time, for short runs")
    p.add_argument("--compile_cache", type=cli.out_file, default=None, metavar="FILE",
                   help="with --compile: load torch.compile's artifacts from FILE before "
                        "compiling and save them there after the first step, so that a fresh "
                        "machine skips most of the compiling (machinery/compile_cache.py)")
    p.add_argument("--profile", type=cli.positive_int, default=None, metavar="N",
                   help="torch.profiler over N steps (after 2 to warm up): out_dir/"
                        "profile_trace.json and the top operations by self time")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="auto (default; on --resume, the checkpoint's): bf16 autocast where the "
                        "hardware has native bf16, fp16 with loss scaling on GPUs whose tensor "
                        "cores have only fp16 (sm_70-sm_75: V100, T4, RTX 20xx), else fp32 "
                        "(machinery/device.py)")
    p.add_argument("--loss_scale", type=cli.positive_float, default=None, metavar="S",
                   help="fp16: the dynamic loss scale to start from (default 2048, "
                        "machinery/loss_scale.py)")
    p.add_argument("--plain_mlm", action="store_true",
                   help="train with objectives.sample and mlm_loss instead of the fused "
                        "machinery/mlm_output.py (same numbers, slower: e.g. to train an "
                        "assignment's code)")
    return p.parse_args(argv)


# Config fields the command line may set (the rest come from Table 6 or --size).
GUMBEL_FLAGS = ("gumbel_tau", "gumbel_start", "gumbel_weight")
CLI_CONFIG = ("model", "batch_size", "lr", "optimizer", "objective", "generator", "gen_size",
              "two_stage", "disc_weight", "mask_prob") + GUMBEL_FLAGS


def config_from_args(args, meta):
    # BERT (§3.3) is masked language modelling alone; the ablation flags choose ELECTRA's G and
    # D's objective, so a BERT run would ignore them without a word: refused instead.
    electra_only = [f"--{f}" for f in ("objective", "generator", "gen_size", "two_stage",
                                       "disc_weight") + GUMBEL_FLAGS
                    if getattr(args, f) is not None]
    if args.model == "bert" and electra_only:
        raise ConfigError(f"--model bert takes no {', '.join(electra_only)}: BERT trains by "
                          "masked language modelling alone and those flags choose ELECTRA's "
                          "ablations; leave them out, or drop --model bert")
    gumbel = [f"--{f}" for f in GUMBEL_FLAGS if getattr(args, f) is not None]
    if gumbel and args.generator != "gumbel":
        raise ConfigError(f"{', '.join(gumbel)} only shape the Gumbel-softmax generator: add "
                          "--generator gumbel, or leave them out")
    over = dict(SIZES[args.size or "small"])
    for name in CLI_CONFIG:
        if getattr(args, name) is not None:
            over[name] = getattr(args, name)
    cfg = replace(Config(), vocab_size=meta["vocab_size"], **over)
    # (each flag's own range is checked as it is parsed; these depend on --size as well)
    if cfg.n_slots < 1:
        raise DataError(f"--mask_prob {cfg.mask_prob:g}: masks no token of a {cfg.seq_len}-token "
                        "sequence; raise it, e.g. to 0.15 (Table 6)")
    g = cfg.gen
    if cfg.model == "electra" and cfg.generator != "unigram" and \
            (g.hidden < 1 or g.ffn < 1 or g.hidden % g.heads):
        raise DataError(f"--gen_size {cfg.gen_size:g}: gives G a hidden size of {g.hidden} for "
                        f"{g.heads} head(s) (D: {cfg.disc.hidden}); pick a share that gives a "
                        "positive multiple of the heads, e.g. 0.25 or 0.5")
    if cfg.model == "bert":
        cfg = replace(cfg, train_steps=1_450_000)           # Table 6: 1.45M, for equal FLOPs
    return cfg


def main(argv=None):
    args = parse_args(argv)
    dist = Dist()                       # torchrun sets RANK / WORLD_SIZE; plain python: 1 process
    existed = Path(args.out_dir).exists()
    try:
        return _main(args, dist)
    except (DataError, ConfigError, CheckpointError, DeviceError, TrainingDiverged) as e:
        if dist.main:
            print(f"error: {e}", file=sys.stderr)
            cli.remove_if_left_empty(args.out_dir, existed)
        return 1
    except NotImplementedError as e:    # a student copy with a part still blank: one line
        line = cli.blank_part_or_raise(e)
        if dist.main:
            print(line, file=sys.stderr)
            log = Path(args.out_dir) / "log.jsonl"        # opened, but no step ever logged
            if not existed and log.is_file() and log.stat().st_size == 0:
                log.unlink()
            cli.remove_if_left_empty(args.out_dir, existed)
        return 1
    finally:
        dist.close()


def check_args(args):
    """What the types of parse_args cannot check alone, before any data or folder is touched."""
    # Flags that do not combine, and shapes that depend on --size too (G's heads, the mask
    # slots): a model built on the "meta" device (no memory, no data) raises what training would.
    count_params(config_from_args(args, {"vocab_size": 1000}))
    try:
        args.save_at = sorted({float(f) for f in args.save_at.split(",") if f.strip()})
    except ValueError:
        raise DataError(f"--save_at {args.save_at!r}: give fractions like 0.25,0.5,1") from None
    if any(not 0 < f <= 1 for f in args.save_at):
        raise DataError("--save_at: every fraction must be in (0, 1]")
    if args.loss_scale and args.precision not in (None, "auto", "fp16"):
        raise DataError(f"--loss_scale scales fp16's gradients; --precision {args.precision} "
                        "has none to scale: add --precision fp16, or leave --loss_scale out")
    if args.compile_cache and not args.compile:
        raise DataError("--compile_cache keeps what --compile compiles: add --compile (or "
                        "--compile regional), or leave --compile_cache out")


def _main(args, dist):
    check_args(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = dist.device(pick_device(args.device))
    if device.type == "cuda":           # TF32 tensor cores for what stays in float32
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    say = print if dist.main else (lambda *a, **k: None)
    out = Path(args.out_dir)
    if out.exists() and not out.is_dir():
        raise DataError(f"--out_dir {out} is a file, not a folder: pick another --out_dir")
    ckpt_path = out / "ckpt.pt"
    resume = None
    if args.resume:
        resume = load_checkpoint(ckpt_path)
        cfg = Config.from_dict(resume["config"])
        same = lambda c: {**c.to_dict(), "fused_mlm": None}     # a speed switch, not a recipe
        if any(getattr(args, f) is not None for f in CLI_CONFIG + ("size",)) and \
                same(config_from_args(args, {"vocab_size": cfg.vocab_size})) != same(cfg):
            raise CheckpointError(f"{ckpt_path} was trained with a different config; resume "
                                  "without changing --model, --size or the ablation flags")
        if args.hours is None and args.max_steps is None and args.flops is None:
            b = resume["budget"]                                # keep the checkpoint's budget
            args.hours, args.max_steps, args.flops = b["hours"], b["max_steps"], b.get("flops")
        args.seed = resume["seed"]
        # The precision the run started with, unless another is asked for (one line says so):
        # another precision rounds differently, so the losses part from a run never stopped.
        started = resume.get("precision")
        if started and args.precision not in (None, "auto", started):
            say(f"note: {ckpt_path} was trained in {started}; continuing in {args.precision} "
                "as --precision asks (its losses will differ from a run that never stopped)")
        elif started:
            args.precision = started
    elif ckpt_path.exists():
        raise DataError(f"{ckpt_path} exists: add --resume to continue it, or pick another "
                        "--out_dir (nothing was overwritten)")
    # No --data: the built-in demo corpus, with the vocabulary the recipe is sized for
    # (config.DEMO_VOCAB: 8,192 for the laptop recipes, else BERT's 30,522).
    demo_vocab = DEMO_VOCAB.get(args.size or "small", 30522)
    if not args.data and dist.main:      # rank 0 builds the demo corpus, the others wait
        prepare_demo(demo_vocab, log=say)
    dist.barrier()
    data_dir = Path(args.data) if args.data else demo_dir(demo_vocab)
    meta = load_meta(data_dir)
    if resume is None:
        cfg = config_from_args(args, meta)
    elif meta["vocab_size"] != cfg.vocab_size or \
            load_tokenizer(data_dir).to_text() != resume["tokenizer"]:
        raise CheckpointError(f"{ckpt_path} was trained with another tokenizer than "
                              f"{data_dir}'s; resume with the same --data")
    cfg = replace(cfg, fused_mlm=not args.plain_mlm)
    if cfg.batch_size % dist.world:
        raise DataError(f"batch size {cfg.batch_size} does not split over {dist.world} processes")
    if args.hours is None and args.max_steps is None and args.flops is None:
        args.max_steps = cfg.train_steps
    # Engineering: the precision this run trains in, by name (machinery/device.py); saved in
    # its checkpoints and its log.
    args.precision = pick_precision(args.precision, device).name
    if args.loss_scale and args.precision != "fp16":
        raise DataError(f"--loss_scale scales fp16's gradients; this run trains in "
                        f"{args.precision}: add --precision fp16, or leave --loss_scale out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:                # a file on the way, a read-only or missing place
        raise DataError(f"--out_dir {out}: cannot create it ({e.strerror or e}): pick another "
                        "--out_dir") from None
    if dist.main:                       # debris of a checkpoint write that was killed
        for name in remove_stale_temporaries(out):
            say(f"removed {out / name}, left by a checkpoint write that was killed")
    torch.manual_seed(args.seed)        # initial weights; a resume restores the RNG state later
    g, d, shared, total = count_params(cfg)
    say(f"{cfg.model}: D {d / 1e6:.2f}M params (incl. {shared / 1e6:.2f}M shared embeddings)"
        + (f", G {g / 1e6:.2f}M + shared" if cfg.model == "electra" else "")
        + f", total {total / 1e6:.2f}M | {train_flops_per_step(cfg):.3g} training FLOPs/step"
        f" | device {device} x {dist.world}, {args.precision}"
        + (" with loss scaling" if args.precision == "fp16" else "")
        + f" | data {data_dir} ({meta['train_tokens']:,} tokens)")
    if resume is not None:
        say(f"resuming at step {resume['step']} ({resume['elapsed_s'] / 3600:.2f} h done)")
    budget = f"{args.hours:g} h" if args.hours else f"{args.flops:.3g} FLOPs" if args.flops \
        else f"{args.max_steps:,} steps"
    say(f"budget {budget}; checkpoints every {args.ckpt_every_min:g} min to {ckpt_path}")
    if device.type == "cuda" and not args.compile:
        say("note: --compile makes the step one graph replayed as a CUDA graph: 5.6x the steps/s "
            "of this eager step on an H200 for the Table 6 model (docs/results.md)")
    # Ctrl-C and `kill` both end in a saved checkpoint: SIGTERM raises KeyboardInterrupt too.
    # SIGINT is set explicitly as well: a shell starts background jobs (`... &`) with SIGINT
    # ignored, and Python then leaves it ignored, so `kill -INT` would not stop the run.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return train(cfg, args, device, data_dir, resume, dist)


if __name__ == "__main__":
    sys.exit(main())
