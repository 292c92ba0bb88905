"""The objective and the networks (§2, §3.2, Table 6, Appendix E)."""
from dataclasses import replace

import pytest
import torch

from objectives import mask_tokens
from config import SIZES, Config, lr_at
from train import make_optimizer
from flops import discriminator_forward_flops, train_flops_per_step
from ablations import build_model
from objectives import ELECTRA, Masked, corrupt


def tiny_cfg(**kw):
    return replace(Config(), vocab_size=100, **SIZES["tiny"], **kw)


def tiny_batch(cfg, B=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 96, (B, cfg.seq_len), generator=g)
    x[:, 0], x[:, -1] = 97, 98
    b = mask_tokens(x, (96, 97, 98), 99, cfg.n_slots, generator=g)
    return dict(x=x, masked=b)


def test_a_sample_equal_to_the_original_counts_as_real():
    x = torch.tensor([[10, 11, 12, 13, 14]])
    positions = torch.tensor([[1, 3, 0]])
    weights = torch.tensor([[1.0, 1.0, 0.0]])        # third slot unused
    x_hat = torch.tensor([[11, 50, 77]])             # slot 0 samples the original token 11
    masked = Masked(x, positions, x.gather(1, positions), weights)
    x_corrupt, is_replaced = corrupt(x, masked, x_hat)
    assert x_corrupt.tolist() == [[10, 11, 12, 50, 14]]   # unused slot left position 0 alone
    assert is_replaced.tolist() == [[False, False, False, True, False]]


def test_one_embedding_tensor_shared_and_trained_by_both_losses():
    cfg = tiny_cfg()
    model = ELECTRA(cfg)
    g_emb, d_emb = model.generator.embeddings, model.discriminator.embeddings
    assert g_emb is d_emb and g_emb.token.weight is d_emb.token.weight
    # the optimizer sees the tied table once: total = G without embeddings + D
    n = lambda ps: sum(p.numel() for p in ps)
    shared = n(g_emb.parameters())
    assert n(model.parameters()) == n(model.generator.parameters()) - shared + \
        n(model.discriminator.parameters())
    _, stats = model(**tiny_batch(cfg))
    emb = g_emb.token.weight
    g_mlm, = torch.autograd.grad(stats["mlm_loss"], emb, retain_graph=True)
    g_disc, = torch.autograd.grad(stats["disc_loss"], emb)
    assert g_mlm.abs().sum() > 0 and g_disc.abs().sum() > 0


def test_no_gradient_from_disc_loss_into_the_generator():
    cfg = tiny_cfg()
    model = ELECTRA(cfg)
    _, stats = model(**tiny_batch(cfg))
    gen_only = [p for n, p in model.generator.named_parameters() if not n.startswith("embeddings")]
    grads = torch.autograd.grad(stats["disc_loss"], gen_only, allow_unused=True)
    assert all(g is None or g.abs().sum() == 0 for g in grads)
    # ... while L_MLM does reach them (so the check above can fail)
    grads = torch.autograd.grad(stats["mlm_loss"], gen_only, allow_unused=True)
    assert any(g is not None and g.abs().sum() > 0 for g in grads)


def test_combined_loss_is_mlm_plus_lambda_disc():
    cfg = tiny_cfg()
    model = ELECTRA(cfg).eval()
    torch.manual_seed(0)
    loss, stats = model(**tiny_batch(cfg))
    assert torch.allclose(loss, stats["mlm_loss"] + 50.0 * stats["disc_loss"])


def test_table6_parameter_counts():
    cfg = Config()                                    # vocab 30,522 as BERT's WordPiece
    model = ELECTRA(cfg)
    n = lambda m: sum(p.numel() for p in m.parameters())
    d, total = n(model.discriminator), n(model)
    assert abs(d - 13.5e6) / 13.5e6 < 0.02, d        # paper: 14M; official D: 13.5M
    assert abs(total - 14.0e6) / 14.0e6 < 0.03, total
    g = cfg.gen
    assert (g.hidden, g.heads, g.ffn, g.layers) == (64, 1, 256, 12)
    assert model.generator.encoder.proj.in_features == 128
    assert model.discriminator.encoder.proj.out_features == 256
    bert = build_model(replace(cfg, model="bert"))
    assert abs(n(bert) - d) / d < 0.02               # BERT-Small has D's shape


