"""The paper's ablations, each a small change to the ELECTRA objective of objectives.py.

§3.2 "Smaller Generators" and "Training Algorithms", Appendix F, §3.5 "Efficiency Analysis":

    --gen_size S           G's width as a fraction of D's (a config field, no class needed)
    --generator unigram    UnigramELECTRA: x̂ sampled from corpus token frequencies, no G network
    --generator adversarial  AdversarialELECTRA: G trained to *maximise* L_Disc by REINFORCE
    --two_stage            TwoStageELECTRA: G alone, then D initialised from G, G frozen
    --objective electra15  ELECTRA15: L_Disc over the masked positions m only
    --objective replace_mlm  ReplaceMLM: D becomes an MLM that reads x_corrupt instead of [MASK]
    --objective all_tokens_mlm  AllTokensMLM: an MLM over every token with a copy mechanism

Each class overrides one step of ELECTRA.forward (generate or discriminate) or, for the two
training algorithms, the whole step and the trainer's hooks (schedule_progress, on_progress):
the trainer does not change. build_model, at the end, picks the model a config describes.
"""
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from generator import Generator
from objectives import BERT, ELECTRA, corrupt, masked_accuracy, mlm_loss, real_tokens, sample


class ConfigError(ValueError):
    """A combination of ablation flags that does not make sense; the command line prints it."""


# ----------------------------------------------------------------------------- §3.5

class ELECTRA15(ELECTRA):
    """"ELECTRA 15%": identical to ELECTRA except that L_Disc sums over i in m, not 1..n.
    The paper's point: this loses most of ELECTRA's gain (Table 5: 82.4 vs 85.0)."""

    def discriminate(self, x, x_corrupt, is_replaced, masked, scored, pad_mask=None,
                     segment_ids=None):
        # BEGIN ASSIGNMENT electra15
        # The used slots' positions: count each position's used slots (an unused slot may
        # repeat a used position, Masked says; a sum does not depend on the order of writes).
        in_m = torch.zeros(scored.shape, device=scored.device).scatter_add(
            1, masked.positions, masked.weights.float()) > 0
        return super().discriminate(x, x_corrupt, is_replaced, masked, scored & in_m, pad_mask,
                                    segment_ids)
        # END ASSIGNMENT electra15


class ReplaceMLM(ELECTRA):
    """"Replace MLM": masked language modelling where masked positions hold generator samples
    instead of [MASK]. Tests how much of ELECTRA's gain is the [MASK] pre-train/fine-tune
    mismatch. The main network (kept as `discriminator`, so fine-tuning finds it) is an MLM at
    D's size; both MLM losses have the same scale, so λ = 1."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.disc_weight = 1.0

    def make_discriminator(self, cfg, embeddings):
        return Generator(cfg.disc, embeddings)

    def discriminate(self, x, x_corrupt, is_replaced, masked, scored, pad_mask=None,
                     segment_ids=None):
        logits = self.discriminator(x_corrupt, masked.positions, pad_mask, segment_ids)
        acc = masked_accuracy(logits.detach(), masked.targets, masked.weights)
        return mlm_loss(logits, masked.targets, masked.weights), dict(disc_correct=acc), logits


class CopyMLM(Generator):
    """An MLM over all positions with an explicit copy gate: a sigmoid D_t mixes "copy the
    input token" with the softmax, p(x_t) = D_t 1[x_t = input_t] + (1 - D_t) p_MLM(x_t)."""

    def __init__(self, cfg, embeddings):
        super().__init__(cfg, embeddings)
        self.copy = nn.Linear(cfg.hidden, 1)

    def forward_all(self, x_in, pad_mask=None, segment_ids=None):
        h = self.hidden(x_in, pad_mask, segment_ids)
        return self.head(h, self.embeddings.token.weight), self.copy(h).squeeze(-1)


def copy_log_probs(logits, copy_logit, x_in):
    """The full log-distribution of the copy mechanism over the vocabulary, (B, T, V): used by
    tests to check that it sums to one; the loss below only needs the target's entry."""
    log_mlm = F.log_softmax(logits.float(), -1) + F.logsigmoid(-copy_logit.float())[..., None]
    log_copy = F.one_hot(x_in, logits.shape[-1]).float().log() + \
        F.logsigmoid(copy_logit.float())[..., None]
    return torch.logaddexp(log_mlm, log_copy)


