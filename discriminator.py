"""The discriminator D: the ELECTRA model we keep (paper §2, Figure 2).

For every position t of x_corrupt, D predicts whether the token is the original ("real") or a
generator sample ("replaced"):

    D(x, t) = sigmoid(w^T h_D(x)_t)                      (the probability that x_t is real)
    L_Disc(x, θ_D) = E[ sum_{t=1..n} -1(x_corrupt_t = x_t) log D(x_corrupt, t)
                                     -1(x_corrupt_t != x_t) log(1 - D(x_corrupt, t)) ]

Like the official code, our head's logit scores "replaced" rather than "real", so
D(x, t) = 1 - sigmoid(logit_t) and L_Disc is the binary cross-entropy of the logits against
is_replaced. It is the same classifier with the sign of w flipped.

The point of the whole paper is in that sum: it runs over *all* n input tokens, not just the
~15 % that were masked, so D learns from every position of every sequence (§3.5 shows that
this, more than anything else, is where ELECTRA's efficiency comes from).

After pre-training the generator is thrown away and D is fine-tuned (finetune_glue.py).
L_Disc itself is part of the algorithm, in objectives.py.
"""
import torch.nn as nn
import torch.nn.functional as F

from encoder import Embeddings, Encoder, EncoderConfig


class Discriminator(nn.Module):
    """ELECTRA-Small's D: 12 layers, hidden 256, 4 heads, FFN 1024 (Table 6), on the shared
    embeddings, with the official per-token head dense(256) -> GELU -> dense(1)."""

    def __init__(self, cfg: EncoderConfig, embeddings: Embeddings):
        super().__init__()
        self.embeddings = embeddings                       # shared with G (§3.2)
        self.encoder = Encoder(cfg, embeddings.token.embedding_dim)
        self.head_dense = nn.Linear(cfg.hidden, cfg.hidden)
        self.head_out = nn.Linear(cfg.hidden, 1)
        self.head_out.glorot = True              # official: a bare tf.layers.dense (init_weights)

    def hidden(self, x, pad_mask=None, segment_ids=None):
        """h_D(x), (B, T, hidden). Fine-tuning reads the [CLS] vector h_D(x)_0 from here."""
        return self.encoder(self.embeddings(x, segment_ids), pad_mask)

    def forward(self, x_corrupt, pad_mask=None, segment_ids=None):
        """Per-token logits of "replaced" for x_corrupt: (B, T); D(x, t) = 1 - sigmoid(logit)."""
        h = self.hidden(x_corrupt, pad_mask, segment_ids)
        return self.head_out(F.gelu(self.head_dense(h))).squeeze(-1)

