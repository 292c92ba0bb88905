"""Part 11, flops (flops.block_flops): one Transformer block's FLOPs per token, counted by the
rules of Appendix E and the official FLOP script."""
from flops import DROPOUT, GELU, LAYER_NORM, SOFTMAX, block_flops, discriminator_forward_flops
from flops import train_flops_per_step
from config import Config


def test_a_worked_example():
    # hidden 4, 2 heads, FFN 8, attending over 3 positions. A matmul of an m-vector by an m x n
    # matrix is 2mn; elementwise ops cost their per-element constants.
    h, n, f, s = 4, 2, 8, 3
    qkv = 3 * (2 * h * h + h)                    # three projections with their biases
    scores = 2 * h * s                           # q . k against s keys, all heads together
    probs = (SOFTMAX + DROPOUT + 1) * s * n      # softmax, dropout and the 1/sqrt(d) scale
    values = 2 * h * s                           # the weighted average of v
    out = 2 * h * h + h                          # output projection and bias
    after_attn = (DROPOUT + 1 + LAYER_NORM) * h  # dropout, residual, LayerNorm
    ffn = 2 * h * f + f + GELU * f + 2 * f * h + h + (DROPOUT + 1 + LAYER_NORM) * h
    got, want = block_flops(h, n, f, s), qkv + scores + probs + values + out + after_attn + ffn
    assert got == want, f"block_flops(4, 2, 8, 3) = {got}, expected {want}: qkv {qkv}, scores " \
        f"{scores}, softmax/dropout/scale {probs}, values {values}, output {out}, after it " \
        f"{after_attn}, FFN {ffn}"


def test_table1_numbers():
    cfg = Config()                               # ELECTRA-Small, Table 6
    infer = discriminator_forward_flops(cfg)
    assert abs(infer - 3.7e9) / 3.7e9 < 0.10, infer            # Table 1: 3.7e9 per sequence
    train = train_flops_per_step(cfg) * 1_000_000
    assert abs(train - 1.29e18) / 1.29e18 < 0.03, train        # the official script: 1.29e18
