"""The paper's algorithm (§2, Figure 2), in its order: read this file first.

The paper says (§2): mask, corrupt, then train a generator G (generator.py) and a
discriminator D (discriminator.py) on both losses at once,

$$ m_i ∼ unif{1, n} for i = 1, …, k
   x^masked = REPLACE(x, m, [MASK])
   x̂_i ∼ p_G(x_i | x^masked) for i ∈ m
   x^corrupt = REPLACE(x, m, x̂) $$

$$ min_{θ_G, θ_D} sum_{x ∈ X} L_MLM(x, θ_G) + λ L_Disc(x, θ_D) $$

$$ L_MLM(x, θ_G) = E[ sum_{i ∈ m} −log p_G(x_i | x^masked) ]
   L_Disc(x, θ_D) = E[ sum_{t=1}^n
   "    " −1(x^corrupt_t = x_t) log D(x^corrupt, t)
   "    " − 1(x^corrupt_t ≠ x_t) log(1 − D(x^corrupt, t)) ] $$

with $k = ⌈0.15 n⌉$ masked positions (footnote 3), X the corpus, $θ_G$ and $θ_D$ the weights
of G and D, and $λ = 50$ (Appendix A); no gradient flows through the sample x̂.

λ weighs means, not these sums. The paper writes sums, over the k masked positions and over all
n tokens; the official code (run_pretraining.py: `get_softmax_output`,
`_get_discriminator_output`) and this code (`mlm_loss`, `disc_loss`) take means over the batch,
and $λ = 50$ (configure_pretraining.py, `disc_weight`) weighs those means:

$$ L_MLM = 1 / N_M sum_{(x, i) ∈ M} −log p_G(x_i | x^masked)
   L_Disc = 1 / N_R sum_{(x, t) ∈ R} ℓ(x, t) $$

with M the batch's used mask slots and $N_M$ their number (about 19 per 128-token sequence), R
its real tokens and $N_R$ their number (about 128 per sequence), and $ℓ(x, t)$ the bracket of
the paper's $L_Disc$ at t. With the paper's sums,
$λ = 50$ would weigh D about $n / k ≈ 6.7$ times more than the official code does; the same mix
with sums is $λ ≈ 50 k / n ≈ 7.4$.

Below, in the paper's order: 1. mask, 2. sample and corrupt, 3. the losses (`ELECTRA` adds
them); then `BERT` (§3.3), the baseline; last, 4. the helpers.
"""
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from discriminator import Discriminator
from encoder import Embeddings, init_weights
from generator import Generator


# ============================================================================ 1. mask

def mask_tokens(x, special_ids, mask_id, n_slots, mask_prob=0.15, replace_prob=0.85,
                random_prob=0.0, n_random=None, generator=None) -> "Masked":
    """Mask: choose the positions m among the content tokens of each sequence (not [CLS],
    [SEP] or padding) and build $x^masked = REPLACE(x, m, [MASK])$.

    The paper draws k positions, $m_i ∼ unif{1, n}$ (§2; they may repeat); this code draws k
    distinct content tokens, so each sequence masks the share it names. Each chosen position
    shows [MASK] with probability `replace_prob`, a random id with probability `random_prob`,
    else its own token.

    Details: the official code (pretrain_helpers.mask) draws with replacement, $k = round(0.15 n)$
    with [CLS] and [SEP] in n (19 draws at 128 tokens: 17.7 distinct positions). What a chosen
    position shows is a draw per position, as the official code, not an exact share of each row.
    The paper's §2 shows [MASK] everywhere; the official code 85 / 0 / 15 %, for ELECTRA and its
    BERT; this code the official split for ELECTRA and §3.5's 80 / 10 / 10 % for BERT.

    Details: the contract (ASSIGNMENTS.md, Part 1): n counts the content tokens, never `special_ids`;
    $k = round(p n)$ for p `mask_prob` (a half rounds either way), at least 1, at most n and
    n_slots; a uniformly random k-subset in the first k slots; $x^masked$ differs from x at
    used positions only; targets is x at every slot's position; the same `generator` seed, the
    same masks (`generator` is the random source, a torch.Generator as torch names it, not G:
    the graded contract passes it by that keyword)."""
    # BEGIN ASSIGNMENT mask
    # 15 % of the chosen tokens are shown as they are: G sees the token there, so
    # its sample is usually the original, which counts as real (`corrupt`).
    #
    # Details: the official code does so (pretrain_helpers.mask) and gives no reason.
    B, T = x.shape
    is_real = torch.ones_like(x, dtype=torch.bool)
    for s in special_ids:
        is_real &= x != s
    n = is_real.sum(1)
    k = torch.clamp(torch.floor(mask_prob * n + 0.5), min=1).minimum(n).clamp(max=n_slots)
    # A uniform k-subset: content tokens get uniform scores, special ones -1; topk keeps the
    # n_slots best in order (the K slots of `Masked`), so the first k are a uniform sample.
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


