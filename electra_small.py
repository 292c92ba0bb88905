"""ELECTRA-Small pre-training: the training loop and the command line.

Paper §2 (the objective: objectives.py), §3.3 (small models), Appendix A / Table 6 (the
hyperparameters: config.py), Appendix E (FLOPs: flops.py). The loop itself is plain PyTorch:
Adam without bias correction (optim.py), gradient clipping at 1.0, warm-up then linear decay.

    python electra_small.py --hours 6                  # the demo corpus, prepared on first use
    python electra_small.py --data data/wiki00 --max_steps 1000000    # the paper's full run
    python electra_small.py --model bert --hours 6     # BERT-Small at equal compute (§3.3)
    torchrun --nproc_per_node=4 electra_small.py ...   # data parallel (distributed.py)

Time budget: with --hours the learning-rate schedule is laid over the *wall-clock* budget, so a
6-hour run warms up, decays to zero and stops at the deadline, whatever the hardware does.
That is the paper's Table 1 question - what does a given amount of compute buy? - and it makes
ELECTRA and BERT comparable at equal time without counting steps by hand.
"""
import argparse
import json
import math
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from checkpoint import CheckpointError, load_checkpoint, remove_stale_temporaries, rng_state
from checkpoint import save_checkpoint, set_rng_state
from config import SIZES, Config, lr_at
from data import DATA_ROOT, DEMO_NAME, DataError, PretrainingData, Prefetcher, load_meta
from data import load_tokenizer, mask_tokens, prepare_demo
from device import DeviceError, pick_device, pick_precision
from distributed import Dist
from flops import hardware_flops_per_step, peak_flops, train_flops_per_step
from objectives import build_model
from optim import decay_groups, make_adam


def make_optimizer(model, cfg, device):
    """Adam with decoupled weight decay (Table 6: ε 1e-6, weight decay 0.01; biases and
    LayerNorm not decayed). cfg.optimizer "official" is the paper's rule without bias
    correction (optim.py explains why that matters); "torch" is torch.optim.AdamW."""
    return make_adam(decay_groups(model.named_parameters(), cfg.weight_decay), cfg.optimizer,
                     cfg.lr, cfg.adam_betas, cfg.adam_eps, fused=device.type == "cuda")


def count_params(model, cfg):
    """(generator-only, discriminator incl. embeddings, shared embeddings, total) in parameters."""
    n = lambda m: sum(p.numel() for p in m.parameters())
    if cfg.model == "bert":
        shared = n(model.mlm.embeddings)
        return 0, n(model.mlm), shared, n(model)
    shared = n(model.discriminator.embeddings)
    d_ids = {id(p) for p in model.discriminator.parameters()}
    g_only = sum(p.numel() for p in model.generator.parameters() if id(p) not in d_ids)
    return g_only, n(model.discriminator), shared, n(model)


