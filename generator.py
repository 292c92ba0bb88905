"""The generator G: a small masked language model (paper §2, §3.2 "Smaller Generators").

The paper says (§2): at each masked position t, G's softmax over the token embeddings e,

$$ p_G(x_t | x) = exp(e(x_t)^T h_G(x)_t) /
   "    " sum_{x'} exp(e(x')^T h_G(x)_t) $$

and G learns by maximum likelihood ($L_MLM$, objectives.py), not to fool D. §3.2 found
generators 1/4 to 1/2 of D's size best, speculating that "too strong of a generator may pose a
too-challenging task for the discriminator"; for ELECTRA-Small G has a quarter of D's width
and D's depth. The same class at D's size is the BERT-Small baseline (§3.3): BERT *is* a
masked LM.

Details: Table 6's "Generator Size" is 1/4 of hidden size, FFN size and heads (64, 256, one
head); §3.2 shrinks "the layer sizes", and the official configure_pretraining.py keeps the
depth (`generator_layers` 1.0).
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
        """$h_G(x^masked)$: one vector per position, (B, T, hidden)."""
        return self.encoder(self.embeddings(x_masked, segment_ids), pad_mask)

    def forward(self, x_masked, masked_positions, pad_mask=None, segment_ids=None):
        """Logits of $p_G$ at the masked positions only, (B, K, vocab): `objectives.Masked`'s K
        slots."""
        return self.head(self.masked_hidden(x_masked, masked_positions, pad_mask, segment_ids),
                         self.embeddings.token.weight)

    def masked_hidden(self, x_masked, masked_positions, pad_mask=None, segment_ids=None):
        """$h_G(x^masked)$ at the masked positions only, (B, K, hidden)."""
        h = self.hidden(x_masked, pad_mask, segment_ids)
        return torch.gather(h, 1, masked_positions[..., None].expand(-1, -1, h.shape[-1]))

    def loss_and_sample(self, masked, pad_mask=None, segment_ids=None, sample=True):
        """Engineering: $L_MLM$, $x̂ ∼ p_G$ and G's argmax hits from one pass over $p_G$
        (machinery/mlm_output.py): the numbers of forward(), `objectives.mlm_loss` and
        `objectives.sample`, faster. What training runs by default."""
        h_m = self.masked_hidden(masked.x_masked, masked.positions, pad_mask, segment_ids)
        return mlm_output(self.head.transform(h_m), self.embeddings.token.weight, self.head.bias,
                          masked.targets, masked.weights, sample=sample)

