"""NaN and infinite losses: seen on the device, reported in one line (machinery; no paper
section - read train.train first).

A loss that becomes NaN or infinite spoils every weight after it. Each step's check stays on
the device: reading a number (.item()) would make the host wait for the GPU at every step. The
first bad step is kept there as a tensor and read only when the run logs or saves, so a
checkpoint is never of a state that has seen a NaN loss: the run stops with one line, and the
last checkpoint still holds the last good state.
"""
import torch


class TrainingDiverged(Exception):
    """The loss became NaN or infinite; the command line prints it as one line."""


def check_finite(bad_step, out):
    """Raise if any step so far had a NaN or infinite loss (bad_step: 0, or the first bad
    step, a tensor on the device)."""
    if bad_step is not None and int(bad_step) > 0:
        raise TrainingDiverged(
            f"the loss became NaN or infinite at step {int(bad_step)}; stopped without saving, "
            f"so {out / 'ckpt.pt'} still holds the last good state: lower --lr (or check the "
            "data) and continue with --resume")


class NanWatch:
    """The first step with a NaN/inf loss, kept on the device until `check` reads it."""

    def __init__(self, out):
        self.out, self.bad_step = out, None

    def see(self, stats, step):
        """After step `step`: note it if its L_MLM or L_Disc is not finite (no host read)."""
        bad = ~torch.isfinite(stats["mlm_loss"].detach())
        if "disc_loss" in stats:
            bad |= ~torch.isfinite(stats["disc_loss"].detach())
        first = torch.zeros((), dtype=torch.long, device=bad.device) if self.bad_step is None \
            else self.bad_step
        self.bad_step = torch.where(bad & (first == 0), step, first)

    def check(self):
        """Raise TrainingDiverged if any step so far had a NaN or infinite loss."""
        check_finite(self.bad_step, self.out)
