"""Teaching: the hidden tests of the assignments, shipped only inside the Gradescope autograder.

Each part's hidden tests check the contract its public file in tests/parts/ checks (ASSIGNMENTS.md
states it), on other seeds, shapes and edge cases: a row with one real token, a fully padded row,
batch 1, bf16 inputs, a 30,522-token vocabulary, other special ids, rates, layer counts and head
counts. They accept every answer the contract allows and reject the plausible wrong ones:
tests/test_assignments.py runs its correct and wrong bodies against them too. A test named
`test_<part>__<what>` grades <part>; the grader (teaching/grade.py) selects them by that name.

teaching/autograder.py copies this file into the autograder as tests/hidden/test_hidden.py, beside
the public tests and their fixtures (tests/conftest.py: `stand_in_attention`); a student copy
never holds it (teaching/make_assignment.py leaves it out). Gradescope shows their results after
the due date. Every random choice is seeded, so every run gives the same numbers."""
import math
import re
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

import finetune_glue as fg
import objectives
from ablations import ELECTRA15
from config import SIZES, Config
from encoder import EncoderConfig, SelfAttention
from flops import DROPOUT, GELU, LAYER_NORM, SOFTMAX, block_flops
from objectives import ELECTRA, Masked, corrupt, disc_loss, mask_tokens, mlm_loss, sample
from optim import AdamWeightDecay
from teaching import stand_ins

VOCAB = 30522                     # BERT's and ELECTRA's vocabulary: a large one

# ============================================================================ Part 1: mask
# Special ids other than the public tests' (which put them at the top of the vocabulary).
PAD, CLS, SEP, MASK = 0, 1, 2, 3
SPECIAL = (PAD, CLS, SEP)


