"""Dynamic loss scaling for fp16, on the device (machinery; no paper section - read
train.update first: this file runs its backward, clipping and Adam when the precision is fp16).

Why: fp16 holds numbers from 6e-5 (normal; 6e-8 with less precision) to 65504. Many gradients
of a Transformer are smaller than 6e-5 and would round to zero in fp16's backward. So the loss
is multiplied by a scale S (INIT_SCALE, 2^11, to start) before backward, every gradient with
it, and divided by S again (unscaled) before anything uses them - before the clip at global
norm 1, which must see the true norm. If a scaled gradient overflowed (inf or NaN), the step is
skipped (no weight, no Adam moment, no step count changes) and S halves; after 2,000 steps
without an overflow S doubles. (Mixed-precision training, Micikevicius et al. 2018;
torch.amp.GradScaler's rules, whose default start is 2^16; richarddwang/electra_pytorch trained
ELECTRA in fp16 this way, from 2^11.) bf16 has float32's range and needs none of it.

The losses themselves (L_MLM, L_Disc) and G's sample x̂ stay in float32, as in every precision.

Why not torch.amp.GradScaler: its step reads found_inf on the host (`.item()`) to decide
whether to call the optimizer - one wait for the GPU per step, and a graph break in a compiled
step (a compiled whole step cannot be one graph, nor one CUDA-graph replay, around it). Here the
decision stays on the device, as torch's fused optimizers take found_inf: the optimizer runs
every step, and `torch.where(overflow, before, after)` puts back every tensor it changed when
the step overflowed. Inside the compiled step Inductor fuses that select into Adam's kernels;
eagerly it costs a copy of the weights and the moments. `GradScalerReference` runs torch's
GradScaler instead, for torch.optim.AdamW (whose state appears only at its first step) and to
measure the two against each other (benchmarks/loss_scale.py).

A skipped step is not divergence: its losses are finite, only its scaled gradients overflowed;
the log counts skipped steps. A run whose gradients overflow even at S < 1 has diverged
(machinery/divergence.py stops it), as has one whose loss is NaN.
"""
import torch

INIT_SCALE, GROWTH_INTERVAL = 2.0 ** 11, 2000


class LossScale:
    """Dynamic loss scaling whose every decision stays on the device.

    scale: S, a float32 0-dim tensor; good_steps: steps since the last overflow (or growth)."""

    def __init__(self, device, init_scale=INIT_SCALE, growth_interval=GROWTH_INTERVAL):
        self.scale = torch.full((), float(init_scale), dtype=torch.float32, device=device)
        self.good_steps = torch.zeros((), dtype=torch.float32, device=device)
        self.growth_interval = growth_interval

    def tensors(self):
        """The state a compiled step writes in place (machinery/step.py marks its address)."""
        return [self.scale, self.good_steps]

    def backward_clip_step(self, model, opt, loss, grad_clip):
        """backward of S·loss, unscale, clip at grad_clip, Adam unless a gradient overflowed,
        then S's update. Returns the overflow flag (a bool tensor, not read)."""
        (loss * self.scale).backward()
        params = [p for group in opt.param_groups for p in group["params"] if p.grad is not None]
        torch._foreach_mul_([p.grad for p in params], 1.0 / self.scale)     # unscale
        # the clip sees the true norm; an inf or NaN gradient makes the norm inf or NaN
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        overflow = ~torch.isfinite(norm)
        step_unless(opt, params, overflow)
        self.update_scale(overflow)
        return overflow

    @torch.no_grad()
    def update_scale(self, overflow):
        """S halves after an overflow; doubles after growth_interval good steps in a row."""
        good = torch.where(overflow, 0.0, self.good_steps + 1)
        grow = good >= self.growth_interval
        self.scale.copy_(torch.where(overflow, self.scale * 0.5,
                                     torch.where(grow, self.scale * 2.0, self.scale)))
        self.good_steps.copy_(torch.where(grow, 0.0, good))

    def state_dict(self):
        return {"scale": self.scale.detach().cpu(), "good_steps": self.good_steps.detach().cpu()}

    def load_state_dict(self, state):
        self.scale.copy_(state["scale"])
        self.good_steps.copy_(state["good_steps"])


@torch.no_grad()
def step_unless(opt, params, overflow):
    """opt.step(), undone on the device where `overflow` (a bool tensor) is true: every weight
    and every tensor of the optimizer's state is put back as it was."""
    changed = list(params) + [t for p in params for t in opt.state[p].values()
                              if torch.is_tensor(t)]
    before = [t.clone() for t in changed]
    opt.step()
    for t, b in zip(changed, before):
        t.copy_(torch.where(overflow, b, t))


class GradScalerReference:
    """The same scaling by torch.amp.GradScaler: one host read per step (its step() asks
    found_inf.item() whether to call the optimizer). For torch.optim.AdamW, and for the
    measurement against LossScale."""

    def __init__(self, device, init_scale=INIT_SCALE, growth_interval=GROWTH_INTERVAL):
        self.scaler = torch.amp.GradScaler(torch.device(device).type, init_scale=init_scale,
                                           growth_interval=growth_interval)

    @property
    def scale(self):
        return self.scaler._scale if self.scaler._scale is not None else \
            torch.tensor(self.scaler._init_scale)

    def tensors(self):
        return []

    def backward_clip_step(self, model, opt, loss, grad_clip):
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        before = self.scaler._scale.clone()
        self.scaler.step(opt)                            # the host read
        self.scaler.update()
        return self.scaler._scale < before               # halved: the step overflowed

    def state_dict(self):
        return {k: (v.detach().cpu() if torch.is_tensor(v) else v)
                for k, v in self.scaler.state_dict().items()}

    def load_state_dict(self, state):
        self.scaler.load_state_dict(state)


def make_loss_scale(precision, opt, device, init_scale=None, reference=False):
    """The loss scaling a run in `precision` (a name) needs: None but for fp16; LossScale, or
    for torch.optim.AdamW (or reference=True) GradScalerReference."""
    if precision != "fp16":
        return None
    kind = GradScalerReference if reference or not hasattr(opt, "_init_state") else LossScale
    return kind(device, init_scale or INIT_SCALE)
