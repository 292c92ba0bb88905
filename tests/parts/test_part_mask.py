"""Part 1, mask (objectives.mask_tokens). Masking (§2, footnote 3; Appendix A): k distinct
positions among the n real tokens of each sequence, k = round(0.15 n) to the nearest integer (a
tie at .5 either way: torch.round and floor(x + 0.5) both pass), at least 1 and at most n and
K; never a special token; the k positions in the first k of K slots (weight 1.0), the unused
slots (weight 0.0) holding any position - distinct or repeating a used one, as Masked allows -
and targets x at every slot's position; positions int64, weights float32; x_masked differs from
x at used positions only, each showing [MASK] with probability replace_prob (85 % for ELECTRA,
80 % for BERT), a random id with probability random_prob (BERT's 10 %), else itself - a draw per
position, not an exact share of each row; static shapes."""
import torch

from objectives import mask_tokens

PAD, CLS, SEP, MASK = 96, 97, 98, 99
SPECIAL = (PAD, CLS, SEP)


def batch(B=256, T=128, lengths=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 90, (B, T), generator=g)
    x[:, 0] = CLS
    lengths = lengths if lengths is not None else torch.full((B,), T)
    for i, n in enumerate(lengths.tolist()):
        x[i, n - 1] = SEP
        x[i, n:] = PAD
    return x


def allowed_k(n, mask_prob=0.15, n_slots=19):
    """The k the rule allows for n real tokens: (lowest, highest). Both are round(mask_prob * n)
    and equal, except at a tie (mask_prob * n = j + 0.5) where j and j + 1 are both nearest."""
    exact = mask_prob * n.double()
    lo, hi = torch.ceil(exact - 0.5 - 1e-6), torch.floor(exact + 0.5 + 1e-6)
    cap = n.double().clamp(max=n_slots)
    return lo.clamp(min=1).minimum(cap).long(), hi.clamp(min=1).minimum(cap).long()


def test_exactly_k_real_positions_per_sequence_never_special():
    g = torch.Generator().manual_seed(1)
    # random lengths, and the ties 0.15 n = 4.5, 10.5, 16.5 (n = 30, 70, 110 real tokens),
    # where torch.round (half to even) and floor(x + 0.5) differ: both are right
    lengths = torch.cat([torch.randint(4, 129, (294,), generator=g),
                         torch.tensor([32, 72, 112, 3, 4, 128])])
    x = batch(300, 128, lengths)
    out = mask_tokens(x, SPECIAL, MASK, 19, generator=g)
    assert out.positions.dtype == torch.int64 and out.weights.dtype == torch.float32, \
        f"positions should be int64 and weights float32 (1.0 used, 0.0 unused), got " \
        f"{out.positions.dtype} and {out.weights.dtype}"
    lo, hi = allowed_k(lengths - 2)
    k = out.weights.sum(1).long()
    bad = ((k < lo) | (k > hi)).nonzero().flatten().tolist()
    if bad:
        i = bad[0]
        want = f"{int(lo[i])}" if lo[i] == hi[i] else f"{int(lo[i])} or {int(hi[i])}"
        assert not bad, f"{len(bad)} rows with the wrong k, e.g. {int(lengths[i]) - 2} real " \
            f"tokens: {int(k[i])} used slots, expected {want} (round(0.15 n), at least 1, " \
            f"at most n and K)"
    assert ((out.weights[:, 1:] <= out.weights[:, :-1]).all()), "used slots must come first"
    for i in range(300):
        used = out.positions[i][out.weights[i] > 0]
        assert len(set(used.tolist())) == len(used), "a position was chosen twice"
        assert all(x[i, p].item() not in SPECIAL for p in used), "a special token was masked"
    # targets are the original tokens at the chosen positions
    assert torch.equal(out.targets, torch.gather(x, 1, out.positions)), \
        "targets should be x at every slot's position"
    # unused slots change nothing; x_masked differs from x only at used positions. An unused
    # slot may repeat a used position, so "used" counts each position's used slots (a sum, the
    # same whatever order the slots are written in) instead of scattering True / False.
    changed = (out.x_masked != x)
    allowed = torch.zeros(x.shape).scatter_add(1, out.positions, out.weights.float()) > 0
    assert not (changed & ~allowed).any(), \
        "x_masked differs from x at a position no used slot holds"


def test_electra_85_15_split_and_no_random_tokens():
    x = batch(2000)
    out = mask_tokens(x, SPECIAL, MASK, 19, generator=torch.Generator().manual_seed(2))
    used = out.weights > 0
    shown = torch.gather(out.x_masked, 1, out.positions)[used]
    orig = out.targets[used]
    frac_mask = (shown == MASK).float().mean().item()
    frac_kept = (shown == orig).float().mean().item()
    assert abs(frac_mask - 0.85) < 0.01 and abs(frac_kept - 0.15) < 0.01, \
        f"{frac_mask:.3f} of used positions show [MASK] and {frac_kept:.3f} keep their token, " \
        f"expected 0.85 and 0.15: each used position shows [MASK] with probability replace_prob " \
        f"(a draw per position, not an exact share of each row)"
    assert int((shown == MASK).sum() + (shown == orig).sum()) == len(shown), \
        "with random_prob 0 a used position shows [MASK] or itself, never a random token"
    # a draw per position: every row has k = 19 used slots, all 19 show [MASK] in 0.85^19 = 4.6 %
    # of rows (one draw per row: 85 %; an exact share of each row, 16 of 19: none)
    all_mask = ((torch.gather(out.x_masked, 1, out.positions) == MASK) | ~used).all(1)
    share = all_mask.float().mean().item()
    assert abs(share - 0.85 ** 19) < 0.03, \
        f"{share:.3f} of rows show [MASK] at all their 19 used positions, expected " \
        f"0.85^19 = {0.85 ** 19:.3f}: draw [MASK] or kept for each position on its own, not " \
        f"once per row or as an exact share of each row"


