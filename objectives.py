"""The algorithm of the paper, §2 and Figure 2, in the paper's order - read this file first.

ELECTRA trains two networks, a generator G (generator.py) and a discriminator D
(discriminator.py), with one training step of three lines:

    1. mask       m_i ~ unif{1, n} for i = 1..k           x_masked  = REPLACE(x, m, [MASK])
    2. corrupt    x̂_i ~ p_G(x_i | x_masked) for i in m    x_corrupt = REPLACE(x, m, x̂)
    3. learn      min_{θG, θD}  L_MLM(x, θG) + λ L_Disc(x, θD)        with λ = 50

with k = round(0.15 n) for the n real tokens of x (15 % are masked; mask_tokens states the
exact rule and where it departs from the official code) and the two losses

    L_MLM(x, θG)  = E[ sum_{i in m} -log p_G(x_i | x_masked) ]
    L_Disc(x, θD) = E[ sum_{t=1..n} -1(x_corrupt_t = x_t) log D(x_corrupt, t)
                                    -1(x_corrupt_t != x_t) log(1 - D(x_corrupt, t)) ]

This file holds exactly those pieces, top to bottom: `mask_tokens` (line 1, returning the
`Masked` structure), `sample` and `corrupt` (line 2), `mlm_loss`, `disc_loss` and the ELECTRA
module that adds them with weight λ (line 3). Then BERT (§3.3), the baseline: line 1 and L_MLM
only. The networks themselves are elsewhere, so the objective stays separate from the
architecture (as in lucidrains/electra-pytorch): BERT-Small and the ablations of ablations.py
are small changes here, not copies of the model.

Imports flow one way: encoder <- generator, discriminator <- objectives <- ablations <- trainer.
"""
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from discriminator import Discriminator
from encoder import Embeddings, init_weights
from generator import Generator


# ============================================================================ 1. mask

class Masked(NamedTuple):
    """The masked positions m of a batch and what the generator sees: the output of line 1.

    Every batch has the same number K of mask slots per sequence (19 for 128 tokens, as the
    official code), so every tensor has a static shape whatever the sentence lengths; a short
    sequence leaves some slots unused (weight 0).

    The contract for unused slots: the used slots come first and hold k distinct positions; an
    unused slot may hold any position of the row - one no used slot holds, a special token's,
    or a used slot's again - and its target is x at that position. Whatever it holds, nothing
    may read it as masked or write through it: losses weight it 0, and every scatter into a
    (B, T) tensor (corrupt, ELECTRA15, the analyses) is written so that an unused slot
    repeating a used position cannot undo what the used slot wrote."""
    x_masked: torch.Tensor    # (B, T) x with the chosen positions replaced: G's (or BERT's) input
    positions: torch.Tensor   # (B, K) m, the chosen positions (unused slots: any position)
    targets: torch.Tensor     # (B, K) x at each slot's position: the labels of L_MLM
    weights: torch.Tensor     # (B, K) 1.0 for a used slot, 0.0 for an unused one

    def to(self, device, non_blocking=False):
        return Masked(*(t.to(device, non_blocking=non_blocking) for t in self))

    def pin_memory(self):
        """Page-locked copies, as Tensor.pin_memory: batches.Prefetcher pins every value of a
        batch so that the copy to a GPU runs asynchronously (non_blocking)."""
        return Masked(*(t.pin_memory() for t in self))


def mask_slots(seq_len: int, mask_prob: float = 0.15) -> int:
    """K, the fixed number of mask slots: int((0.15 + 0.005) * 128) = 19, as the official code."""
    return int((mask_prob + 0.005) * seq_len)


