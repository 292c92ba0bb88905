"""Counting FLOPs the way the paper does (Appendix E), and MFU (model FLOPs utilisation).

The paper compares methods by pre-training compute, not steps (Figure 1, Table 1), as
ELECTRA's step also runs G. Its rules (Appendix E): a vector of m times an $m × n$ matrix is
$2 m n$; an elementwise op counts its operations; backward costs as much as forward; a lookup
is a one-hot vector times the table ($2 d V$ per token for d-wide embeddings of V tokens: 40 %
of ELECTRA-Small's count). This code counts 1.29e18 FLOPs for ELECTRA-Small's 1M steps and
1.42e18 for BERT-Small's 1.45M, where Table 1 prints 1.4e18 for both, and Table 1's 3.7e9 for
one forward pass of D.

Details: the per-element costs are those of the official flops_computation.py, which gives
1.294e18 and 1.419e18 against this code's 1.292e18 and 1.417e18 (it counts the MLM softmax at
20 of 128 positions, this code at its 19 slots). One 128-token forward pass of D: 3.68e9.
"""
import time

import torch

# Engineering: the GPUs' data-sheet peaks, by name and precision, for MFU below.
from machinery.gpu_peaks import GPU_PEAK, gpu_peak  # noqa: F401

LAYER_NORM, GELU, SOFTMAX, DROPOUT = 5, 8, 5, 4      # FLOPs per element, as the official script


def embedding_flops(vocab, emb, hidden, seq):
    """e(x) for one token, every lookup dense (Appendix E), then the projection to this
    network's hidden size."""
    f = 2 * emb * vocab + 2 * emb * (seq + 2) + 2 * emb + LAYER_NORM * emb + DROPOUT * emb
    if emb != hidden:
        f += 2 * emb * hidden + hidden
    return f


def block_flops(hidden, heads, ffn, seq):
    """One post-LN Transformer block's FLOPs per token (it attends over `seq` positions), by
    Appendix E's rules (above; a bias costs n).

    Details: counted: q, k, v with biases; the scores; softmax,
    dropout and the $1 / √d$ scale on each head's `seq` scores; the weighted sum of v; the output
    projection with bias; the FFN's two matmuls with biases and GELU; dropout, residual and
    LayerNorm after attention and after the FFN."""
    # BEGIN ASSIGNMENT flops
    attn = (3 * 2 * hidden * hidden + 3 * hidden        # q, k, v projections and biases
            + 2 * hidden * seq                          # q . k scores over all heads
            + (SOFTMAX + DROPOUT + 1) * seq * heads     # softmax, dropout, 1/sqrt(d) scale
            + 2 * hidden * seq                          # weighted average of v
            + 2 * hidden * hidden + hidden              # output projection
            + (DROPOUT + 1 + LAYER_NORM) * hidden)      # dropout, residual, LayerNorm
    ffn_f = (2 * hidden * ffn + ffn + GELU * ffn        # up-projection, bias, GELU
             + 2 * ffn * hidden + hidden                # down-projection, bias
             + (DROPOUT + 1 + LAYER_NORM) * hidden)
    return attn + ffn_f
    # END ASSIGNMENT flops


def mlm_head_flops(vocab, emb, hidden):
    """The MLM output layer for one predicted token: dense, GELU, LayerNorm, tied softmax."""
    return (2 * hidden * emb + emb + GELU * emb + LAYER_NORM * emb
            + 2 * emb * vocab + vocab + SOFTMAX * vocab + 2 * vocab)


def disc_head_flops(hidden):
    """D's per-token head: dense(hidden), GELU, dense(1)."""
    return 2 * hidden * hidden + hidden + GELU * hidden + 2 * hidden + 1


def encoder_forward_flops(enc, vocab, emb, seq):
    """Embeddings plus all blocks, for one sequence of `seq` tokens."""
    per_token = embedding_flops(vocab, emb, enc.hidden, seq) + \
        enc.layers * block_flops(enc.hidden, enc.heads, enc.ffn, seq)
    return per_token * seq


def discriminator_forward_flops(cfg):
    """One forward pass of D over one sequence (Table 1's "Infer FLOPs": 3.7e9)."""
    return encoder_forward_flops(cfg.disc, cfg.vocab_size, cfg.emb_size, cfg.seq_len) + \
        cfg.seq_len * disc_head_flops(cfg.disc.hidden)


def mlm_forward_flops(enc, cfg):
    """A masked LM (G, or BERT) over one sequence; the vocabulary softmax only at the K mask
    slots, which is what this code computes."""
    return encoder_forward_flops(enc, cfg.vocab_size, cfg.emb_size, cfg.seq_len) + \
        cfg.n_slots * mlm_head_flops(cfg.vocab_size, cfg.emb_size, enc.hidden)


