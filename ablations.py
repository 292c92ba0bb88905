"""The paper's ablations, each a small change to objectives.ELECTRA (§3.2, §3.5, Appendix F).

| flag | class | what changes |
|---|---|---|
| `--objective electra15` | `ELECTRA15` | $L_Disc$ on masked positions only (§3.5) |
| `--objective replace_mlm` | `ReplaceMLM` | MLM on G's samples, not [MASK] (§3.5) |
| `--objective all_tokens_mlm` | `AllTokensMLM` | MLM on every token, copy gate (§3.5) |
| `--gen_size S` | (config) | G's width, a fraction of D's (§3.2) |
| `--generator unigram` | `UnigramELECTRA` | x̂ by token frequency (§3.2) |
| `--generator adversarial` | `AdversarialELECTRA` | G maximises $L_Disc$ (Appendix F) |
| `--generator gumbel` | `GumbelELECTRA` | not the paper's: after a blog review's idea, with a straight-through gradient (docs/reviewers-questions.md) |
| `--two_stage` | `TwoStageELECTRA` | G, then D from G's weights (§3.2) |

Details: each class overrides one half of the step (generate or discriminate) or, for the
training algorithms, the whole step and the trainer's hooks; `build_model` picks one.
"""
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from generator import Generator
from objectives import BERT, ELECTRA, corrupt, disc_loss, masked_accuracy, mlm_loss, real_tokens, \
    sample


class ConfigError(ValueError):
    """Engineering: a combination of ablation flags that does not make sense; the command line
    prints it."""


# ----------------------------------------------------------------------------- §3.5

class ELECTRA15(ELECTRA):
    """"ELECTRA 15%": ELECTRA with $L_Disc$ summed over $i ∈ m$, not $t = 1, …, n$ (§3.5). The
    paper's point: this loses most of ELECTRA's gain (Table 5: 82.4 against 85.0)."""

    def discriminate(self, x, x_corrupt, is_replaced, masked, scored, pad_mask=None,
                     segment_ids=None):
        # BEGIN ASSIGNMENT electra15
        # The used slots' positions, by a count (an unused slot may repeat a used position).
        in_m = torch.zeros(scored.shape, device=scored.device).scatter_add(
            1, masked.positions, masked.weights.float()) > 0
        return super().discriminate(x, x_corrupt, is_replaced, masked, scored & in_m, pad_mask,
                                    segment_ids)
        # END ASSIGNMENT electra15


class ReplaceMLM(ELECTRA):
    """"Replace MLM" (§3.5): an MLM reading G's samples instead of [MASK] at the masked
    positions: how much of ELECTRA's gain is the [MASK] mismatch?

    Details: the main network (`discriminator`, which fine-tuning keeps) is an MLM at D's size,
    weighted $λ = 1$ (this code's choice; the paper does not say)."""

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
    """An MLM over all positions with the paper's copy mechanism (§3.5): a sigmoid $D_t$ mixes
    "copy the input token" with the softmax:
    $p(x_t) = D_t 1(x_t = x^in_t) + (1 − D_t) p_MLM(x_t)$."""

    def __init__(self, cfg, embeddings):
        super().__init__(cfg, embeddings)
        self.copy = nn.Linear(cfg.hidden, 1)

    def forward_all(self, x_in, pad_mask=None, segment_ids=None):
        h = self.hidden(x_in, pad_mask, segment_ids)
        return self.head(h, self.embeddings.token.weight), self.copy(h).squeeze(-1)


def copy_log_probs(logits, copy_logit, x_in):
    """Engineering: the copy mechanism's full log-distribution over the vocabulary, (B, T, V),
    for the tests (it must sum to one); the loss below needs only the target's entry."""
    log_mlm = F.log_softmax(logits.float(), -1) + F.logsigmoid(-copy_logit.float())[..., None]
    log_copy = F.one_hot(x_in, logits.shape[-1]).float().log() + \
        F.logsigmoid(copy_logit.float())[..., None]
    return torch.logaddexp(log_mlm, log_copy)