def rows(lengths, T, seed, vocab=500):
    """One row per length: [CLS] words [SEP] then padding; length 0 is a fully padded row."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(4, vocab, (len(lengths), T), generator=g)
    for i, n in enumerate(lengths):
        x[i, n:] = PAD
        if n:
            x[i, 0], x[i, n - 1] = CLS, SEP
    return x


def k_range(n, mask_prob, n_slots):
    """(lowest, highest) k the rule allows for n real tokens: round(mask_prob n) with a tie
    either way, at least 1, at most n and n_slots (so 0 for a row without real tokens)."""
    exact = mask_prob * n
    lo, hi = math.ceil(exact - 0.5 - 1e-9), math.floor(exact + 0.5 + 1e-9)
    return tuple(min(max(v, 1), n, n_slots) for v in (lo, hi))


def check_mask(x, out, n_slots, mask_prob, special=SPECIAL):
    """Every rule of Masked that does not depend on chance; returns k per row."""
    B, T = x.shape
    assert out.positions.shape == (B, n_slots) and out.weights.shape == (B, n_slots), \
        f"positions and weights should be ({B}, {n_slots}), got {tuple(out.positions.shape)}"
    assert out.x_masked.shape == x.shape, "x_masked should have x's shape"
    assert torch.equal(out.targets, x.gather(1, out.positions)), \
        "targets should be x at every slot's position"
    is_real = ~(x.unsqueeze(-1) == torch.tensor(special)).any(-1)
    ks = []
    for i in range(B):
        w = out.weights[i]
        k = int((w > 0).sum())
        assert set(w.tolist()) <= {0.0, 1.0}, f"row {i}: weights should be 1 or 0"
        assert torch.equal(w, (torch.arange(n_slots) < k).float()), \
            f"row {i}: the {k} used slots should come first"
        n = int(is_real[i].sum())
        lo, hi = k_range(n, mask_prob, n_slots)
        assert lo <= k <= hi, f"row {i} with {n} real tokens: {k} used slots, expected " + \
            (f"{lo}" if lo == hi else f"{lo} or {hi}")
        used = out.positions[i, :k]
        assert len(set(used.tolist())) == k, f"row {i}: a position was chosen twice"
        assert is_real[i, used].all(), f"row {i}: a special token or padding was chosen"
        changed = (out.x_masked[i] != x[i]).nonzero().flatten()
        assert set(changed.tolist()) <= set(used.tolist()), \
            f"row {i}: x_masked differs from x at a position no used slot holds"
        ks.append(k)
    return ks


def test_mask__a_fully_padded_row_and_a_row_with_one_real_token():
    # lengths: all padding (0 real tokens), [CLS] w [SEP] (1 real token), 2, 5, 20 and all real
    lengths = [0, 3, 4, 7, 22, 40]
    x = rows(lengths, 40, seed=11)
    out = mask_tokens(x, SPECIAL, MASK, 7, generator=torch.Generator().manual_seed(12))
    assert out.positions.dtype == torch.int64 and out.weights.dtype == torch.float32, \
        f"positions should be int64 and weights float32, got {out.positions.dtype} and " \
        f"{out.weights.dtype}"
    ks = check_mask(x, out, 7, 0.15)
    assert ks[0] == 0 and torch.equal(out.x_masked[0], x[0]), \
        "a fully padded row has no real token: nothing to mask, x_masked equal to x"
    assert ks[1] == 1 and out.positions[1, 0].item() == 1, \
        "a row with one real token should mask exactly that token"


def test_mask__many_lengths_other_special_ids():
    # BERT's ids: [PAD] 0, [CLS] 101, [SEP] 102, [MASK] 103, words on both sides of them (a
    # real token is any id not in special_ids, not one above or below them)
    g = torch.Generator().manual_seed(21)
    lengths = torch.randint(3, 97, (400,), generator=g).tolist() + [2, 3, 32, 72, 96]
    bert = torch.arange(1000)
    for ours, theirs in ((CLS, 101), (SEP, 102), (MASK, 103)):
        bert[ours], bert[theirs] = theirs, ours
    x = bert[rows(lengths, 96, seed=22, vocab=1000)]
    special = (0, 101, 102)
    out = mask_tokens(x, special, 103, 15, generator=torch.Generator().manual_seed(23))
    check_mask(x, out, 15, 0.15, special)
    shown = out.x_masked.gather(1, out.positions)[out.weights > 0]
    assert ((shown == 103) | (shown == out.targets[out.weights > 0])).all(), \
        "with random_prob 0 a used position shows [MASK] or itself, nothing else"


def test_mask__batch_one_another_rate_and_the_slot_cap():
    x = rows([200], 200, seed=31)                     # n = 198 real tokens
    # 0.25 * 198 = 49.5, a tie: 49 or 50 with 60 slots; with 40 slots, the cap
    for n_slots, want in ((60, (49, 50)), (40, (40, 40))):
        out = mask_tokens(x, SPECIAL, MASK, n_slots, mask_prob=0.25, replace_prob=1.0,
                          generator=torch.Generator().manual_seed(32))
        k = check_mask(x, out, n_slots, 0.25)[0]
        assert want[0] <= k <= want[1], f"k = {k} for mask_prob 0.25, n 198, {n_slots} slots"
        shown = out.x_masked[0, out.positions[0, :k]]
        assert (shown == MASK).all(), "replace_prob 1.0: every used position shows [MASK]"
    again = mask_tokens(x, SPECIAL, MASK, 40, mask_prob=0.25, replace_prob=1.0,
                        generator=torch.Generator().manual_seed(32))
    assert torch.equal(again.positions, out.positions), "the same seed should give the same mask"
    other = mask_tokens(x, SPECIAL, MASK, 40, mask_prob=0.25, replace_prob=1.0,
                        generator=torch.Generator().manual_seed(33))
    assert not torch.equal(other.positions, out.positions), \
        "another seed should give another mask: draw every random number from `generator`"


def test_mask__a_separator_mid_row_and_uniform_positions():
    # two segments, [CLS] a x9 [SEP] b x9 [SEP]: 18 real tokens, k = round(2.7) = 3; the middle
    # [SEP] is never chosen and every real token equally often
    B, T = 6000, 21
    x = rows([T] * B, T, seed=41)
    x[:, 10] = SEP
    out = mask_tokens(x, SPECIAL, MASK, 4, generator=torch.Generator().manual_seed(42))
    assert (out.weights.sum(1) == 3).all(), "18 real tokens: 3 used slots in every row"
    counts = torch.zeros(T).index_add_(0, out.positions[out.weights > 0],
                                       torch.ones(int(out.weights.sum())))
    assert counts[0] == counts[10] == counts[20] == 0, "a special token was chosen"
    real = torch.cat([counts[1:10], counts[11:20]])
    expect = B * 3 / 18
    assert ((real - expect).abs() < 5 * math.sqrt(expect)).all(), \
        f"positions should be uniform over the real tokens: counts {real.tolist()}"
    # a uniform 3-subset: each pair of real tokens chosen together 3 * 2 / (18 * 17) of the time
    chosen = torch.zeros(B, T).scatter_add_(1, out.positions, out.weights.float())   # unused: 0
    chosen = torch.cat([chosen[:, 1:10], chosen[:, 11:20]], 1)
    together = chosen.T @ chosen
    pairs = together[torch.triu(torch.ones(18, 18, dtype=torch.bool), diagonal=1)]
    expect = B * 6 / (18 * 17)
    assert ((pairs - expect).abs() < 5 * math.sqrt(expect)).all(), \
        f"the 3 positions should be a uniformly random subset: pairs of real tokens chosen " \
        f"together {pairs.min().item():.0f} to {pairs.max().item():.0f} times, expected " \
        f"{expect:.0f} each (neighbours too often or too rarely)"


def test_mask__half_mask_half_random_tokens():
    x = rows([24] * 3000, 24, seed=51, vocab=400)
    out = mask_tokens(x, SPECIAL, MASK, 4, replace_prob=0.5, random_prob=0.5, n_random=400,
                      generator=torch.Generator().manual_seed(52))
    check_mask(x, out, 4, 0.15)
    used = out.weights > 0
    shown, orig = out.x_masked.gather(1, out.positions)[used], out.targets[used]
    is_mask = (shown == MASK).float().mean().item()
    kept = (shown == orig).float().mean().item()
    assert abs(is_mask - 0.5) < 0.02, f"{is_mask:.3f} of used positions show [MASK], expected " \
        f"0.5 (a draw per position, not an exact share of each row)"
    assert kept < 0.01, f"{kept:.3f} kept their token, expected ~0.5 / 400 (random ones only)"
    # 22 real tokens: k = 3 used slots a row, all three [MASK] in 0.5^3 of rows if drawn per
    # position (one draw per row: half the rows; an exact share of each row: none or all)
    all_mask = ((out.x_masked.gather(1, out.positions) == MASK) | ~used).all(1)
    share = all_mask.float().mean().item()
    assert abs(share - 0.125) < 0.04, \
        f"{share:.3f} of rows show [MASK] at all 3 used positions, expected 0.125: a draw per " \
        f"position, not one per row or an exact share of each row"
    assert (shown[shown != MASK] < 400).all(), "random ids should be below n_random"
    # the same generator seed gives the same mask, random tokens included
    again = mask_tokens(x[:64], SPECIAL, MASK, 4, replace_prob=0.5, random_prob=0.5,
                        n_random=400, generator=torch.Generator().manual_seed(53))
    twice = mask_tokens(x[:64], SPECIAL, MASK, 4, replace_prob=0.5, random_prob=0.5,
                        n_random=400, generator=torch.Generator().manual_seed(53))
    assert torch.equal(again.x_masked, twice.x_masked), \
        "the same generator seed should give the same x_masked, random tokens included: draw " \
        "them from `generator` too"


# ============================================================================ Part 2: sample

def test_sample__a_large_vocabulary():
    # three likely tokens - the first, one in the middle, the last - in 30,522
    logits = torch.full((VOCAB,), -40.0)
    logits[0], logits[VOCAB // 2], logits[-1] = 0.0, 1.0, 2.0
    g = torch.Generator().manual_seed(61)
    x_hat = torch.cat([sample(logits.expand(300, VOCAB), g) for _ in range(10)])
    assert x_hat.shape == (3000,) and x_hat.dtype == torch.int64, \
        f"one int64 id per row expected, got {tuple(x_hat.shape)} {x_hat.dtype}"
    assert set(x_hat.unique().tolist()) <= {0, VOCAB // 2, VOCAB - 1}, \
        "drew a token of probability ~1e-18"
    p = torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0)
    freq = torch.stack([(x_hat == i).float().mean() for i in (0, VOCAB // 2, VOCAB - 1)])
    assert torch.allclose(freq, p, atol=0.045), \
        f"frequencies {freq.tolist()} should follow softmax {p.tolist()}"


def test_sample__bf16_logits():
    logits = torch.tensor([0.0, 1.0, 2.0, -1.0], dtype=torch.bfloat16).expand(40_000, 4)
    x_hat = sample(logits, torch.Generator().manual_seed(62))
    assert x_hat.shape == (40_000,) and x_hat.dtype == torch.int64, \
        f"bf16 logits: one int64 id per row expected, got {x_hat.dtype}"
    freq = torch.bincount(x_hat, minlength=4) / 40_000
    p = torch.softmax(torch.tensor([0.0, 1.0, 2.0, -1.0]), 0)
    assert torch.allclose(freq, p, atol=0.012), \
        f"frequencies {freq.tolist()} should follow softmax {p.tolist()}"
    assert sample(torch.tensor([[-1000.0, 1000.0, 0.0]], dtype=torch.bfloat16),
                  torch.Generator().manual_seed(63)).tolist() == [1]
    # over 30,522 tokens of spread-out bf16 logits, 1,000 draws reach as many distinct tokens as
    # an exact sampler's (a CDF summed in bf16 reaches about half of them)
    logits = (torch.randn(VOCAB, generator=torch.Generator().manual_seed(67)) * 2).bfloat16()
    g = torch.Generator().manual_seed(68)
    x_hat = torch.cat([sample(logits.expand(20, VOCAB), g) for _ in range(50)])
    p = torch.softmax(logits.double(), 0)
    expect = (1 - (1 - p) ** 1000).sum().item()          # distinct tokens of an exact sampler
    distinct = x_hat.unique().numel()
    assert distinct > 0.9 * expect, \
        f"bf16 logits over {VOCAB} tokens: {distinct} distinct tokens in 1,000 draws, an " \
        f"exact sampler draws about {expect:.0f}"


def test_sample__batch_one_reproducible_from_a_seed():
    logits = torch.randn(1, 5, 1000, generator=torch.Generator().manual_seed(64))
    a = sample(logits, torch.Generator().manual_seed(65))
    b = sample(logits, torch.Generator().manual_seed(65))
    c = sample(logits, torch.Generator().manual_seed(66))
    assert a.shape == (1, 5), f"shape (1, 5) expected, got {tuple(a.shape)}"
    assert torch.equal(a, b), "the same generator seed should give the same samples"
    assert not torch.equal(a, c), "another seed should give other samples"


# ============================================================================ Part 3: corrupt

def masked_of(x, positions, weights):
    """x_masked shows [MASK] at the used positions, as mask_tokens makes it (so corrupt must
    compare x_corrupt with x, not with x_masked)."""
    used = torch.zeros_like(x).scatter_add(1, positions, (weights > 0).long()) > 0
    return Masked(x.masked_fill(used, MASK), positions, x.gather(1, positions), weights)


def test_corrupt__batch_one_with_one_used_slot():
    x = torch.tensor([[5, 6, 7, 8, 9, 10, 11]])
    before = x.clone()
    m = masked_of(x, torch.tensor([[4, 0, 0]]), torch.tensor([[1.0, 0.0, 0.0]]))
    x_corrupt, is_replaced = corrupt(x, m, torch.tensor([[VOCAB - 1, 70, 71]]))
    assert torch.equal(x, before), "x itself must not change"
    assert x_corrupt.tolist() == [[5, 6, 7, 8, VOCAB - 1, 10, 11]], \
        f"only the used slot's position takes its sample; got {x_corrupt.tolist()}"
    assert is_replaced.dtype == torch.bool and is_replaced.tolist() == [
        [False, False, False, False, True, False, False]]


def test_corrupt__a_row_without_used_slots_and_repeated_positions():
    x = torch.arange(30).view(3, 10) + 100
    positions = torch.tensor([[3, 1, 3, 1],      # unused slots repeat both used positions
                              [0, 0, 0, 0],      # a row without used slots (fully padded)
                              [9, 2, 5, 9]])
    weights = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
    x_hat = torch.tensor([[50, 51, 52, 53], [60, 61, 62, 63], [70, 122, 74, 75]])
    x_corrupt, is_replaced = corrupt(x, masked_of(x, positions, weights), x_hat)
    expect = x.clone()
    expect[0, 3], expect[0, 1] = 50, 51
    expect[2, 9], expect[2, 2], expect[2, 5] = 70, 122, 74     # 122 is x[2, 2]: a real token
    assert torch.equal(x_corrupt, expect), \
        f"x_corrupt {x_corrupt.tolist()}, expected {expect.tolist()}"
    assert torch.equal(is_replaced, expect != x), \
        "is_replaced should be x_corrupt != x (a sample equal to the original is real)"


def test_corrupt__labels_follow_the_tokens_in_a_larger_batch():
    g = torch.Generator().manual_seed(71)
    x = torch.randint(0, VOCAB, (5, 33), generator=g)
    positions = torch.stack([torch.randperm(33, generator=g)[:6] for _ in range(5)])
    x_hat = torch.where(torch.rand(5, 6, generator=g) < 0.5, x.gather(1, positions),
                        torch.randint(0, VOCAB, (5, 6), generator=g))
    x_corrupt, is_replaced = corrupt(x, masked_of(x, positions, torch.ones(5, 6)), x_hat)
    assert torch.equal(x_corrupt.gather(1, positions), x_hat)
    outside = torch.ones_like(x, dtype=torch.bool).scatter(1, positions, False)
    assert torch.equal(x_corrupt[outside], x[outside]), "positions outside m must not change"
    assert torch.equal(is_replaced, x_corrupt != x), "is_replaced should be x_corrupt != x"


# ============================================================================ Part 4: mlm_loss

def nll64(logits, targets, weights):
    """The mean over used slots of -log softmax, in float64 from the same values."""
    log_p = torch.log_softmax(logits.double(), -1).gather(-1, targets[..., None]).squeeze(-1)
    w = weights.double()
    return (-(log_p * w).sum() / w.sum()).item()


def test_mlm_loss__bf16_logits_over_a_large_vocabulary():
    g = torch.Generator().manual_seed(81)
    logits = (torch.randn(3, 5, VOCAB, generator=g) * 3).bfloat16()
    targets = torch.randint(0, VOCAB, (3, 5), generator=g)
    weights = torch.tensor([[1.0, 1, 1, 1, 0], [0, 0, 0, 0, 0], [1, 1, 0, 0, 0]])  # row 2: none
    got = mlm_loss(logits, targets, weights)
    assert got.dtype == torch.float32, f"a float32 loss expected, got {got.dtype}"
    assert got.item() == pytest.approx(nll64(logits, targets, weights), rel=1e-4), \
        "the mean over the used slots of -log softmax at the targets"


def test_mlm_loss__large_logits_over_a_large_vocabulary():
    g = torch.Generator().manual_seed(83)
    logits = (torch.randn(2, 3, VOCAB, generator=g) * 22).clamp(-100, 100)    # the contract's ±100
    targets = logits.argmin(-1)                                   # the least likely tokens
    weights = torch.tensor([[1.0, 1, 0], [1, 1, 1]])
    got = mlm_loss(logits, targets, weights)
    assert math.isfinite(got.item()) and got.item() == pytest.approx(
        nll64(logits, targets, weights), rel=1e-5), \
        f"got {got.item()}: -log softmax at targets far below the largest logit, finite"


def test_mlm_loss__batch_one_with_one_used_slot():
    logits = torch.tensor([[[1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 9.0, 0.0]]])
    got = mlm_loss(logits, torch.tensor([[1, 2]]), torch.tensor([[1.0, 0.0]]))
    expect = math.log(sum(math.exp(v) for v in (1, 2, 3, 4))) - 2.0
    assert got.item() == pytest.approx(expect, rel=1e-6), "-log p_G(target) of the used slot"


def test_mlm_loss__a_mean_not_a_sum_for_other_shapes():
    g = torch.Generator().manual_seed(82)
    logits = torch.randn(4, 9, 50, generator=g)
    targets = torch.randint(0, 50, (4, 9), generator=g)
    weights = (torch.arange(9)[None, :] < torch.tensor([[9], [1], [4], [7]])).float()
    got = mlm_loss(logits, targets, weights).item()
    assert got == pytest.approx(nll64(logits, targets, weights), rel=1e-5), \
        f"got {got:.4f}: the mean over the 21 used slots expected"


# ============================================================================ Part 5: disc_loss

def bce64(logits, replaced, mask):
    z, y = logits.double(), replaced.double()
    loss = F.binary_cross_entropy_with_logits(z, y, reduction="none")
    return loss[mask].mean().item()


def test_disc_loss__batch_one_with_one_real_token():
    logits = torch.tensor([[0.7, -3.0, 2.0]])
    mask = torch.tensor([[False, True, False]])
    got = disc_loss(logits, torch.tensor([[True, False, True]]), mask)
    assert got.item() == pytest.approx(-math.log(1 - 1 / (1 + math.exp(3.0))), rel=1e-6), \
        "one real token: its -log D, D = 1 - sigmoid(logit)"
    one = disc_loss(torch.tensor([[1.5]]), torch.tensor([[True]]))
    assert one.item() == pytest.approx(-math.log(1 / (1 + math.exp(-1.5))), rel=1e-6)


def test_disc_loss__a_fully_padded_row():
    g = torch.Generator().manual_seed(91)
    logits = torch.randn(3, 8, generator=g) * 4
    replaced = torch.rand(3, 8, generator=g) < 0.3
    mask = torch.ones(3, 8, dtype=torch.bool)
    mask[1] = False                                            # row 1: all padding
    mask[2, 5:] = False
    got = disc_loss(logits, replaced, mask)
    assert got.item() == pytest.approx(bce64(logits, replaced, mask), rel=1e-5), \
        "the mean over the tokens in mask only"


def test_disc_loss__large_logits_with_a_mask():
    logits = torch.tensor([[95.0, -60.0, 17.5, -25.0, 0.3, 50.0],
                           [-100.0, 20.0, 3.0, -17.0, 8.0, 1.0]])
    replaced = torch.tensor([[False, True, False, True, True, True],
                             [False, False, True, True, False, True]])
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[0, 5] = mask[1, 0] = False
    got = disc_loss(logits, replaced, mask)
    assert got.item() == pytest.approx(bce64(logits, replaced, mask), rel=1e-5), \
        f"got {got.item():.4f}, expected {bce64(logits, replaced, mask):.4f}: logits up to ±100 " \
        "should give the binary cross-entropy, not a sigmoid rounded to 0 or 1"


def test_disc_loss__bf16_logits():
    g = torch.Generator().manual_seed(92)
    logits = (torch.randn(4, 16, generator=g) * 8).bfloat16()
    replaced = torch.rand(4, 16, generator=g) < 0.15
    mask = torch.rand(4, 16, generator=g) < 0.8
    got = disc_loss(logits, replaced, mask)
    assert got.dtype == torch.float32, f"a float32 loss expected, got {got.dtype}"
    assert got.item() == pytest.approx(bce64(logits, replaced, mask), rel=1e-4)


# ============================================================================ Part 6: joint_loss

def joint_rig(monkeypatch, B, T, K, disc_weight, pad_lengths):
    """A tiny ELECTRA with λ = disc_weight, a batch, the stand-ins of teaching/stand_ins.py in
    place; forward()'s (loss, stats) and what it should give, (loss, L_MLM, L_Disc), computed
    here with the same stand-ins."""
    torch.manual_seed(101)
    V = 120
    cfg = replace(Config(), vocab_size=V, **SIZES["tiny"], fused_mlm=False,
                  disc_weight=disc_weight)
    model = ELECTRA(cfg).eval()
    g = torch.Generator().manual_seed(102)
    x = torch.randint(0, 100, (B, T), generator=g)
    pad_mask = None
    if pad_lengths is not None:
        pad_mask = torch.arange(T)[None, :] < torch.tensor(pad_lengths)[:, None]
    positions = torch.zeros(B, K, dtype=torch.long)
    weights = torch.zeros(B, K)
    for b in range(B):
        n = T if pad_lengths is None else pad_lengths[b]
        k = min(K, max(1, n // 3))
        positions[b, :k] = torch.randperm(n, generator=g)[:k]
        weights[b, :k] = 1.0
    masked = Masked(x.scatter(1, positions, V - 1), positions, x.gather(1, positions), weights)
    for name, fn in dict(sample=stand_ins.sample_argmax,
                         corrupt=stand_ins.corrupt_last_and_first_slot,
                         mlm_loss=stand_ins.mlm_loss_square,
                         disc_loss=stand_ins.disc_loss_linear).items():
        monkeypatch.setattr(objectives, name, fn)
    loss, stats = model(x, masked, pad_mask=pad_mask)
    inp = dict(pad_mask=pad_mask, segment_ids=None)
    want_mlm, x_hat, _ = model.generate(masked, **inp)
    with torch.no_grad():
        x_corrupt, is_replaced = objectives.corrupt(x, masked, x_hat)
    want_disc, _, _ = model.discriminate(x, x_corrupt, is_replaced, masked,
                                         objectives.real_tokens(x, pad_mask), **inp)
    want = (want_mlm + disc_weight * want_disc, want_mlm, want_disc)
    return model, x, pad_mask, masked, loss, stats, want


def grads_of(loss, weights):
    got = torch.autograd.grad(loss, weights, allow_unused=True, retain_graph=True)
    return [torch.zeros_like(w) if g is None else g for g, w in zip(got, weights)]


@pytest.mark.parametrize("B, T, K, disc_weight, pad_lengths", [
    (1, 12, 3, 3.5, [12]),                     # batch 1, another λ
    (3, 10, 4, 50.0, [10, 3, 7]),              # a row with one real token between [CLS] [SEP]
    (2, 9, 2, 7.0, None),                      # no pad_mask: every token is real
], ids=["batch1", "padded", "no_pad_mask"])
def test_joint_loss__value_inputs_and_scored_tokens(monkeypatch, stand_in_attention,
                                                    B, T, K, disc_weight, pad_lengths):
    model, x, pad_mask, masked, loss, stats, want = joint_rig(
        monkeypatch, B, T, K, disc_weight, pad_lengths)
    assert stats["mlm_loss"].item() == pytest.approx(want[1].item(), rel=1e-5)
    assert stats["disc_loss"].item() == pytest.approx(want[2].item(), rel=1e-5), \
        "L_Disc should score every real token of x_corrupt, with corrupt's labels"
    assert loss.item() == pytest.approx(want[0].item(), rel=1e-5), \
        f"loss should be L_MLM + {disc_weight} L_Disc"
    # every real token scored: the stand-in whose value names them
    monkeypatch.setattr(objectives, "disc_loss", stand_ins.disc_loss_scored)
    _, scored = model(x, masked, pad_mask=pad_mask)
    real = torch.ones_like(x, dtype=torch.bool) if pad_mask is None else pad_mask
    assert torch.equal(stand_ins.scored_of(scored["disc_loss"].item(), B, T), real), \
        "L_Disc should score every real token"
    # loss is what the trainer back-propagates: L_MLM's gradient in G, λ L_Disc's in D
    for net, name in ((model.discriminator, "D"), (model.generator, "G")):
        weights = [p for n, p in net.named_parameters() if not n.startswith("embeddings")]
        got, exp = grads_of(loss, weights), grads_of(want[0], weights)
        assert all(torch.allclose(g, w, rtol=1e-4, atol=1e-6) for g, w in zip(got, exp)), \
            f"the gradient of loss in {name} should be " \
            f"{'L_MLM' if name == 'G' else f'{disc_weight:g} times L_Disc'}'s: is a term detached?"


def test_joint_loss__no_gradient_from_l_disc_into_g_at_batch_one(monkeypatch,
                                                               stand_in_attention):
    model, _, _, _, _, stats, _ = joint_rig(monkeypatch, 1, 8, 2, 50.0, [8])
    gen_only = [p for n, p in model.generator.named_parameters() if not n.startswith("embeddings")]
    grads = torch.autograd.grad(stats["disc_loss"], gen_only, allow_unused=True)
    assert all(g is None or g.abs().sum() == 0 for g in grads), "L_Disc reached G's weights"


# ============================================================================ Part 7: attention

def attention_by_hand(att, h, keep):
    B, T, H = h.shape
    n, d = att.heads, H // att.heads
    qkv = h @ att.qkv.weight.T + att.qkv.bias
    out = torch.zeros(B, T, H)
    for j in range(n):
        q, k, v = (qkv[..., s * H + j * d:s * H + (j + 1) * d] for s in range(3))
        scores = (q @ k.transpose(1, 2) / math.sqrt(d)).masked_fill(~keep[:, None, :], -1e30)
        out[..., j * d:(j + 1) * d] = torch.softmax(scores, -1) @ v
    return out @ att.out.weight.T + att.out.bias


@pytest.mark.parametrize("hidden, heads, B, T, lengths", [
    (16, 4, 1, 7, [7]),                       # batch 1, four heads
    (12, 1, 3, 9, [9, 4, 6]),                 # one head: d = hidden
    (32, 8, 2, 5, [5, 2]),                    # eight heads of 4
], ids=["batch1_4heads", "1head", "8heads"])
def test_attention__other_heads_shapes_and_padding(hidden, heads, B, T, lengths):
    torch.manual_seed(111)
    att = SelfAttention(EncoderConfig(hidden=hidden, heads=heads, ffn=2 * hidden,
                                      dropout=0.0)).eval()
    h = torch.randn(B, T, hidden)
    keep = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    with torch.no_grad():
        got = att(h, keep[:, None, None, :])
        assert got.shape == (B, T, hidden), f"shape {(B, T, hidden)} expected"
        assert torch.allclose(got, attention_by_hand(att, h, keep), atol=1e-5), \
            "should be softmax(q k^T / sqrt(d)) v per head, masked keys getting no attention"


def test_attention__one_key_allowed_gives_its_value():
    torch.manual_seed(112)
    att = SelfAttention(EncoderConfig(hidden=8, heads=2, ffn=16, dropout=0.0)).eval()
    h = torch.randn(1, 6, 8)
    keep = torch.zeros(1, 6, dtype=torch.bool)
    keep[0, 2] = True                                          # one real token
    with torch.no_grad():
        got = att(h, keep[:, None, None, :])
        v = (h @ att.qkv.weight.T + att.qkv.bias)[0, 2, 16:]    # its value vector
        expect = (v @ att.out.weight.T + att.out.bias).expand(6, 8)
        assert torch.allclose(got[0], expect, atol=1e-5), \
            "with one key allowed every query should get that key's value"


@pytest.mark.parametrize("p", [0.25, 0.6])
def test_attention__dropout_on_the_probabilities_only_in_training(p):
    """Four heads, three keys of which one is allowed: each query's probability is 1 on it, so in
    training each head's output is 0 (dropped) or v / (1 - p) (kept), and in eval always v."""
    torch.manual_seed(113)
    att = SelfAttention(EncoderConfig(hidden=16, heads=4, ffn=32, dropout=p))
    with torch.no_grad():
        att.out.weight.copy_(torch.eye(16))                    # the heads' outputs show through
        att.out.bias.zero_()
        h = torch.randn(300, 3, 16)
        keep = torch.tensor([False, True, False]).expand(300, 3)[:, None, None, :]
        v = (h @ att.qkv.weight.T + att.qkv.bias)[:, 1, 32:].view(300, 1, 4, 4)
        got = att.eval()(h, keep).view(300, 3, 4, 4)
        assert torch.allclose(got, v.expand_as(got), atol=1e-5), \
            "eval: no dropout, every query gets the one allowed key's value"
        got = att.train()(h, keep).view(300, 3, 4, 4)
    dropped = got.abs().amax(-1) < 1e-6
    kept = (got - v / (1 - p)).abs().amax(-1) < 1e-4
    assert (dropped | kept).all(), \
        "training: each head's output should be 0 or v / (1 - p) - dropout on the attention " \
        "probabilities, not on v, the scores or the heads' outputs"
    share = dropped.float().mean().item()
    assert abs(share - p) < 0.05, f"{share:.3f} of the probabilities dropped, expected {p}"


