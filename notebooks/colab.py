# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
#   accelerator: GPU
#   colab:
#     provenance: []
# ---

# %% [markdown]
# # ELECTRA-Small on Colab's free GPU
#
# This notebook pre-trains ELECTRA-Small (Clark et al., ICLR 2020) on the GPU Colab lends for
# free (usually a T4), then fine-tunes it on GLUE and sets the scores beside the paper's. It
# runs the repository's own command lines, so everything here also works in a terminal.
#
# 1. **Runtime > Change runtime type > T4 GPU** (any GPU), then **Runtime > Run all**.
# 2. Set `REPO_URL` below to the GitHub repository this notebook came from.
# 3. Checkpoints go to your Google Drive: when Colab disconnects (the free tier does, after
#    a few hours or when idle), run the notebook again and training continues where the last
#    checkpoint left it (`--resume`).
#
# A T4 has no native bf16: its tensor cores run fp16, so the run trains in fp16 with dynamic
# loss scaling (machinery/loss_scale.py) - `--precision auto` picks it; docs/gpu.md has the
# estimate of its speed.
#
# This file is `notebooks/colab.py` (percent format); `notebooks/colab.ipynb` is made from it
# with `jupytext --to ipynb notebooks/colab.py`. Run as a script, it runs end to end at a tiny
# size on a CPU (`ELECTRA_NOTEBOOK_TINY=1 python notebooks/colab.py`), skipping what only
# Colab has, with a line for each.

# %%
import json
import os
import subprocess
import sys
from pathlib import Path

REPO_URL = "https://github.com/<owner>/<repo>"      # the repository this notebook came from
HOURS = 4.0              # pre-training budget (the free tier disconnects; --resume continues)
TASKS = "rte,mrpc,sst2"  # GLUE tasks to fine-tune (all 8: "cola,sst2,mrpc,stsb,qqp,mnli,qnli,rte")
CORPUS = ""              # your own text: a .txt / .txt.xz / .jsonl file or folder; "" below
HF_DATASET = ("wikimedia/wikipedia", "20231101.en", 50_000_000)  # (name, config, tokens) or None

ON_COLAB = "google.colab" in sys.modules
TINY = os.environ.get("ELECTRA_NOTEBOOK_TINY") == "1"     # CI: a tiny model on the CPU


def skipped(what, why="not on Colab"):
    print(f"skipped ({why}): {what}")


def sh(*args, check=True):
    """Run `python <args>` in the repository, printing its output as it comes."""
    print("$ python " + " ".join(map(str, args)), flush=True)
    r = subprocess.run([sys.executable, *map(str, args)], cwd=ROOT)
    if check and r.returncode != 0:
        raise SystemExit(f"the command above failed (exit {r.returncode})")
    return r.returncode


# %% [markdown]
# ## Install
# On Colab: the repository is cloned, and the one package Colab lacks (tiktoken) installed;
# Colab's own PyTorch is used. Google Drive is mounted for the checkpoints.

# %%
if ON_COLAB:
    from google.colab import drive                          # noqa: E402 (Colab only)
    drive.mount("/content/drive")
    ROOT = Path("/content/electra-small")
    if not ROOT.exists():
        subprocess.run(["git", "clone", "--depth", "1", REPO_URL, str(ROOT)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "tiktoken"], check=True)
    WORK = Path("/content/drive/MyDrive/electra-small")     # survives a disconnect
else:
    ROOT = Path(__file__).resolve().parents[1] if "__file__" in globals() else Path.cwd()
    WORK = Path(os.environ.get("ELECTRA_NOTEBOOK_WORK", ROOT / "out" / "notebook"))
    skipped("git clone, pip install tiktoken, mounting Google Drive")
WORK.mkdir(parents=True, exist_ok=True)
sys.path.insert(0, str(ROOT))
print(f"repository {ROOT}; checkpoints and results in {WORK}")

# %% [markdown]
# ## The GPU, and the precision it will train in
# bf16 where the GPU has it (sm_80 and newer), fp16 with loss scaling on a T4 / V100 / RTX 20xx,
# float32 on older cards (docs/gpu.md). A GPU this PyTorch cannot use gets one line saying what
# to install.

# %%
import torch                                                      # noqa: E402

from machinery.device import DeviceError, pick_device, pick_precision  # noqa: E402

try:
    device = pick_device("cpu" if TINY else None)
except DeviceError as e:
    raise SystemExit(f"error: {e}")
precision = pick_precision("auto", device).name
if device.type == "cuda":
    major, minor = torch.cuda.get_device_capability()
    print(f"GPU: {torch.cuda.get_device_name()} (sm_{major}{minor}), training in {precision}")
else:
    print(f"device: {device}, training in {precision}"
          + ("" if TINY else " - no GPU: Runtime > Change runtime type > T4 GPU"))

# %% [markdown]
# ## A corpus
# Your own text (`CORPUS`), else Wikipedia through Hugging Face `datasets` (needs internet
# while preparing), else the built-in demo corpus. Prepared once, kept on Drive.

# %%
DATA = WORK / "data"
size_args = []
if TINY:                               # CI: a made-up corpus and the tiny model
    import random                                                 # noqa: E402
    rng = random.Random(0)
    words = lambda *ws: rng.choice(ws)
    (WORK / "corpus.txt").write_text("\n\n".join(" ".join(
        f"{words('the cat', 'a dog', 'my sister', 'the teacher')} "
        f"{words('sees', 'likes', 'finds', 'helps')} "
        f"{words('the ball', 'a red house', 'the river', 'a book')} in the morning."
        for _ in range(5)) for _ in range(600)))
    CORPUS, HF_DATASET = str(WORK / "corpus.txt"), None
    size_args = ["--size", "tiny", "--threads", "1"]
    skipped("Wikipedia through Hugging Face datasets", "tiny run")
