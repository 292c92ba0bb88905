"""Which device and which precision (machinery; no paper section - skip on a first read).

Both command lines (pre-training and GLUE fine-tuning) pick a device the same way - CUDA if
present, else Apple's MPS, else the CPU - and use bf16 autocast where the hardware computes bf16
natively: recent NVIDIA GPUs (tensor cores), and CPUs with AVX512-BF16 / AMX, where bf16
matrix multiplies run several times faster than float32. Autocast keeps the weights, the
optimizer and the losses (computed in float32 in generator.py / discriminator.py) in float32,
so it changes speed, not the recipe. Elsewhere everything stays in float32.
"""
import contextlib
import functools

import torch


class DeviceError(Exception):
    """A device the user asked for that is not there; the command lines print one line."""


def pick_device(name=None):
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceError("--device cuda: no CUDA GPU is visible to PyTorch")
    if name == "mps" and not torch.backends.mps.is_available():
        raise DeviceError("--device mps: Apple's MPS backend is not available")
    if name:
        return torch.device(name)
    return torch.device("cuda" if torch.cuda.is_available() else
                        "mps" if torch.backends.mps.is_available() else "cpu")


@functools.lru_cache(maxsize=None)
def native_bf16(device_type):
    if device_type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device_type == "cpu":
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return False


def pick_precision(choice, device):
    """("bf16" | "fp32", a function returning the autocast context to run forward passes in)."""
    if choice == "auto":
        choice = "bf16" if native_bf16(device.type) else "fp32"
    if choice == "bf16" and device.type in ("cuda", "cpu"):
        return "bf16", lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return "fp32", contextlib.nullcontext