def training_step(model, opt, batch, lr, cfg, device, precision="auto"):
    """One optimizer step of L_MLM + λ L_Disc (or of the config's objective) on a CPU batch
    {x, x_masked, positions, targets, weights}; returns the statistics as device tensors."""
    batch = {k: v.to(device, non_blocking=device.type == "cuda") for k, v in batch.items()}
    for group in opt.param_groups:
        group["lr"] = lr
    # bf16 autocast where the hardware has native bf16 (device.py): several times faster
    # matmuls; weights, optimizer and the losses (mlm_loss / disc_loss) stay in float32.
    with pick_precision(precision, device)[1]():
        loss, stats = model(**batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return stats


class TrainingDiverged(Exception):
    """The loss became NaN or infinite; the command line prints it as one line."""


class Trainer:
    """The loop: sample a batch, mask it, one step of L_MLM + λ L_Disc, log, checkpoint."""

    def __init__(self, cfg, args, device, data_dir, resume_ckpt=None, dist=None):
        self.cfg, self.args, self.device = cfg, args, device
        self.dist = dist or Dist()
        self.out = Path(args.out_dir)
        self.data = PretrainingData(data_dir, "train", cfg.batch_size, cfg.seq_len, args.seed,
                                    self.dist.rank, self.dist.world)
        self.tokenizer = load_tokenizer(data_dir)
        counts = None
        if cfg.generator == "unigram":                      # §3.2: corpus token frequencies
            counts = torch.from_numpy(np.bincount(self.data.tokens, minlength=cfg.vocab_size)) + 1
        self.raw_model = build_model(cfg, counts).to(device)   # what checkpoints hold
        self.opt = make_optimizer(self.raw_model, cfg, device)
        self.stage = 1 if cfg.two_stage else None
        self.flops_per_step = train_flops_per_step(cfg, self.stage)    # the paper's count
        self.step, self.flops, self.elapsed = 0, 0.0, 0.0
        self.first_bad_step = None                          # see check_finite
        self.saved_fractions = []
        if resume_ckpt is not None:
            self.raw_model.load_state_dict(resume_ckpt["model"])
            self.opt.load_state_dict(resume_ckpt["optimizer"])
            self.step, self.flops = resume_ckpt["step"], resume_ckpt["flops"]
            self.elapsed = resume_ckpt["elapsed_s"]
            self.saved_fractions = list(resume_ckpt.get("saved_fractions", []))
            self.data.load_state_dict(resume_ckpt["data"])
            set_rng_state(resume_ckpt["rng"])
        self.data_state = self.data.state_dict()           # position after the last used batch
        if cfg.two_stage and self.raw_model.current_stage == 2:
            self.stage = 2
            self.flops_per_step = train_flops_per_step(cfg, 2)
        self.model = self.dist.wrap(self.raw_model, find_unused=cfg.two_stage)
        if args.compile:
            self.model = torch.compile(self.model)
        meta = self.data.meta
        self.special = (meta["pad_id"], meta["cls_id"], meta["sep_id"])
        # BERT's masking: 80 % [MASK], 10 % random, 10 % kept; ELECTRA's: 85 % [MASK], 15 % kept.
        self.mask_kw = dict(replace_prob=0.8, random_prob=0.1) if cfg.model == "bert" else \
            dict(replace_prob=0.85, random_prob=0.0)

    # -- budget ----------------------------------------------------------------------------
    def progress(self):
        """Fraction of the budget used: of wall-clock time with --hours, else of steps."""
        if self.args.hours:
            return self.elapsed / (self.args.hours * 3600)
        if self.args.flops:                 # Table 1's question: what does this compute buy?
            return self.flops / self.args.flops
        return self.step / self.args.max_steps

    def lr(self):
        """Two-stage training (§3.2) gives each stage half the budget and its own schedule."""
        p = self.progress()
        if self.cfg.two_stage:
            p = 2 * p if p < 0.5 else 2 * p - 1
        return lr_at(p, self.cfg)

    def maybe_start_stage_two(self):
        if self.cfg.two_stage and self.progress() >= 0.5 and self.raw_model.current_stage == 1:
            self.raw_model.start_stage_two()
            self.stage = 2
            self.flops_per_step = train_flops_per_step(self.cfg, 2)
            self.model = self.dist.wrap(self.raw_model, find_unused=True)
            if self.dist.main:
                print(f"step {self.step}: stage two - D initialised from G, G frozen")

    def checkpoint_state(self):
        return dict(config=self.cfg.to_dict(), model=self.raw_model.state_dict(),
                    optimizer=self.opt.state_dict(), step=self.step, flops=self.flops,
                    elapsed_s=self.elapsed, rng=rng_state(), data=self.data_state,
                    tokenizer=self.tokenizer.to_text(), saved_fractions=self.saved_fractions,
                    budget=dict(hours=self.args.hours, max_steps=self.args.max_steps,
                                flops=self.args.flops),
                    seed=self.args.seed, device=str(self.device), world=self.dist.world)

    def save(self, name="ckpt.pt"):
        """Write a checkpoint - never of a state that has seen a NaN loss, and never over the
        previous one unless the new one is complete (checkpoint.py writes atomically)."""
        self.check_finite()
        if self.dist.main:
            try:
                save_checkpoint(self.out / name, self.checkpoint_state())
            except OSError as e:                 # disk full, permissions, folder removed ...
                raise CheckpointError(f"could not write {self.out / name} ({e.strerror or e}); "
                                      "the previous checkpoint is intact: free disk space and "
                                      "continue with --resume") from None

    def check_finite(self):
        """Raise if any step so far had a NaN/inf loss. The flag lives on the device and is
        read only here (at logging and checkpoint time), so no step waits for the host."""
        if self.first_bad_step is not None and int(self.first_bad_step) > 0:
            raise TrainingDiverged(
                f"the loss became NaN or infinite at step {int(self.first_bad_step)}; stopped "
                f"without saving, so {self.out / 'ckpt.pt'} still holds the last good state: "
                "lower --lr (or check the data) and continue with --resume")

    # -- one step ----------------------------------------------------------------------------
    def make_batch(self):
        """The next batch, masked on the CPU, and the data position after it."""
        batch = self.data.next_batch()                     # x, segment_ids, pad_mask
        masked = mask_tokens(batch["x"], self.special, self.data.meta["mask_id"],
                             self.cfg.n_slots, self.cfg.mask_prob,
                             n_random=self.data.meta["vocab_size"] - 4,
                             generator=self.data.mask_generator(), **self.mask_kw)
        return dict(**batch, **masked), self.data.state_dict()

    def train_step(self, batch, lr):
        try:
            return training_step(self.model, self.opt, batch, lr, self.cfg, self.device,
                                 self.args.precision)
        except Exception as e:          # torch.compile can fail on some setups: fall back
            if not self.args.compile or self.model is self.raw_model:
                raise
            print(f"torch.compile failed ({type(e).__name__}: {str(e).splitlines()[0][:120]}); "
                  "continuing eagerly", file=sys.stderr)
            self.opt.zero_grad(set_to_none=True)
            self.model = self.dist.wrap(self.raw_model, find_unused=self.cfg.two_stage)
            return training_step(self.model, self.opt, batch, lr, self.cfg, self.device,
                                 self.args.precision)

    # -- the loop --------------------------------------------------------------------------
    def run(self):
        args, main = self.args, self.dist.main
        peak, peak_note = peak_flops(self.device)
        peak = peak * self.dist.world if peak else None
        log_file = open(self.out / "log.jsonl", "a") if main else None
        # On a GPU a background thread prepares batches while the GPU works (data.Prefetcher).
        fetch = Prefetcher(self.make_batch) if self.device.type == "cuda" else self.make_batch
        sums, interval_start, interval_steps = {}, time.time(), 0
        last_ckpt = time.time()
        t0, elapsed0 = time.time(), self.elapsed
        if main:
            print(f"MFU is relative to {peak_note}" + (f": {peak:.3g} FLOP/s" if peak else ""))
        try:
            while self.progress() < 1.0:
                self.maybe_start_stage_two()
                batch, data_state = fetch()
                stats = self.train_step(batch, self.lr())
                self.step += 1
                # remember the first step whose loss is not finite (0: none so far)
                bad = ~torch.isfinite(stats["mlm_loss"].detach())
                if "disc_loss" in stats:
                    bad |= ~torch.isfinite(stats["disc_loss"].detach())
                first = torch.zeros((), dtype=torch.long, device=bad.device) \
                    if self.first_bad_step is None else self.first_bad_step
                self.first_bad_step = torch.where(bad & (first == 0), self.step, first)
                self.flops += self.flops_per_step
                self.data_state = data_state
                now = elapsed0 + time.time() - t0
                self.elapsed = self.dist.broadcast_float(now) if args.hours else now
                interval_steps += 1
                for k, v in stats.items():                 # accumulate on the device
                    v = torch.stack(v) if isinstance(v, tuple) else v.detach()
                    sums[k] = sums[k] + v if k in sums else v
                if self.step % args.log_every == 0 or self.progress() >= 1.0:
                    self.check_finite()
                    sums = {k: self.dist.sum(v.float()) for k, v in sums.items()}
                    rec = self.log_record(sums, interval_steps, time.time() - interval_start, peak)
                    if main:
                        print(self.progress_line(rec), flush=True)
                        log_file.write(json.dumps(rec) + "\n")
                        log_file.flush()
                    sums, interval_start, interval_steps = {}, time.time(), 0
                for f in args.save_at:                     # Table 1-style compute checkpoints
                    if self.progress() >= f and f not in self.saved_fractions:
                        self.saved_fractions.append(f)
                        self.save(f"ckpt_{f:g}.pt")
                due = time.time() - last_ckpt > args.ckpt_every_min * 60
                if (args.save_every and self.step % args.save_every == 0) or \
                        self.dist.broadcast_float(float(due)):
                    self.save()
                    last_ckpt = time.time()
        except KeyboardInterrupt:
            self.save()
            if main:
                print(f"\ninterrupted at step {self.step}: saved {self.out / 'ckpt.pt'}; "
                      "continue with --resume", file=sys.stderr)
            return 130
        finally:
            if log_file:
                log_file.close()
            if isinstance(fetch, Prefetcher):
                fetch.close()
        self.save()
        if main:
            print(f"done: {self.step} steps, {self.flops:.3g} FLOPs, "
                  f"{self.elapsed / 3600:.2f} h; saved {self.out / 'ckpt.pt'}")
        return 0

    def log_record(self, sums, steps, dt, peak):
        """Read the accumulated statistics back from the device (the only host sync)."""
        s = {k: v.float().cpu() for k, v in sums.items()}
        w = self.dist.world
        # None where the denominator is 0 (e.g. precision while D flags nothing): undefined
        ratio = lambda k: (s[k][0] / s[k][1]).item() if k in s and s[k][1] > 0 else None
        tok_s = steps * self.cfg.batch_size * self.cfg.seq_len / dt
        mfu = hardware_flops_per_step(self.cfg, self.stage) * steps / dt / peak if peak else None
        if self.args.hours:
            left = self.args.hours * 3600 - self.elapsed
        elif self.args.flops:
            left = (self.args.flops - self.flops) / self.flops_per_step * dt / steps
        else:
            left = (self.args.max_steps - self.step) * dt / steps
        return dict(step=self.step, mlm_loss=(s["mlm_loss"] / steps / w).item(),
                    disc_loss=(s["disc_loss"] / steps / w).item() if "disc_loss" in s else None,
                    gen_acc=ratio("gen_correct"), disc_acc=ratio("disc_correct"),
                    disc_acc_replaced=ratio("replaced_correct"),
                    disc_precision_replaced=ratio("replaced_flagged"), tokens_per_s=tok_s, mfu=mfu,
                    flops=self.flops, elapsed_s=self.elapsed, eta_s=max(0.0, left),
                    lr=self.lr(), model=self.cfg.model,
                    objective="mlm" if self.cfg.model == "bert" else self.cfg.objective)

    @staticmethod
    def progress_line(r):
        pct = lambda v: "  -  " if v is None else f"{100 * v:4.1f}%"
        disc = "" if r["disc_loss"] is None else \
            f" | L_Disc {r['disc_loss']:.4f} | D acc {pct(r['disc_acc'])} | replaced: " \
            f"recall {pct(r['disc_acc_replaced'])} precision " \
            f"{pct(r.get('disc_precision_replaced'))}"
        eta = time.strftime("%H:%M:%S", time.gmtime(r["eta_s"])) if r["eta_s"] < 86400 else \
            f"{r['eta_s'] / 86400:.1f}d"
        return (f"step {r['step']} | L_MLM {r['mlm_loss']:.4f} | G acc {pct(r['gen_acc'])}"
                f"{disc} | {r['tokens_per_s']:,.0f} tok/s | mfu {pct(r['mfu'])} | "
                f"{r['flops']:.2e} FLOPs | ETA {eta}")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Pre-train ELECTRA-Small (or BERT-Small).")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--hours", type=float, help="wall-clock budget; LR schedule spans it")
    budget.add_argument("--max_steps", type=int, help="step budget (default: Table 6's steps)")
    budget.add_argument("--flops", type=float, help="compute budget in training FLOPs (the "
                        "paper's count, Appendix E): equal-compute comparisons as Table 1")
    p.add_argument("--data", help="prepared data folder (default: the demo corpus)")
    p.add_argument("--out_dir", default="out", help="checkpoints and log.jsonl go here")
    p.add_argument("--resume", action="store_true", help="continue from out_dir/ckpt.pt")
    p.add_argument("--save_at", default="", help="also keep ckpt_F.pt at these budget fractions")
    p.add_argument("--device", choices=["cpu", "cuda", "mps"], help="default: best available")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", choices=["electra", "bert"], default=None)
    p.add_argument("--size", choices=sorted(SIZES), default=None,
                   help="small: Table 6 (default); mini: CPU experiments; tiny: tests")
    ab = p.add_argument_group("ablations (paper §3.2, §3.5, Appendix F)")
    ab.add_argument("--objective", choices=["electra", "electra15", "replace_mlm",
                                            "all_tokens_mlm"], default=None)
    ab.add_argument("--generator", choices=["mlm", "unigram", "adversarial"], default=None)
    ab.add_argument("--gen_size", type=float, default=None, help="G width / D width (0.25)")
    ab.add_argument("--two_stage", action="store_true", default=None,
                    help="G alone for half the budget, then D from G with G frozen")
    ab.add_argument("--disc_weight", type=float, default=None, help="λ (50)")
    p.add_argument("--batch_size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (Table 6: 5e-4)")
    p.add_argument("--optimizer", choices=["official", "torch"], default=None,
                   help="official: Adam without bias correction, as the paper (default); "
                        "torch: torch.optim.AdamW")
    p.add_argument("--log_every", type=int, default=100, help="steps between progress lines")
    p.add_argument("--ckpt_every_min", type=float, default=15.0, help="periodic checkpoint")
    p.add_argument("--save_every", type=int, default=0, help="also checkpoint every N steps")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for PyTorch")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (GPU speed)")
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto",
                   help="auto: bf16 autocast where the hardware has native bf16 (device.py)")
    return p.parse_args(argv)


