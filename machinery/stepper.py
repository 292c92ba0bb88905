"""How a training step runs: eager or compiled, in one process or several, profiled, on as
many CPU threads as pay (machinery; no paper section - read train.training_step first: every
path here runs its lines).

- --compile makes the whole step one graph (machinery/step.py), or compiles the model only
  where the step cannot be one graph: under DistributedDataParallel (its gradient hooks need a
  backward of their own) and with torch.optim.AdamW (its step breaks graphs on purpose). The
  model is compiled inside DDP, so Dynamo does not trace DDP.
- A torch.compile that fails, when the step is set up or at its first call (a torch or a GPU it
  does not support), gets one line, and the run goes on with the eager step; so does a GPU
  that torch.compile cannot compile for (machinery/device.py `compile_refusal`: older than
  sm_70, or bf16 below sm_80), said before any compiling.
- Under torchrun the model is wrapped in DistributedDataParallel (machinery/distributed.py);
  two-stage training, whose other parameters train from half-way, gets a new DDP around the
  same model.
- --compile_cache FILE loads torch.compile's saved artifacts before the first compile and
  writes them after the first compiled step (machinery/compile_cache.py): a fresh machine
  skips most of the compiling.
- --profile N records N steps with torch.profiler (machinery/profile.py); on a CPU the run
  picks its thread count from timed steps (machinery/threads.py: two threads are faster on an
  idle machine, one on a busy laptop).

train.py passes its own step functions in (`training_step`, `update`): machinery imports
nothing of the core.
"""
import sys

import torch

from machinery import compile_cache
from machinery.device import compile_refusal
from machinery.profile import start_profile
from machinery.step import compile_step
from machinery.threads import ThreadChooser


class Stepper:
    """step(batch, lr) -> the step's statistics, on the device: `training_step` (eager) or its
    compiled graph, with the fallback, DDP, the profiler and the thread choice around it."""

    def __init__(self, training_step, update, model, opt, cfg, device, args, dist, out, say,
                 loss_scale=None):
        self.training_step, self.raw_model, self.opt = training_step, model, opt
        self.cfg, self.device, self.args, self.dist = cfg, device, args, dist
        self.loss_scale = loss_scale                  # fp16's (machinery/loss_scale.py) or None
        refusal = compile_refusal(device, args.precision) if args.compile else None
        if refusal:
            say(refusal)
            args.compile = None
        compile_model = args.compile and (dist.enabled or cfg.optimizer != "official")
        # the saved artifacts in, before anything compiles (every process: each compiles);
        # written after the first step, by one
        self.cache = getattr(args, "compile_cache", None) if args.compile else None
        if self.cache:
            compile_cache.load(self.cache, device, say)
        self.say = say
        # DistributedDataParallel where torchrun started several processes, else the model
        self.model = dist.wrap(torch.compile(model) if compile_model else model,
                               find_unused=getattr(model, "stage", None) is not None)
        self.step = None                   # the compiled whole step, if there is one
        if args.compile and not compile_model:
            try:    # (a torch without what machinery/step.py sets up: eager, as a failed compile)
                self.step = compile_step(update, model, opt, cfg.grad_clip, device,
                                         args.precision, regional=args.compile == "regional",
                                         loss_scale=loss_scale)
            except Exception as e:
                compile_failed(e)
        self.prof = start_profile(args.profile, out, device) \
            if getattr(args, "profile", None) and dist.main else None
        self.threads = ThreadChooser.for_run(device, args, dist.world, say)

    def __call__(self, batch, lr):
        stats, self.step, self.model = compiled_step(
            self.training_step, self.step, self.model, self.raw_model, self.opt, batch, lr,
            self.cfg, self.device, self.args, self.loss_scale)
        if self.cache:             # (whether or not the step fell back: what did compile)
            if self.dist.main:
                compile_cache.save(self.cache, self.device, self.say)
            self.cache = None
        if self.prof:
            self.prof.step()
        if self.threads:
            self.threads.after_step()
        return stats

    def new_stage(self):
        """Other parameters train from now on (two-stage training): a new DDP, same model."""
        self.model = self.dist.wrap(unwrapped(self.model), find_unused=True)

    def close(self):
        if self.prof:
            self.prof.stop()                              # (writes the trace if still recording)


def compiled_step(training_step, step, model, raw_model, opt, batch, lr, cfg, device, args,
                  loss_scale=None):
    """One step, compiled (machinery/step.py) if there is a compiled `step`, else
    training_step; falls back to the eager model if torch.compile fails here. Returns
    (statistics, step, model), the last two changed by a fallback."""
    try:
        if step is not None:
            return step(batch, lr), step, model
        return training_step(model, opt, batch, lr, cfg, device, args.precision, loss_scale), \
            step, model
    except Exception as e:
        if not args.compile or (step is None and unwrapped(model) is raw_model):
            raise
        compile_failed(e)
        opt.zero_grad(set_to_none=True)
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            # the same DDP with the eager model inside (a second DDP would all-reduce every
            # gradient twice)
            model.module = raw_model
        else:
            model = raw_model
        return training_step(model, opt, batch, lr, cfg, device, args.precision, loss_scale), \
            None, model


def unwrapped(model):
    """The model inside DistributedDataParallel, or the model itself."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def compile_failed(e):
    """The one line a failed torch.compile gets; the run goes on eagerly."""
    print(f"torch.compile failed ({type(e).__name__}: {(str(e).splitlines() or [''])[0][:120]}); "
          "continuing eagerly", file=sys.stderr)
