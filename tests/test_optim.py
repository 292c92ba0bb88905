"""The paper's optimizer (optim.py): Adam without bias correction, decoupled weight decay."""
import math

import pytest
import torch

from optim import AdamWeightDecay, make_adam


def test_uncorrected_steps_average_about_2_5x_adamw_over_a_glue_run():
    # optim.py's docstring: the uncorrected step is 6.5x AdamW's at step 10, 1.4x at step 700,
    # and about 2.5x on average over 700 steps of 10 % warm-up then linear decay (Table 7's
    # schedule for RTE / MRPC / CoLA), weighted by the learning rate
    ratio = lambda t: (1 - 0.9 ** t) / math.sqrt(1 - 0.999 ** t)  # noqa: E731
    assert round(ratio(10), 1) == 6.5 and round(ratio(700), 1) == 1.4
    total, warm = 700, 70
    num = den = 0.0
    for t in range(1, total + 1):
        lr = min(1.0, t / warm) * (1 - (t - 1) / total)
        num += lr * (1 - 0.9 ** t) / math.sqrt(1 - 0.999 ** t)
        den += lr
    assert 2.3 < num / den < 2.7


def test_make_adam_kinds():
    p = [torch.nn.Parameter(torch.zeros(2))]
    assert isinstance(make_adam(p, "official", 1e-3, (0.9, 0.999), 1e-6), AdamWeightDecay)
    assert isinstance(make_adam(p, "torch", 1e-3, (0.9, 0.999), 1e-6), torch.optim.AdamW)
    with pytest.raises(ValueError):
        make_adam(p, "sgd", 1e-3, (0.9, 0.999), 1e-6)
