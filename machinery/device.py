"""Which device and which precision (machinery; no paper section - skip on a first read).

Both command lines (pre-training and GLUE fine-tuning) pick a device the same way - CUDA if
present, else Apple's MPS, else the CPU - and a precision for it (`--precision auto`):

| hardware                                           | auto | why                           |
|----------------------------------------------------|------|-------------------------------|
| NVIDIA sm_80+ (RTX 30xx/40xx, A100, L4, H100)      | bf16 | tensor cores run bf16         |
| NVIDIA sm_70-sm_75 (V100, T4, RTX 20xx, GTX 16xx)  | fp16 | fp16 only; bf16 is emulated   |
| NVIDIA sm_6x and older (GTX 10xx, P100)            | fp32 | no tensor cores               |
| CPU with AVX512-BF16 / AMX / ARM BF16              | bf16 | bf16 matrix units             |
| other CPUs, Apple's MPS                            | fp32 |                               |

Autocast keeps the weights, the optimizer and the losses (computed in float32 in
generator.py / discriminator.py, G's sample x̂ too) in float32, so it changes speed, not the
recipe. fp16's range is small (largest 65504, smallest normal 6e-5): its gradients need dynamic
loss scaling, machinery/loss_scale.py. bf16 has float32's range and needs none.

Where a GPU is there but cannot be used - a PyTorch built without its compute capability, a
driver too old for the PyTorch, the CPU build of PyTorch - `pick_device` raises one line that
says what to install (or to pass --device cpu) instead of running on the CPU unasked or failing
at the first kernel ("no kernel image"). `compile_refusal` says in one line why torch.compile
cannot compile for this GPU, before minutes of tracing end in a silent eager run.
"""
import contextlib
import functools
import os
import shutil
import warnings
from typing import Callable, NamedTuple

import torch

PRECISIONS = ("auto", "bf16", "fp16", "fp32")
PYTORCH_INSTALL = "https://pytorch.org/get-started/locally/"


class DeviceError(Exception):
    """A device the user asked for that is not there, or a GPU this PyTorch cannot use; the
    command lines print one line."""


def pick_device(name=None):
    """torch.device for --device `name` (None: the best available), or DeviceError."""
    if name == "mps" and not torch.backends.mps.is_available():
        raise DeviceError("--device mps: Apple's MPS backend is not available")
    if name in ("cpu", "mps"):
        return torch.device(name)
    problem = cuda_problem()                 # a GPU that is there but cannot be used
    if problem:
        raise DeviceError(problem + ("" if name else "; or pass --device cpu"))
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceError("--device cuda: no CUDA GPU is visible to PyTorch")
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


def nvidia_driver():
    """Is an NVIDIA driver installed (so an NVIDIA GPU is very likely there)?"""
    return os.path.exists("/proc/driver/nvidia/version") or shutil.which("nvidia-smi") is not None


def base_version():
    return torch.__version__.split("+")[0]


def builds_for(cc):
    """The CUDA versions of PyTorch's published wheels (x86-64) whose kernels run on compute
    capability cc (e.g. 70), from torch's own table where this torch has one."""
    table = getattr(torch.cuda, "PYTORCH_RELEASES_CODE_CC", None)
    compatible = getattr(torch.cuda, "_code_compatible_with_device", None)
    if not table or not compatible:
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [cuda for cuda, by_arch in table.items()
                if any(compatible(cc, code) for code in by_arch.get("x86_64", ()))]


def arch_supported(cc, arch_list):
    """Does a build for `arch_list` (torch.cuda.get_arch_list(): "sm_75", "compute_90", ...)
    run on compute capability cc (e.g. 75)? Kernels for sm_XY run on the same major version at
    Y or above; PTX (compute_XY) is compiled by the driver for any later GPU."""
    for arch in arch_list:
        kind, _, num = arch.partition("_")
        if not num.isdigit():
            continue
        code = int(num)
        if kind == "sm" and code // 10 == cc // 10 and code <= cc:
            return True
        if kind == "compute" and code <= cc:
            return True
    return not arch_list                     # (a build that lists nothing: trust it)


def install_line(cc):
    """What to install for a GPU of compute capability cc."""
    cudas = builds_for(cc)
    if cudas:
        cu = "cu" + cudas[-1].replace(".", "")
        return (f"pip install torch=={base_version()} --index-url "
                f"https://download.pytorch.org/whl/{cu}")
    return f"install a PyTorch build for sm_{cc} ({PYTORCH_INSTALL})"