class Masked(NamedTuple):
    """The mask step's output: $x^masked$, the positions m, their original tokens and weights. Each
    sequence has K mask slots, 19 for 128 tokens; the first k are used (weight 1).

    Engineering: K is fixed so that every tensor has one shape. The price is a contract: an
    unused slot may hold any position (a used slot's again included), with x there as target,
    and nothing may read it as masked or write through it (`corrupt`, `ELECTRA15`)."""
    x_masked: torch.Tensor    # (B, T) x with the chosen positions replaced: G's (or BERT's) input
    positions: torch.Tensor   # (B, K) int64 m, the chosen positions (unused slots: any position)
    targets: torch.Tensor     # (B, K) x at each slot's position: the labels of L_MLM
    weights: torch.Tensor     # (B, K) float32: 1.0 for a used slot, 0.0 for an unused one

    def to(self, device, non_blocking=False):
        return Masked(*(t.to(device, non_blocking=non_blocking) for t in self))


def mask_slots(seq_len: int, mask_prob: float = 0.15) -> int:
    """K, the fixed number of mask slots: $⌊(0.15 + 0.005) ⋅ 128⌋ = 19$.

    Details: as the official code (configure_pretraining.py)."""
    return int((mask_prob + 0.005) * seq_len)


# ============================================================================ 2. sample and corrupt

def sample(logits, generator: torch.Generator = None):
    """$x̂_i ∼ p_G(x_i | x^masked)$: one token per slot from softmax(logits), at temperature 1
    as the official code (configure_pretraining.py; Appendix H: a higher one did not help).

    No gradient goes back through it (§2): the logits are detached.

    Engineering: by default training draws from the same $p_G$ in machinery/mlm_output.py, fused
    with $L_MLM$ for speed (`--plain_mlm` runs this function). The contract: logits (..., V) ->
    int64 ids (...), one exact sample per row, safe for logits up to ±1000, reproducible from
    `generator` (the random source, not G), in float32."""
    # BEGIN ASSIGNMENT sample
    # This code inverts the CDF: the first token whose CDF exceeds a uniform u. Token i comes
    # out exactly when $CDF(i-1) <= u < CDF(i)$, with probability $p_i$.
    #
    # Details: the official code (pretrain_helpers.sample_from_softmax) uses Gumbel-max, as
    # exact.
    #
    # Engineering: Gumbel-max draws one random number per vocabulary entry (~20 % of a small
    # CPU step), this code one per slot. u is scaled by the CDF's last entry, which float
    # rounding leaves a hair off 1.
    cdf = torch.softmax(logits.detach().float(), dim=-1).cumsum_(dim=-1)
    u = torch.rand(cdf.shape[:-1] + (1,), device=cdf.device, generator=generator)
    x_hat = torch.searchsorted(cdf, u * cdf[..., -1:], right=True).squeeze(-1)
    return x_hat.clamp_(max=cdf.shape[-1] - 1)      # u * CDF[-1] < CDF[-1]: never needed, safe
    # END ASSIGNMENT sample


