"""A compiled step carried to a fresh machine: torch.compile's portable cache (machinery; no paper
section - what --compile_cache does for a GPU that starts with an empty disk each time).

torch.compile keeps what it compiled in a cache on the local disk (Inductor's and AOTAutograd's,
under TORCHINDUCTOR_CACHE_DIR), so a second run on the same machine starts in seconds. A rented
or shared GPU often starts bare: every run compiles from scratch, minutes at Table 6's size
(docs/gpu.md). PyTorch can pack those caches into one blob (torch.compiler.save_cache_artifacts)
and unpack it on another machine (load_cache_artifacts) before anything compiles; the graphs the
run then compiles are looked up there first, by a key that hashes the graph, the torch version
and the device, so an artifact is used only for the graph it was made from.

--compile_cache FILE does both: it loads FILE, if there is one, before the first compile, and
after the first compiled step writes FILE anew with every artifact the run used (loaded or
compiled). What one saves is the graphs of one kind of run - a pre-training of one size and
model, or one fine-tuning setup - so give each kind its own file.

The file starts with one line of JSON naming where it was made (torch, Triton, Python, the
device); a file from elsewhere is not loaded, with one line, and the run compiles from scratch
and writes its own. A file that cannot be read is the same: one line, never a failed run.

What it saves, measured on a CPU (benchmarks/compile_time.py --cache, the Table 6 model at batch
8, 2-core AMD EPYC, torch 2.13.0; docs/gpu.md): the whole step's first step from 212 to 64 s,
the regional step's from 24 to 20 s, the losses equal bit for bit. On a CPU the C++ kernels are
still built from their saved source; on CUDA the file holds the compiled Triton kernels too
(Inductor's bundle_triton_into_fx_graph_cache) and the autotuning results - not measured yet.

A loaded artifact is checked like a freshly compiled one: benchmarks/selfcheck.py takes
--compile_cache too, and benchmarks/gpu_measure.sh runs it with the cache it carried.
"""
import json
import logging
import platform
import sys

import torch

from machinery.atomic import atomic_write

MAGIC = "electra-small compile cache"


def made_on(device):
    """Where artifacts made now could be used: what must match for a file to be loaded."""
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = f"{device.type} {platform.machine()}"
    return {"torch": torch.__version__, "triton": triton_version,
            "python": f"{sys.version_info[0]}.{sys.version_info[1]}", "device": name}


def load(path, device, say=print):
    """Load the artifacts in `path` into torch.compile's caches before anything compiles.
    Returns how many were loaded; 0, after one line, for a file from elsewhere or unreadable,
    and 0 silently where there is no file yet."""
    try:
        with open(path, "rb") as f:
            header = json.loads(f.readline())
            blob = f.read()
    except FileNotFoundError:
        return 0
    except (OSError, ValueError) as e:
        say(f"compile cache {path}: unreadable ({type(e).__name__}); compiling from scratch")
        return 0
    here = made_on(device)
    if not isinstance(header, dict) or header.get("magic") != MAGIC:
        say(f"compile cache {path}: not a file --compile_cache wrote; compiling from scratch")
        return 0
    differ = [f"{k} {header.get(k)} (here {v})" for k, v in here.items() if header.get(k) != v]
    if differ:
        say(f"compile cache {path}: made with {', '.join(differ)}; compiling from scratch")
        return 0
    quiet = logging.getLogger("torch.compiler._cache")     # (its warning comes with a traceback)
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        info = torch.compiler.load_cache_artifacts(blob)
        problem = None if info is not None else "damaged: its checksum or contents are wrong"
    except Exception as e:
        problem = f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:100]}"
    finally:
        quiet.setLevel(level)
    if problem:                     # (a damaged blob): as if there were none
        say(f"compile cache {path}: could not be loaded ({problem}); compiling from scratch")
        return 0
    n = count(info)
    say(f"compile cache {path}: {n} compiled artifacts loaded")
    return n


def save(path, device, say=print):
    """Write every artifact this process has compiled or loaded to `path` (atomically: a run
    stopped mid-write leaves the old file). Returns the bytes written (0: nothing compiled)."""
    try:
        saved = torch.compiler.save_cache_artifacts()
    except Exception as e:
        say(f"compile cache {path}: not saved ({type(e).__name__}: "
            f"{(str(e).splitlines() or [''])[0][:100]})")
        return 0
    if not saved or not saved[0]:
        return 0
    blob, info = saved
    header = json.dumps(dict(magic=MAGIC, **made_on(device), artifacts=count(info)))

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(header.encode() + b"\n" + blob)
    try:
        atomic_write(path, write)
    except OSError as e:
        say(f"compile cache {path}: not saved ({e.strerror or type(e).__name__})")
        return 0
    say(f"compile cache {path}: {count(info)} compiled artifacts saved "
        f"({len(blob) / 2**20:.1f} MiB)")
    return len(blob)


def count(info):
    """The number of artifacts a CacheInfo names (of every kind: Inductor, AOTAutograd, ...)."""
    artifacts = getattr(info, "artifacts", None) or {}
    return sum(len(v) for v in artifacts.values())
