"""Pre-training objectives: ELECTRA's replaced token detection (§2) and BERT's MLM (§3.3).

The objective is kept apart from the networks (as in lucidrains/electra-pytorch): G and D are
any masked LM and any per-token classifier. That makes BERT-Small a different objective over
the same pieces, not a second implementation.

ELECTRA, one training step, in the paper's order (§2, Figure 2):

    m_i ~ unif{1, n} for i = 1..k            x_masked  = REPLACE(x, m, [MASK])     (data.py)
    x̂_i ~ p_G(x_i | x_masked) for i in m    x_corrupt = REPLACE(x, m, x̂)
    min_{θG, θD}  L_MLM(x, θG) + λ L_Disc(x, θD)        with λ = 50 (Appendix A)

λ is large because L_Disc is a binary cross-entropy over 128 mostly easy tokens, much smaller
than a 30k-way MLM loss (Appendix A, footnote 8); 50 balances the two gradients.
"""
import torch
import torch.nn as nn

from discriminator import Discriminator, disc_loss
from encoder import Embeddings, init_weights
from generator import Generator, mlm_loss, sample


def shared_embeddings(cfg):
    return Embeddings(cfg.vocab_size, cfg.emb_size, cfg.max_len, dropout=cfg.disc.dropout)


def masked_accuracy(logits, targets, weights):
    """Sum of correct argmax predictions over used slots, and the number of used slots."""
    return ((logits.argmax(-1) == targets).float() * weights).sum(), weights.sum()


def corrupt(x, positions, x_hat, weights):
    """x_corrupt = REPLACE(x, m, x̂) and its labels. Every used slot takes the generator's
    sample (also the 15 % of positions G saw unmasked, as in the official code); unused slots
    write back the original token. A sample equal to the original is "real" (§2), so the
    labels compare x_corrupt with x, not "was this position in m"."""
    x_hat = torch.where(weights > 0, x_hat, torch.gather(x, 1, positions))
    x_corrupt = x.scatter(1, positions, x_hat)
    return x_corrupt, x_corrupt != x


class ELECTRA(nn.Module):
    """G and D trained jointly on L_MLM + λ L_Disc, sharing one Embeddings module (§3.2).

    forward() is the paper's three lines; generate() and discriminate() are the two halves that
    the ablations in ablations.py replace (a different generator, a different D objective)."""

    def __init__(self, cfg):
        super().__init__()
        embeddings = shared_embeddings(cfg)                 # one module, two owners: tied
        self.generator = self.make_generator(cfg, embeddings)
        self.discriminator = self.make_discriminator(cfg, embeddings)
        self.disc_weight = cfg.disc_weight                  # λ
        self.apply(init_weights)

    def make_generator(self, cfg, embeddings):
        return Generator(cfg.gen, embeddings)

    def make_discriminator(self, cfg, embeddings):
        return Discriminator(cfg.disc, embeddings)

    def forward(self, x, x_masked, positions, targets, weights, pad_mask=None, segment_ids=None):
        # pad_mask (True on real tokens) and segment_ids (0 for sentence A, 1 for B) describe the
        # input for both networks; they travel together as `inp`.
        inp = dict(pad_mask=pad_mask, segment_ids=segment_ids)
        # 1. The generator reads x_masked and predicts the masked tokens: L_MLM, and samples x̂.
        loss_mlm, x_hat, stats = self.generate(x_masked, positions, targets, weights, **inp)
        # 2. x_corrupt: discrete, built under no_grad - no gradient from L_Disc reaches G (§2).
        with torch.no_grad():
            x_corrupt, is_replaced = corrupt(x, positions, x_hat, weights)
        # 3. The discriminator labels every token of x_corrupt: L_Disc over all positions.
        loss_disc, d_stats, _ = self.discriminate(x, x_corrupt, is_replaced, positions, targets,
                                                  weights, **inp)
        loss = loss_mlm + self.disc_weight * loss_disc
        return loss, dict(mlm_loss=loss_mlm, disc_loss=loss_disc, **stats, **d_stats)

    def generate(self, x_masked, positions, targets, weights, pad_mask=None, segment_ids=None):
        gen_logits = self.generator(x_masked, positions, pad_mask, segment_ids)
        x_hat = sample(gen_logits)                          # argmax: no gradient through it
        return mlm_loss(gen_logits, targets, weights), x_hat, \
            dict(gen_correct=masked_accuracy(gen_logits.detach(), targets, weights))

    def discriminate(self, x, x_corrupt, is_replaced, positions, targets, weights, pad_mask=None,
                     segment_ids=None, loss_mask=None):
        """L_Disc over the non-padding tokens (or over `loss_mask`, for ELECTRA 15%);
        returns the loss, statistics, and D's logits."""
        logits = self.discriminator(x_corrupt, pad_mask, segment_ids)
        real = torch.ones_like(is_replaced) if pad_mask is None else pad_mask
        loss_mask = real if loss_mask is None else loss_mask
        loss = disc_loss(logits, is_replaced, loss_mask)
        with torch.no_grad():                               # statistics for the progress line
            # Accuracy alone hides the plateau: "everything is real" already scores ~85-93 %.
            # Recall (replaced tokens D catches) and precision (flagged tokens that really were
            # replaced) show whether D has learned anything about replaced tokens at all.
            flagged = (logits > 0) & real
            caught = (flagged & is_replaced).float().sum()
            stats = dict(disc_correct=((((logits > 0) == is_replaced) & real).float().sum(),
                                       real.float().sum()),
                         replaced_correct=(caught, is_replaced.float().sum()),
                         replaced_flagged=(caught, flagged.float().sum()))
        return loss, stats, logits


class BERT(nn.Module):
    """BERT-Small (§3.3): "the same hyperparameters" and D's exact shape, trained by masked
    language modelling alone - which is the generator class at the discriminator's size.
    data.py masks its inputs 80 % [MASK] / 10 % random / 10 % kept. Fine-tuning keeps
    `mlm.embeddings` and `mlm.encoder`, exactly as it keeps D's for ELECTRA."""

    def __init__(self, cfg):
        super().__init__()
        self.mlm = Generator(cfg.disc, shared_embeddings(cfg))
        self.apply(init_weights)

    def forward(self, x, x_masked, positions, targets, weights, pad_mask=None, segment_ids=None):
        logits = self.mlm(x_masked, positions, pad_mask, segment_ids)
        loss = mlm_loss(logits, targets, weights)
        return loss, dict(mlm_loss=loss,
                          gen_correct=masked_accuracy(logits.detach(), targets, weights))


def build_model(cfg, unigram_counts=None):
    """The pre-training model a config describes: BERT, ELECTRA, or one of the ablations."""
    if cfg.model == "bert":
        return BERT(cfg)
    if cfg.objective == "electra" and cfg.generator == "mlm" and not cfg.two_stage:
        return ELECTRA(cfg)
    import ablations                                        # the paper's stepping stones
    return ablations.build(cfg, unigram_counts)
