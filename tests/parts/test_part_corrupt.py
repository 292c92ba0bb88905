"""Part 3, corrupt (objectives.corrupt): x_corrupt = REPLACE(x, m, x̂) and its labels, §2.

Every used slot's position takes its sample; unused slots (weight 0) change nothing, whatever
position they hold - one no used slot holds, or a used slot's again (objectives.Masked allows
both); is_replaced is x_corrupt != x, so a sample equal to the original is real."""
import torch

from objectives import Masked, corrupt


MASK = 999         # [MASK] in x_masked: an id no x below holds


def masked_of(x, positions, weights):
    """Masked as mask_tokens makes it: x_masked shows [MASK] at the used slots' positions, so
    it differs from x there (corrupt compares with x, never with x_masked)."""
    used = torch.zeros_like(x).scatter_add(1, positions, (weights > 0).long()) > 0
    return Masked(x.masked_fill(used, MASK), positions, x.gather(1, positions), weights)


def test_hand_worked_example():
    x = torch.tensor([[10, 11, 12, 13, 14]])
    m = masked_of(x, torch.tensor([[1, 3, 0]]), torch.tensor([[1.0, 1.0, 0.0]]))  # slot 3 unused
    x_hat = torch.tensor([[11, 50, 77]])        # slot 0 samples the original token 11
    x_corrupt, is_replaced = corrupt(x, m, x_hat)
    assert x_corrupt.tolist() == [[10, 11, 12, 50, 14]], \
        f"x_corrupt {x_corrupt.tolist()}, expected [[10, 11, 12, 50, 14]] (the unused slot " \
        f"changes nothing)"
    assert is_replaced.tolist() == [[False, False, False, True, False]], \
        f"is_replaced {is_replaced.int().tolist()}, expected [[0, 0, 0, 1, 0]]: a sample " \
        f"equal to the original (11) is real"


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
    assert torch.equal(is_replaced, x_corrupt != x), \
        "is_replaced should be x_corrupt != x (a sample equal to the original is real)"
    expect = torch.zeros_like(x, dtype=torch.bool).scatter(1, positions, x_hat >= 100)
    assert torch.equal(is_replaced, expect), \
        "is_replaced should be True exactly where the sample differs from x (x left unchanged)"
    assert torch.equal(x_corrupt.gather(1, positions), x_hat), \
        "x_corrupt should hold each used slot's sample at its position"


def test_unused_slots_change_nothing():
    x = torch.arange(20).view(2, 10)
    positions = torch.tensor([[2, 5, 7], [0, 9, 3]])        # distinct positions (as topk's)
    m = masked_of(x, positions, torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 0.0]]))
    x_corrupt, is_replaced = corrupt(x, m, torch.full((2, 3), 99))
    expect = x.clone()
    expect[0, 2], expect[1, 0], expect[1, 9] = 99, 99, 99
    assert torch.equal(x_corrupt, expect), \
        f"x_corrupt {x_corrupt.tolist()}, expected {expect.tolist()}: unused slots change nothing"
    assert is_replaced.dtype == torch.bool, f"is_replaced should be bool, got {is_replaced.dtype}"
    assert is_replaced.sum() == 3, \
        f"{int(is_replaced.sum())} tokens marked replaced, expected 3 (the used slots')"


def test_unused_slots_that_repeat_a_used_position_change_nothing():
    """A mask may fill its unused slots with a used position (its first choice, say). Written
    after the used slot, such a slot must not put the original token (or its own sample) back."""
    x = torch.arange(20).view(2, 10)
    positions = torch.tensor([[2, 5, 2, 2], [7, 7, 7, 7]])   # unused slots repeat used ones
    m = masked_of(x, positions, torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]))
    x_hat = torch.tensor([[50, 51, 52, 53], [60, 61, 62, 63]])
    x_corrupt, is_replaced = corrupt(x, m, x_hat)
    expect = x.clone()
    expect[0, 2], expect[0, 5], expect[1, 7] = 50, 51, 60
    assert torch.equal(x_corrupt, expect), \
        f"x_corrupt {x_corrupt.tolist()}, expected {expect.tolist()}: an unused slot repeating " \
        f"a used position must not write"
    assert torch.equal(is_replaced, expect != x), \
        f"is_replaced {is_replaced.int().tolist()}, expected {(expect != x).int().tolist()}"