# ============================================================================ Part 8: adam

def test_adam__two_groups_by_hand():
    w = torch.nn.Parameter(torch.tensor([[0.5, -1.0], [2.0, 0.0], [1.0, 1.0]], dtype=torch.float64))
    b = torch.nn.Parameter(torch.tensor([0.3, -0.2], dtype=torch.float64))
    opt = AdamWeightDecay([{"params": [w], "weight_decay": 0.1, "lr": 0.01},
                           {"params": [b], "weight_decay": 0.0, "lr": 0.05}],
                          betas=(0.8, 0.99), eps=1e-8)
    g = torch.Generator().manual_seed(121)
    state = {id(p): [p.detach().clone(), torch.zeros_like(p), torch.zeros_like(p), lr, wd]
             for p, lr, wd in ((w, 0.01, 0.1), (b, 0.05, 0.0))}
    for step in range(4):
        for p in (w, b):
            p.grad = torch.randn(p.shape, generator=g, dtype=torch.float64)
        opt.step()
        for p in (w, b):
            theta, m, v, lr, wd = state[id(p)]
            m.mul_(0.8).add_(0.2 * p.grad)
            v.mul_(0.99).add_(0.01 * p.grad ** 2)
            theta -= lr * (m / (v.sqrt() + 1e-8) + wd * theta)
            assert torch.allclose(p.detach(), theta, atol=1e-12), \
                f"step {step + 1}: θ differs from the uncorrected Adam update"
            assert torch.allclose(opt.state[p]["exp_avg"], m, atol=1e-12), \
                "m (exp_avg) should be updated in place"
            assert torch.allclose(opt.state[p]["exp_avg_sq"], v, atol=1e-12), \
                "v (exp_avg_sq) should be updated in place"


