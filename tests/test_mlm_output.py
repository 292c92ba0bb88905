"""machinery/mlm_output.py: G's output layer, L_MLM and x̂ from one pass over p_G (§2) must give the
numbers of the plain path - encoder.MLMHead, objectives.mlm_loss, objectives.sample."""
from dataclasses import replace

import torch

from config import SIZES, Config
from encoder import MLMHead
from machinery.mlm_output import mlm_output
from objectives import BERT, ELECTRA, masked_accuracy, mlm_loss, sample
from tests.test_model import tiny_batch


def head_and_batch(B=6, K=5, H=16, E=8, V=50, seed=0):
    torch.manual_seed(seed)
    head = MLMHead(H, E, V)
    torch.nn.init.normal_(head.bias, std=0.5)                   # a bias that matters
    emb = torch.nn.Parameter(torch.randn(V, E))
    h = torch.randn(B, K, H, requires_grad=True)
    targets = torch.randint(0, V, (B, K))
    weights = (torch.rand(B, K) > 0.3).float()                  # some unused slots
    return head, emb, h, targets, weights


def grads(loss, params):
    return torch.autograd.grad(loss, params)


def test_loss_gradients_and_argmax_match_the_plain_path():
    head, emb, h, targets, weights = head_and_batch()
    params = [h, emb, head.bias, head.dense.weight, head.norm.weight]
    logits = head(h, emb)
    plain = mlm_loss(logits, targets, weights)
    fused, _, hits = mlm_output(head.transform(h), emb, head.bias, targets, weights)
    assert torch.allclose(fused, plain, atol=1e-6)
    for gf, gp in zip(grads(fused, params), grads(plain, params)):
        assert torch.allclose(gf, gp, atol=1e-6), (gf - gp).abs().max()
    want = masked_accuracy(logits.detach(), targets, weights)
    assert hits[0] == want[0] and hits[1] == want[1]


def test_unused_slots_get_no_gradient():
    head, emb, h, targets, weights = head_and_batch()
    weights[0] = 0.0
    loss, _, _ = mlm_output(head.transform(h), emb, head.bias, targets, weights)
    g, = torch.autograd.grad(loss, h)
    assert g[0].abs().sum() == 0 and g[1:].abs().sum() > 0


def test_samples_are_the_plain_samples_under_the_same_seed():
    head, emb, h, targets, weights = head_and_batch(B=64, K=8, V=200)
    logits = head(h, emb)
    torch.manual_seed(7)
    plain = sample(logits)
    torch.manual_seed(7)
    _, fused, _ = mlm_output(head.transform(h), emb, head.bias, targets, weights)
    # one uniform per slot, the same inverse CDF: only a float hair at a CDF step could differ
    assert (fused == plain).float().mean() > 0.99


def test_samples_follow_p_G():
    V, n = 5, 40_000
    z = torch.eye(V)[:1].repeat(n, 1)[:, None, :]               # (n, 1, V): every row the same
    emb = torch.diag(torch.tensor([2.0, 1.0, 0.0, -1.0, 0.5]))  # logits of row 0 = this diag
    p = torch.softmax(torch.tensor([2.0, 0.0, 0.0, 0.0, 0.0]), 0)
    torch.manual_seed(0)
    _, x_hat, _ = mlm_output(z, emb, torch.zeros(V), torch.zeros(n, 1, dtype=torch.long),
                             torch.ones(n, 1))
    freq = torch.bincount(x_hat.flatten(), minlength=V).float() / n
    assert (freq - p).abs().max() < 4 * (p * (1 - p) / n).sqrt().max()


def test_backward_twice_gives_the_same_gradient():
    head, emb, h, targets, weights = head_and_batch()
    loss, _, _ = mlm_output(head.transform(h), emb, head.bias, targets, weights)
    g1, = torch.autograd.grad(loss, emb, retain_graph=True)
    g2, = torch.autograd.grad(loss, emb)
    assert torch.equal(g1, g2)


def test_bf16_autocast_stays_close_to_float32():
    head, emb, h, targets, weights = head_and_batch()
    ref, _, _ = mlm_output(head.transform(h), emb, head.bias, targets, weights)
    g_ref, = torch.autograd.grad(ref, emb)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low, _, _ = mlm_output(head.transform(h), emb, head.bias, targets, weights)
    g_low, = torch.autograd.grad(low, emb)
    assert low.dtype == torch.float32 and g_low.dtype == torch.float32
    assert abs(low.item() - ref.item()) < 0.05 * ref.item()
    assert torch.nn.functional.cosine_similarity(g_low.flatten(), g_ref.flatten(), 0) > 0.99


def model_grads(model_cls, fused):
    cfg = replace(Config(), vocab_size=100, **SIZES["tiny"], fused_mlm=fused)
    torch.manual_seed(0)
    model = model_cls(cfg)
    torch.manual_seed(1)                                        # the same samples both ways
    loss, stats = model(**tiny_batch(cfg))
    loss.backward()
    return loss, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def test_electra_and_bert_train_the_same_with_and_without_fusion():
    for model_cls in (ELECTRA, BERT):
        loss_f, g_f = model_grads(model_cls, True)
        loss_p, g_p = model_grads(model_cls, False)
        assert torch.allclose(loss_f, loss_p, atol=1e-5), model_cls.__name__
        assert g_f.keys() == g_p.keys()
        for n in g_f:
            assert torch.allclose(g_f[n], g_p[n], atol=1e-5, rtol=1e-4), (model_cls.__name__, n)
