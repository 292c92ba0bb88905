"""The discriminator D: the ELECTRA model we keep (paper §2, Figure 2).

For every position t of $x^corrupt$, D says whether the token is the original ("real") or a
sample of G ("replaced"). The paper says (§2):

$$ D(x, t) = sigmoid(w^T h_D(x)_t) $$

the probability that $x_t$ is real, trained on $L_Disc$ over *all* n tokens, not only the 15 %
that were masked: the paper's point (§3.5). After pre-training G is thrown away and D is
fine-tuned (finetune_glue.py).

Details: the official code (run_pretraining.py, `_get_discriminator_output`) puts a dense layer
with GELU before w, and its logit scores "replaced": $D(x, t) = 1 − sigmoid(logit_t)$, the
same classifier with w's sign flipped. This code does both.
"""
import torch.nn as nn
import torch.nn.functional as F

from encoder import Embeddings, Encoder, EncoderConfig


class Discriminator(nn.Module):
    """ELECTRA-Small's D: 12 layers, hidden 256, 4 heads, FFN 1024 (Table 6), on the shared
    embeddings, with the official code's head per token (run_pretraining.py): dense(256), GELU,
    dense(1)."""

    def __init__(self, cfg: EncoderConfig, embeddings: Embeddings):
        super().__init__()
        self.embeddings = embeddings                       # shared with G (§3.2)
        self.encoder = Encoder(cfg, embeddings.token.embedding_dim)
        self.head_dense = nn.Linear(cfg.hidden, cfg.hidden)
        self.head_out = nn.Linear(cfg.hidden, 1)
        self.head_out.glorot = True              # official: a bare tf.layers.dense (init_weights)

    def hidden(self, x, pad_mask=None, segment_ids=None):
        """$h_D(x)$, (B, T, hidden). Fine-tuning reads the [CLS] vector $h_D(x)_0$ from here."""
        return self.encoder(self.embeddings(x, segment_ids), pad_mask)

    def forward(self, x_corrupt, pad_mask=None, segment_ids=None):
        """Per-token logits of "replaced" for $x^corrupt$, (B, T)."""
        h = self.hidden(x_corrupt, pad_mask, segment_ids)
        return self.head_out(F.gelu(self.head_dense(h))).squeeze(-1)

