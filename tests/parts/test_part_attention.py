"""Part 7, attention (encoder.SelfAttention.forward): multi-head scaled dot-product attention,
softmax(Q K^T / sqrt(d)) V per head (Vaswani et al.; the encoder of §2): q, k, v in that order
in qkv's output, head j at columns j d to (j + 1) d of each; masked keys get no attention;
dropout on the probabilities in training only."""
import math

import torch

from encoder import EncoderConfig, SelfAttention


def by_hand(att, h, keep):
    """The same computation one head and one sequence at a time, with plain loops."""
    B, T, H = h.shape
    n, d = att.heads, H // att.heads
    W, b = att.qkv.weight, att.qkv.bias
    out = torch.zeros(B, T, H)
    for i in range(B):
        qkv = h[i] @ W.T + b                                   # (T, 3H): q | k | v
        for j in range(n):
            q = qkv[:, j * d:(j + 1) * d]
            k = qkv[:, H + j * d:H + (j + 1) * d]
            v = qkv[:, 2 * H + j * d:2 * H + (j + 1) * d]
            scores = q @ k.T / math.sqrt(d)
            scores = scores.masked_fill(~keep[i][None, :], float("-inf"))
            out[i, :, j * d:(j + 1) * d] = torch.softmax(scores, -1) @ v
    return out @ att.out.weight.T + att.out.bias


def test_matches_a_hand_computation_with_padding():
    torch.manual_seed(0)
    att = SelfAttention(EncoderConfig(hidden=12, heads=3, ffn=24, dropout=0.0)).eval()
    h = torch.randn(2, 5, 12)
    keep = torch.tensor([[True] * 5, [True, True, True, False, False]])
    with torch.no_grad():
        got = att(h, keep[:, None, None, :])
        assert got.shape == (2, 5, 12), f"shape (2, 5, 12) expected, got {tuple(got.shape)}"
        assert torch.allclose(got, by_hand(att, h, keep), atol=1e-5), \
            "should be softmax(q k^T / sqrt(d)) v per head (q, k, v in that order, head j at " \
            "columns j d to (j + 1) d), masked keys getting no attention"
        assert torch.allclose(att(h, None), by_hand(att, h, torch.ones(2, 5, dtype=torch.bool)),
                              atol=1e-5), "attn_mask None: every key allowed"


def test_padded_keys_change_nothing():
    torch.manual_seed(1)
    att = SelfAttention(EncoderConfig(hidden=8, heads=2, ffn=16, dropout=0.0)).eval()
    h = torch.randn(1, 6, 8)
    keep = torch.tensor([[True] * 4 + [False] * 2])[:, None, None, :]
    h2 = h.clone()
    h2[0, 4:] = torch.randn(2, 8) * 10                          # change what sits in the padding
    with torch.no_grad():
        assert torch.allclose(att(h, keep)[0, :4], att(h2, keep)[0, :4], atol=1e-5), \
            "what sits at masked keys changed the output: masked keys should get no attention " \
            "(attn_mask is True where attention is allowed)"


def test_dropout_on_the_probabilities_in_training_only():
    """In training, dropout self.dropout on the attention probabilities (kept ones scaled by
    1 / (1 - p), so the average output is eval's); in eval, none."""
    torch.manual_seed(2)
    att = SelfAttention(EncoderConfig(hidden=8, heads=2, ffn=16, dropout=0.5))
    h = torch.randn(1, 4, 8)
    with torch.no_grad():
        ref = att.eval()(h)
        assert torch.equal(ref, att(h)), "eval: no dropout, the same output every call"
        att.train()
        draws = att(h.expand(4000, 4, 8))                      # 4000 rows, 4000 draws at once
        assert not torch.allclose(draws[0], draws[1]), "training: dropout should be on"
        gap = (draws.mean(0) - ref).abs().max().item()
        assert gap < 0.1, f"training's mean output is {gap:.3f} off eval's: kept probabilities " \
            f"should be scaled by 1 / (1 - p)"
        att.dropout = 0.0
        assert torch.allclose(att(h), ref, atol=1e-6), "dropout 0 in training should be eval"


def test_dropout_drops_whole_probabilities():
    """Dropout acts on the attention probabilities, not on v or the heads' outputs: with one key
    each query's probability is 1, so in training each head's output is either 0 (dropped) or
    v / (1 - p) (kept, scaled), never a mix of dropped and kept coordinates."""
    torch.manual_seed(3)
    att = SelfAttention(EncoderConfig(hidden=8, heads=2, ffn=16, dropout=0.5)).train()
    with torch.no_grad():
        att.out.weight.copy_(torch.eye(8))                     # out: the identity, so the
        att.out.bias.zero_()                                   # heads' outputs show through
        h = torch.randn(400, 1, 8)                             # 400 rows of one token
        v = (h @ att.qkv.weight.T + att.qkv.bias)[..., 16:].view(400, 2, 4)
        got = att(h).view(400, 2, 4)
    dropped = got.abs().amax(-1) < 1e-6
    kept = (got - 2 * v).abs().amax(-1) < 1e-5
    assert (dropped | kept).all(), "a head's output was partly dropped: dropout is not on the " \
                                   "probabilities"
    share = dropped.float().mean().item()
    assert 0.4 < share < 0.6, f"{share:.2f} of the probabilities dropped, expected 0.5"