def corrupt(x, masked: Masked, x_hat):
    """$x^corrupt = REPLACE(x, m, x̂)$ and its labels is_replaced, both (B, T).

    The paper says (§2): "if the generator happens to generate the correct token, that token is
    considered 'real'", so the labels compare $x^corrupt$ with x. Every used slot takes G's
    sample; unused slots change nothing (`Masked`).

    Details: G's sample replaces the token also where G saw it unmasked, as the official code
    (run_pretraining.py, `_get_fake_data`)."""
    # BEGIN ASSIGNMENT corrupt
    # Why not ask "was this position in m": G is often right, and
    # labelling those tokens "replaced" would teach D to flag perfectly good text.
    #
    # Engineering: unused slots write into a spare column T, then dropped (a position written
    # twice would depend on the order of the writes).
    T = x.shape[1]
    where = torch.where(masked.weights > 0, masked.positions, T)
    x_corrupt = F.pad(x, (0, 1)).scatter(1, where, x_hat)[:, :T]
    return x_corrupt, x_corrupt != x
    # END ASSIGNMENT corrupt


# ============================================================================ 3. the losses

def mlm_loss(logits, targets, weights):
    """$L_MLM$: the mean over the batch's used slots of $−log p_G(x_i | x^masked)$ (the paper
    writes a sum; the official code averages: run_pretraining.py, `get_softmax_output`).
    logits (B, K, V) at the masked positions, targets (B, K), weights (B, K).

    Engineering: in float32, accurate for logits as large as ±100. By default training computes
    the same number fused with the sample (machinery/mlm_output.py; `--plain_mlm` runs this
    function)."""
    # BEGIN ASSIGNMENT mlm_loss
    nll = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
    return (nll * weights.flatten()).sum() / weights.sum().clamp(min=1.0)
    # END ASSIGNMENT mlm_loss


def disc_loss(logits, is_replaced, mask=None):
    """$L_Disc$: the binary cross-entropy of D's logits against is_replaced, averaged over the
    batch's tokens in `mask` (all but padding, as run_pretraining.py; the paper writes a sum).
    D's logit scores "replaced": $D(x, t) = 1 − sigmoid(logit_t)$, so the paper's two terms are
    one cross-entropy.

    Engineering: in float32, accurate for logits as large as ±100 (in float32, sigmoid(17) is
    already 1)."""
    # BEGIN ASSIGNMENT disc_loss
    bce = F.binary_cross_entropy_with_logits(logits.float(), is_replaced.float(), reduction="none")
    if mask is None:
        return bce.mean()
    w = mask.float()
    return (bce * w).sum() / w.sum().clamp(min=1.0)
    # END ASSIGNMENT disc_loss


class Pretraining(nn.Module):
    """What the trainer asks of every pre-training model: a loss, and how to mask.

    Details: forward(x, masked, pad_mask, segment_ids) -> (loss, statistics), and `masking`,
    the mask step's split (`mask_tokens`): ELECTRA's 85 % [MASK], 15 % kept."""

    masking = dict(replace_prob=0.85, random_prob=0.0)


