"""Part 8, adam (optim.AdamWeightDecay.step): Adam without bias correction, decoupled weight
decay, as the official AdamWeightDecayOptimizer (Appendix A)."""
import math

import pytest
import torch

from optim import AdamWeightDecay, decay_groups


def test_first_steps_match_hand_computed_updates():
    # one scalar parameter, gradients 1, -2, 0.5; lr 0.1, β 0.9/0.999, ε 1e-6, decay 0.01
    p = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    opt = AdamWeightDecay([p], lr=0.1, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01)
    theta, m, v = 1.0, 0.0, 0.0
    for g in (1.0, -2.0, 0.5):
        p.grad = torch.tensor([g], dtype=torch.float64)
        opt.step()
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        theta -= 0.1 * (m / (math.sqrt(v) + 1e-6) + 0.01 * theta)   # no 1 - β^t anywhere
        assert p.item() == pytest.approx(theta, abs=1e-12), \
            f"θ {p.item():.12f} after a step, expected {theta:.12f}: θ - lr (m / (√v + ε) + w θ), " \
            f"m and v updated in place, no bias correction"
    # step 1 by itself: m = 0.1, √v = √0.001, so the update is 0.1 * (3.1623 + 0.01)
    q = torch.nn.Parameter(torch.tensor([1.0], dtype=torch.float64))
    o = AdamWeightDecay([q], lr=0.1, weight_decay=0.01)
    q.grad = torch.tensor([1.0], dtype=torch.float64)
    o.step()
    want = 1.0 - 0.1 * (0.1 / (0.001 ** 0.5 + 1e-6) + 0.01)
    assert q.item() == pytest.approx(want, abs=1e-12), \
        f"θ {q.item():.12f} after step 1, expected {want:.12f} (m = 0.1, v = 0.001)"


def test_differs_from_torch_adamw_exactly_by_the_bias_correction():
    torch.manual_seed(0)
    grads = [torch.randn(5) for _ in range(20)]
    ours, theirs = torch.zeros(5, requires_grad=True), torch.zeros(5, requires_grad=True)
    o1 = AdamWeightDecay([ours], lr=1e-3, eps=1e-12)
    o2 = torch.optim.AdamW([theirs], lr=1e-3, eps=1e-12, weight_decay=0.0)
    for t, g in enumerate(grads, 1):
        before1, before2 = ours.detach().clone(), theirs.detach().clone()
        ours.grad, theirs.grad = g.clone(), g.clone()
        o1.step()
        o2.step()
        step1, step2 = ours.detach() - before1, theirs.detach() - before2
        # AdamW's step is ours times √(1 - β2^t) / (1 - β1^t): 0.32 at t = 1, 0.15 at t = 10
        factor = math.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t)
        assert torch.allclose(step2, step1 * factor, rtol=1e-4, atol=1e-9), \
            f"step {t}: torch's AdamW step should be ours times √(1 - β2^t) / (1 - β1^t) = " \
            f"{factor:.4f}: no bias correction in ours"


def test_weight_decay_is_decoupled_and_skips_biases_and_norms():
    lin, norm = torch.nn.Linear(3, 3), torch.nn.LayerNorm(3)
    named = list(lin.named_parameters()) + [("norm." + n, p) for n, p in norm.named_parameters()]
    groups = decay_groups(named, 0.01)
    assert groups[0]["params"] == [lin.weight] and groups[0]["weight_decay"] == 0.01, \
        "decay_groups: weights decayed"
    assert len(groups[1]["params"]) == 3 and groups[1]["weight_decay"] == 0.0, \
        "decay_groups: biases and norms not decayed"
    # with a zero gradient Adam's term is 0, so the only change is -lr * w * θ (not scaled by
    # 1/√v, as L2 regularisation through the gradient would be)
    p = torch.nn.Parameter(torch.tensor([2.0]))
    opt = AdamWeightDecay([p], lr=0.5, weight_decay=0.1)
    p.grad = torch.zeros(1)
    opt.step()
    assert p.item() == pytest.approx(2.0 - 0.5 * 0.1 * 2.0), \
        f"θ {p.item():.5f} after a step with a zero gradient, expected 1.9: the decay is " \
        f"- lr w θ, decoupled (not added to the gradient)"