def mask_tokens(x, special_ids, mask_id, n_slots, mask_prob=0.15, replace_prob=0.85,
                random_prob=0.0, n_random=None, generator=None) -> Masked:
    """Line 1: choose m, k distinct positions among the n real tokens of each sequence,
    uniformly at random, and build x_masked = REPLACE(x, m, [MASK]).

    The rule: n counts the real tokens (special_ids - [CLS], [SEP], padding - are never
    chosen: they carry no word to predict); k = round(mask_prob * n), rounded to the nearest
    integer (a tie at .5 may go either way: torch.round and floor(x + 0.5) are both right),
    then at least 1 and at most n and n_slots; the k positions are a uniformly random k-subset
    (drawn without replacement), and the first k of the n_slots slots hold them. The other
    slots get weight 0 and may hold any position (Masked says what they may not do); x_masked
    differs from x at used positions only, and targets is x at every slot's position.

    The official code (pretrain_helpers.mask) differs in two details, both kept here on
    purpose: it counts [CLS] and [SEP] in n (k = 3 instead of 2 for 15 words), and it draws
    the k positions *with* replacement, so a position can fill two slots - L_MLM then counts
    that token twice, and fewer than k distinct tokens are masked (at 128 tokens, 19 draws
    give 17.7 distinct positions on average). Without replacement every sequence has exactly
    k masked tokens, which is what "15 % of the tokens" says.

    Of the chosen positions, a share `replace_prob` shows [MASK], a share `random_prob` a
    random token id below n_random, and the rest keep their token. ELECTRA uses 85 % / 0 % /
    15 % (as the official code); BERT uses 80 % / 10 % / 10 %."""
    # BEGIN ASSIGNMENT mask
    # Why ELECTRA keeps 15 % of the chosen tokens as they are: G must also predict some tokens
    # it can see, which keeps its predictions sensible where no [MASK] is shown (the official
    # code's choice).
    B, T = x.shape
    is_real = torch.ones_like(x, dtype=torch.bool)
    for s in special_ids:
        is_real &= x != s
    n = is_real.sum(1)
    k = torch.clamp(torch.floor(mask_prob * n + 0.5), min=1).minimum(n).clamp(max=n_slots)
    # A uniformly random k-subset of the real tokens: give each real token a uniform score,
    # every special token -1, and take the K best. The first k of them are a uniform sample
    # (topk sorts by score, so "the k best" is a prefix of the K slots).
    scores = torch.rand(B, T, generator=generator, device=x.device).masked_fill(~is_real, -1.0)
    positions = scores.topk(n_slots, dim=1).indices
    weights = (torch.arange(n_slots, device=x.device)[None, :] < k[:, None]).float()
    targets = torch.gather(x, 1, positions)
    # What each chosen position shows the network: [MASK], a random token, or itself.
    u = torch.rand(B, n_slots, generator=generator, device=x.device)
    shown = torch.where(u < replace_prob, torch.full_like(targets, mask_id), targets)
    if random_prob > 0:
        rnd = torch.randint(0, n_random, (B, n_slots), generator=generator, device=x.device)
        shown = torch.where((u >= replace_prob) & (u < replace_prob + random_prob), rnd, shown)
    shown = torch.where(weights > 0, shown, targets)       # unused slots change nothing
    # topk's K positions are distinct, so this scatter writes each position once.
    return Masked(x.scatter(1, positions, shown), positions, targets, weights)
    # END ASSIGNMENT mask


# ============================================================================ 2. sample and corrupt

def sample(logits, generator: torch.Generator = None):
    """x̂_i ~ p_G(x_i | x_masked): one token per slot from softmax(logits), temperature 1.

    Sampling is not differentiable, and §2 trains G by maximum likelihood only ("we don't
    back-propagate the discriminator loss through the generator"), so the logits are detached.
    logits (..., V) -> int64 ids (...), one exact sample per row; logits as large as ±1000
    must be safe, and the same `generator` seed gives the same samples. Probabilities are
    float32 so bf16 rounding cannot bias the sample."""
    # BEGIN ASSIGNMENT sample
    # We invert the CDF: turn each slot's logits into probabilities, take their running sum
    # (the CDF), draw one u ~ U(0, 1) per slot and return the first token whose CDF exceeds u.
    # Token i is returned exactly when CDF(i-1) <= u < CDF(i), which has probability p_i: an
    # exact sample. The official code uses the Gumbel-max trick, argmax(logits + Gumbel
    # noise), also exact, but it needs one random number per *vocabulary entry* (B x K x 30522
    # of them): on a CPU that alone took ~20 % of a small model's training step, against one
    # number per slot here. u is scaled by the CDF's last entry, which float rounding leaves a
    # hair off 1.
    cdf = torch.softmax(logits.detach().float(), dim=-1).cumsum_(dim=-1)
    u = torch.rand(cdf.shape[:-1] + (1,), device=cdf.device, generator=generator)
    x_hat = torch.searchsorted(cdf, u * cdf[..., -1:], right=True).squeeze(-1)
    return x_hat.clamp_(max=cdf.shape[-1] - 1)      # u * CDF[-1] < CDF[-1]: never needed, safe
    # END ASSIGNMENT sample


