"""NaN and infinite losses: seen on the device, reported in one line (machinery; no paper
section - read train.train first).

A loss that becomes NaN or infinite spoils every weight after it. Each step's check stays on
the device: reading a number (.item()) would make the host wait for the GPU at every step. The
first bad step is kept there as a tensor and read only when the run logs or saves, so a
checkpoint is never of a state that has seen a NaN loss: the run stops with one line, and the
last checkpoint still holds the last good state.

In fp16 (machinery/loss_scale.py) a step whose scaled gradients overflow is skipped, not a
divergence: its losses are finite, and the log counts it. A run whose gradients overflow even
unscaled - a step that overflowed at a loss scale of 1 or less - has diverged, and stops the
same way.
"""
import torch


class TrainingDiverged(Exception):
    """The loss became NaN or infinite; the command line prints it as one line."""


def check_finite(bad_step, out, scale_step=None):
    """Raise if any step so far had a NaN or infinite loss (bad_step: 0, or the first bad
    step, a tensor on the device), or, in fp16, gradients that overflowed at a loss scale of 1
    or less (scale_step: likewise)."""
    if scale_step is not None and int(scale_step) > 0 and \
            (bad_step is None or not 0 < int(bad_step) < int(scale_step)):
        raise TrainingDiverged(
            f"the gradients overflowed fp16 even unscaled (at a loss scale of 1 or less, step "
            f"{int(scale_step)}); stopped without saving, so {out / 'ckpt.pt'} still holds the "
            "last good state: lower --lr, or continue with --resume --precision fp32")
    if bad_step is not None and int(bad_step) > 0:
        raise TrainingDiverged(
            f"the loss became NaN or infinite at step {int(bad_step)}; stopped without saving, "
            f"so {out / 'ckpt.pt'} still holds the last good state: lower --lr (or check the "
            "data) and continue with --resume")


class NanWatch:
    """The first step with a NaN/inf loss, kept on the device until `check` reads it."""

    def __init__(self, out):
        self.out, self.bad_step, self.scale_step = out, None, None

    def see(self, stats, step):
        """After step `step`: note it if its L_MLM or L_Disc is not finite (no host read)."""
        bad = ~torch.isfinite(stats["mlm_loss"].detach())
        if "disc_loss" in stats:
            bad |= ~torch.isfinite(stats["disc_loss"].detach())
        first = torch.zeros((), dtype=torch.long, device=bad.device) if self.bad_step is None \
            else self.bad_step
        self.bad_step = torch.where(bad & (first == 0), step, first)
        if "loss_scale" in stats:                         # fp16: overflow even unscaled
            first = torch.zeros_like(self.bad_step) if self.scale_step is None \
                else self.scale_step
            # a step that overflowed at a scale of 1 or less (it halved to 0.5 or less)
            hopeless = (stats["skipped"] > 0) & (stats["loss_scale"] <= 0.5)
            self.scale_step = torch.where(hopeless & (first == 0), step, first)

    def check(self):
        """Raise TrainingDiverged if any step so far had a NaN or infinite loss, or gradients
        that overflowed fp16 even unscaled."""
        check_finite(self.bad_step, self.out, self.scale_step)