class AllTokensMLM(ReplaceMLM):
    """"All-Tokens MLM" (§3.5): Replace MLM predicting the original token $x_t$ at *every*
    position of $x^corrupt$, through the copy mechanism. Table 5: it closes most of the
    BERT-ELECTRA gap.

    Details: the paper says the copy mechanism "improved results"; its remark that a model
    would "trivially learn to ... copy the input" is about inputs without G's samples."""

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
    """Appendix F: G maximises $L_Disc$ by REINFORCE (sampling has no gradient). A sample's
    reward is D's loss on it, $R = −log D$ if $x̂_t = x_t$, else $−log(1 − D)$, against the
    learned baseline $b = −log sigmoid(w^T h_G(x^masked)_t)$.

    Details: $L_MLM$, without gradient, tracks G's accuracy (the paper: 58 % against 65 % by
    maximum likelihood)."""

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


class ScaleGrad(torch.autograd.Function):
    """Identity forward; the gradient multiplied by `c` backward. With $c < 0$ the network
    upstream ascends the loss downstream: G's side of the adversarial game."""

    @staticmethod
    def forward(ctx, x, c):
        ctx.c = c
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.c, None


def gumbel_weight(progress, start=0.5, end_weight=0.5):
    """Details: w, the weight of the adversarial gradient in G's update at `progress` of the
    budget: 0 (maximum likelihood) until `start`, then linearly to `end_weight`. G's gradient
    is $(1 − w) ∇L_MLM − w λ ∇L_Disc$."""
    if progress <= start:
        return 0.0
    return end_weight * min(1.0, (progress - start) / (1.0 - start))


def embed_tokens(emb, token_vectors, segment_ids=None):
    """Engineering: `Embeddings.forward` from token vectors instead of ids, so a
    straight-through sample can carry a gradient into them."""
    e = token_vectors + emb.position.weight[:token_vectors.shape[1]]
    e = e + (emb.segment.weight[0] if segment_ids is None else emb.segment(segment_ids))
    return emb.drop(emb.norm(e))


