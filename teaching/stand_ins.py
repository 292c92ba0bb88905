"""Teaching: the stand-ins the assignment tests put in place of other parts, by name.

A part that runs a network (the joint loss, ELECTRA 15%) is graded with the parts it calls
replaced by these simple functions, so that it is graded while those are still blank and its
result depends on its own wiring alone. They are functions of this module, not of a test, so
that the part's worker (teaching/worker.py, another process) puts the same ones in place when a
test has (teaching/remote.py sends their names): the tests compare what the worker returns with
what they compute here, with the same stand-ins. None of them holds an expected value. Each
stand-in's value depends on every input the graded part hands it, so that a part handing it
the wrong one changes the numbers (sample_argmax reads no `generator`: an argmax draws
nothing)."""
import torch


def attend_to_self(self, h, attn_mask=None):
    """encoder.SelfAttention.forward: every position attends only to itself (its value vector,
    projected)."""
    H = h.shape[-1]
    return self.out(self.qkv(h)[..., 2 * H:])


def sample_argmax(logits, generator=None):
    """objectives.sample: G's most likely token."""
    return logits.detach().argmax(-1)


def corrupt_last_and_first_slot(x, masked, x_hat):
    """objectives.corrupt: x with its last token changed and the first slot's position taking
    the first slot's sample, labels x_corrupt != x. It reads all three inputs - x, the mask's
    positions and x_hat - so that a joint loss that hands it anything but G's samples (the
    original tokens, masked.targets: D would never see a replaced token) gets other labels."""
    x_corrupt = x.clone()
    x_corrupt[:, -1] = (x[:, -1] + 1) % 90
    x_corrupt.scatter_(1, masked.positions[:, :1], x_hat[:, :1].to(x.dtype))
    labels = x_corrupt.ne(x)
    return x_corrupt, labels


def mlm_loss_square(logits, targets, weights):
    """objectives.mlm_loss: the mean square of G's logits, plus a term in the targets and
    weights (so that its value depends on every input)."""
    return (logits.float() ** 2).mean() + 1e-3 * (targets.float() * weights.float()).mean()


def disc_loss_linear(logits, is_replaced, mask=None):
    """objectives.disc_loss: D's logits, doubled where replaced, averaged over the tokens in
    mask (every token when None): its value depends on the logits, the labels and the mask."""
    mask = torch.ones_like(logits, dtype=torch.bool) if mask is None else mask
    return (logits.float() * (1 + is_replaced.float()) * mask).sum() / mask.sum()


def disc_loss_scored(logits, is_replaced, mask=None):
    """objectives.disc_loss: the tokens in mask as one number, sum of 2^(row * T + t) over them
    (exact in float64 for B * T <= 52), so that a test reads which tokens were scored."""
    B, T = logits.shape
    mask = torch.ones_like(logits, dtype=torch.bool) if mask is None else mask
    code = 2.0 ** torch.arange(B * T, dtype=torch.float64).view(B, T)
    return (mask.double() * code).sum() + 0.0 * logits.sum()


def scored_of(value, B, T):
    """The (B, T) bool mask that disc_loss_scored turned into `value`."""
    n = int(round(float(value)))
    return torch.tensor([[bool(n >> (b * T + t) & 1) for t in range(T)] for b in range(B)])