class ELECTRA(Pretraining):
    """G and D trained jointly on $L_MLM + λ L_Disc$, sharing one `Embeddings` module (§3.2).
    forward() samples, corrupts and adds the losses; the trainer masks (`train.masked_batch`).

    Details: `train.electra_step` writes the same step out plainly, the mask to Adam."""

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
        """Sample, corrupt and the losses on a batch: $L_MLM + λ L_Disc$ and statistics for the
        log; pad_mask is True on the non-padding tokens."""
        inp = dict(pad_mask=pad_mask, segment_ids=segment_ids)
        # BEGIN ASSIGNMENT joint_loss
        # G reads $x^masked$: $L_MLM$, and its samples $x̂$.
        loss_mlm, x_hat, stats = self.generate(masked, **inp)
        # $x^corrupt$ is discrete and built without gradient: nothing of $L_Disc$ reaches G through
        # the sample (§2); only the shared embeddings get both losses.
        with torch.no_grad():
            x_corrupt, is_replaced = corrupt(x, masked, x_hat)
        # D labels every non-padding token of $x^corrupt$, not only the 15 % in m: $L_Disc$ sums
        # over $t = 1, …, n$ (§2), and §3.5 measures what that is worth.
        scored = real_tokens(x, pad_mask)
        loss_disc, d_stats, _ = self.discriminate(x, x_corrupt, is_replaced, masked, scored,
                                                  **inp)
        # λ weighs the two means (the introduction shows both forms) and mixes the two
        # gradients where both reach: $λ = 50$, which the paper picked among 1, 10, 20, 50 and
        # 100 (Appendix A), $L_Disc$ being "typically much lower" than $L_MLM$ (footnote 8).
        #
        # Details: for weights only one loss reaches (D's own, G's own), Adam's update is
        # unchanged (up to ε) when that loss is scaled, so $λ = 50$ does not make D learn 50
        # times faster; what λ changes is the mix of the two gradients in the shared
        # embeddings, and how often the clip at norm 1 (train.py) scales every gradient down,
        # G's included.
        loss = loss_mlm + self.disc_weight * loss_disc
        # END ASSIGNMENT joint_loss
        return loss, dict(mlm_loss=loss_mlm, disc_loss=loss_disc, **stats, **d_stats)

    def generate(self, masked: Masked, pad_mask=None, segment_ids=None):
        """G's half of the step: $L_MLM$, the samples $x̂$ and G's accuracy.

        Engineering: training runs the fused branch by default (config `fused_mlm`); the plain
        lines below, with `sample` and `mlm_loss`, define it."""
        if self.fused_mlm:
            # Engineering: the same numbers from one pass over $p_G$ instead of five
            # (machinery/mlm_output.py): a laptop step 1.05x faster on 2 CPU cores.
            loss, x_hat, correct = self.generator.loss_and_sample(masked, pad_mask, segment_ids)
            return loss, x_hat, dict(gen_correct=correct)
        gen_logits = self.generator(masked.x_masked, masked.positions, pad_mask, segment_ids)
        x_hat = sample(gen_logits)
        return mlm_loss(gen_logits, masked.targets, masked.weights), x_hat, \
            dict(gen_correct=masked_accuracy(gen_logits.detach(), masked.targets, masked.weights))

    def discriminate(self, x, x_corrupt, is_replaced, masked: Masked, scored, pad_mask=None,
                     segment_ids=None):
        """D's half of the step: $L_Disc$ over the tokens in `scored` (B, T), statistics over
        every non-padding token, and D's logits."""
        logits = self.discriminator(x_corrupt, pad_mask, segment_ids)
        real = real_tokens(x, pad_mask)
        loss = disc_loss(logits, is_replaced, scored)
        with torch.no_grad():                               # statistics for the progress line
            # Recall (replaced tokens D catches) and precision (flagged tokens that were
            # replaced) show when D learns; accuracy does not.
            #
            # Details: answering "real" everywhere already scores 85-93 %, and hides "the
            # plateau", this project's name for the early phase in which D catches under 10 %
            # of the replaced tokens (train.py).
            flagged = (logits > 0) & real
            caught = (flagged & is_replaced).float().sum()
            stats = dict(disc_correct=((((logits > 0) == is_replaced) & real).float().sum(),
                                       real.float().sum()),
                         replaced_correct=(caught, is_replaced.float().sum()),
                         replaced_flagged=(caught, flagged.float().sum()))
        return loss, stats, logits


class BERT(Pretraining):
    """BERT-Small (§3.3): D's shape and "the same hyperparameters", trained on the mask step
    and $L_MLM$ alone.

    Details: the generator class at D's size, 80 / 10 / 10 % masking; fine-tuning keeps
    `mlm.embeddings` and `mlm.encoder`."""

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


# ============================================================================ 4. the helpers

def masked_accuracy(logits, targets, weights):
    """Sum of correct argmax predictions over used slots, and the number of used slots."""
    return ((logits.argmax(-1) == targets).float() * weights).sum(), weights.sum()


def real_tokens(x, pad_mask=None):
    """(B, T) bool, True on the non-padding tokens ([CLS] and [SEP] included)."""
    return torch.ones_like(x, dtype=torch.bool) if pad_mask is None else pad_mask


def shared_embeddings(cfg):
    return Embeddings(cfg.vocab_size, cfg.emb_size, cfg.max_len, dropout=cfg.disc.dropout)