class GumbelELECTRA(ELECTRA):
    """Not the paper's: G annealed from maximum likelihood to an adversarial gradient that
    passes through its sample by a straight-through Gumbel-softmax, biased and low-variance,
    where REINFORCE (Appendix F, `AdversarialELECTRA`) is unbiased and noisy.

    Details: a blog review (Mark Neumann, "Paper Review: Electra",
    https://markneumann.xyz/blog/electra; not a peer review; docs/reviewers-questions.md)
    proposes annealing to "a full REINFORCE based gradient estimate using the Gumbel-Softmax
    Trick". This code's sample is $x̂_t = argmax(l_t + g_t)$, $g ∼ Gumbel(0, 1)$, a one-hot row
    for D, while the gradient follows $softmax((l_t + g_t) / τ)$, times $−w$ (`ScaleGrad`,
    `gumbel_weight`), through D's input."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.tau, self.start, self.end_weight = cfg.gumbel_tau, cfg.gumbel_start, \
            cfg.gumbel_weight
        self.weight = 0.0                                   # w, set by on_progress each step

    def on_progress(self, progress):
        before, self.weight = self.weight, gumbel_weight(progress, self.start, self.end_weight)
        if before == 0.0 and self.weight > 0.0:
            return f"gumbel: G's gradient now (1 - w) L_MLM - w λ L_Disc, w -> " \
                   f"{self.end_weight:g} at the end"
        return None

    def forward(self, x, masked, pad_mask=None, segment_ids=None):
        if self.weight == 0.0:                              # pure maximum likelihood
            return super().forward(x, masked, pad_mask, segment_ids)
        G, D, w = self.generator, self.discriminator, self.weight
        logits = G(masked.x_masked, masked.positions, pad_mask, segment_ids).float()
        loss_mlm = mlm_loss(logits, masked.targets, masked.weights)
        gumbel = -torch.empty_like(logits).exponential_().log()          # g ~ Gumbel(0, 1)
        y_soft = torch.softmax((logits + gumbel) / self.tau, -1)
        x_hat = y_soft.argmax(-1)                           # = argmax(logits + g): x̂ ~ p_G
        y_hard = F.one_hot(x_hat, logits.shape[-1]).to(y_soft.dtype)
        y_soft = ScaleGrad.apply(y_soft, -w)                # G ascends what D descends
        y = y_hard + y_soft - y_soft.detach()               # forward: one-hot; backward: soft
        with torch.no_grad():
            x_corrupt, is_replaced = corrupt(x, masked, x_hat)
        table = D.embeddings.token.weight
        tokens = D.embeddings.token(x_corrupt)              # (B, T, E), every token as usual
        used = (masked.weights > 0)[..., None]              # unused slots keep the original
        sampled = torch.where(used, y.to(table.dtype) @ table, tokens.gather(
            1, masked.positions[..., None].expand(-1, -1, tokens.shape[-1])))
        tokens = tokens.scatter(1, masked.positions[..., None].expand_as(sampled), sampled)
        h = D.encoder(embed_tokens(D.embeddings, tokens, segment_ids), pad_mask)
        d_logits = D.head_out(F.gelu(D.head_dense(h))).squeeze(-1)
        real = real_tokens(x, pad_mask)
        loss_disc = disc_loss(d_logits, is_replaced, real)
        with torch.no_grad():
            flagged = (d_logits > 0) & real
            caught = (flagged & is_replaced).float().sum()
            stats = dict(disc_correct=((((d_logits > 0) == is_replaced) & real).float().sum(),
                                       real.float().sum()),
                         replaced_correct=(caught, is_replaced.float().sum()),
                         replaced_flagged=(caught, flagged.float().sum()),
                         gen_correct=masked_accuracy(logits.detach(), masked.targets,
                                                     masked.weights))
        loss = (1.0 - w) * loss_mlm + self.disc_weight * loss_disc
        return loss, dict(mlm_loss=loss_mlm.detach(), disc_loss=loss_disc, **stats)


# ----------------------------------------------------------------------------- §3.2 two-stage

class TwoStageELECTRA(ELECTRA):
    """§3.2 two-stage training: G alone on $L_MLM$, then D, initialised from G's weights, on
    $L_Disc$ with G frozen.

    Details: so --gen_size 1; each stage gets half the budget and its own schedule. The paper
    says that without the initialisation D "would sometimes fail to learn at all beyond the
    majority class"."""

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
    """The pre-training model a config describes: BERT, ELECTRA or an ablation.

    Details: `train_tokens` (the training set's token ids) gives the unigram generator its
    counts."""
    if cfg.model == "bert":
        return BERT(cfg)
    if cfg.two_stage:
        if cfg.gen != cfg.disc:
            raise ConfigError("--two_stage initialises D from G: it needs --gen_size 1")
        if cfg.objective != "electra" or cfg.generator != "mlm":
            raise ConfigError("--two_stage combines only with the default objective and generator")
        return TwoStageELECTRA(cfg)
    if cfg.generator != "mlm" and cfg.objective != "electra":
        raise ConfigError("--generator unigram/adversarial/gumbel combine only with --objective "
                          "electra")
    if cfg.generator == "unigram":          # §3.2: corpus token frequencies (+1: none is zero)
        counts = torch.ones(cfg.vocab_size) if train_tokens is None else \
            torch.from_numpy(np.bincount(train_tokens, minlength=cfg.vocab_size)) + 1
        return UnigramELECTRA(cfg, counts)  # (without tokens: a checkpoint's buffer replaces it)
    if cfg.generator == "adversarial":
        return AdversarialELECTRA(cfg)
    if cfg.generator == "gumbel":
        return GumbelELECTRA(cfg)
    classes = {"electra": ELECTRA, "electra15": ELECTRA15, "replace_mlm": ReplaceMLM,
               "all_tokens_mlm": AllTokensMLM}
    if cfg.objective not in classes:
        raise ConfigError(f"unknown objective {cfg.objective!r}")
    return classes[cfg.objective](cfg)


# ----------------------------------------------------------------------------- the trainer's hooks

# Engineering: two of the models above change as they train (two-stage training starts stage
# two half-way, with a schedule of its own; the Gumbel generator turns its adversarial gradient
# up). The trainer asks every model through these three calls; a model without the hook gets
# the plain answer.

def stage(model):
    """Engineering: 1 or 2 in two-stage training (flops.py counts what each stage trains),
    else None."""
    return getattr(model, "stage", None)


def schedule_progress(model, progress):
    """Engineering: the fraction of the learning-rate schedule reached at `progress` of the
    budget: the budget's own, or the model's (two-stage training: each half of the budget)."""
    own = getattr(model, "schedule_progress", None)
    return progress if own is None else own(progress)


def on_progress(model, progress):
    """Engineering: called before every step; a message when what trains changes from now
    on, else None."""
    own = getattr(model, "on_progress", None)
    return None if own is None else own(progress)
