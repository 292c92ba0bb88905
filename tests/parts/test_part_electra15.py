"""Part 10, electra15 (ablations.ELECTRA15.discriminate): the §3.5 ablation "ELECTRA 15%",
L_Disc over the masked positions m only (Table 5: 82.4 against ELECTRA's 85.0 GLUE)."""
from dataclasses import replace

import torch

import objectives
from ablations import ELECTRA15
from config import SIZES, Config
from objectives import Masked


def test_l_disc_scores_only_the_used_mask_slots(monkeypatch, stand_in_attention):
    torch.manual_seed(0)
    model = ELECTRA15(replace(Config(), vocab_size=100, objective="electra15", **SIZES["tiny"]))
    got = {}
    monkeypatch.setattr(objectives, "disc_loss",
                        lambda logits, rep, mask=None: got.setdefault("mask", mask).float().sum())
    x = torch.randint(0, 90, (2, 10))
    positions = torch.tensor([[1, 4, 7], [2, 3, 8]])
    weights = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])          # row 0: slot 3 unused
    masked = Masked(x.scatter(1, positions, 99), positions, x.gather(1, positions), weights)
    pad_mask = torch.ones(2, 10, dtype=torch.bool)
    pad_mask[1, 8:] = False                                   # position 8 of row 1 is padding
    is_replaced = torch.zeros(2, 10, dtype=torch.bool)
    model.discriminate(x, x, is_replaced, masked, pad_mask.clone(), pad_mask)
    expect = torch.zeros(2, 10, dtype=torch.bool)
    expect[0, [1, 4]] = True
    expect[1, [2, 3]] = True                                   # 8 is padding: never scored
    assert torch.equal(got["mask"].bool(), expect)
