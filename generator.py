"""The generator G: a small masked language model (paper §2, §3.2 "Smaller Generators").

    x_masked = REPLACE(x, m, [MASK])
    p_G(x_t | x_masked) = exp(e(x_t)^T h_G(x_masked)_t) / sum_x' exp(e(x')^T h_G(x_masked)_t)
    L_MLM(x, θ_G) = E[ sum_{i in m} -log p_G(x_i | x_masked) ]

For ELECTRA-Small, G has D's depth but a quarter of its width (Table 6, "Generator Size 1/4":
hidden 64, FFN 256, one attention head). §3.2 found generators 1/4-1/2 the size of D work
best: "having too strong of a generator may pose a too-challenging task for the discriminator".

G is trained by maximum likelihood only - not to fool D. Its samples make x_corrupt, but no
gradient flows back through the sampling step (sampling is discrete; §2: "we don't
back-propagate the discriminator loss through the generator").

The same class at D's size is the BERT-Small baseline (§3.3): BERT *is* a masked LM.
L_MLM and the sampling step are part of the algorithm, in objectives.py.
"""
import torch
import torch.nn as nn

from encoder import Embeddings, Encoder, EncoderConfig, MLMHead
from machinery.mlm_output import mlm_output


class Generator(nn.Module):
    """A masked LM of any size on top of (possibly shared) embeddings e(x)."""

    def __init__(self, cfg: EncoderConfig, embeddings: Embeddings):
        super().__init__()
        self.embeddings = embeddings                       # shared with D in ELECTRA (§3.2)
        emb_size = embeddings.token.embedding_dim
        self.encoder = Encoder(cfg, emb_size)
        self.head = MLMHead(cfg.hidden, emb_size, embeddings.token.num_embeddings)

    def hidden(self, x_masked, pad_mask=None, segment_ids=None):
        """h_G(x_masked): one vector per position, (B, T, hidden)."""
        return self.encoder(self.embeddings(x_masked, segment_ids), pad_mask)

    def forward(self, x_masked, masked_positions, pad_mask=None, segment_ids=None):
        """Logits of p_G at the masked positions only: (B, K, vocab).

        masked_positions is (B, K) with a fixed K per batch (19 slots for 128 tokens, as the
        official code), so every tensor has a static shape whatever the sentence lengths."""
        return self.head(self.masked_hidden(x_masked, masked_positions, pad_mask, segment_ids),
                         self.embeddings.token.weight)

    def masked_hidden(self, x_masked, masked_positions, pad_mask=None, segment_ids=None):
        """h_G(x_masked) at the masked positions only, (B, K, hidden)."""
        h = self.hidden(x_masked, pad_mask, segment_ids)
        return torch.gather(h, 1, masked_positions[..., None].expand(-1, -1, h.shape[-1]))

    def loss_and_sample(self, masked, pad_mask=None, segment_ids=None, sample=True):
        """L_MLM, x̂ ~ p_G and G's argmax hits from one pass over p_G (machinery/mlm_output.py):
        the same numbers as forward() followed by objectives.mlm_loss and objectives.sample,
        faster."""
        h_m = self.masked_hidden(masked.x_masked, masked.positions, pad_mask, segment_ids)
        return mlm_output(self.head.transform(h_m), self.embeddings.token.weight, self.head.bias,
                          masked.targets, masked.weights, sample=sample)

