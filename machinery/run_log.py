"""What a run writes as it trains: log.jsonl and the progress line every --log_every steps,
MFU, and a line when D leaves the plateau (machinery; no paper section - read train.train
first; the line itself and the plateau's rule: machinery/progress.py).

The statistics of each step stay on the device, summed there: reading a number (.item())
would make the host wait for the GPU at every step, so the log's record is the only host
read. Under torchrun every process's sums are added up, for the whole batch. MFU (model FLOPs
utilisation) needs the hardware's peak: a data sheet on a GPU, a measured matmul on a CPU
(flops.py, passed in by train.py: machinery imports nothing of the core). The log is appended
to, so a resumed run continues the same log.
"""
import json
import math
import time

import torch

from machinery.divergence import NanWatch
from machinery.progress import left_plateau_line, off_plateau, plateau_note, progress_line


class RunLog:
    """The log of a run: `add` each step's statistics, `write` a record when one is due.

    peak_flops(device) -> (FLOP/s or None, what it is relative to); hardware_flops() the
    FLOPs of a step as the hardware runs it; repeats(steps) one line when that many steps
    would repeat the corpus too often, else None (batches.repetition_warning)."""

    def __init__(self, cfg, args, device, dist, out, say, peak_flops, hardware_flops, repeats,
                 run):
        self.cfg, self.args, self.device, self.dist, self.say = cfg, args, device, dist, say
        self.peak_flops, self.hardware_flops, self.repeats_of, self.run = \
            peak_flops, hardware_flops, repeats, run
        peak, peak_note = peak_flops(device)
        self.peak = peak * dist.world if peak else None
        say(f"MFU is relative to {peak_note}" + (f": {self.peak:.3g} FLOP/s" if peak else ""))
        self.file = open(out / "log.jsonl", "a") if dist.main else None
        self.nan = NanWatch(out)     # the first step with a NaN/inf loss (machinery/divergence.py)
        self.sums, self.start, self.steps = {}, time.time(), 0       # since the last record
        self.rec, self.left = None, False   # the last record; whether D was ever off the plateau
        # A budget that repeats a small corpus too often learns it by heart; one line says so
        # (with --hours, once the step rate is measured).
        self.repeats = repeats(args.max_steps or args.flops / run.flops_per_step) \
            if not args.hours else None
        if self.repeats:
            say(self.repeats)

    def add(self, stats):
        """A step's statistics, added up on the device; its NaN check, on the device too."""
        self.nan.see(stats, self.run.step)
        self.steps += 1
        for k, v in stats.items():
            v = torch.stack(v) if isinstance(v, tuple) else v.detach()
            # fp16's loss scale: the latest, not a sum (machinery/loss_scale.py)
            self.sums[k] = self.sums[k] + v if k in self.sums and k != "loss_scale" else v

    def due(self):
        return self.run.step % self.args.log_every == 0 or self.run.progress() >= 1.0

    def write(self, lr):
        """One record: log.jsonl, the progress line, and once, the line that D left the
        plateau."""
        self.nan.check()
        run, args, say = self.run, self.args, self.say
        sums = {k: self.dist.sum(v.float()) for k, v in self.sums.items()}
        dt = time.time() - self.start
        rec = log_record(sums, self.steps, dt, self.peak, self.cfg, args, run.counters(),
                         run.flops_per_step, self.hardware_flops(), lr, self.dist.world)
        if rec["mfu"] and rec["mfu"] > 1:
            self.peak, rec["mfu"] = peak_again(self.peak, rec["mfu"], self.device,
                                               self.dist.world, say, self.peak_flops)
        if self.file:
            print(progress_line(rec), flush=True)
            self.file.write(json.dumps(rec) + "\n")
            self.file.flush()
        if not self.left and off_plateau(rec):            # said once, the first time
            self.left = True
            say(left_plateau_line(rec))
        if args.hours and self.repeats is None:           # the step rate is measured now
            rate = self.steps / (time.time() - self.start)
            self.repeats = self.repeats_of(run.step + rate * (args.hours * 3600 - run.elapsed)) \
                or ""
            if self.repeats:
                say(self.repeats)
        self.rec, self.sums, self.start, self.steps = rec, {}, time.time(), 0

    def closing_note(self):
        """A line for a run that ended with D still on the plateau, else None."""
        return plateau_note(self.rec) if self.rec is not None and not self.left else None

    def close(self):
        if self.file:
            self.file.close()


def log_record(sums, steps, dt, peak, cfg, args, st, flops_per_step, hw_flops_per_step, lr,
               world):
    """One line of log.jsonl from the statistics summed on the device over `steps` steps that
    took dt seconds; st: the run's step, flops and elapsed seconds."""
    s = {k: v.float().cpu() for k, v in sums.items()}
    # None where the denominator is 0 (e.g. precision while D flags nothing): undefined
    ratio = lambda k: (s[k][0] / s[k][1]).item() if k in s and s[k][1] > 0 else None
    tok_s = steps * cfg.batch_size * cfg.seq_len / dt
    mfu = hw_flops_per_step * steps / dt / peak if peak else None
    if args.hours:
        left = args.hours * 3600 - st["elapsed"]
    elif args.flops:
        left = (args.flops - st["flops"]) / flops_per_step * dt / steps
    else:
        left = (args.max_steps - st["step"]) * dt / steps
    # H(r) = −r ln r − (1 − r) ln(1 − r), r the share of replaced tokens: what answering r
    # everywhere scores; below it, D knows more than how many tokens are replaced. (None
    # where D is an MLM: Replace MLM, All-Tokens MLM.)
    share = prior = None
    if "replaced_correct" in s and "disc_correct" in s and s["disc_correct"][1] > 0:
        share = (s["replaced_correct"][1] / s["disc_correct"][1]).item()
        prior = sum(-p * math.log(p) for p in (share, 1 - share) if p > 0)
    # fp16 (machinery/loss_scale.py): steps skipped because their gradients overflowed, over
    # every process, and the loss scale now
    scaled = dict(skipped_steps=int(s["skipped"].item()),
                  loss_scale=(s["loss_scale"] / world).item()) if "skipped" in s else {}
    return dict(step=st["step"], mlm_loss=(s["mlm_loss"] / steps / world).item(),
                disc_loss=(s["disc_loss"] / steps / world).item() if "disc_loss" in s else None,
                replaced_share=share, disc_prior_entropy=prior,
                gen_acc=ratio("gen_correct"), disc_acc=ratio("disc_correct"),
                disc_acc_replaced=ratio("replaced_correct"),
                disc_precision_replaced=ratio("replaced_flagged"), tokens_per_s=tok_s, mfu=mfu,
                flops=st["flops"], elapsed_s=st["elapsed"], eta_s=max(0.0, left), lr=lr,
                model=cfg.model, objective="mlm" if cfg.model == "bert" else cfg.objective,
                precision=getattr(args, "precision", None), **scaled,
                gpu_peak_bytes=gpu_peak_bytes(next(iter(sums.values())).device))


def peak_again(peak, mfu, device, world, say, measure):
    """An MFU above 100 % means the CPU's peak was measured while the machine was busier than
    now (a matmul beside other jobs runs several times slower). Measure it again and keep the
    larger: (peak, the interval's MFU against it)."""
    again = measure(device)[0]
    if again and again * world > peak:
        say(f"MFU: the peak measured again, {again * world:.3g} FLOP/s (the first measure "
            f"ran while the machine was busier)")
        mfu, peak = mfu * peak / (again * world), again * world
    return peak, mfu


def gpu_peak_bytes(device):
    """The most GPU memory the run's tensors have held so far, None off a GPU."""
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
