"""Part 4, mlm_loss (objectives.mlm_loss): L_MLM = E[sum_{i in m} -log p_G(x_i | x_masked)],
as the mean over the used slots (weight 1) of -log softmax(logits) at the targets, a float32
scalar whatever the logits' dtype, accurate for logits as large as ±100."""
import math

import pytest
import torch

from objectives import mlm_loss


def nll(row, target):
    """-log softmax(row)[target], by hand."""
    return math.log(sum(math.exp(v) for v in row)) - row[target]


def test_hand_worked_value_over_used_slots_only():
    logits = [[[2.0, 0.0, -1.0], [0.5, 0.5, 3.0], [9.0, -9.0, 0.0]]]     # (1, K=3, V=3)
    targets, weights = [[0, 2, 1]], [[1.0, 1.0, 0.0]]                     # slot 3 unused
    got = mlm_loss(torch.tensor(logits), torch.tensor(targets), torch.tensor(weights))
    expect = (nll(logits[0][0], 0) + nll(logits[0][1], 2)) / 2
    assert got.item() == pytest.approx(expect, rel=1e-6), \
        f"got {got.item():.6f}, expected {expect:.6f}: the mean of -log softmax at the targets " \
        f"over the 2 used slots (the unused third left out)"


def test_mean_over_used_slots_in_a_batch():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 7, generator=g)
    targets = torch.randint(0, 7, (3, 4), generator=g)
    weights = torch.tensor([[1.0, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    got = mlm_loss(logits, targets, weights).item()
    terms = [nll(logits[b, k].tolist(), targets[b, k].item())
             for b in range(3) for k in range(4) if weights[b, k] > 0]
    assert got == pytest.approx(sum(terms) / len(terms), rel=1e-5), \
        f"got {got:.5f}, expected {sum(terms) / len(terms):.5f}: the mean over all {len(terms)} " \
        f"used slots of the batch (not a sum, not a mean of row means)"


def test_accurate_for_large_logits():
    """A target 200 below the largest logit: -log p_G is 200 (to 1e-87); log of a float32
    softmax takes the log of exp(-200), which is 0 there, and gives infinity."""
    logits = torch.tensor([[[100.0, -100.0, 0.0], [-100.0, 100.0, 100.0]]])
    got = mlm_loss(logits, torch.tensor([[1, 0]]), torch.tensor([[1.0, 1.0]]))
    expect = (200 + (200 + math.log(2))) / 2
    assert got.item() == pytest.approx(expect, rel=1e-6), \
        f"got {got.item()}: -log p_G at a target 200 below the largest logit is about 200"


def test_float32_under_bf16_logits_and_gradient():
    logits = torch.randn(2, 3, 30000, generator=torch.Generator().manual_seed(1))
    targets = torch.randint(0, 30000, (2, 3), generator=torch.Generator().manual_seed(2))
    weights = torch.ones(2, 3)
    a = mlm_loss(logits.bfloat16(), targets, weights)
    assert a.dtype == torch.float32, f"a float32 loss expected under bf16 logits, got {a.dtype}"
    # computed in float32 from the bf16 values, not in bf16 and cast at the end (which is off
    # by some 1e-3)
    exact = -torch.log_softmax(logits.bfloat16().double(), -1).gather(-1, targets[..., None])
    assert a.item() == pytest.approx(exact.mean().item(), rel=1e-4), \
        f"got {a.item():.5f}, expected {exact.mean().item():.5f}: compute in float32 from the " \
        f"bf16 logits, not in bf16"
    leaf = logits.clone().requires_grad_(True)
    mlm_loss(leaf, targets, weights).backward()
    # d/dlogits of the mean NLL: (softmax - onehot) / 6 at each slot
    expect = (torch.softmax(logits, -1) - torch.nn.functional.one_hot(targets, 30000)) / 6
    assert torch.allclose(leaf.grad, expect, atol=1e-6), \
        "the gradient should be (softmax - onehot(target)) / 6 at each of the 6 used slots"