def test_adam__a_parameter_without_gradient_is_left_alone():
    a = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    c = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))
    opt = AdamWeightDecay([a, c], lr=0.1, weight_decay=0.5)
    a.grad = torch.tensor([1.0, -1.0, 0.0], dtype=torch.float64)
    opt.step()
    assert torch.equal(c.detach(), torch.ones(3, dtype=torch.float64)), "c had no gradient"
    step = 0.1 * 0.1 / (math.sqrt(0.001) + 1e-6)          # lr * m / (sqrt(v) + eps)
    expect = torch.tensor([1 - step - 0.05, 1 + step - 0.05, 1 - 0.05], dtype=torch.float64)
    assert torch.allclose(a.detach(), expect, atol=1e-12), \
        f"θ after one step: {a.detach().tolist()}, expected {expect.tolist()}"


# ============================================================================ Part 9: layer_decay

def expected_power(name, L, rule):
    if name.startswith("head."):
        return 0
    block = re.match(r"encoder\.blocks\.(\d+)\.", name)
    if block:
        i = int(block.group(1))
        return L + 1 - i if rule == "official" else L - i
    return L + 2 if rule == "official" else L + 1


@pytest.mark.parametrize("layers, rule", [(1, "official"), (2, "stated"), (4, "official"),
                                          (4, "stated"), (12, "stated")], ids=lambda v: str(v))
