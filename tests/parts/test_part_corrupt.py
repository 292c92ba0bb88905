"""Part 3, corrupt (objectives.corrupt): x_corrupt = REPLACE(x, m, x̂) and its labels, §2."""
import torch

from objectives import Masked, corrupt


def masked_of(x, positions, weights):
    return Masked(x.clone(), positions, x.gather(1, positions), weights)


def test_hand_worked_example():
    x = torch.tensor([[10, 11, 12, 13, 14]])
    m = masked_of(x, torch.tensor([[1, 3, 0]]), torch.tensor([[1.0, 1.0, 0.0]]))  # slot 3 unused
    x_hat = torch.tensor([[11, 50, 77]])        # slot 0 samples the original token 11
    x_corrupt, is_replaced = corrupt(x, m, x_hat)
    assert x_corrupt.tolist() == [[10, 11, 12, 50, 14]]     # the unused slot left 10 alone
    assert is_replaced.tolist() == [[False, False, False, True, False]]


def test_a_sample_equal_to_the_original_is_real():
    """§2: "if the generator happens to generate the correct token, that token is considered
    'real' instead of 'fake'" - so the labels are not "was this position masked"."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 100, (16, 32), generator=g)
    positions = torch.stack([torch.randperm(32, generator=g)[:6] for _ in range(16)])
    m = masked_of(x, positions, torch.ones(16, 6))
    x_hat = torch.where(torch.rand(16, 6, generator=g) < 0.5, x.gather(1, positions),
                        torch.randint(100, 200, (16, 6), generator=g))     # half right, half new
    x_corrupt, is_replaced = corrupt(x, m, x_hat)
    assert torch.equal(is_replaced, x_corrupt != x)
    expect = torch.zeros_like(x, dtype=torch.bool).scatter(1, positions, x_hat >= 100)
    assert torch.equal(is_replaced, expect)
    assert torch.equal(x_corrupt.gather(1, positions), x_hat)


def test_unused_slots_change_nothing():
    x = torch.arange(20).view(2, 10)
    positions = torch.tensor([[2, 5, 7], [0, 9, 3]])        # positions are distinct (topk)
    m = masked_of(x, positions, torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]))
    x_corrupt, is_replaced = corrupt(x, m, torch.full((2, 3), 99))
    expect = x.clone()
    expect[0, 2], expect[1, 0], expect[1, 9] = 99, 99, 99
    assert torch.equal(x_corrupt, expect)
    assert is_replaced.sum() == 3 and is_replaced.dtype == torch.bool