def corrupt(x, masked: Masked, x_hat):
    """x_corrupt = REPLACE(x, m, x̂) and its labels is_replaced, both (B, T).

    Every used slot takes the generator's sample (also the 15 % of positions G saw unmasked, as
    in the official code); unused slots change nothing, whatever position they hold (one a used
    slot holds included: see Masked). A sample that equals the original is "real" (§2: "if the
    generator happens to generate the correct token, that token is considered 'real' instead of
    'fake'"), so the labels compare x_corrupt with x."""
    # BEGIN ASSIGNMENT corrupt
    # Why not ask "was this position in m": early in training, when G is poor, the two labels
    # hardly differ; later G is right ~60 % of the time, and labelling those tokens "replaced"
    # would teach D to flag perfectly good text.
    # Unused slots may repeat a used position, and a scatter's result at a position written
    # twice depends on the order of the writes: so they write into a spare column T, past the
    # end of the row, which is then dropped. The result does not depend on the order.
    T = x.shape[1]
    where = torch.where(masked.weights > 0, masked.positions, T)
    x_corrupt = F.pad(x, (0, 1)).scatter(1, where, x_hat)[:, :T]
    return x_corrupt, x_corrupt != x
    # END ASSIGNMENT corrupt


# ============================================================================ 3. the losses

def mlm_loss(logits, targets, weights):
    """L_MLM: the mean over the used mask slots of -log p_G(x_i | x_masked).

    logits (B, K, V) at the masked positions; targets (B, K) the original tokens x_i; weights
    (B, K) 1.0 for a used slot, 0.0 for an unused one. The paper writes a sum over m under an
    expectation; like the official code we average over the used slots, so the loss does not
    depend on how many there are. The softmax is computed in float32 even under bf16 autocast:
    log-probabilities over 30k classes need the precision."""
    # BEGIN ASSIGNMENT mlm_loss
    nll = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    return (nll * weights.flatten()).sum() / weights.sum().clamp(min=1.0)
    # END ASSIGNMENT mlm_loss


def disc_loss(logits, is_replaced, mask=None):
    """L_Disc: the binary cross-entropy of D's logits against is_replaced, averaged over the
    tokens in `mask` - every non-padding token, [CLS] and [SEP] included, as the official code;
    every token when mask is None. A float32 scalar whatever the logits' dtype; tokens outside
    `mask` get no gradient.

    D's logit scores "replaced" (discriminator.py), so D(x, t) = 1 - sigmoid(logit_t) is the
    probability of "real", and the two terms of L_Disc are one cross-entropy. The sum runs over
    *all* tokens, not only the masked ~15 %: that, more than anything else, is where ELECTRA's
    efficiency comes from (§3.5). The "ELECTRA 15%" ablation passes the masked positions as
    `mask` instead, to show it."""
    # BEGIN ASSIGNMENT disc_loss
    bce = F.binary_cross_entropy_with_logits(logits.float(), is_replaced.float(), reduction="none")
    if mask is None:
        return bce.mean()
    w = mask.float()
    return (bce * w).sum() / w.sum().clamp(min=1.0)
    # END ASSIGNMENT disc_loss


def masked_accuracy(logits, targets, weights):
    """Sum of correct argmax predictions over used slots, and the number of used slots."""
    return ((logits.argmax(-1) == targets).float() * weights).sum(), weights.sum()


def real_tokens(x, pad_mask=None):
    """(B, T) bool, True on every token that is not padding."""
    return torch.ones_like(x, dtype=torch.bool) if pad_mask is None else pad_mask


def shared_embeddings(cfg):
    return Embeddings(cfg.vocab_size, cfg.emb_size, cfg.max_len, dropout=cfg.disc.dropout)


class Pretraining(nn.Module):
    """What the training loop asks of any pre-training model (ELECTRA, BERT, the ablations):
    how line 1 shows the chosen positions, and hooks for the ablations that change training
    itself (two-stage training, §3.2). The defaults are ELECTRA's; each model overrides its own."""

    # How line 1 shows the chosen positions (mask_tokens): 85 % [MASK], 15 % kept, as official.
    masking = dict(replace_prob=0.85, random_prob=0.0)
    stage = None                  # two-stage training (§3.2) reports 1 or 2 (flops.py counts it)

    def schedule_progress(self, progress):
        """The fraction of the learning-rate schedule reached at `progress` of the budget."""
        return progress

    def on_progress(self, progress):
        """Called before every step. Returns a message when the model changed which parameters
        train (the trainer prints it, re-wraps the model for data parallelism and recounts
        FLOPs), else None."""
        return None


