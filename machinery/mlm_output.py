"""G's output layer, L_MLM and the sample x̂ in one pass over p_G (paper §2; machinery - read
objectives.sample and objectives.mlm_loss first: this file computes exactly what they compute,
and tests/test_mlm_output.py holds it to that).

Each step needs the generator's distribution over the vocabulary,

    p_G(x | x_masked)_i = softmax(e(x)^T z_i + b)        z_i = G's output transform at slot i,

three times: for L_MLM = mean_i -log p_G(x_i | x_masked), for its gradient, and to draw
x̂_i ~ p_G (§2). Written plainly, PyTorch makes a (B·K, V) tensor of logits and then
passes over it five more times: log-softmax for the loss, softmax again for the sample, an
argmax for G's accuracy, and in backward the log-softmax gradient plus a zero-filled one-hot.
With B·K = 512 slots and V = 8192 (`--size laptop`) that is 4M floats per pass, and on a
2-core CPU the passes took about as long as the layer's three matrix products.

Here the probabilities are computed once, in place over the logits:

    m_i = max_x l_ix (also G's argmax, for free)      p_ix = exp(l_ix - m_i) / s_i
    -log p_G(x_i | x_masked) = log s_i + m_i - l_{i,x_i}

and the gradient of L_MLM with respect to the logits is the textbook one for softmax
cross-entropy, (p_i - onehot(x_i)) · w_i / sum w, computed from the saved p in backward. The
sample x̂ is drawn from the same p, exactly as objectives.sample draws it from the logits.
No gradient flows through the sample (§2: G is trained by maximum likelihood only).
"""
import torch


class _SoftmaxCrossEntropy(torch.autograd.Function):
    """logits = z E^T + b; returns (L_MLM, p_G, argmax); backward: (p - onehot) w / sum w."""

    @staticmethod
    def forward(ctx, z, E, bias, targets, weights):
        # Under bf16 autocast the product runs in bf16 and everything after it in float32: the
        # softmax over V classes needs the precision (as objectives.mlm_loss).
        logits = torch.addmm(bias, z, E.t())
        ctx.compute_dtype = logits.dtype
        logits = logits.float()
        target_logit = logits.gather(1, targets[:, None])
        m, argmax = logits.max(1, keepdim=True)
        p = logits.sub_(m).exp_()                       # in place: the logits are not kept
        s = p.sum(1, keepdim=True)
        p.div_(s)
        n = weights.sum().clamp(min=1.0)
        nll = (s.log() + m - target_logit).squeeze(1)
        loss = (nll * weights).sum() / n
        ctx.save_for_backward(p, z, E, targets, weights / n)
        ctx.mark_non_differentiable(p, argmax)
        return loss, p, argmax.squeeze(1)

    @staticmethod
    def backward(ctx, grad_loss, _grad_p, _grad_argmax):
        p, z, E, targets, w = ctx.saved_tensors
        c = (w * grad_loss)[:, None]
        g = p * c                   # a new tensor, not p.mul_: backward may run twice
        g.scatter_add_(1, targets[:, None], -c)         # (p - onehot(x_i)) w_i / sum w
        dt = ctx.compute_dtype      # backward runs outside autocast: cast as autocast would
        g_c = g.to(dt)
        grad_z = (g_c @ E.to(dt)).to(z.dtype)
        grad_E = (g_c.t() @ z.to(dt)).to(E.dtype)
        return grad_z, grad_E, g.sum(0).to(E.dtype), None, None


def mlm_output(z, token_embedding, bias, targets, weights, sample=True, generator=None):
    """z (B, K, E): G's transformed hidden states at the masked slots; token_embedding (V, E)
    the tied e(x); bias (V,); targets, weights (B, K) as in objectives.Masked.

    Returns L_MLM (a scalar with gradient), x̂ (B, K) sampled from p_G without gradient (None
    when sample=False, for BERT, which only needs the loss) and G's argmax hits as
    (correct, total), as objectives.masked_accuracy."""
    B, K, _ = z.shape
    loss, p, argmax = _SoftmaxCrossEntropy.apply(z.reshape(B * K, -1), token_embedding, bias,
                                                 targets.reshape(-1), weights.reshape(-1))
    hits = ((argmax.view(B, K) == targets).float() * weights).sum(), weights.sum()
    if not sample:
        return loss, None, hits
    # BEGIN ANSWER sample  (objectives.sample's method restated; a student copy in which Part 2
    # is blank calls the student's objectives.sample here instead: teaching/make_assignment.py)
    # The inverse CDF of objectives.sample, on the p computed above. cumsum makes a copy: p
    # itself is saved for backward.
    cdf = p.cumsum(dim=-1)
    u = torch.rand(cdf.shape[:-1] + (1,), device=cdf.device, generator=generator)
    x_hat = torch.searchsorted(cdf, u * cdf[..., -1:], right=True).squeeze(-1)
    return loss, x_hat.clamp_(max=cdf.shape[-1] - 1).view(B, K), hits
    # END ANSWER sample
