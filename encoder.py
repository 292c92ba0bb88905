"""The Transformer encoder of G and D (paper §2, §3.2, §3.3).

Each network "primarily consists of an encoder (e.g., a Transformer network)" (§2): here
BERT's, post-LayerNorm blocks of self-attention and a GELU feed-forward network. G and D share their token and position embeddings (§3.2), projected to each
network's width by linear layers (footnote 4). Pieces: `Embeddings`, `Encoder` (projection and
blocks) and `MLMHead` (the softmax of $p_G$).

Details: in §3.2 the shared embeddings have D's hidden size and only G projects them;
ELECTRA-Small's are smaller still, 128 (§3.3), so D projects them too. This code, as the
official code, also shares the segment embeddings and their LayerNorm.
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
    """The initial weights: the paper gives none, so this code follows the official code.

    Details: model/modeling.py draws N(0, 0.02) truncated at 2 std, zero biases, LayerNorm at
    identity; TensorFlow's default, Glorot uniform, where it builds a bare tf.layers.dense
    (modules marked `glorot = True`)."""
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
    """e(x), shared by G and D (§3.2): G's softmax re-uses `token.weight`, so each MLM step
    updates every token embedding, where D updates only those in its input, the paper's reason
    why sharing them helps."""

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
        else:  # no segment ids: segment 0 for every token
            e = e + self.segment.weight[0]
        return self.drop(self.norm(e))


class SelfAttention(nn.Module):
    """Multi-head self-attention, with one projection for q, k and v and PyTorch's
    scaled_dot_product_attention."""

    def __init__(self, cfg: EncoderConfig):
        super().__init__()
        assert cfg.hidden % cfg.heads == 0, "hidden size must be divisible by the number of heads"
        self.heads, self.dropout = cfg.heads, cfg.dropout
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.out = nn.Linear(cfg.hidden, cfg.hidden)

    def forward(self, h, attn_mask=None):
        """Each head j computes $softmax(q k^T / √d) v$ over its $d = hidden / heads$
        dimensions; `out` projects the concatenated heads.

        Details: the contract: h (B, T, hidden) -> (B, T, hidden); attn_mask (B, 1, 1, T) bool,
        True where a key may be attended to (padding may not), or None. qkv(h) holds q, k and v
        in that order; head j takes columns $j d$ to $(j + 1) d$ of each; dropout
        self.dropout on the probabilities in training only."""
        # BEGIN ASSIGNMENT attention
        B, T, H = h.shape
        # (B, T, 3 * H) -> three tensors of (B, heads, T, d): one matmul for q, k and v
        q, k, v = self.qkv(h).view(B, T, 3, self.heads, H // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.out(a.transpose(1, 2).reshape(B, T, H))
        # END ASSIGNMENT attention


class Block(nn.Module):
    """A post-LayerNorm Transformer block, as in BERT and the official code (model/modeling.py):
    $h ← LN(h + Attn(h))$, then $h ← LN(h + FFN(h))$."""

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
    """(B, T) bool "is not padding" -> the (B, 1, 1, T) mask scaled_dot_product_attention
    expects (True: may attend); None without padding."""
    return None if pad_mask is None else pad_mask[:, None, None, :]


class Encoder(nn.Module):
    """h(x): the projection from the shared embedding size to this network's hidden size
    (footnote 4; each network has its own), then the stack of blocks."""

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
    """The masked-LM output layer, the softmax of $p_G$: dense, GELU, LayerNorm, then a product
    with every token embedding plus a bias, at the K masked slots only (the only ones with a
    target).

    Details: as BERT and the official code build it (run_pretraining.py,
    `get_token_logits`)."""

    def __init__(self, hidden: int, emb_size: int, vocab_size: int):
        super().__init__()
        self.dense = nn.Linear(hidden, emb_size)
        self.norm = nn.LayerNorm(emb_size, eps=1e-12)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def transform(self, h):
        """$z = LN(GELU(dense(h)))$: the vector whose product with e(x) scores x."""
        return self.norm(F.gelu(self.dense(h)))

    def forward(self, h, token_embedding: torch.Tensor):
        return self.transform(h) @ token_embedding.t() + self.bias