class AllTokensMLM(ReplaceMLM):
    """"All-Tokens MLM": like Replace MLM, but the model predicts the identity of *every*
    token of x_corrupt, through the copy mechanism (§3.5; without it the model would learn to
    copy the input for all unmasked tokens). A generative objective over all tokens: Table 5
    shows it closes most of the gap between BERT and ELECTRA. Replace MLM's λ = 1 applies."""

    def make_discriminator(self, cfg, embeddings):
        return CopyMLM(cfg.disc, embeddings)

    def discriminate(self, x, x_corrupt, is_replaced, masked, scored, pad_mask=None,
                     segment_ids=None):
        logits, copy_logit = self.discriminator.forward_all(x_corrupt, pad_mask, segment_ids)
        log_mlm = F.log_softmax(logits.float(), -1).gather(-1, x[..., None]).squeeze(-1)
        copy_ok = torch.where(x_corrupt == x, 0.0, float("-inf"))      # log 1[x_t = input_t]
        log_p = torch.logaddexp(F.logsigmoid(copy_logit.float()) + copy_ok,
                                F.logsigmoid(-copy_logit.float()) + log_mlm)
        real = scored.float()
        loss = -(log_p * real).sum() / real.sum()
        return loss, dict(disc_correct=masked_accuracy(logits.detach(), x, real)), logits


# ----------------------------------------------------------------------------- §3.2 generators

class UnigramSampler(nn.Module):
    """The §3.2 "unigram" generator: samples fake tokens by their frequency in the corpus."""

    def __init__(self, counts):
        super().__init__()
        self.register_buffer("probs", counts.float() / counts.float().sum())


class UnigramELECTRA(ELECTRA):
    def __init__(self, cfg, counts):
        self._counts = counts
        super().__init__(cfg)

    def make_generator(self, cfg, embeddings):
        return UnigramSampler(self._counts)

    def generate(self, masked, pad_mask=None, segment_ids=None):
        x_hat = torch.multinomial(self.generator.probs, masked.positions.numel(), replacement=True)
        x_hat = x_hat.view_as(masked.positions)
        correct = ((x_hat == masked.targets).float() * masked.weights).sum(), masked.weights.sum()
        return torch.zeros((), device=x_hat.device), x_hat, dict(gen_correct=correct)


class AdversarialELECTRA(ELECTRA):
    """Appendix F: G maximises L_Disc by policy gradient (REINFORCE), since sampling cannot be
    back-propagated through. The reward of sample x̂_t is D's loss on it,
    R = -log D(x̂_t) if x̂_t = x_t else -log(1 - D(x̂_t)); the learned baseline
    b = -log sigmoid(w^T h_G(x_masked)_t) is fit to R by cross-entropy. L_MLM is still
    computed, without gradient, to watch G's accuracy (the paper: 58 % vs 65 % for MLE)."""

    def make_generator(self, cfg, embeddings):
        g = Generator(cfg.gen, embeddings)
        g.baseline = nn.Linear(cfg.gen.hidden, 1)
        return g

    def forward(self, x, masked, pad_mask=None, segment_ids=None):
        G, positions, weights = self.generator, masked.positions, masked.weights
        h_m = G.masked_hidden(masked.x_masked, positions, pad_mask, segment_ids)
        logits = G.head(h_m, G.embeddings.token.weight)
        x_hat = sample(logits)
        with torch.no_grad():
            x_corrupt, is_replaced = corrupt(x, masked, x_hat)
        loss_disc, stats, d_logits = self.discriminate(x, x_corrupt, is_replaced, masked,
                                                       real_tokens(x, pad_mask), pad_mask,
                                                       segment_ids)
        # reward of each sample: D's cross-entropy on it (detached: G only sees the number)
        d_m = torch.gather(d_logits.detach().float(), 1, positions)
        rep_m = torch.gather(is_replaced, 1, positions).float()
        reward = F.binary_cross_entropy_with_logits(d_m, rep_m, reduction="none")
        b_logit = G.baseline(h_m).squeeze(-1).float()
        baseline = -F.logsigmoid(b_logit)
        log_p = F.log_softmax(logits.float(), -1).gather(-1, x_hat[..., None]).squeeze(-1)
        n = weights.sum().clamp(min=1.0)
        loss_pg = -(log_p * (reward - baseline).detach() * weights).sum() / n   # ascend L_Disc
        loss_b = (F.binary_cross_entropy_with_logits(b_logit, torch.exp(-reward),
                                                     reduction="none") * weights).sum() / n
        with torch.no_grad():
            loss_mlm = mlm_loss(logits, masked.targets, weights)
        stats["gen_correct"] = masked_accuracy(logits.detach(), masked.targets, weights)
        loss = loss_pg + loss_b + self.disc_weight * loss_disc
        return loss, dict(mlm_loss=loss_mlm, disc_loss=loss_disc, **stats)