def test_layer_decay__other_depths(layers, rule):
    # 12 layers: encoder.blocks.10 and .11 are not block 1 (a name that merely starts with
    # "encoder.blocks.1")
    enc = EncoderConfig(hidden=8, layers=layers, heads=2, ffn=16)
    model = fg.Classifier(vocab_size=20, emb_size=4, max_len=16, enc=enc, n_out=3)
    groups = fg.layerwise_param_groups(model, 1e-3, 0.9, rule)
    named = dict(model.named_parameters())
    seen = [n for g in groups for n in g["names"]]
    assert sorted(seen) == sorted(named), "every parameter should be in exactly one group"
    for g in groups:
        assert len(g["params"]) == len(g["names"])
        assert all(p is named[n] for p, n in zip(g["params"], g["names"])), \
            "params and names should be in the same order"
        powers = {expected_power(n, layers, rule) for n in g["names"]}
        assert len(powers) == 1, f"one group mixes depths: {g['names'][:4]}"
        power = powers.pop()
        assert g["lr"] == pytest.approx(1e-3 * 0.9 ** power), \
            f"{g['names'][0]} ({rule}, {layers} layers): lr {g['lr']:.3g}, " \
            f"expected {1e-3 * 0.9 ** power:.3g}"
    assert len(groups) == len({expected_power(n, layers, rule) for n in named}), \
        "one group per distinct power"


