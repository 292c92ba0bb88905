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
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

from encoder import Embeddings, Encoder, EncoderConfig, MLMHead


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
        h = self.hidden(x_masked, pad_mask, segment_ids)
        h_m = torch.gather(h, 1, masked_positions[..., None].expand(-1, -1, h.shape[-1]))
        return self.head(h_m, self.embeddings.token.weight)


def mlm_loss(logits, targets, weights):
    """L_MLM: mean over the used mask slots of -log p_G(x_i | x_masked).

    logits (B, K, V); targets (B, K) the original tokens x_i; weights (B, K) 1.0 for a real mask
    slot, 0.0 for an unused one (a short sequence has fewer than K masked positions). The
    softmax is computed in float32 even under bf16 autocast: log-probabilities over 30k classes
    need the precision."""
    nll = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    return (nll * weights.flatten()).sum() / weights.sum().clamp(min=1.0)


def sample(logits, generator: torch.Generator = None):
    """x̂_i ~ p_G(x_i | x_masked), temperature 1, by inverting the CDF: turn each slot's logits
    into probabilities, take their running sum (the CDF), draw one u ~ U(0, 1) per slot and
    return the first token whose CDF exceeds u. Token i is returned exactly when
    CDF(i-1) <= u < CDF(i), which has probability p_i: an exact sample.

    Why not the Gumbel-max trick, argmax(logits + Gumbel noise)? It is exact too and needs no
    CDF, but it draws one random number per *vocabulary entry* (B x K x 30522 of them): on a
    CPU that alone took ~20 % of a small model's training step, against one number per slot
    here. Neither needs a host synchronisation, unlike torch.multinomial on some devices.

    Called on detached logits: sampling is not differentiable, and §2 trains G by maximum
    likelihood only. Probabilities are computed in float32 so bf16 rounding cannot bias the
    sample; u is scaled by the CDF's last entry, which float rounding leaves a hair off 1."""
    cdf = torch.softmax(logits.detach().float(), dim=-1).cumsum_(dim=-1)
    u = torch.rand(cdf.shape[:-1] + (1,), device=cdf.device, generator=generator)
    x_hat = torch.searchsorted(cdf, u * cdf[..., -1:], right=True).squeeze(-1)
    return x_hat.clamp_(max=cdf.shape[-1] - 1)      # u * CDF[-1] < CDF[-1]: never needed, safe
