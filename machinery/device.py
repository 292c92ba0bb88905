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


def refuse_unavailable(parser, name):
    """A --device that is not there (cuda without a GPU, say): the parser's one-line error
    while the arguments are read, before any data or model is touched."""
    try:
        pick_device(name)
    except DeviceError as e:
        parser.error(str(e))


def cpu_flags(path="/proc/cpuinfo"):
    """The CPU's instruction-set flags as Linux reports them ("flags" on x86, "Features" on
    ARM); an empty set where the file does not exist (macOS, Windows)."""
    try:
        with open(path) as f:
            for line in f:
                if line.split(":")[0].strip() in ("flags", "Features"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@functools.lru_cache(maxsize=None)
def native_bf16(device_type):
    """Does this device multiply bf16 matrices in hardware?

    On a CPU, oneDNN's own check (torch.ops.mkldnn._is_mkldnn_bf16_supported) also says yes
    for plain AVX-512 CPUs, where bf16 is *emulated*: measured on a 2-core Xeon with AVX-512 but
    no AVX512-BF16, the laptop recipe ran at 9.9k tokens/s under bf16 autocast against 21.7k in
    float32. So we ask for the instructions themselves: AVX512-BF16 or AMX-BF16 on x86, the
    BF16 extension on ARM."""
    if device_type == "cuda":
        return torch.cuda.is_bf16_supported()
    if device_type == "cpu":
        return bool(cpu_flags() & {"avx512_bf16", "amx_bf16", "bf16"})
    return False


def pick_precision(choice, device):
    """("bf16" | "fp32", a function returning the autocast context to run forward passes in)."""
    if choice == "auto":
        choice = "bf16" if native_bf16(device.type) else "fp32"
    if choice == "bf16" and device.type in ("cuda", "cpu"):
        return "bf16", lambda: torch.autocast(device.type, dtype=torch.bfloat16)
    return "fp32", contextlib.nullcontext