# ----------------------------------------------------------------------------- §3.2 two-stage

class TwoStageELECTRA(ELECTRA):
    """§3.2 two-stage training: (1) train only G with L_MLM for n steps; (2) initialise D with
    G's weights, then train D with L_Disc for n steps, G frozen. Needs G and D of the same size
    (--gen_size 1). Each stage gets half the budget and its own warm-up and decay: the hooks
    schedule_progress and on_progress tell the trainer so."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.register_buffer("stage_buf", torch.tensor(1))  # saved in checkpoints
        self.stage = 1                                      # its host copy: no GPU sync per step

    def forward(self, x, masked, pad_mask=None, segment_ids=None):
        inp = dict(pad_mask=pad_mask, segment_ids=segment_ids)
        if self.stage == 1:
            loss_mlm, _, stats = self.generate(masked, **inp)
            return loss_mlm, dict(mlm_loss=loss_mlm, **stats)
        with torch.no_grad():                               # G frozen: it only samples
            loss_mlm, x_hat, stats = self.generate(masked, **inp)
            x_corrupt, is_replaced = corrupt(x, masked, x_hat)
        loss_disc, d_stats, _ = self.discriminate(x, x_corrupt, is_replaced, masked,
                                                  real_tokens(x, pad_mask), **inp)
        return self.disc_weight * loss_disc, dict(mlm_loss=loss_mlm, disc_loss=loss_disc,
                                                  **stats, **d_stats)

    def schedule_progress(self, progress):
        return 2 * progress if progress < 0.5 else 2 * progress - 1

    def on_progress(self, progress):
        if progress >= 0.5 and self.stage == 1:
            self.start_stage_two()
            return "stage two - D initialised from G, G frozen"
        return None

    def _freeze_generator(self):
        """G keeps a frozen copy of the embeddings it was trained with; D trains the original."""
        self.generator.embeddings = copy.deepcopy(self.generator.embeddings)
        for p in self.generator.parameters():
            p.requires_grad_(False)

    def start_stage_two(self):
        self.discriminator.encoder.load_state_dict(self.generator.encoder.state_dict())
        self._freeze_generator()
        self.stage_buf.fill_(2)
        self.stage = 2

    def load_state_dict(self, state, strict=True):
        if "stage" in state and "stage_buf" not in state:   # checkpoints before the rename
            state = {("stage_buf" if k == "stage" else k): v for k, v in state.items()}
        if int(state.get("stage_buf", 1)) == 2 and self.stage == 1:
            self._freeze_generator()                        # untie before loading both copies
            self.stage = 2
        return super().load_state_dict(state, strict)


# ----------------------------------------------------------------------------- choosing one

def build_model(cfg, train_tokens=None):
    """The pre-training model a config describes: BERT, ELECTRA, or one of the ablations.
    `train_tokens` (the training set's token ids) gives the unigram generator its counts."""
    if cfg.model == "bert":
        return BERT(cfg)
    if cfg.two_stage:
        if cfg.gen != cfg.disc:
            raise ConfigError("--two_stage initialises D from G: it needs --gen_size 1")
        if cfg.objective != "electra" or cfg.generator != "mlm":
            raise ConfigError("--two_stage combines only with the default objective and generator")
        return TwoStageELECTRA(cfg)
    if cfg.generator != "mlm" and cfg.objective != "electra":
        raise ConfigError("--generator unigram/adversarial combine only with --objective electra")
    if cfg.generator == "unigram":          # §3.2: corpus token frequencies (+1: none is zero)
        counts = torch.ones(cfg.vocab_size) if train_tokens is None else \
            torch.from_numpy(np.bincount(train_tokens, minlength=cfg.vocab_size)) + 1
        return UnigramELECTRA(cfg, counts)  # (without tokens: a checkpoint's buffer replaces it)
    if cfg.generator == "adversarial":
        return AdversarialELECTRA(cfg)
    classes = {"electra": ELECTRA, "electra15": ELECTRA15, "replace_mlm": ReplaceMLM,
               "all_tokens_mlm": AllTokensMLM}
    if cfg.objective not in classes:
        raise ConfigError(f"unknown objective {cfg.objective!r}")
    return classes[cfg.objective](cfg)