def forward_flops(cfg):
    """One forward pass over one sequence of whatever the config trains: BERT-Small, an MLM at
    D's size; ELECTRA, G (none for the unigram generator) and D; the §3.5 ablations, D with
    another head."""
    if cfg.model == "bert":
        return mlm_forward_flops(cfg.disc, cfg)
    gen = 0 if cfg.generator == "unigram" else mlm_forward_flops(cfg.gen, cfg)
    objective = getattr(cfg, "objective", "electra")
    if objective in ("electra", "electra15"):
        return gen + discriminator_forward_flops(cfg)
    body = encoder_forward_flops(cfg.disc, cfg.vocab_size, cfg.emb_size, cfg.seq_len)
    head = mlm_head_flops(cfg.vocab_size, cfg.emb_size, cfg.disc.hidden)
    if objective == "replace_mlm":
        return gen + body + cfg.n_slots * head
    if objective == "all_tokens_mlm":
        return gen + body + cfg.seq_len * (head + 2 * cfg.disc.hidden + 1)
    raise ValueError(f"unknown objective {objective!r}")


def train_flops_per_step(cfg, stage=None):
    """FLOPs of one optimizer step on a batch: twice the forward pass (Appendix E). Two-stage
    training (§3.2) trains G alone in stage 1, and in stage 2 runs the frozen G forward only."""
    if stage == 1:
        return 2 * mlm_forward_flops(cfg.gen, cfg) * cfg.batch_size
    if stage == 2:
        return (mlm_forward_flops(cfg.gen, cfg) + 2 * discriminator_forward_flops(cfg)) * \
            cfg.batch_size
    return 2 * forward_flops(cfg) * cfg.batch_size


def flops_by_part(cfg):
    """`train_flops_per_step` of ELECTRA by network and part: {(net, part): FLOPs}, net "G"
    or "D", part "embeddings", "attention", "FFN" or "output head" (G's MLM head at its mask
    slots, D's head at every position); the parts add up to the step. The picture above draws
    them.

    Details: FFN is what a block gains with its FFN width; attention the rest of the block."""
    twice, s, out = 2 * cfg.batch_size, cfg.seq_len, {}
    for net, enc in (("G", cfg.gen), ("D", cfg.disc)):
        block = block_flops(enc.hidden, enc.heads, enc.ffn, s)
        ffn = block - block_flops(enc.hidden, enc.heads, 0, s)
        out[net, "embeddings"] = twice * s * embedding_flops(cfg.vocab_size, cfg.emb_size,
                                                             enc.hidden, s)
        out[net, "attention"] = twice * s * enc.layers * (block - ffn)
        out[net, "FFN"] = twice * s * enc.layers * ffn
    out["G", "output head"] = twice * cfg.n_slots * mlm_head_flops(cfg.vocab_size, cfg.emb_size,
                                                                   cfg.gen.hidden)
    out["D", "output head"] = twice * s * disc_head_flops(cfg.disc.hidden)
    return out


def hardware_flops_per_step(cfg, stage=None):
    """Engineering: the same count without the "dense" embedding lookups, what the hardware
    really multiplies, for MFU (with the paper's count a small model's "MFU" can exceed 100 %).
    Lookups: 2 per network trained (forward and backward), 1 for a frozen one."""
    lookup = 2 * cfg.emb_size * (cfg.vocab_size + cfg.seq_len + 2) * cfg.seq_len * cfg.batch_size
    if cfg.model == "bert" or stage == 1:
        passes = 2
    elif stage == 2:
        passes = 3
    else:
        passes = 2 if cfg.generator == "unigram" else 4
    return train_flops_per_step(cfg, stage) - passes * lookup


# ----------------------------------------------------------------------------- MFU

def peak_flops(device, precision=None):
    """Engineering: (peak FLOP/s, how it is known) for MFU, in `precision` (the run's: "bf16",
    "fp16" or "fp32"; None: --precision auto's choice): a GPU's data-sheet peak (GPU_PEAK); on
    a CPU, measured: the best of a few matmuls in that precision."""
    device = torch.device(device)
    if precision is None:
        from machinery.device import auto_precision
        precision = auto_precision(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        peak, key = gpu_peak(name, precision)
        if peak:
            kind = "TF32/FP32" if precision == "fp32" else precision
            return peak, f"{name} {kind} data sheet"
        return None, f"{name}: unknown peak"
    if device.type != "cpu":
        return None, f"{device.type}: unknown peak"
    # (fp16 on a CPU, which has no fp16 matrix unit, is for tests: float32's peak)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    n, best = 1024, 0.0
    g = torch.Generator().manual_seed(0)        # leave the global RNG (training's) untouched
    a, b = (torch.randn(n, n, generator=g).to(dtype) for _ in range(2))
    for _ in range(5):
        t = time.perf_counter()
        a @ b
        best = max(best, 2 * n ** 3 / (time.perf_counter() - t))
    return best, (f"CPU {str(dtype)[6:]} matmul, measured ({torch.get_num_threads()} "
                  f"thread{'s' if torch.get_num_threads() > 1 else ''})")
