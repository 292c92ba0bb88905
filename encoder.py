"""The Transformer encoder shared in design by the generator G and the discriminator D.

Paper §2: "Each one primarily consists of an encoder (e.g., a Transformer network) that maps a
sequence on input tokens x = [x1, ..., xn] into a sequence of contextualized vector
representations h(x) = [h1, ..., hn]."  Both G and D are BERT-style encoders (Devlin et al.,
2019): post-LayerNorm blocks of multi-head self-attention and a GELU feed-forward network.

§3.2 "Weight Sharing": G and D share their *embeddings* (token and positional; we also share
the segment/token-type embeddings and the embedding LayerNorm, as the official code does).
Because G is smaller than D, the embeddings have their own size (128 for ELECTRA-Small,
Table 6) and each network projects them to its hidden size (footnote 4: "We add linear layers
to the generator to project the embeddings into generator-hidden-sized representations").

This file holds the pieces both networks are built from:
  Embeddings     - e(x): token + position + segment embeddings, LayerNorm, dropout (shared)
  Encoder        - projection 128 -> hidden, then L Transformer blocks:  h(x)
  MLMHead        - dense -> GELU -> LayerNorm -> logits through the tied token embeddings,
                   the softmax of p_G(x_t | x) in §2 (also BERT-Small's head)
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class EncoderConfig:
    """The size of one Transformer encoder (one column of Table 6)."""
    hidden: int = 256        # "Hidden Size"
    layers: int = 12         # "Number of layers"
    heads: int = 4           # "Attention heads" (head size 64 = 256 / 4)
    ffn: int = 1024          # "FFN inner hidden size"
    dropout: float = 0.1     # "Dropout" and "Attention Dropout"


def init_weights(module):
    """BERT's initialisation: N(0, 0.02) weights (the official code truncates at 2 std), zero
    biases, LayerNorm at identity. Small weights keep the residual stream stable at the start.

    Exception, as in the official code: the layers it builds with a bare tf.layers.dense (no
    initializer given) get TensorFlow's default, Glorot (Xavier) uniform, U(±√(6/(in+out))).
    Those are the embedding projection, D's output layer and the GLUE head; their modules are
    marked `glorot = True` where they are built."""
    if isinstance(module, nn.Linear) and getattr(module, "glorot", False):
        nn.init.xavier_uniform_(module.weight)
        nn.init.zeros_(module.bias)
    elif isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.trunc_normal_(module.weight, std=0.02, a=-0.04, b=0.04)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.LayerNorm):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


class Embeddings(nn.Module):
    """e(x): the one set of embedding parameters that G and D share (§3.2).

    The generator's softmax re-uses `token.weight` as its output matrix ("the 'input' and
    'output' token embeddings of the generator are always tied as in BERT"), so every MLM step
    updates *all* token embeddings densely - the paper's explanation of why sharing helps D."""

    def __init__(self, vocab_size, emb_size=128, max_len=512, n_segments=2, dropout=0.1):
        super().__init__()
        self.token = nn.Embedding(vocab_size, emb_size)
        self.position = nn.Embedding(max_len, emb_size)
        self.segment = nn.Embedding(n_segments, emb_size)   # sentence A / B, used by GLUE pairs
        self.norm = nn.LayerNorm(emb_size, eps=1e-12)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, segment_ids=None):
        T = x.shape[1]
        e = self.token(x) + self.position.weight[:T]          # (B, T, E) + (T, E) broadcast
        if segment_ids is not None:
            e = e + self.segment(segment_ids)
        else:  # pre-training inputs are one segment: add segment 0 without building a tensor
            e = e + self.segment.weight[0]
        return self.drop(self.norm(e))


class SelfAttention(nn.Module):
    """Multi-head self-attention. One fused q/k/v projection; the attention itself is PyTorch's
    scaled_dot_product_attention, which picks a fused (flash / memory-efficient) kernel on GPU."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        assert cfg.hidden % cfg.heads == 0, "hidden size must be divisible by the number of heads"
        self.heads, self.dropout = cfg.heads, cfg.dropout
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.out = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, h, attn_mask=None):
        """h (B, T, hidden) -> (B, T, hidden). attn_mask (B, 1, 1, T) bool, True where a key may
        be attended to (padding may not), or None. qkv(h) holds q, k and v in that order, and
        head j uses columns j d to (j + 1) d of each. Each head computes
        softmax(q k^T / sqrt(d)) v over its d = hidden / heads dimensions, with dropout
        self.dropout on the probabilities in training (none in eval); the heads' outputs are
        concatenated and projected by `out`."""
        # BEGIN ASSIGNMENT attention
        B, T, H = h.shape
        # (B, T, 3 * H) -> three tensors of (B, heads, T, d): one matmul for q, k and v
        q, k, v = self.qkv(h).view(B, T, 3, self.heads, H // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.out(a.transpose(1, 2).reshape(B, T, H))
        # END ASSIGNMENT attention


class Block(nn.Module):
    """A post-LayerNorm Transformer block, as in BERT and ELECTRA:
    h = LN(h + Attn(h));  h = LN(h + FFN(h))."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        self.attn = SelfAttention(cfg)
        self.norm1 = nn.LayerNorm(cfg.hidden, eps=1e-12)
        self.ffn_in = nn.Linear(cfg.hidden, cfg.ffn)
        self.ffn_out = nn.Linear(cfg.ffn, cfg.hidden)
        self.norm2 = nn.LayerNorm(cfg.hidden, eps=1e-12)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, h, attn_mask=None):
        h = self.norm1(h + self.drop(self.attn(h, attn_mask)))
        return self.norm2(h + self.drop(self.ffn_out(F.gelu(self.ffn_in(h)))))


def attention_mask(pad_mask):
    """(B, T) bool "is a real token" -> the (B, 1, 1, T) boolean mask SDPA expects (True = may
    attend). None when there is no padding: SDPA is fastest without a mask, and packed
    pre-training sequences never have padding."""
    return None if pad_mask is None else pad_mask[:, None, None, :]


class Encoder(nn.Module):
    """h(x): projection from the (shared) embedding size to this network's hidden size, then the
    stack of blocks. The projection is per network (footnote 4), the embeddings are not."""

    def __init__(self, cfg: EncoderConfig, emb_size: int):
        super().__init__()
        self.proj = nn.Linear(emb_size, cfg.hidden) if emb_size != cfg.hidden else nn.Identity()
        self.proj.glorot = True                  # official: tf.layers.dense, Glorot (init_weights)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))

    def forward(self, e, pad_mask=None):
        h, m = self.proj(e), attention_mask(pad_mask)
        for block in self.blocks:
            h = block(h, m)
        return h


class MLMHead(nn.Module):
    """The masked-LM output layer, p_G(x_t | x) = softmax(e(x_t)^T h_G(x)_t) of §2, as BERT builds
    it: dense(hidden -> E) -> GELU -> LayerNorm, then a dot product with every token embedding
    (the tied matrix) plus an output bias.

    It is only ever applied to the gathered masked positions (B, K, hidden), never to all T
    positions: the vocabulary projection is the most expensive matmul of the generator, and only
    ~15 % of positions have a target."""

    def __init__(self, hidden: int, emb_size: int, vocab_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden, emb_size)
        self.norm = nn.LayerNorm(emb_size, eps=1e-12)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def transform(self, h):
        """z = LayerNorm(GELU(dense(h))): the vector whose dot product with e(x) scores x."""
        return self.norm(F.gelu(self.dense(h)))

    def forward(self, h, token_embedding: torch.Tensor):
        return self.transform(h) @ token_embedding.t() + self.bias
