"""Where a pre-training run stands, its budget and its checkpoints (machinery; no paper
section - read train.train first: this file keeps its counters and writes its saves).

A run's state is a few numbers - steps, FLOPs (Appendix E's count), wall-clock seconds, the
seconds its setup steps took, the compute fractions already saved (--save_at) - and the data
position after the last batch used. A checkpoint holds them with the weights, the optimizer
and the random state, so that --resume takes exactly the batch, the masks and the learning
rate that a run never stopped would have taken next.

The budget (--hours, --max_steps or --flops) is a fraction, progress, over which the learning
rate's schedule is laid. With --hours it is wall-clock time less the setup steps': the first
step (compiling, the first batch; on a GPU with --compile the second too, which records the
CUDA graph) is setup, not training. Counted, it would eat the warm-up, and the first real
update would run at the peak learning rate. Under torchrun rank 0's clock is every rank's.
"""
import time
from pathlib import Path

from machinery.checkpoint import CheckpointError, rng_state, save_checkpoint, set_rng_state


class RunState:
    """The counters of a run (step, flops, elapsed, setup_s, saved_fractions, data_state), its
    budget's progress and its clock; restored from `resume`, a loaded checkpoint, if given."""

    def __init__(self, args, dist, device, data, model, opt, flops_per_step, resume=None,
                 loss_scale=None):
        self.args, self.dist, self.flops_per_step = args, dist, flops_per_step
        self.step, self.flops, self.elapsed, self.setup_s, self.saved_fractions = 0, 0.0, 0.0, \
            0.0, []
        if resume is not None:
            model.load_state_dict(resume["model"])
            opt.load_state_dict(resume["optimizer"])
            self.step, self.flops, self.elapsed = resume["step"], resume["flops"], \
                resume["elapsed_s"]
            self.setup_s = resume.get("setup_s", 0.0)
            self.saved_fractions = list(resume.get("saved_fractions", []))
            if loss_scale is not None and resume.get("loss_scale"):
                loss_scale.load_state_dict(resume["loss_scale"])  # fp16: the scale it reached
            data.load_state_dict(resume["data"])          # the exact next batch ...
            set_rng_state(resume["rng"])                  # ... and the exact next masks
        self.data_state = data.state_dict()               # position after the last used batch
        # the steps that are setup, not training: compiling (the first); on a GPU recording the
        # CUDA graph (the whole step: the second; the regional step: the third, after two
        # warm-up steps, machinery/cuda_graph.py)
        self.setup_steps = ((3 if args.compile == "regional" else 2)
                            if args.compile and device.type == "cuda" else 1)

    def start_clock(self):
        """From now on the run's time counts (called as the loop starts)."""
        self.t0 = self.setup_mark = time.time()     # setup_mark: where a setup step's time starts
        self.elapsed0, self.local_steps = self.elapsed, 0         # local: steps taken here

    def progress(self):
        """The fraction of the budget used: of wall-clock time (less the setup steps'), of
        FLOPs, or of steps."""
        args = self.args
        if args.hours:
            budget, setup = args.hours * 3600, self.setup_s
            return 1.0 if setup >= budget else max(0.0, self.elapsed - setup) / (budget - setup)
        if args.flops:
            return self.flops / args.flops
        return self.step / args.max_steps

    def count_step(self, data_state, say):
        """A step is done: count it, its FLOPs and its time. The data position moves only now,
        so a resume never skips or repeats a batch."""
        self.step += 1
        self.flops += self.flops_per_step
        self.data_state = data_state
        hours = self.args.hours
        now = self.elapsed0 + time.time() - self.t0       # every process must agree on the time
        self.elapsed = self.dist.broadcast_float(now) if hours else now
        self.local_steps += 1
        if self.local_steps <= self.setup_steps:          # not schedule time (see progress)
            self.setup_s += self.dist.broadcast_float(time.time() - self.setup_mark) \
                if hours else time.time() - self.setup_mark
            self.setup_mark = time.time()
            if self.local_steps == self.setup_steps and self.args.compile:
                say(f"step {self.step}: compiling, "
                    f"{'graph recording, ' * (self.setup_steps > 1)}"
                    f"the first batch took {time.time() - self.t0:.1f} s"
                    + (": not counted in the learning-rate schedule, which runs over "
                       "the training time left before the deadline" if hours else ""),
                    flush=True)

    def counters(self):
        return dict(step=self.step, flops=self.flops, elapsed=self.elapsed)


class Checkpoints:
    """Saves of a run: never of a state that has seen a NaN loss (`nan`, machinery/divergence.py),
    never half-written (machinery/checkpoint.py); only rank 0 writes. `fixed`: what every
    checkpoint holds besides the run's state (config, tokenizer, data folder, budget, ...)."""

    def __init__(self, run, model, opt, nan, out, dist, loss_scale=None, **fixed):
        self.run, self.model, self.opt, self.nan, self.out, self.dist = \
            run, model, opt, nan, Path(out), dist
        self.loss_scale = loss_scale             # fp16's scale, saved with the optimizer
        self.fixed, self.last = fixed, time.time()

    def save(self, name="ckpt.pt"):
        self.nan.check()
        if not self.dist.main:
            return
        run = self.run
        state = dict(model=self.model.state_dict(), optimizer=self.opt.state_dict(),
                     step=run.step, flops=run.flops, elapsed_s=run.elapsed, setup_s=run.setup_s,
                     rng=rng_state(), data=run.data_state, saved_fractions=run.saved_fractions,
                     loss_scale=self.loss_scale.state_dict() if self.loss_scale else None,
                     **self.fixed)
        try:
            save_checkpoint(self.out / name, state)
        except OSError as e:                 # disk full, permissions, folder removed ...
            raise CheckpointError(f"could not write {self.out / name} ({e.strerror or e}); the "
                                  "previous checkpoint is intact: free disk space and continue "
                                  "with --resume") from None

    def after_step(self):
        """The saves a step may call for: at a fraction of the budget (--save_at, Table
        1-style compute checkpoints), every --save_every steps, and every --ckpt_every_min
        minutes, which bounds what a crash can lose (rank 0's clock decides for every
        process)."""
        run, args = self.run, self.run.args
        for f in args.save_at:
            if run.progress() >= f and f not in run.saved_fractions:
                run.saved_fractions.append(f)
                self.save(f"ckpt_{f:g}.pt")
        due = time.time() - self.last > args.ckpt_every_min * 60
        if (args.save_every and run.step % args.save_every == 0) or \
                self.dist.broadcast_float(float(due)):
            self.save()
            self.last = time.time()
