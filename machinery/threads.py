"""Machinery (skip on a first read): how many CPU threads a training run uses, chosen while it runs.

On an idle 2-core machine two PyTorch threads train the laptop recipe about 1.5x faster than
one; beside two busy processes (a browser, an editor, another job) the same two threads run
2-3x slower than one thread does, because each OpenMP parallel region waits at its end for the
thread the operating system has put aside, and a waiting thread spins on its core meanwhile
(docs/results.md, "Threads on a busy machine", has the table). No single count is right on
both machines, and a laptop changes from one to the other while a run goes on.

So, on a CPU, when neither --threads nor OMP_NUM_THREADS chooses: the run times a few steps at
each candidate count (all cores, then half of them, down to 1), keeps the fastest, and tries
again after `every` steps, then less often while the choice holds - or at once when the steps
between two probes drift from what the last probe timed (the median of `window` steps 1.5x
slower or faster: another program started or stopped). A probe costs a few steps at a slower
count; the line that says which count won is printed when the choice changes. A
fixed --threads N gives runs that repeat bit for bit; a chosen count may change the order of a
few float sums between runs (never the data, the masks or the samples)."""
import os
import time

import torch

PROBE_STEPS = 6          # steps timed per candidate (after one step to settle)
EVERY = 300              # steps between two probes
WINDOW = 20              # steps whose median is held against the last probe's time
DRIFT = 1.5              # a median this many times slower or faster than it: probe now


def candidates(n):
    """n, n // 2, ..., 1: the thread counts worth a probe on n cores."""
    out = []
    while n >= 1:
        out.append(n)
        n //= 2
    return out


class ThreadChooser:
    """Call `after_step()` once after every training step; it sets torch's thread count.

    A probe times the count in use first, then the others; a count whose first timed steps are
    already a quarter slower than the best so far is dropped at once, so a probe on a busy
    machine costs a few slow steps, not `probe_steps`. When a probe keeps the same count the
    wait until the next doubles (up to 8 x `every`); a change starts it again at `every`."""

    def __init__(self, n_threads, say=print, probe_steps=None, every=None, start=2,
                 clock=time.perf_counter, window=None):
        self.options, self.say, self.clock = candidates(n_threads), say, clock
        self.probe_steps, self.every = probe_steps or PROBE_STEPS, every or EVERY
        self.window, self.recent = window or WINDOW, []
        self.chosen, self.steps_left, self.wait = n_threads, start, self.every
        self.probing, self.times, self.last, self.history = [], {}, None, []

    @classmethod
    def for_run(cls, device, args, world, say=print):
        """A chooser when this run may choose, else None: a CPU, more than one core, one
        process, and no thread count given by --threads or OMP_NUM_THREADS."""
        n = torch.get_num_threads()
        if device.type != "cpu" or n < 2 or world > 1 or getattr(args, "threads", None) or \
                os.environ.get("OMP_NUM_THREADS"):
            return None
        return cls(n, say)

    def _set(self, n):
        torch.set_num_threads(n)
        self.current, self.timed = n, []

    def after_step(self):
        now = self.clock()
        step_s, self.last = (None if self.last is None else now - self.last), now
        if self.probing:
            if step_s is not None:
                self.timed.append(step_s)
            timed = sorted(self.timed[1:])       # one step to settle (waking the threads)
            median = timed[len(timed) // 2] if timed else None
            best = min(self.times.values(), default=None)
            hopeless = best is not None and len(timed) >= 2 and median > 1.25 * best
            if len(timed) >= self.probe_steps or hopeless:
                self.times[self.current] = median
                self.probing.pop(0)
                if self.probing:
                    self._set(self.probing[0])
                else:
                    self._decide()
            return
        self.steps_left -= 1
        if step_s is not None and self.chosen in self.times:
            self.recent.append(step_s)
            if len(self.recent) >= self.window:         # the machine changed since the probe?
                median, timed = sorted(self.recent)[len(self.recent) // 2], self.times[self.chosen]
                self.recent = []
                if not timed / DRIFT <= median <= timed * DRIFT:
                    self.steps_left, self.wait = 0, self.every
        if self.steps_left <= 0:                        # time for a probe: the count in use first
            self.recent = []
            self.probing = [self.chosen] + [n for n in self.options if n != self.chosen]
            self.times = {}
            self._set(self.probing[0])
            self.last = self.clock()                    # time from here

    def _decide(self):
        best = min(self.times, key=self.times.get)
        self.history.append(dict(self.times))
        if best != self.chosen or len(self.history) == 1:
            table = ", ".join(f"{n}: {1e3 * s:.0f} ms" for n, s in sorted(self.times.items()))
            self.say(f"threads: {best} (per step with {table}; timed again after {self.every} "
                     f"steps, then less often while it holds; --threads N fixes it)", flush=True)
        self.wait = self.every if best != self.chosen or len(self.history) == 1 else \
            min(2 * self.wait, 8 * self.every)
        self.chosen, self.steps_left = best, self.wait
        self._set(best)