def test_bert_80_10_10_split():
    x = batch(2000)
    out = mask_tokens(x, SPECIAL, MASK, 19, replace_prob=0.8, random_prob=0.1, n_random=90,
                      generator=torch.Generator().manual_seed(3))
    used = out.weights > 0
    shown = torch.gather(out.x_masked, 1, out.positions)[used]
    orig = out.targets[used]
    is_mask = shown == MASK
    is_kept = shown == orig
    # a random token equal to the original looks "kept": 1/90 of the 10 % random ones
    shares = [t.float().mean().item() for t in (is_mask, is_kept, ~is_mask & ~is_kept)]
    assert abs(shares[0] - 0.80) < 0.01 and abs(shares[1] - (0.10 + 0.10 / 90)) < 0.01 and \
        abs(shares[2] - 0.10 * 89 / 90) < 0.01, \
        f"[MASK] / kept / random: {shares[0]:.3f} / {shares[1]:.3f} / {shares[2]:.3f} of used " \
        f"positions, expected 0.80 / 0.10 / 0.10 (a draw per position with probabilities " \
        f"replace_prob and random_prob, not an exact share of each row)"
    assert (shown[~is_mask] < 90).all(), "random tokens should be ids below n_random (never special)"


def test_masks_are_fresh_each_time_but_reproducible_from_a_seed():
    x = batch(8)
    a = mask_tokens(x, SPECIAL, MASK, 19, generator=torch.Generator().manual_seed(5))
    b = mask_tokens(x, SPECIAL, MASK, 19, generator=torch.Generator().manual_seed(5))
    c = mask_tokens(x, SPECIAL, MASK, 19, generator=torch.Generator().manual_seed(6))
    assert torch.equal(a.positions, b.positions), "the same generator seed should give the same mask"
    assert not torch.equal(a.positions, c.positions), \
        "another seed should give another mask: draw every random number from `generator`"
    # BERT's 80 / 10 / 10: the random tokens come from `generator` too
    bert = dict(replace_prob=0.8, random_prob=0.1, n_random=90)
    d = mask_tokens(x, SPECIAL, MASK, 19, generator=torch.Generator().manual_seed(5), **bert)
    e = mask_tokens(x, SPECIAL, MASK, 19, generator=torch.Generator().manual_seed(5), **bert)
    assert torch.equal(d.x_masked, e.x_masked), \
        "with random_prob > 0 the same generator seed should give the same x_masked: draw the " \
        "random tokens from `generator` too"


def test_positions_are_uniform_over_real_tokens():
    x = batch(8000, 32)
    out = mask_tokens(x, SPECIAL, MASK, 5, generator=torch.Generator().manual_seed(7))
    counts = torch.zeros(32)
    counts.index_add_(0, out.positions[out.weights > 0], torch.ones(int(out.weights.sum())))
    real = counts[1:-1]
    assert counts[0] == 0 and counts[-1] == 0, "[CLS] or [SEP] was chosen"
    # each count is binomial-like: within 5 standard deviations of the mean
    assert ((real - real.mean()).abs() < 5 * real.mean().sqrt()).all(), \
        f"positions should be uniform over the real tokens: each chosen {real.min().item():.0f} " \
        f"to {real.max().item():.0f} times, expected about {real.mean().item():.0f}"
    # a uniform k-subset, not only uniform positions: every pair of real positions is chosen
    # together k (k - 1) / (n (n - 1)) of the time (a run of k neighbours from a random start,
    # or one position from each of k stretches, chooses each position as often but not pairs)
    k = int(out.weights[0].sum())
    assert (out.weights.sum(1) == k).all(), "rows of the same length should use the same k"
    chosen = torch.zeros(8000, 32).scatter_add_(1, out.positions, out.weights.float())[:, 1:-1]
    together = chosen.T @ chosen                                  # (30, 30) co-occurrences
    pairs = together[torch.triu(torch.ones(30, 30, dtype=torch.bool), diagonal=1)]
    expect = 8000 * k * (k - 1) / (30 * 29)
    assert ((pairs - expect).abs() < 5 * expect ** 0.5).all(), \
        f"the {k} positions should be a uniformly random subset: pairs of real tokens chosen " \
        f"together {pairs.min().item():.0f} to {pairs.max().item():.0f} times, expected " \
        f"{expect:.0f} each"
