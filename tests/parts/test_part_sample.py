"""Part 2, sample (objectives.sample): x̂_i ~ p_G(x_i | x_masked) = softmax(logits), §2.

One exact sample per row as int64, no gradient, safe for logits of ±1000 and for bf16 logits,
reproducible from `generator`. Any exact method passes: the inverse CDF, the Gumbel-max trick,
torch.multinomial."""
import torch

from objectives import sample


def test_frequencies_follow_the_softmax():
    logits = torch.tensor([0.0, 1.0, 2.0, -1.0]).expand(100_000, 4)
    x_hat = sample(logits, torch.Generator().manual_seed(0))
    assert x_hat.shape == (100_000,) and x_hat.dtype == torch.int64, \
        f"one int64 id per row expected, got {tuple(x_hat.shape)} {x_hat.dtype}"
    freq = torch.bincount(x_hat, minlength=4) / 1e5
    p = torch.softmax(logits[0], 0)
    # each frequency within 5 binomial standard deviations (at most 0.0016) of its p
    assert torch.allclose(freq, p, atol=0.008), \
        f"frequencies {[round(f, 3) for f in freq.tolist()]} should follow softmax(logits) " \
        f"{[round(v, 3) for v in p.tolist()]}"


def test_is_a_sample_not_the_argmax():
    logits = torch.tensor([[[2.0, 1.9, -30.0]]]).expand(50, 40, 3)      # (B, K, V)
    x_hat = sample(logits, torch.Generator().manual_seed(1))
    assert x_hat.shape == (50, 40), f"shape (50, 40) expected, got {tuple(x_hat.shape)}"
    share = (x_hat == 1).float().mean().item()                    # p = 0.475
    assert 0.43 < share < 0.52, \
        f"the second most likely token drawn {share:.3f} of the time, expected 0.475: a sample, " \
        f"not the argmax"
    assert not (x_hat == 2).any(), "drew a token of probability ~1e-14"


def test_reproducible_from_a_seed_and_different_across_seeds():
    logits = torch.randn(8, 19, 50, generator=torch.Generator().manual_seed(2))
    a = sample(logits, torch.Generator().manual_seed(3))
    b = sample(logits, torch.Generator().manual_seed(3))
    c = sample(logits, torch.Generator().manual_seed(4))
    assert torch.equal(a, b), "the same generator seed should give the same samples"
    assert not torch.equal(a, c), \
        "another seed should give other samples: draw every random number from `generator`"


def test_no_gradient_and_large_logits_are_safe():
    logits = torch.tensor([[1000.0, 0.0, -1000.0]], requires_grad=True)
    x_hat = sample(logits, torch.Generator().manual_seed(5))
    assert not x_hat.requires_grad, "the sample should carry no gradient"
    assert x_hat.tolist() == [0], \
        f"logits (1000, 0, -1000): token 0 expected, got {x_hat.tolist()} (overflow?)"


def test_bf16_logits_over_a_large_vocabulary_reach_every_token():
    """Uniform bf16 logits over 30,522 tokens (what G gives under bf16 autocast): 1,000 draws of
    an exact sampler hold about 984 distinct tokens. A CDF summed in bf16 has steps of 2^-8 near
    1: whole runs of tokens share one value and are never drawn."""
    V = 30522
    logits = torch.zeros(V, dtype=torch.bfloat16).expand(20, V)    # 20 rows a call: small blocks
    g = torch.Generator().manual_seed(6)
    x_hat = torch.cat([sample(logits, g) for _ in range(50)])
    assert x_hat.dtype == torch.int64 and ((x_hat >= 0) & (x_hat < V)).all(), \
        f"int64 ids from 0 to {V - 1} expected"
    distinct = x_hat.unique().numel()
    assert distinct > 900, f"{distinct} distinct tokens in 1,000 draws, an exact sampler " \
        f"draws about 984: compute the probabilities in float32"