name = "own" if CORPUS else "wiki" if HF_DATASET else None
if name and not (DATA / name / "meta.json").exists():
    if CORPUS:
        sh("data.py", "--corpus", CORPUS, "--name", name, "--out_root", DATA,
           *(["--vocab_size", "300", "--bpe_mb", "1"] if TINY else []))
    else:
        sh("-m", "pip", "install", "-q", "datasets")
        if sh("data.py", "--hf", HF_DATASET[0], "--hf_config", HF_DATASET[1], "--name", name,
              "--out_root", DATA, "--max_tokens", HF_DATASET[2], check=False):
            name = None                  # (offline, say): the demo corpus instead
data_args = ["--data", DATA / name] if name else []
print("corpus:", DATA / name if name else "the built-in demo corpus")

# %% [markdown]
# ## Pre-training
# `--hours` lays the learning-rate schedule over the wall-clock budget; `--compile` makes the
# step one graph replayed as a CUDA graph. A checkpoint is written every 15 minutes to Drive;
# when the runtime disconnected, running this cell again continues with `--resume`, in the
# precision the run started with.

# %%
OUT = WORK / "out"
if TINY and not (OUT / "ckpt.pt").exists():    # CI: 5 of 10 steps, then as after a disconnect
    sh("electra_small.py", "--out_dir", OUT, *data_args, *size_args, "--max_steps", "5")
if (OUT / "ckpt.pt").exists():
    print("a checkpoint is there: continuing it")
    sh("electra_small.py", "--out_dir", OUT, "--resume", *data_args, *size_args,
       *(["--max_steps", "10", "--log_every", "5"] if TINY else []))
else:
    sh("electra_small.py", "--out_dir", OUT, *data_args, *size_args, "--hours", HOURS,
       "--compile")

# %% [markdown]
# ## The training curve
# L_MLM (G's loss) and L_Disc (D's), and D's recall of replaced tokens: for a while D catches
# few of them ("the plateau", docs/plateau.md), then it learns to read their neighbours.

# %%
import matplotlib                                                   # noqa: E402
if not ON_COLAB:
    matplotlib.use("Agg")
import matplotlib.pyplot as plt                                     # noqa: E402

log = [json.loads(line) for line in (OUT / "log.jsonl").read_text().splitlines() if line]
fig, axes = plt.subplots(1, 3, figsize=(13, 3.2))
for ax, key, title in zip(axes, ("mlm_loss", "disc_loss", "disc_acc_replaced"),
                          ("L_MLM (G)", "L_Disc (D)", "D's recall of replaced tokens")):
    ax.plot([r["step"] for r in log], [r[key] or 0 for r in log])
    ax.set_title(title)
    ax.set_xlabel("step")
fig.tight_layout()
fig.savefig(WORK / "training_curve.png")
plt.show() if ON_COLAB else print(f"wrote {WORK / 'training_curve.png'}")
print(f"last record: step {log[-1]['step']}, L_MLM {log[-1]['mlm_loss']:.3f}, "
      f"L_Disc {log[-1]['disc_loss']:.3f}, precision {log[-1].get('precision')}")

# %% [markdown]
# ## A look inside D
# D reads a sentence in which some words were replaced and says, for every token, how sure it
# is that the token was replaced.

# %%
sh("analysis/inspect_discriminator.py", "--ckpt", OUT / "ckpt.pt", "show",
   "the chef cooked the meal and the guests ate it", *(["--threads", "1"] if TINY else []))

# %% [markdown]
# ## Fine-tuning on GLUE, beside the paper
# `finetune_glue.py --download` fetches the tasks (internet needed); Table 7's settings, one
# seed per task (the paper's medians are over 10: `--seeds 10`).

# %%
GLUE = WORK / "glue"
PAPER = dict(cola=54.6, sst2=89.1, mrpc=83.7, stsb=80.3, qqp=88.0, mnli=79.7, qnli=87.7,
             rte=60.8)                       # ELECTRA-Small, dev sets (the paper's Table 8)
results = WORK / "glue.json"
if TINY:                                     # CI (offline): a small made-up SST-2
    (GLUE / "SST-2").mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 64), ("dev", 32)):          # label 1: "wonderful" is there
        rows = [f"{words('the', 'a')} {words('man', 'dog', 'city')} {words('walks', 'sees')}"
                + (" wonderful" if i % 2 else "") + f"\t{i % 2}" for i in range(n)]
        (GLUE / "SST-2" / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    skipped("downloading GLUE", "tiny run")
    sh("finetune_glue.py", "--ckpt", OUT / "ckpt.pt", "--glue_dir", GLUE, "--tasks", "sst2",
       "--epochs", "1", "--threads", "1", "--out", results)
else:
    sh("finetune_glue.py", "--ckpt", OUT / "ckpt.pt", "--download", GLUE, "--tasks", TASKS,
       "--out", results)
ours = json.loads(results.read_text())
print(f"{'task':6} {'this run':>9} {'paper':>7}")
for task, r in ours["tasks"].items():
    print(f"{task:6} {100 * r['median'][r['metric']]:9.1f} {PAPER[task]:7.1f}")
print(f"pre-trained {ours['pretrain']['steps']} steps; the paper: 1M steps (4 days on a V100)")