class ELECTRA(Pretraining):
    """G and D trained jointly on L_MLM + λ L_Disc, sharing one Embeddings module (§3.2).

    forward() is lines 2-3 of the algorithm (line 1, masking, runs on the CPU while the previous
    step computes: the trainer calls mask_tokens). generate() and discriminate() are its two
    halves; the ablations in ablations.py override one of them, or one of Pretraining's hooks,
    and the trainer never needs to know which model it trains."""

    def __init__(self, cfg):
        super().__init__()
        embeddings = shared_embeddings(cfg)                 # one module, two owners: tied
        self.generator = self.make_generator(cfg, embeddings)
        self.discriminator = self.make_discriminator(cfg, embeddings)
        self.disc_weight = cfg.disc_weight                  # λ
        self.fused_mlm = cfg.fused_mlm                      # see generate()
        self.apply(init_weights)

    def make_generator(self, cfg, embeddings):
        return Generator(cfg.gen, embeddings)

    def make_discriminator(self, cfg, embeddings):
        return Discriminator(cfg.disc, embeddings)

    def forward(self, x, masked: Masked, pad_mask=None, segment_ids=None):
        """One step of §2 on a batch: returns L_MLM + λ L_Disc and statistics for the log.
        pad_mask (True on real tokens) and segment_ids (0 for sentence A, 1 for B) describe
        the input of both networks; they travel together as `inp`."""
        inp = dict(pad_mask=pad_mask, segment_ids=segment_ids)
        # BEGIN ASSIGNMENT joint_loss
        # G reads x_masked and predicts the masked tokens: L_MLM, and its samples x̂.
        loss_mlm, x_hat, stats = self.generate(masked, **inp)
        # x_corrupt is discrete and built without gradient: nothing of L_Disc reaches G (§2).
        with torch.no_grad():
            x_corrupt, is_replaced = corrupt(x, masked, x_hat)
        # D labels every token of x_corrupt, and L_Disc sums over t = 1..n: all real tokens are
        # scored, not only the ~15 % in m - the source of ELECTRA's efficiency (§3.5).
        scored = real_tokens(x, pad_mask)
        loss_disc, d_stats, _ = self.discriminate(x, x_corrupt, is_replaced, masked, scored,
                                                  **inp)
        # λ = 50 because L_Disc, a binary cross-entropy over mostly easy tokens, is much smaller
        # than a 30k-way L_MLM (Appendix A); 50 balances the two gradients.
        loss = loss_mlm + self.disc_weight * loss_disc
        # END ASSIGNMENT joint_loss
        return loss, dict(mlm_loss=loss_mlm, disc_loss=loss_disc, **stats, **d_stats)

    def generate(self, masked: Masked, pad_mask=None, segment_ids=None):
        """L_MLM, the samples x̂ and G's accuracy: the generator's half of the step."""
        if self.fused_mlm:
            # The same numbers as the four lines below, from one pass over p_G instead of five
            # (machinery/mlm_output.py); measured on 2 CPU cores, a laptop step 1.05x faster.
            loss, x_hat, correct = self.generator.loss_and_sample(masked, pad_mask, segment_ids)
            return loss, x_hat, dict(gen_correct=correct)
        gen_logits = self.generator(masked.x_masked, masked.positions, pad_mask, segment_ids)
        x_hat = sample(gen_logits)
        return mlm_loss(gen_logits, masked.targets, masked.weights), x_hat, \
            dict(gen_correct=masked_accuracy(gen_logits.detach(), masked.targets, masked.weights))

    def discriminate(self, x, x_corrupt, is_replaced, masked: Masked, scored, pad_mask=None,
                     segment_ids=None):
        """D's half of the step: L_Disc over the tokens in `scored` (B, T); returns the loss,
        statistics, and D's logits. The statistics count every real token."""
        logits = self.discriminator(x_corrupt, pad_mask, segment_ids)
        real = real_tokens(x, pad_mask)
        loss = disc_loss(logits, is_replaced, scored)
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


class BERT(Pretraining):
    """BERT-Small (§3.3): "the same hyperparameters" and D's exact shape, trained by masked
    language modelling alone - line 1 and L_MLM, with the generator class at D's size. BERT
    shows its chosen positions 80 % [MASK] / 10 % random / 10 % kept. Fine-tuning keeps
    `mlm.embeddings` and `mlm.encoder`, exactly as it keeps D's for ELECTRA."""

    masking = dict(replace_prob=0.8, random_prob=0.1)

    def __init__(self, cfg):
        super().__init__()
        self.mlm = Generator(cfg.disc, shared_embeddings(cfg))
        self.fused_mlm = cfg.fused_mlm
        self.apply(init_weights)

    def forward(self, x, masked: Masked, pad_mask=None, segment_ids=None):
        if self.fused_mlm:                                  # as ELECTRA.generate, no sample
            loss, _, correct = self.mlm.loss_and_sample(masked, pad_mask, segment_ids,
                                                        sample=False)
            return loss, dict(mlm_loss=loss, gen_correct=correct)
        logits = self.mlm(masked.x_masked, masked.positions, pad_mask, segment_ids)
        loss = mlm_loss(logits, masked.targets, masked.weights)
        return loss, dict(mlm_loss=loss, gen_correct=masked_accuracy(logits.detach(),
                                                                     masked.targets,
                                                                     masked.weights))
