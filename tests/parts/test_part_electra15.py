"""Part 10, electra15 (ablations.ELECTRA15.discriminate): the §3.5 ablation "ELECTRA 15%",
L_Disc over the masked positions m only (Table 5: 82.4 against ELECTRA's 85.0 GLUE): `scored`
narrowed to the positions of the used slots, whatever the unused slots hold (objectives.Masked
lets them repeat a used position). L_Disc is the stand-in teaching/stand_ins.disc_loss_scored,
whose value says which tokens it was asked to score."""
from dataclasses import replace

import torch

import objectives
from ablations import ELECTRA15
from config import SIZES, Config
from objectives import Masked
from teaching import stand_ins


def test_l_disc_scores_only_the_used_mask_slots(monkeypatch, stand_in_attention):
    torch.manual_seed(0)
    model = ELECTRA15(replace(Config(), vocab_size=100, objective="electra15", **SIZES["tiny"]))
    monkeypatch.setattr(objectives, "disc_loss", stand_ins.disc_loss_scored)
    x = torch.randint(0, 90, (3, 10))
    positions = torch.tensor([[1, 4, 7], [2, 3, 8], [5, 6, 5]])
    # row 0: slot 3 unused; row 2: slot 3 unused and repeating slot 1's position (Masked
    # allows it), which must stay scored
    weights = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    masked = Masked(x.scatter(1, positions, 99), positions, x.gather(1, positions), weights)
    pad_mask = torch.ones(3, 10, dtype=torch.bool)
    pad_mask[1, 8:] = False                                   # position 8 of row 1 is padding
    is_replaced = torch.zeros(3, 10, dtype=torch.bool)
    loss, _, _ = model.discriminate(x, x, is_replaced, masked, pad_mask.clone(), pad_mask)
    got = stand_ins.scored_of(loss.item(), 3, 10)
    expect = torch.zeros(3, 10, dtype=torch.bool)
    expect[0, [1, 4]] = True
    expect[1, [2, 3]] = True                                   # 8 is padding: never scored
    expect[2, [5, 6]] = True
    assert torch.equal(got, expect), \
        f"scored {got.int().tolist()}, expected {expect.int().tolist()}: the used slots' " \
        f"positions within scored"