# ============================================================================ Part 10: electra15

def electra15_scored(monkeypatch, x, positions, weights, pad_mask):
    torch.manual_seed(131)
    model = ELECTRA15(replace(Config(), vocab_size=100, objective="electra15", **SIZES["tiny"]))
    monkeypatch.setattr(objectives, "disc_loss", stand_ins.disc_loss_scored)
    masked = Masked(x.scatter(1, positions, 99), positions, x.gather(1, positions), weights)
    scored = torch.ones_like(x, dtype=torch.bool) if pad_mask is None else pad_mask.clone()
    loss, _, _ = model.discriminate(x, x, torch.zeros_like(x, dtype=torch.bool), masked, scored,
                                    pad_mask)
    return stand_ins.scored_of(loss.item(), *x.shape)


def test_electra15__batch_one_every_slot_used(monkeypatch, stand_in_attention):
    x = torch.randint(0, 90, (1, 9), generator=torch.Generator().manual_seed(132))
    got = electra15_scored(monkeypatch, x, torch.tensor([[8, 0, 4]]), torch.ones(1, 3), None)
    expect = torch.zeros(1, 9, dtype=torch.bool)
    expect[0, [0, 4, 8]] = True
    assert torch.equal(got, expect), \
        f"scored {got.int().tolist()}, expected {expect.int().tolist()}"


