"""Part 6, joint_loss (objectives.ELECTRA.forward): L_MLM + λ L_Disc with λ = 50, §2.

The other parts forward() relies on - sampling, corruption, L_MLM, L_Disc, attention - are replaced
here by the stand-ins of teaching/stand_ins.py, so this file grades the wiring alone. The test
computes what forward() should give with the same model, batch and stand-ins - G's L_MLM and
samples, x_corrupt from them without gradient, D on x_corrupt with L_Disc over every real token,
loss = L_MLM + λ L_Disc - and compares the value of each loss and its gradient in every weight of
both networks (L_MLM's in G, λ L_Disc's in D: nothing detached, no L_Disc in G). Each stand-in's
value depends on what it is given, so D reading x or x_masked, other labels or other scored
tokens change the numbers."""
from dataclasses import replace

import pytest
import torch

import objectives
from config import SIZES, Config
from objectives import ELECTRA, Masked, real_tokens
from teaching import stand_ins

V = 100


def expected(model, x, masked, pad_mask):
    """What forward() should compute, the stand-ins being in place: (loss, L_MLM, L_Disc)."""
    inp = dict(pad_mask=pad_mask, segment_ids=None)
    loss_mlm, x_hat, _ = model.generate(masked, **inp)
    with torch.no_grad():
        x_corrupt, is_replaced = objectives.corrupt(x, masked, x_hat)
    loss_disc, _, _ = model.discriminate(x, x_corrupt, is_replaced, masked,
                                         real_tokens(x, pad_mask), **inp)
    return loss_mlm + model.disc_weight * loss_disc, loss_mlm, loss_disc


@pytest.fixture
def rig(monkeypatch, stand_in_attention):
    """A tiny ELECTRA, a batch with padding, the stand-ins in place."""
    torch.manual_seed(0)
    # fused_mlm=False: the plain path through sample and mlm_loss, which the stand-ins replace
    cfg = replace(Config(), vocab_size=V, **SIZES["tiny"], fused_mlm=False)
    model = ELECTRA(cfg).eval()
    B, T, K = 3, 16, 4
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 90, (B, T), generator=g)
    pad_mask = torch.ones(B, T, dtype=torch.bool)
    pad_mask[1, 12:] = False                                   # row 1 is padded
    positions = torch.stack([torch.randperm(11, generator=g)[:K] + 1 for _ in range(B)])
    weights = torch.ones(B, K)
    masked = Masked(x.scatter(1, positions, V - 1), positions, x.gather(1, positions), weights)
    for name, fn in dict(sample=stand_ins.sample_argmax,
                         corrupt=stand_ins.corrupt_last_and_first_slot,
                         mlm_loss=stand_ins.mlm_loss_square,
                         disc_loss=stand_ins.disc_loss_linear).items():
        monkeypatch.setattr(objectives, name, fn)
    return model, dict(x=x, masked=masked, pad_mask=pad_mask)


def test_the_value_is_mlm_plus_50_disc(rig):
    model, batch = rig
    loss, stats = model(**batch)
    want, want_mlm, want_disc = expected(model, **batch)
    assert stats["mlm_loss"].item() == pytest.approx(want_mlm.item(), rel=1e-5), \
        "loss_mlm should be the L_MLM that self.generate returns"
    assert loss.item() == pytest.approx(want.item(), rel=1e-5), \
        f"loss {loss.item():.5f}, expected L_MLM + 50 L_Disc = {want.item():.5f} (λ = " \
        f"self.disc_weight, on L_Disc)"


def test_d_reads_x_corrupt_built_from_g_samples(rig):
    model, batch = rig
    _, stats = model(**batch)
    _, _, want = expected(model, **batch)
    assert stats["disc_loss"].item() == pytest.approx(want.item(), rel=1e-5), \
        f"L_Disc {stats['disc_loss'].item():.5f}, expected {want.item():.5f}: D should read " \
        f"x_corrupt (corrupt(x, masked, G's samples)) with corrupt's labels, scoring every real " \
        f"token"


def test_l_disc_scores_every_real_token_not_only_the_masked_ones(rig, monkeypatch):
    model, batch = rig
    monkeypatch.setattr(objectives, "disc_loss", stand_ins.disc_loss_scored)
    _, stats = model(**batch)
    got = stand_ins.scored_of(stats["disc_loss"].item(), *batch["x"].shape)
    assert torch.equal(got, batch["pad_mask"]), \
        f"L_Disc scored {int(got.sum())} tokens, expected every real (non-padding) token, " \
        f"{int(batch['pad_mask'].sum())}, not only the masked ones"


def own_weights(net):
    """A network's parameters other than the embeddings it shares with the other one."""
    return [p for n, p in net.named_parameters() if not n.startswith("embeddings")]


def grads(loss, weights):
    """d loss / d weights, 0 where loss does not depend on a weight."""
    got = torch.autograd.grad(loss, weights, allow_unused=True, retain_graph=True)
    return [torch.zeros_like(w) if g is None else g for g, w in zip(got, weights)]


def test_no_gradient_from_l_disc_into_the_generator(rig):
    model, batch = rig
    _, stats = model(**batch)
    gen_only = own_weights(model.generator)
    grads = torch.autograd.grad(stats["disc_loss"], gen_only, allow_unused=True)
    assert all(g is None or g.abs().sum() == 0 for g in grads), "L_Disc reached G's weights"
    grads = torch.autograd.grad(stats["mlm_loss"], gen_only, allow_unused=True)
    assert any(g is not None and g.abs().sum() > 0 for g in grads), \
        "L_MLM should reach G's weights (is loss_mlm detached?)"


def test_the_loss_trains_both_networks(rig):
    """`loss` is what the trainer back-propagates: its gradient in every weight is the expected
    sum's, L_MLM's in G and 50 times L_Disc's in D (a detached term would leave that network
    untrained, with the same value)."""
    model, batch = rig
    loss, _ = model(**batch)
    want, _, _ = expected(model, **batch)
    for net, name in ((model.discriminator, "D"), (model.generator, "G")):
        weights = own_weights(net)
        got = grads(loss, weights)
        exp = grads(want, weights)
        assert any(w.abs().sum() > 0 for w in exp)
        assert all(torch.allclose(g, w, rtol=1e-4, atol=1e-6) for g, w in zip(got, exp)), \
            f"the gradient of loss in {name} should be " \
            f"{'50 times L_Disc' if name == 'D' else 'L_MLM'}'s: is a term detached?"