def test_flops_match_the_paper():
    cfg = Config()
    train = train_flops_per_step(cfg) * 1_000_000
    assert abs(train - 1.4e18) / 1.4e18 < 0.10, train          # Table 1: 1.4e18
    assert abs(train - 1.29e18) / 1.29e18 < 0.03, train        # the official script: 1.29e18
    infer = discriminator_forward_flops(cfg)
    assert abs(infer - 3.7e9) / 3.7e9 < 0.10, infer            # Table 1: 3.7e9
    # BERT-Small needs more steps for the same FLOPs: the paper trains 1.45M vs 1M
    ratio = train_flops_per_step(cfg) / train_flops_per_step(replace(cfg, model="bert"))
    assert 1.25 < ratio < 1.50, ratio


def test_flops_by_part_add_up_to_the_step():
    """The parts the flops.py page draws (Appendix E by network and part) are the step's count:
    D's FFN the largest, the dense embedding lookups about 40 %, G about a quarter."""
    from flops import flops_by_part
    cfg = Config()
    parts, total = flops_by_part(cfg), train_flops_per_step(cfg)
    assert sum(parts.values()) == total and len(parts) == 8
    assert max(parts, key=parts.get) == ("D", "FFN")
    assert 0.38 < (parts["G", "embeddings"] + parts["D", "embeddings"]) / total < 0.42
    assert 0.2 < sum(v for (net, _), v in parts.items() if net == "G") / total < 0.3
    small = replace(cfg, gen_size=0.125)                                # a narrower G costs less
    assert sum(flops_by_part(small).values()) == train_flops_per_step(small) < total


def test_lr_schedule_warms_up_then_decays_to_zero():
    cfg = Config()
    assert lr_at(0.0, cfg) == 0.0
    assert lr_at(0.005, cfg) == pytest.approx(0.5 * 5e-4 * 0.995)
    assert lr_at(0.01, cfg) == pytest.approx(5e-4 * 0.99)      # peak at the end of warm-up
    assert lr_at(0.5, cfg) == pytest.approx(2.5e-4)
    assert lr_at(1.0, cfg) == 0.0
    lrs = [lr_at(p / 1000, cfg) for p in range(10, 1001)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_optimizer_does_not_decay_layernorm_or_biases():
    cfg = tiny_cfg()
    model = ELECTRA(cfg)
    opt = make_optimizer(model, cfg, torch.device("cpu"))
    decay = {id(p) for p in opt.param_groups[0]["params"]}
    for name, p in model.named_parameters():
        assert (id(p) in decay) == (p.ndim >= 2 and "norm" not in name), name
    assert opt.defaults["eps"] == 1e-6 and opt.param_groups[0]["weight_decay"] == 0.01


def test_padding_does_not_change_real_token_outputs():
    """pad_mask must hide [PAD] from attention: D's logits on real tokens are the same."""
    cfg = tiny_cfg()
    model = ELECTRA(cfg).eval()
    x = torch.randint(0, 96, (1, 20))
    padded = torch.cat([x, torch.full((1, 10), 96)], 1)
    mask = torch.cat([torch.ones(1, 20), torch.zeros(1, 10)], 1).bool()
    a = model.discriminator(x)
    b = model.discriminator(padded, mask)[:, :20]
    assert torch.allclose(a, b, atol=1e-5)


def test_mfu_count_leaves_out_only_the_dense_lookups():
    from flops import hardware_flops_per_step
    cfg = Config()
    lookup = 2 * 128 * (30522 + 128 + 2) * 128 * 128          # one lookup pass of a batch
    assert train_flops_per_step(cfg) - hardware_flops_per_step(cfg) == 4 * lookup   # G, D x fwd/bwd
    bert = replace(cfg, model="bert")
    assert train_flops_per_step(bert) - hardware_flops_per_step(bert) == 2 * lookup
    assert 0.55 < hardware_flops_per_step(cfg) / train_flops_per_step(cfg) < 0.65


def test_slot_count_is_the_official_19():
    from objectives import mask_slots
    assert mask_slots(128) == 19