def test_electra15__a_row_without_used_slots_and_repeats(monkeypatch, stand_in_attention):
    x = torch.randint(0, 90, (3, 8), generator=torch.Generator().manual_seed(133))
    positions = torch.tensor([[2, 6, 2, 6], [0, 0, 0, 0], [7, 1, 1, 7]])
    weights = torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    pad_mask = torch.ones(3, 8, dtype=torch.bool)
    pad_mask[2, 7] = False                                      # position 7 of row 2: padding
    got = electra15_scored(monkeypatch, x, positions, weights, pad_mask)
    expect = torch.zeros(3, 8, dtype=torch.bool)
    expect[0, [2, 6]] = True                                    # row 1: no used slot, nothing
    expect[2, 1] = True
    assert torch.equal(got, expect), \
        f"scored {got.int().tolist()}, expected {expect.int().tolist()}"


# ============================================================================ Part 11: flops

def flops_by_hand(h, n, f, s):
    d = h // n
    per_head = 2 * d * s + (SOFTMAX + DROPOUT + 1) * s + 2 * d * s   # scores, softmax.., sum
    return (3 * (2 * h * h + h) + n * per_head + 2 * h * h + h + (DROPOUT + 1 + LAYER_NORM) * h
            + 2 * h * f + f + GELU * f + 2 * f * h + h + (DROPOUT + 1 + LAYER_NORM) * h)


@pytest.mark.parametrize("hidden, heads, ffn, seq", [
    (256, 4, 1024, 128),                      # ELECTRA-Small's D
    (12, 3, 20, 1),                           # one position, an FFN not 4 H wide
    (64, 16, 256, 512),                       # many heads, a long sequence
    (768, 12, 3072, 512),                     # BERT-Base
], ids=["small", "seq1", "16heads", "base"])
def test_flops__other_shapes(hidden, heads, ffn, seq):
    got = block_flops(hidden, heads, ffn, seq)
    expect = flops_by_hand(hidden, heads, ffn, seq)
    assert got == expect, f"block_flops{(hidden, heads, ffn, seq)} = {got}, expected {expect}"
