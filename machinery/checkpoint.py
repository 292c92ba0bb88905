"""Checkpoints: one self-contained file per pre-training state (machinery; no paper section).

A checkpoint holds everything needed to continue or to use a run: the config, the weights, the
optimizer, the step, the FLOPs and wall time so far (for compute-vs-GLUE plots, Table 1), the
RNG states and data position (so --resume continues exactly), the data folder's path (so the
analyses find its held-out text), and the tokenizer itself (so a checkpoint works without the
data folder it was trained on).

Safety rules: files are written to a temporary name and renamed into place (a crash or Ctrl-C
mid-write never leaves a truncated ckpt.pt), and loaded with torch.load(weights_only=True), which
refuses pickled code - a checkpoint from someone else cannot run anything on your machine.
"""
from pathlib import Path

import torch

from machinery.atomic import atomic_write

KIND = "electra-small-pretraining"
VERSION = 1


class CheckpointError(Exception):
    """A checkpoint that cannot be used; the command line prints it as one line."""


def save_checkpoint(path, state):
    """Atomically write `state` (a dict of tensors and plain values) to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: torch.save({"kind": KIND, "version": VERSION, **state}, tmp))


def remove_stale_temporaries(folder):
    """Delete the hidden `.NAME.tmp-PID` files that a writer killed mid-write (SIGKILL, power
    loss) leaves beside its checkpoints. The checkpoints themselves are whole - the rename
    never happened - so only the debris goes. Returns the names removed."""
    removed = []
    for f in Path(folder).glob(".*.pt.tmp-*"):
        f.unlink(missing_ok=True)
        removed.append(f.name)
    return removed


def load_checkpoint(path, map_location="cpu"):
    """Load and check a pre-training checkpoint, or raise CheckpointError with one clear line."""
    path = Path(path)
    if path.is_dir():                           # a run's --out_dir given for its checkpoint
        inside = next((f for f in [path / "ckpt.pt", *sorted(path.glob("*.pt"))]
                       if f.is_file()), None)
        raise CheckpointError(f"{path} is a folder, not a checkpoint file: " + (
            f"give the file, e.g. {inside}" if inside else "it holds no .pt file"))
    if not path.is_file():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:                      # truncated zip, random bytes, pickled code, ...
        raise CheckpointError(f"{path}: cannot be read as a checkpoint ({type(e).__name__}); "
                              "it may be truncated or not a checkpoint of this project") from None
    if not isinstance(ckpt, dict) or ckpt.get("kind") != KIND:
        raise CheckpointError(f"{path}: not an ELECTRA-Small pre-training checkpoint")
    missing = [k for k in ("config", "model", "step", "tokenizer") if k not in ckpt]
    if missing:
        raise CheckpointError(f"{path}: checkpoint lacks {', '.join(missing)}")
    return ckpt


def rng_state():
    """The torch RNG states (CPU and every GPU): dropout masks and generator samples come from
    these, so saving them makes the step after a resume identical to the one never taken."""
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if torch.backends.mps.is_available():              # Apple's GPU draws from its own
        state["mps"] = torch.mps.get_rng_state()
    return state


def set_rng_state(state):
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "mps" in state and torch.backends.mps.is_available():
        torch.mps.set_rng_state(state["mps"])