@functools.lru_cache(maxsize=None)
def cuda_problem():
    """None where CUDA works or no NVIDIA GPU is there; else one line: why this PyTorch cannot
    use the GPU, and what to install."""
    if torch.version.cuda is None:
        if getattr(torch.version, "hip", None) or not nvidia_driver():
            return None
        return (f"an NVIDIA driver is installed but this PyTorch {torch.__version__} is the CPU "
                f"build: pip install torch=={base_version()} (Linux's default is a CUDA build; "
                f"{PYTORCH_INSTALL})")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    if not available:
        said = " ".join(str(w.message) for w in caught)
        if "too old" in said or "driver" in said.lower() and nvidia_driver():
            return (f"the NVIDIA driver is too old for this PyTorch (built for CUDA "
                    f"{torch.version.cuda}): update the driver, or install a PyTorch built for "
                    f"an older CUDA ({PYTORCH_INSTALL})")
        if nvidia_driver():
            return (f"an NVIDIA driver is installed but PyTorch (CUDA {torch.version.cuda}) sees "
                    "no GPU (check nvidia-smi, and CUDA_VISIBLE_DEVICES="
                    f"{os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')})")
        return None
    major, minor = torch.cuda.get_device_capability()
    cc, archs = 10 * major + minor, torch.cuda.get_arch_list()
    if not arch_supported(cc, archs):
        return (f"{torch.cuda.get_device_name()} (sm_{cc}) is not among the GPUs this PyTorch "
                f"{torch.__version__} was built for ({' '.join(archs)}): {install_line(cc)}")
    return None


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


def native_bf16(device_type):
    """Does this device multiply bf16 matrices in hardware?

    On a GPU: compute capability 8.0 or newer, what torch.cuda.is_bf16_supported(
    including_emulation=False) answers (its default, True, also says yes for a T4 or a V100,
    which only emulate bf16, without tensor cores). On a CPU, oneDNN's own check
    (torch.ops.mkldnn._is_mkldnn_bf16_supported) also says yes for plain AVX-512 CPUs, where
    bf16 is *emulated*: measured on a 2-core Xeon with AVX-512 but no AVX512-BF16, the laptop
    recipe ran at 9.9k tokens/s under bf16 autocast against 21.7k in float32. So we ask for the
    instructions themselves: AVX512-BF16 or AMX-BF16 on x86, the BF16 extension on ARM."""
    if device_type == "cuda":
        if getattr(torch.version, "hip", None):
            return True
        return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8
    if device_type == "cpu":
        return _cpu_native_bf16()
    return False


@functools.lru_cache(maxsize=None)
def _cpu_native_bf16():
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16", "bf16"})


native_bf16.cache_clear = _cpu_native_bf16.cache_clear     # (the tests stand in other CPUs)


def auto_precision(device):
    """--precision auto's choice for `device` (the table above)."""
    if device.type == "cuda":
        if native_bf16("cuda"):
            return "bf16"
        return "fp16" if torch.cuda.get_device_capability(device)[0] >= 7 else "fp32"
    return "bf16" if device.type == "cpu" and native_bf16("cpu") else "fp32"


class Precision(NamedTuple):
    """name: "bf16" | "fp16" | "fp32"; autocast(): the context forward passes run in."""
    name: str
    autocast: Callable

    @property
    def scaled(self):
        """Does training need loss scaling (machinery/loss_scale.py)?"""
        return self.name == "fp16"


def pick_precision(choice, device):
    """Precision(name, autocast) for --precision `choice` ("auto", None, or a name) on
    `device`; on MPS (and any device without autocast here) everything runs in float32."""
    name = auto_precision(device) if choice in (None, "auto") else choice
    if name in ("bf16", "fp16") and device.type in ("cuda", "cpu"):
        dtype = torch.bfloat16 if name == "bf16" else torch.float16
        return Precision(name, lambda: torch.autocast(device.type, dtype=dtype))
    return Precision("fp32", contextlib.nullcontext)


def compile_refusal(device, precision):
    """One line where torch.compile's Inductor cannot compile for this GPU in `precision`
    (a name), else None. Inductor writes Triton kernels, which need compute capability 7.0
    (torch.utils._triton); it skips bf16 graphs below 8.0 (torch._inductor.compile_fx:
    "does not support bfloat16 compilation natively") and runs them eagerly."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    major, minor = torch.cuda.get_device_capability(device)
    if major < 7:
        return (f"--compile: {name} (sm_{major}{minor}) is older than Triton's compute "
                "capability 7.0, so torch.compile cannot generate its kernels: the step runs "
                "eagerly (leave out --compile)")
    if precision == "bf16" and major < 8:
        return (f"--compile: {name} (sm_{major}{minor}) has no native bf16, which torch.compile "
                "needs for a bf16 graph: the step runs eagerly (pass --precision fp16, the "
                "default on this GPU)")
    try:
        import triton  # noqa: F401
    except ImportError:
        return ("--compile: Triton is not installed, which torch.compile needs on a GPU: "
                "pip install triton (the step runs eagerly until then)")
    return None
