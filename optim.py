"""The optimizer that produced the paper's numbers: Adam with decoupled weight decay and *no*
bias correction (Appendix A / Table 6 "Adam ε 1e-6", Table 7; google-research/electra
model/optimization.py, AdamWeightDecayOptimizer, inherited from BERT).

For one parameter θ with gradient g, learning rate η, β1 = 0.9, β2 = 0.999, ε = 1e-6 and
weight decay w (0.01 in pre-training, 0 in fine-tuning):

    m ← β1 m + (1 - β1) g            (first moment, starts at 0)
    v ← β2 v + (1 - β2) g²           (second moment, starts at 0)
    θ ← θ - η ( m / (√v + ε) + w θ )

torch.optim.AdamW divides m by (1 - β1^t) and v by (1 - β2^t) ("bias correction"); this rule
does not. Since v starts at 0 and β2 = 0.999 forgets slowly, the uncorrected √v underestimates
the gradient scale for the first thousands of steps, so the uncorrected step is *larger* than
AdamW's by (1 - β1^t) / √(1 - β2^t): 6.5x at step 10, 3.2x at step 100, 1.4x at step 700, and
still 1.03x at step 3000. Over a ~700-step GLUE run (RTE, MRPC, CoLA: 10 % warm-up, linear
decay) the learning-rate-weighted average step is 2.5x AdamW's, for steady or noisy gradients
alike (tests/test_optim.py checks the ratio). The paper's learning rates (5e-4 pre-training,
3e-4 fine-tuning) were tuned with this rule, so with torch's AdamW the same lr is effectively
~2.5x smaller on the small GLUE tasks. This project uses the official rule by default
(`--optimizer torch` selects torch.optim.AdamW instead).

Weight decay is decoupled (Loshchilov & Hutter): it is added to the Adam *update*, not to the
gradient, so it is not rescaled by 1/√v; like the official code it is multiplied by η, and it is
skipped for biases and LayerNorm parameters (the caller puts those in a group with w = 0).
"""
import torch


class AdamWeightDecay(torch.optim.Optimizer):
    """Adam without bias correction, with decoupled weight decay, as the official ELECTRA code.

    Parameter groups work as in torch.optim (a per-group "lr" and "weight_decay"), so layer-wise
    learning rates (finetune_glue.py) and "no decay for biases" are just groups. The state uses
    torch's names (exp_avg, exp_avg_sq, step) so checkpoints look like AdamW's. A group's "lr"
    may also be a 0-dim tensor, changed in place between steps: a compiled step
    (machinery/step.py) then reads it as an input instead of baking a number into its graph."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
        if not (lr >= 0 and eps >= 0 and 0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"invalid Adam hyperparameters lr={lr}, betas={betas}, eps={eps}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay))

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        # The moments start at zero and exist from the start, as TF's slot variables: the first
        # step then runs the same code as every later one, which a compiled step needs
        # (machinery/step.py).
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
        """One update of every parameter with a gradient, in place: m <- β1 m + (1-β1) g,
        v <- β2 v + (1-β2) g², θ <- θ - η (m / (√v + ε) + w θ), with m and v (zero at the
        start) updated in place and no division by 1 - β^t."""
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
            # One operation per list, not one per parameter (as all of the rule below).
            torch._foreach_add_([self.state[p]["step"] for p in params], 1)   # for inspection
            m = [self.state[p]["exp_avg"] for p in params]
            v = [self.state[p]["exp_avg_sq"] for p in params]
            # BEGIN ASSIGNMENT adam
            # The _foreach_ ops apply one elementwise op to a whole list of tensors at once:
            # the same arithmetic as a loop over parameters, in far fewer kernel launches.
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
    """Two parameter groups: weights that decay, and biases / LayerNorm parameters that don't
    (as BERT and ELECTRA: shrinking a bias or a LayerNorm gain toward 0 regularises nothing)."""
    decay, no_decay = [], []
    for name, p in named_params:
        (no_decay if p.ndim < 2 or "norm" in name else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def make_adam(groups, kind, lr, betas, eps, weight_decay=0.0, fused=False):
    """`kind` "official": AdamWeightDecay above (the default, as the paper); "torch":
    torch.optim.AdamW, with bias correction (fused on CUDA)."""
    if kind == "official":
        return AdamWeightDecay(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if kind == "torch":
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                 fused=fused)
    raise ValueError(f"unknown optimizer {kind!r}: use 'official' or 'torch'")
