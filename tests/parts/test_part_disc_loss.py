"""Part 5, disc_loss (objectives.disc_loss): L_Disc, the binary cross-entropy of D over tokens.

D's logit scores "replaced": D(x, t) = 1 - sigmoid(logit_t) is the probability of "real". The
mean over the tokens in mask (every token when mask is None), a float32 scalar, accurate for
logits as large as ±100; tokens outside mask get no gradient."""
import math

import pytest
import torch

from objectives import disc_loss


def bce(logit, replaced):
    """-1(real) log D - 1(replaced) log(1 - D), D = 1 - sigmoid(logit), by hand."""
    p_replaced = 1 / (1 + math.exp(-logit))
    return -math.log(p_replaced) if replaced else -math.log(1 - p_replaced)


def test_hand_worked_value_over_the_mask():
    logits = [[2.0, -1.0, 0.5, 4.0]]
    is_replaced = [[True, False, False, True]]
    mask = [[True, True, True, False]]                       # the last token is padding
    got = disc_loss(torch.tensor(logits), torch.tensor(is_replaced), torch.tensor(mask))
    expect = (bce(2.0, True) + bce(-1.0, False) + bce(0.5, False)) / 3
    assert got.item() == pytest.approx(expect, rel=1e-6), \
        f"got {got.item():.6f}, expected {expect:.6f}: the mean over the 3 tokens in mask " \
        f"(the padding left out)"


def test_every_token_counts_when_no_mask_is_given():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 9, generator=g)
    is_replaced = torch.rand(4, 9, generator=g) < 0.15
    got = disc_loss(logits, is_replaced).item()
    terms = [bce(logits[b, t].item(), bool(is_replaced[b, t])) for b in range(4) for t in range(9)]
    assert got == pytest.approx(sum(terms) / len(terms), rel=1e-5), \
        f"got {got:.5f}, expected {sum(terms) / len(terms):.5f}: without a mask, the mean over " \
        f"every token"


def test_accurate_for_large_logits():
    """Confident logits: in float32 sigmoid(40) is exactly 1, so a loss taken through the
    probability loses -log(1 - D) of a confident mistake; from the logit it is 40."""
    logits = torch.tensor([[40.0, -40.0, 30.0, -30.0, 100.0]])
    is_replaced = torch.tensor([[False, True, True, False, True]])
    got = disc_loss(logits, is_replaced)
    # two confident mistakes (a loss of 40 each, to 1e-17) and three confident right answers
    assert got.item() == pytest.approx(80 / 5, rel=1e-6), \
        f"got {got.item():.4f}, expected 16: a confident mistake at logit ±40 costs 40 (from " \
        f"the logit; a sigmoid in float32 rounds to 0 or 1)"


def test_the_sign_replaced_is_a_positive_logit():
    rep = torch.tensor([[True]])
    assert disc_loss(torch.tensor([[5.0]]), rep) < disc_loss(torch.tensor([[-5.0]]), rep), \
        "a replaced token should cost less at logit +5 than at -5: the logit scores 'replaced'"


def test_float32_and_gradient_only_on_masked_tokens():
    logits = torch.randn(2, 6, generator=torch.Generator().manual_seed(1), requires_grad=True)
    is_replaced = torch.zeros(2, 6, dtype=torch.bool)
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])
    loss = disc_loss(logits.bfloat16(), is_replaced, mask)
    assert loss.dtype == torch.float32, f"a float32 loss expected under bf16 logits, got {loss.dtype}"
    # computed in float32 from the bf16 values, not in bf16 and cast at the end
    z = logits.detach().bfloat16().double()[mask]
    want = torch.nn.functional.softplus(z).mean().item()
    assert loss.item() == pytest.approx(want, rel=1e-4), \
        f"got {loss.item():.5f}, expected {want:.5f}: compute in float32 from the bf16 logits, " \
        f"the mean over the 9 tokens in mask"
    loss.backward()
    assert (logits.grad[~mask] == 0).all() and (logits.grad[mask] != 0).all(), \
        "tokens in mask should get a gradient, tokens outside it none"
    expect = torch.sigmoid(logits.detach()) / 9                # d BCE / d logit, mean over 9
    assert torch.allclose(logits.grad[mask], expect[mask], atol=1e-2), \
        "the gradient should be sigmoid(logit) / 9 at each of the 9 tokens in mask"   # bf16 input