# Config fields the command line may set (the rest come from Table 6 or --size).
CLI_CONFIG = ("model", "batch_size", "lr", "optimizer", "objective", "generator", "gen_size",
              "two_stage", "disc_weight")


def config_from_args(args, meta):
    over = dict(SIZES[args.size or "small"])
    for name in CLI_CONFIG:
        if getattr(args, name) is not None:
            over[name] = getattr(args, name)
    if over.get("gen_size", 1) <= 0 or over.get("disc_weight", 1) < 0 or over.get("lr", 1) <= 0:
        raise DataError("--gen_size and --lr must be positive and --disc_weight non-negative")
    cfg = replace(Config(), vocab_size=meta["vocab_size"], **over)
    if cfg.model == "bert":
        cfg = replace(cfg, train_steps=1_450_000)           # Table 6: 1.45M, for equal FLOPs
    return cfg


def main(argv=None):
    args = parse_args(argv)
    dist = Dist()                       # torchrun sets RANK / WORLD_SIZE; plain python: 1 process
    try:
        return _main(args, dist)
    except (DataError, CheckpointError, DeviceError, TrainingDiverged) as e:
        if dist.main:
            print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        dist.close()


def check_args(args):
    if args.hours is not None and not (args.hours > 0 and math.isfinite(args.hours)):
        raise DataError(f"--hours {args.hours}: must be a positive number of hours")
    if args.max_steps is not None and args.max_steps <= 0:
        raise DataError(f"--max_steps {args.max_steps}: must be a positive number of steps")
    if args.flops is not None and not (args.flops > 0 and math.isfinite(args.flops)):
        raise DataError(f"--flops {args.flops}: must be a positive number of FLOPs, e.g. 1e14")
    try:
        args.save_at = sorted({float(f) for f in args.save_at.split(",") if f.strip()})
    except ValueError:
        raise DataError(f"--save_at {args.save_at!r}: give fractions like 0.25,0.5,1") from None
    if any(not 0 < f <= 1 for f in args.save_at):
        raise DataError("--save_at: every fraction must be in (0, 1]")


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
        if any(getattr(args, f) is not None for f in CLI_CONFIG + ("size",)) and \
                config_from_args(args, {"vocab_size": cfg.vocab_size}).to_dict() != cfg.to_dict():
            raise CheckpointError(f"{ckpt_path} was trained with a different config; resume "
                                  "without changing --model, --size or the ablation flags")
        if args.hours is None and args.max_steps is None and args.flops is None:
            b = resume["budget"]                                # keep the checkpoint's budget
            args.hours, args.max_steps, args.flops = b["hours"], b["max_steps"], b.get("flops")
        args.seed = resume["seed"]
    elif ckpt_path.exists():
        raise DataError(f"{ckpt_path} exists: add --resume to continue it, or pick another "
                        "--out_dir (nothing was overwritten)")
    if not args.data and dist.main:      # rank 0 builds the demo corpus, the others wait
        prepare_demo(log=say)
    dist.barrier()
    data_dir = Path(args.data) if args.data else DATA_ROOT / DEMO_NAME
    meta = load_meta(data_dir)
    if resume is None:
        cfg = config_from_args(args, meta)
    elif meta["vocab_size"] != cfg.vocab_size or \
            load_tokenizer(data_dir).to_text() != resume["tokenizer"]:
        raise CheckpointError(f"{ckpt_path} was trained with another tokenizer than "
                              f"{data_dir}'s; resume with the same --data")
    if cfg.batch_size % dist.world:
        raise DataError(f"batch size {cfg.batch_size} does not split over {dist.world} processes")
    if args.hours is None and args.max_steps is None and args.flops is None:
        args.max_steps = cfg.train_steps
    out.mkdir(parents=True, exist_ok=True)
    if dist.main:                       # debris of a checkpoint write that was killed
        for name in remove_stale_temporaries(out):
            say(f"removed {out / name}, left by a checkpoint write that was killed")
    torch.manual_seed(args.seed)        # initial weights; a resume restores the RNG state later
    trainer = Trainer(cfg, args, device, data_dir, resume, dist)
    g, d, shared, total = count_params(trainer.raw_model, cfg)
    say(f"{cfg.model}: D {d / 1e6:.2f}M params (incl. {shared / 1e6:.2f}M shared embeddings)"
        + (f", G {g / 1e6:.2f}M + shared" if cfg.model == "electra" else "")
        + f", total {total / 1e6:.2f}M | {trainer.flops_per_step:.3g} training FLOPs/step"
        f" | device {device} x {dist.world} | data {data_dir} ({meta['train_tokens']:,} tokens)")
    if resume is not None:
        say(f"resuming at step {trainer.step} ({trainer.elapsed / 3600:.2f} h done)")
    budget = f"{args.hours:g} h" if args.hours else f"{args.flops:.3g} FLOPs" if args.flops \
        else f"{args.max_steps:,} steps"
    say(f"budget {budget}; checkpoints every {args.ckpt_every_min:g} min to {ckpt_path}")
    # Ctrl-C and `kill` both end in a saved checkpoint: SIGTERM raises KeyboardInterrupt too.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    return trainer.run()


if __name__ == "__main__":
    sys.exit(main())
