"""objectives.Masked's contract for unused slots (weight 0): they may hold any position of the
row - one no used slot holds, or a used slot's again - and no consumer may read them as masked
or write through them. corrupt and ELECTRA15 are written so that the order of a scatter's
writes cannot matter; this file checks that they give the numbers they gave before (a scatter
over every slot) where the positions are distinct, as mask_tokens makes them, and the same
numbers whatever the unused slots repeat."""
from dataclasses import replace

import pytest
import torch

import objectives
from ablations import ELECTRA15
from config import SIZES, Config
from objectives import ELECTRA, Masked, corrupt, mask_tokens
from train import make_optimizer, training_step

SPECIAL, MASK = (96, 97, 98), 99


def corrupt_by_scatter(x, masked, x_hat):
    """corrupt as it was written before: every slot scattered, unused ones writing back the
    original token - right for distinct positions, order-dependent where an unused slot repeats
    a used position."""
    x_hat = torch.where(masked.weights > 0, x_hat, masked.targets)
    x_corrupt = x.scatter(1, masked.positions, x_hat)
    return x_corrupt, x_corrupt != x


def in_m_by_scatter(masked, shape):
    """ELECTRA15's used positions as they were computed before."""
    return torch.zeros(shape, dtype=torch.bool).scatter(1, masked.positions, masked.weights > 0)


def batches(cfg, n, B=8, seed=0):
    """n batches of the training loop's form, with padding and masks from mask_tokens."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        x = torch.randint(0, 96, (B, cfg.seq_len), generator=g)
        lengths = torch.randint(6, cfg.seq_len + 1, (B,), generator=g)
        pad_mask = torch.arange(cfg.seq_len)[None, :] < lengths[:, None]
        x[:, 0] = 97
        x[torch.arange(B), lengths - 1] = 98
        x[~pad_mask] = 96
        masked = mask_tokens(x, SPECIAL, MASK, cfg.n_slots, generator=g)
        out.append(dict(x=x, masked=masked, pad_mask=pad_mask))
    return out


def repeat_first(masked):
    """The same mask with every unused slot repeating the row's first position."""
    used = masked.weights > 0
    positions = torch.where(used, masked.positions, masked.positions[:, :1])
    targets = torch.where(used, masked.targets, masked.targets[:, :1])
    return Masked(masked.x_masked, positions, targets, masked.weights)


def tiny_cfg(**kw):
    return replace(Config(), vocab_size=100, **SIZES["tiny"], **kw)


def electra15_scored(monkeypatch, b, masked):
    """The tokens ELECTRA15.discriminate passes to L_Disc as `mask` for batch b."""
    seen = []
    orig = objectives.disc_loss
    monkeypatch.setattr(objectives, "disc_loss",
                        lambda logits, rep, mask=None: seen.append(mask) or orig(logits, rep, mask))
    model = ELECTRA15(tiny_cfg(objective="electra15"))
    x = b["x"]
    model.discriminate(x, x, torch.zeros_like(x, dtype=torch.bool), masked, b["pad_mask"].clone(),
                       b["pad_mask"])
    monkeypatch.setattr(objectives, "disc_loss", orig)
    return seen[0]


def test_distinct_positions_corrupt_and_electra15_give_the_numbers_of_a_scatter(monkeypatch):
    cfg = tiny_cfg()
    for b in batches(cfg, 20):
        x, m = b["x"], b["masked"]
        assert (m.weights == 0).any()                   # short rows leave slots unused
        x_hat = torch.randint(0, 96, m.positions.shape)
        new, old = corrupt(x, m, x_hat), corrupt_by_scatter(x, m, x_hat)
        assert torch.equal(new[0], old[0]) and torch.equal(new[1], old[1])
        assert torch.equal(electra15_scored(monkeypatch, b, m),
                           in_m_by_scatter(m, x.shape) & b["pad_mask"])


@pytest.mark.parametrize("fused", [True, False])
def test_training_losses_are_unchanged_for_distinct_positions(monkeypatch, fused):
    """Same seed, same numbers: five training steps of ELECTRA with corrupt as it is and as it
    was (a scatter over every slot) give identical L_MLM and L_Disc at every step."""
    cfg = tiny_cfg(fused_mlm=fused)
    data = batches(cfg, 5, seed=1)

    def run():
        torch.manual_seed(0)
        model = ELECTRA(cfg)
        opt = make_optimizer(model, cfg, torch.device("cpu"))
        losses = []
        for b in data:
            stats = training_step(model, opt, b, 1e-3, cfg, torch.device("cpu"), "fp32")
            losses.append((stats["mlm_loss"].item(), stats["disc_loss"].item()))
        return losses
    now = run()
    monkeypatch.setattr(objectives, "corrupt", corrupt_by_scatter)
    before = run()
    assert now == before
    assert len(set(now)) == len(now)                    # the steps did change the model


def test_unused_slots_repeating_a_used_position_change_no_number(monkeypatch):
    """The same batch with its unused slots pointing at used positions: x_corrupt, ELECTRA15's
    scored tokens and ELECTRA's losses are the same. (The old scatter over every slot would
    have put the original token back at a used position: the check can fail.)"""
    cfg = tiny_cfg()
    b = batches(cfg, 1, seed=2)[0]
    x, m = b["x"], b["masked"]
    r = repeat_first(m)
    assert not torch.equal(r.positions, m.positions)
    x_hat = torch.randint(0, 96, m.positions.shape)
    assert torch.equal(corrupt(x, r, x_hat)[0], corrupt(x, m, x_hat)[0])
    assert not torch.equal(corrupt_by_scatter(x, r, x_hat)[0], corrupt(x, m, x_hat)[0])

    scored = electra15_scored(monkeypatch, b, r)
    assert torch.equal(scored, electra15_scored(monkeypatch, b, m))
    assert torch.equal(scored, in_m_by_scatter(m, x.shape) & b["pad_mask"])

    model = ELECTRA(cfg).eval()
    out = []
    for masked in (m, r):
        torch.manual_seed(3)
        loss, stats = model(x, masked, b["pad_mask"])
        out.append((loss.item(), stats["mlm_loss"].item(), stats["disc_loss"].item()))
    assert out[0] == out[1]
