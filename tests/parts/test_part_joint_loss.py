"""Part 6, joint_loss (objectives.ELECTRA.forward): L_MLM + λ L_Disc with λ = 50, §2.

The other parts forward() relies on - sampling, corruption, L_MLM, L_Disc, attention - are replaced here by
stand-ins that record what they receive, so this file grades the wiring alone: the value of the
sum (computed independently from the logits both networks produced) and its gradient (L_MLM's
into G, λ L_Disc's into D: nothing detached), that D reads x_corrupt, that L_Disc scores every
real token, and that L_Disc sends no gradient into G."""
from dataclasses import replace

import pytest
import torch

import objectives
from config import SIZES, Config
from objectives import ELECTRA, Masked

V = 100


@pytest.fixture
def rig(monkeypatch, stand_in_attention):
    """A tiny ELECTRA, a batch with padding, and stand-ins that log their inputs."""
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
    x_masked = x.scatter(1, positions, V - 1)
    masked = Masked(x_masked, positions, x.gather(1, positions), weights)
    log = {}
    # x_corrupt chosen by the test: two positions of each row changed, one of them in m
    x_corrupt = x.clone()
    x_corrupt[:, 0] = (x[:, 0] + 1) % 90
    x_corrupt.scatter_(1, positions[:, :1], (x.gather(1, positions[:, :1]) + 1) % 90)

    def sample(logits, generator=None):
        log["gen_logits"] = logits
        return logits.detach().argmax(-1)

    def corrupt(x_, masked_, x_hat):
        log["corrupt_args"] = (x_, masked_, x_hat)
        return x_corrupt.clone(), x_corrupt != x_

    def mlm_loss(logits, targets, weights):
        return (logits.float() ** 2).mean()

    def disc_loss(logits, is_replaced, mask=None):
        log["disc"] = (logits, is_replaced, mask)
        return (logits.float() * mask).sum() / mask.sum()
    for name, fn in dict(sample=sample, corrupt=corrupt, mlm_loss=mlm_loss,
                         disc_loss=disc_loss).items():
        monkeypatch.setattr(objectives, name, fn)
    seen = {}
    d_forward = model.discriminator.forward

    def d_reads(x_in, *a, **k):                             # what D's forward receives
        seen["x"] = x_in
        return d_forward(x_in, *a, **k)
    monkeypatch.setattr(model.discriminator, "forward", d_reads)
    return model, dict(x=x, masked=masked, pad_mask=pad_mask), log, seen, x_corrupt


def test_the_value_is_mlm_plus_50_disc(rig):
    model, batch, log, _, _ = rig
    loss, stats = model(**batch)
    d_logits, _, mask = log["disc"]
    expect_mlm = (log["gen_logits"].float() ** 2).mean()
    expect_disc = (d_logits.float() * mask).sum() / mask.sum()
    assert loss.item() == pytest.approx((expect_mlm + 50 * expect_disc).item(), rel=1e-5), \
        f"loss {loss.item():.5f}, expected L_MLM + 50 L_Disc = " \
        f"{(expect_mlm + 50 * expect_disc).item():.5f} (λ = self.disc_weight, on L_Disc)"
    assert stats["mlm_loss"].item() == pytest.approx(expect_mlm.item(), rel=1e-5), \
        "loss_mlm should be the L_MLM that self.generate returns"
    assert stats["disc_loss"].item() == pytest.approx(expect_disc.item(), rel=1e-5), \
        "loss_disc should be the L_Disc that self.discriminate returns"


def test_d_reads_x_corrupt_built_from_g_samples(rig):
    model, batch, log, seen, x_corrupt = rig
    model(**batch)
    x_, masked_, x_hat = log["corrupt_args"]
    assert torch.equal(x_, batch["x"]) and torch.equal(masked_.positions, batch["masked"].positions), \
        "corrupt should get x and the batch's masked"
    assert torch.equal(x_hat, log["gen_logits"].argmax(-1)), \
        "corrupt should get G's samples x̂ from self.generate"     # G's samples, at the slots
    assert torch.equal(seen["x"], x_corrupt), "D should read x_corrupt, not x or x_masked"
    _, is_replaced, _ = log["disc"]
    assert torch.equal(is_replaced, x_corrupt != batch["x"]), \
        "L_Disc's labels should be corrupt's is_replaced"


def test_l_disc_scores_every_real_token_not_only_the_masked_ones(rig):
    model, batch, log, _, _ = rig
    model(**batch)
    _, _, mask = log["disc"]
    assert mask is not None and torch.equal(mask.bool(), batch["pad_mask"]), \
        f"L_Disc scored {int(mask.sum()) if mask is not None else 'all'} tokens, expected every " \
        f"real (non-padding) token, {int(batch['pad_mask'].sum())}, not only the masked ones"


def test_no_gradient_from_l_disc_into_the_generator(rig):
    model, batch, _, _, _ = rig
    _, stats = model(**batch)
    gen_only = [p for n, p in model.generator.named_parameters() if not n.startswith("embeddings")]
    grads = torch.autograd.grad(stats["disc_loss"], gen_only, allow_unused=True)
    assert all(g is None or g.abs().sum() == 0 for g in grads), "L_Disc reached G's weights"
    grads = torch.autograd.grad(stats["mlm_loss"], gen_only, allow_unused=True)
    assert any(g is not None and g.abs().sum() > 0 for g in grads), \
        "L_MLM should reach G's weights (is loss_mlm detached?)"


def own_weights(net):
    """A network's parameters other than the embeddings it shares with the other one."""
    return [p for n, p in net.named_parameters() if not n.startswith("embeddings")]


def test_the_loss_trains_both_networks(rig):
    """`loss` is what the trainer back-propagates: its gradient is L_MLM's in G and 50 times
    L_Disc's in D (a detached term would leave that network untrained, with the same value)."""
    model, batch, _, _, _ = rig
    loss, stats = model(**batch)
    for net, part, scale in ((model.discriminator, "disc_loss", 50.0),
                             (model.generator, "mlm_loss", 1.0)):
        weights = own_weights(net)
        got = torch.autograd.grad(loss, weights, retain_graph=True, allow_unused=True)
        want = torch.autograd.grad(stats[part], weights, retain_graph=True, allow_unused=True)
        assert any(w is not None and w.abs().sum() > 0 for w in want), \
            f"{part} should have a gradient in {'D' if part == 'disc_loss' else 'G'}: is it detached?"
        assert all(g is not None and torch.allclose(g, scale * w, rtol=1e-4, atol=1e-6)
                   for g, w in zip(got, want) if w is not None), \
            f"the gradient of loss in {'D' if part == 'disc_loss' else 'G'} should be " \
            f"{'' if scale == 1 else '50 times '}{part}'s: is a term detached?"
