"""Part 9, layer_decay (finetune_glue.layerwise_param_groups): layer-wise learning-rate decay
(Appendix A, Table 7: 0.8 for Small), with the official code's exponents (_get_layer_lrs)."""
import pytest

import finetune_glue as fg
from encoder import EncoderConfig


def lrs_by_name(rule, layers=12):
    enc = EncoderConfig(hidden=16, layers=layers, heads=2, ffn=32)
    model = fg.Classifier(vocab_size=50, emb_size=8, max_len=32, enc=enc, n_out=2)
    groups = fg.layerwise_param_groups(model, 3e-4, 0.8, rule)
    lr_of = {n: g["lr"] for g in groups for n in g["names"]}
    assert sorted(lr_of) == sorted(n for n, _ in model.named_parameters()), \
        "every parameter's name should be in exactly one group"
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters())), \
        "every parameter should be in exactly one group"
    return lr_of


def test_layerwise_learning_rates_follow_the_official_exponents():
    # electra/model/optimization.py _get_layer_lrs, written out for n_layers = 12: depth 0 for
    # /embeddings/ and /embeddings_project/, layer_i + 1 for encoder/layer_i, n_layers + 2 for
    # task_specific/; rate = lr * decay ** (n_layers + 2 - depth)
    official = {"embeddings": 0, "embeddings_project": 0, "task_specific": 14,
                **{f"layer_{i}": i + 1 for i in range(12)}}
    ours = {"embeddings": "embeddings.token.weight", "embeddings_project": "encoder.proj.weight",
            "task_specific": "head.weight", **{f"layer_{i}": f"encoder.blocks.{i}.attn.qkv.weight"
                                               for i in range(12)}}
    lr_of = lrs_by_name("official")
    for key, depth in official.items():
        assert lr_of[ours[key]] == pytest.approx(3e-4 * 0.8 ** (14 - depth)), \
            f"{ours[key]} (the official {key}, depth {depth}): lr {lr_of[ours[key]]:.3g}, " \
            f"expected lr 0.8^{14 - depth} = {3e-4 * 0.8 ** (14 - depth):.3g}"
    for name, power in (("encoder.blocks.11.norm2.bias", 2), ("embeddings.norm.weight", 14),
                        ("head.bias", 0)):
        assert lr_of[name] == pytest.approx(3e-4 * 0.8 ** power), \
            f"{name}: lr {lr_of[name]:.3g}, expected lr 0.8^{power} = {3e-4 * 0.8 ** power:.3g}"
    assert len({round(v, 15) for v in lr_of.values()}) == 14, \
        "14 distinct learning rates expected for 12 layers (depth 13 is never used)"


def test_layerwise_learning_rates_stated_rule_3_layers():
    lr_of = lrs_by_name("stated", layers=3)
    expect = {"head.weight": 3e-4, "head.bias": 3e-4,
              "encoder.blocks.2.ffn_in.weight": 3e-4 * 0.8,       # top block: 0.8 lr
              "encoder.blocks.1.attn.qkv.weight": 3e-4 * 0.8 ** 2,
              "encoder.blocks.0.norm2.bias": 3e-4 * 0.8 ** 3,
              "embeddings.token.weight": 3e-4 * 0.8 ** 4,
              "embeddings.norm.weight": 3e-4 * 0.8 ** 4,
              "encoder.proj.weight": 3e-4 * 0.8 ** 4}             # the projection: embeddings
    for name, lr in expect.items():
        assert lr_of[name] == pytest.approx(lr), \
            f"{name} (stated rule, 3 layers): lr {lr_of[name]:.3g}, expected {lr:.3g}"
    with pytest.raises(ValueError):
        lrs_by_name("sideways")
