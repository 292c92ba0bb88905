"""Adam (Table 6) as the official code runs it: decoupled weight decay and *no* bias correction.

The paper says "Adam" (β 0.9, 0.999, ε 1e-6; weight decay 0.01, 0 for fine-tuning: Table 6,
Table 7), nothing about bias correction. The official code (model/optimization.py,
AdamWeightDecayOptimizer, from BERT), released with the paper, has none. For a weight θ with
gradient g, learning rate η, weight decay w and moments m and v starting at 0:

$$ m ← β_1 m + (1 − β_1) g
   v ← β_2 v + (1 − β_2) g^2
   θ ← θ − η (m / (√v + ε) + w θ) $$

torch.optim.AdamW divides m by $1 − β_1^t$ and v by $1 − β_2^t$ (bias correction), so its
early steps are larger; the paper's learning rates were presumably tuned with the official
rule, this code's default.

Details: AdamW's step is larger by $(1 − β_1^t) / √{1 − β_2^t}$: 6.5x at step 10, 1.4x at step
700, about 2.5x on average over a 700-step GLUE run (tests/test_optim.py). `--optimizer
official` is the default; `--optimizer torch` is AdamW, which the `laptop` size uses.
"""
import torch


class AdamWeightDecay(torch.optim.Optimizer):
    """The rule above as a torch.optim optimizer.

    Details: parameter groups work as in torch.optim (a per-group "lr" and "weight_decay"), so
    layer-wise learning rates (finetune_glue.py) and "no decay for biases" are just groups; the
    state has torch's names (exp_avg, exp_avg_sq, step).

    Engineering: a group's "lr" may be a 0-dim tensor changed in place between steps, which a
    compiled step (machinery/step.py) reads as an input instead of baking it into its graph."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
        if not (lr >= 0 and eps >= 0 and 0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"invalid Adam hyperparameters lr={lr}, betas={betas}, eps={eps}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay))

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        # Engineering: the moments exist from the start, at zero, as TF's slot variables: the
        # first step runs the same code as every later one, which a compiled step needs.
        for p in self.param_groups[-1]["params"]:
            self._init_state(p)

    def _init_state(self, p):
        self.state[p] = dict(step=torch.zeros((), dtype=torch.float32, device=p.device),
                             exp_avg=torch.zeros_like(p, memory_format=torch.preserve_format),
                             exp_avg_sq=torch.zeros_like(p, memory_format=torch.preserve_format))

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        for group in self.param_groups:       # torch leaves "step" on the device it was saved on
            for p in group["params"]:
                if self.state[p]:
                    self.state[p]["step"] = self.state[p]["step"].to(p.device)
                else:
                    self._init_state(p)

    @torch.no_grad()
    def step(self, closure=None):
        """One in-place update of every parameter with a gradient by the rule above, m and v
        (zero at the start) included; no division by $1 − β^t$."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            (b1, b2), lr, eps, wd = group["betas"], group["lr"], group["eps"], group["weight_decay"]
            grads = [p.grad for p in params]
            torch._foreach_add_([self.state[p]["step"] for p in params], 1)   # for inspection
            m = [self.state[p]["exp_avg"] for p in params]
            v = [self.state[p]["exp_avg_sq"] for p in params]
            # BEGIN ASSIGNMENT adam
            # The _foreach_ ops: the arithmetic of a loop over parameters, in far fewer
            # kernel launches.
            torch._foreach_lerp_(m, grads, 1 - b1)                   # m ← β1 m + (1-β1) g
            torch._foreach_mul_(v, b2)                               # v ← β2 v + (1-β2) g²
            torch._foreach_addcmul_(v, grads, grads, value=1 - b2)
            update = torch._foreach_sqrt(v)                          # m / (√v + ε), no 1-β^t
            torch._foreach_add_(update, eps)
            update = torch._foreach_div(m, update)
            if wd:                                                   # + w θ, decoupled
                torch._foreach_add_(update, params, alpha=wd)
            torch._foreach_mul_(update, lr)                          # θ ← θ - η · update
            torch._foreach_sub_(params, update)
            # END ASSIGNMENT adam
        return loss


def decay_groups(named_params, weight_decay):
    """Two parameter groups: weights that decay, and biases and LayerNorm parameters that do
    not (as the official code, model/optimization.py: shrinking a bias or a LayerNorm gain
    regularises nothing)."""
    decay, no_decay = [], []
    for name, p in named_params:
        (no_decay if p.ndim < 2 or "norm" in name else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def make_adam(groups, kind, lr, betas, eps, weight_decay=0.0, fused=False):
    """`kind` "official": AdamWeightDecay above (the default, the official code's rule);
    "torch": torch.optim.AdamW, with bias correction (fused on CUDA)."""
    if kind == "official":
        return AdamWeightDecay(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if kind == "torch":
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                 fused=fused)
    raise ValueError(f"unknown optimizer {kind!r}: use 'official' or 'torch'")
