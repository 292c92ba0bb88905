"""Fine-tune a pre-trained discriminator on GLUE: the paper's evaluation (§3.1, Appendix B, C).

The paper says (Figure 2's caption) "we throw out the generator and only fine-tune the
discriminator", with "simple linear classifiers on top" (§3.1). This code puts one linear
layer on D's [CLS] vector (`Classifier`) and trains everything with Table 7's values for Small
(`HPARAMS`): lower layers learn more slowly (layer-wise decay 0.8), 3 epochs, 10 for RTE and
STS-B. Each task is scored by §3.1's metric (glue.py), the median of 10 seeds with
`--seeds 10`, as §3.1 reports.

Details: from the official code, not the paper: Adam without bias correction (optim.py) and
the layer-decay exponents (`layerwise_param_groups`). Not from it: its weight decay 0.01 and
learning rate 1e-4 for Small (configure_finetuning.py), where Table 7 says 0 and 3e-4.
`--seeds` defaults to 1.

    python finetune_glue.py --ckpt out/ckpt.pt --glue_dir glue
    python finetune_glue.py --ckpt out/ckpt.pt --glue_dir glue --tasks rte,mrpc --seeds 10

Engineering: batches group examples of similar length and are padded to their longest only
(RTE: 2 % padding instead of 80 %); bf16 autocast where the hardware has it. With --compile
(the default on a GPU) each batch is padded further, to one of a few lengths (--buckets), so
that each length is one compiled graph, a CUDA graph on a GPU (machinery/static_shapes.py). On a
2-core CPU shared with other jobs use --threads 1: PyTorch's threads otherwise wait for each other.
"""
import argparse
import json
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from machinery import cli, compile_cache
from machinery.atomic import atomic_write
from machinery.checkpoint import CheckpointError, load_checkpoint
from machinery.device import DeviceError, compile_refusal, pick_device, pick_precision, \
    refuse_unavailable
from machinery.loss_scale import make_loss_scale
from machinery.static_shapes import DEFAULT_BUCKETS, Padded, bucket_lengths, bucket_list, \
    compiled_shapes
from encoder import Embeddings, Encoder, EncoderConfig, init_weights
from glue import TASKS, GlueError, both_orders, download_glue, encode_examples, print_table, \
    read_task, summarize, task_metrics
from optim import make_adam
from machinery.tokenizer import Tokenizer

# Table 7's values for Small, in one place (its one column gives some per model size).
HPARAMS = dict(lr=3e-4, layer_decay=0.8, adam_betas=(0.9, 0.999), adam_eps=1e-6,
               weight_decay=0.0, warmup_frac=0.1, batch_size=32, dropout=0.1, max_len=128,
               grad_clip=1.0,          # global-norm clipping at 1.0, as the official optimizer
               optimizer="official",   # Adam without bias correction, as the official code
               decay_rule="official")  # layer-wise exponents of the official code (see below)
STSB_MAX = 5.0                          # STS-B scores lie in [0, 5]


# ----------------------------------------------------------------------------- the model

class Classifier(nn.Module):
    """D's embeddings and encoder, then dropout and one linear layer on the [CLS] vector; n_out:
    the number of classes, or 1 for STS-B's regression.

    Details: the official code's head (classification_tasks.py), without BERT's dense + tanh
    "pooler"."""

    def __init__(self, vocab_size, emb_size, max_len, enc: EncoderConfig, n_out, dropout=0.1):
        super().__init__()
        self.embeddings = Embeddings(vocab_size, emb_size, max_len, dropout=dropout)
        self.encoder = Encoder(replace(enc, dropout=dropout), emb_size)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(enc.hidden, n_out)
        # Details: the official head (classification_tasks.py) is a bare tf.layers.dense:
        # Glorot uniform (encoder.init_weights), ~4x larger weights than N(0, 0.02).
        self.head.glorot = True
        init_weights(self.head)

    def forward(self, ids, segment_ids, pad_mask):
        h = self.encoder(self.embeddings(ids, segment_ids), pad_mask)
        return self.head(self.drop(h[:, 0])).float()      # [CLS] is position 0


def load_pretrained(path):
    """The encoder part of a pre-training checkpoint: (weights, shapes, tokenizer, info).

    Engineering: a folder is a Hugging Face ELECTRA (config.json, weights, vocab.txt):
    interop/hf_import.py."""
    if Path(path).is_dir():
        from interop.hf_import import load_hf_electra
        return load_hf_electra(path)
    ckpt = load_checkpoint(path)
    try:
        c = ckpt["config"]
        prefix = "mlm." if c["model"] == "bert" else "discriminator."
        keep = (prefix + "embeddings.", prefix + "encoder.")
        state = {k[len(prefix):]: v for k, v in ckpt["model"].items() if k.startswith(keep)}
        shapes = dict(vocab_size=c["vocab_size"], emb_size=c["emb_size"], max_len=c["max_len"],
                      enc=EncoderConfig(**c["disc"]))
        tok = Tokenizer.from_text(ckpt["tokenizer"])
        info = dict(model=c["model"], objective="mlm" if c["model"] == "bert" else
                    c.get("objective", "electra"), flops=float(ckpt.get("flops", 0.0)),
                    steps=int(ckpt["step"]), elapsed_s=float(ckpt.get("elapsed_s", 0.0)),
                    params=sum(v.numel() for v in state.values()), device=ckpt.get("device"))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{path}: not a usable pre-training checkpoint "
                              f"({type(e).__name__}: {e})") from None
    if not state:
        raise CheckpointError(f"{path}: holds no {prefix}embeddings/encoder weights")
    if tok.vocab_size != shapes["vocab_size"]:
        raise CheckpointError(f"{path}: tokenizer has {tok.vocab_size} ids, the model "
                              f"{shapes['vocab_size']}")
    return state, shapes, tok, info


def build_classifier(state, shapes, n_out, dropout):
    model = Classifier(**shapes, n_out=n_out, dropout=dropout)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or any(not k.startswith("head.") for k in missing):
        raise CheckpointError(f"checkpoint weights do not fit the encoder (missing "
                              f"{[k for k in missing if not k.startswith('head.')][:3]}, "
                              f"unexpected {unexpected[:3]})")
    return model


def layerwise_param_groups(model, lr, decay, rule="official"):
    """Layer-wise learning-rate decay (Table 7: 0.8 for Small): lower layers move less. A
    parameter at depth d gets $η ⋅ decay^{L + 2 − d}$ for L blocks.

    Details: rule "official" (default): the depths of the official code (model/optimization.py,
    `_get_layer_lrs`): the head at $L + 2$, block i at
    $i + 1$ (so the top block gets $0.8^2 = 0.64$ of η), the embeddings and their projection at
    0 ($0.8^{14} ≈ 0.044$ of η for $L = 12$); no parameter sits at $L + 1$.
    rule "stated": one factor per layer below the head, the rule as usually described: the
    head at η (depth $L + 2$, as "official"), the top block at 0.8 η, block i at
    $η ⋅ 0.8^{L − i}$, the embeddings and their projection at $η ⋅ 0.8^{L + 1}$."""
    if rule not in ("official", "stated"):
        raise ValueError(f"unknown layer-decay rule {rule!r}: use 'official' or 'stated'")
    L = len(model.encoder.blocks)
    groups = {}
    # BEGIN ASSIGNMENT layer_decay
    for name, p in model.named_parameters():
        if name.startswith("head."):
            depth = L + 2
        elif name.startswith("encoder.blocks."):
            i = int(name.split(".")[2])
            depth = i + 1 if rule == "official" else i + 2
        else:                                     # embeddings.*, encoder.proj.*
            depth = 0 if rule == "official" else 1
        power = L + 2 - depth
        g = groups.setdefault(power, {"params": [], "names": [], "lr": lr * decay ** power})
        g["params"].append(p)
        g["names"].append(name)
    # END ASSIGNMENT layer_decay
    return [groups[k] for k in sorted(groups)]


def lr_multiplier(step, total, warmup):
    """Linear warm-up over the first 10 % of updates (Table 7), times a linear decay to 0.

    Details: as the official code (model/optimization.py, `warmup_proportion` 0.1); step counts
    from 1."""
    return min(1.0, step / max(1, warmup)) * max(0.0, 1.0 - (step - 1) / total)


# ----------------------------------------------------------------------------- batches

def length_batches(lengths, batch_size, rng, window=50):
    """Engineering: shuffled batches of similar length: shuffle, sort each window of 50
    batches by length, cut, shuffle the batches. Each is padded to its own longest only."""
    idx = rng.permutation(len(lengths))
    batches = []
    for s in range(0, len(idx), batch_size * window):
        w = idx[s:s + batch_size * window]
        w = w[np.argsort(lengths[w], kind="stable")]
        batches += [w[i:i + batch_size] for i in range(0, len(w), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def collate(inputs, idx, pad_id, device):
    """Engineering: the chosen examples padded to the longest of them: (ids, segment ids,
    pad mask)."""
    T = max(len(inputs[i][0]) for i in idx)
    ids = torch.full((len(idx), T), pad_id, dtype=torch.long)
    seg = torch.zeros((len(idx), T), dtype=torch.long)
    for r, i in enumerate(idx):
        x, s = inputs[i]
        ids[r, :len(x)], seg[r, :len(s)] = torch.tensor(x), torch.tensor(s)
    return ids.to(device), seg.to(device), (ids != pad_id).to(device)


@torch.inference_mode()
def predict(model, inputs, pad_id, device, autocast, regression, batch_size=128):
    """Engineering: dev-set predictions, in input order, from batches sorted by length."""
    model.eval()
    order = np.argsort([len(x) for x, _ in inputs], kind="stable")
    out = np.empty(len(inputs), dtype=np.float32)
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        with autocast():
            logits = model(*collate(inputs, idx, pad_id, device))
        out[idx] = (logits[:, 0] if regression else logits.argmax(-1)).float().cpu().numpy()
    return out


# ----------------------------------------------------------------------------- one run

def finetune(name, data, pre, seed, device, autocast, epochs, hp=HPARAMS, log=print,
             static=None, precision=None):
    """Fine-tune one copy of the encoder on one task with one seed; the dev metrics at the
    end of training (no early stopping, as the official run_finetuning.py).

    Engineering: `static`, a machinery.static_shapes.StaticShapes, runs the same batches
    padded to fixed shapes through its compiled graphs (--compile); precision "fp16" scales
    the loss (machinery/loss_scale.py)."""
    t0 = time.time()
    state, shapes, tok, _ = pre
    task = TASKS[name]
    (train_in, train_y), devs = data
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = build_classifier(state, shapes, 1 if task.regression else len(task.labels),
                             hp["dropout"]).to(device)
    groups = layerwise_param_groups(model, hp["lr"], hp["layer_decay"], hp["decay_rule"])
    opt = make_adam(groups, hp["optimizer"], hp["lr"], hp["adam_betas"], hp["adam_eps"],
                    hp["weight_decay"], fused=device.type == "cuda")
    base_lrs = [g["lr"] for g in opt.param_groups]
    loss_scale = make_loss_scale(precision, opt, device)
    lengths = np.array([len(x) for x, _ in train_in])
    total = epochs * math.ceil(len(train_in) / hp["batch_size"])
    warmup, step = math.ceil(hp["warmup_frac"] * total), 0
    # STS-B is a regression onto label / 5, a score in [0, 1]; scaling the predictions
    # leaves their correlations unchanged.
    #
    # Details: as the official code (classification_tasks.py).
    labels = torch.from_numpy(train_y / STSB_MAX if task.regression else train_y)
    if static:
        train_padded = Padded(train_in, tok.pad_id, static.buckets[-1])
    for epoch in range(1, epochs + 1):
        model.train()
        te, loss_sum, n_batches = time.time(), torch.zeros((), device=device), 0
        skipped = torch.zeros((), device=device)          # fp16's skipped steps
        for idx in length_batches(lengths, hp["batch_size"], rng):
            step += 1
            for g, lr in zip(opt.param_groups, base_lrs):
                g["lr"] = lr * lr_multiplier(step, total, warmup)
            if static:          # the same batch at a fixed shape, through a compiled graph
                loss = static.loss(model, train_padded, idx, labels, autocast)
            else:
                y = labels[idx].to(device)
                with autocast():
                    logits = model(*collate(train_in, idx, tok.pad_id, device))
                loss = F.mse_loss(logits[:, 0], y) if task.regression else \
                    F.cross_entropy(logits, y.long())
            if loss_scale is not None:        # fp16 (machinery/loss_scale.py)
                skipped += loss_scale.backward_clip_step(model, opt, loss, hp["grad_clip"])
            else:
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), hp["grad_clip"])
                opt.step()
            opt.zero_grad(set_to_none=True)
            loss_sum += loss.detach()
            n_batches += 1
        if device.type == "cuda":      # the queued steps done: the time they really took
            torch.cuda.synchronize()
        speed = len(train_in) / (time.time() - te)
        metrics = evaluate(name, model, devs, tok.pad_id, device, autocast, static)
        log(f"{name} seed {seed} epoch {epoch}/{epochs} | train loss "
            f"{loss_sum.item() / n_batches:.4f} | dev {task.metric} {metrics[task.metric]:.4f}"
            f" | {speed:.0f} examples/s" + ("" if loss_scale is None else
                                             f" | fp16 skipped {int(skipped)} steps"), flush=True)
    return {"seed": seed, "metrics": metrics, "time_s": round(time.time() - t0, 2)}


def evaluate(name, model, devs, pad_id, device, autocast, static=None):
    """Metrics of every dev split; MNLI's mismatched ones get the suffix _mm."""
    metrics = {}
    for split, (inputs, gold) in devs.items():
        pred = static.predict(model, inputs, pad_id, autocast) if static else \
            predict(model, inputs, pad_id, device, autocast, TASKS[name].regression)
        suffix = "_mm" if split == "dev_mismatched" else ""
        metrics.update({k + suffix: v for k, v in task_metrics(name, pred, gold).items()})
    return metrics


# ----------------------------------------------------------------------------- command line

def parse_args(argv=None):
    p = cli.Parser(description="Fine-tune a pre-trained ELECTRA/BERT-Small "
                   "checkpoint on GLUE (Table 7 hyperparameters).")
    p.add_argument("--ckpt", type=cli.nonempty,
                   help="pre-training checkpoint (ckpt.pt from electra_small.py)")
    p.add_argument("--glue_dir", type=cli.nonempty,
                   help="GLUE folder in the standard layout (CoLA/, SST-2/, ...)")
    p.add_argument("--tasks", help=f"comma list of {','.join(TASKS)} (default, or empty: all "
                   "present)")
    p.add_argument("--seeds", type=cli.positive_int, default=1,
                   help="fine-tuning runs per task (paper: 10)")
    p.add_argument("--out", type=cli.nonempty,
                   help="results JSON (default: next to the checkpoint)")
    p.add_argument("--device", choices=["cpu", "cuda", "mps"], help="default: best available")
    p.add_argument("--precision", choices=["auto", "bf16", "fp16", "fp32"], default="auto",
                   help="auto: bf16 where the hardware has native bf16, fp16 with loss scaling "
                   "on GPUs of sm_70-sm_75 (V100, T4, RTX 20xx), else fp32 (machinery/device.py)")
    p.add_argument("--download", type=cli.out_folder, metavar="DIR",
                   help="download GLUE into DIR first")
    p.add_argument("--max_train", type=cli.positive_int,
                   help="use at most N training examples per task")
    p.add_argument("--epochs", type=cli.positive_int,
                   help="override Table 7's epochs (quick runs only)")
    p.add_argument("--lr", type=cli.float_range(0, 1, accepts="a learning rate in (0, 1), e.g. "
                                                "3e-4"),
                   help="override Table 7's 3e-4 (Appendix B: the paper searched 1e-4, 2e-4, "
                   "3e-4 and, as printed, 5e-3 for Small)")
    p.add_argument("--optimizer", choices=["official", "torch"], default="official",
                   help="official: Adam without bias correction, as the official code; "
                        "torch: AdamW")
    p.add_argument("--layer_decay_rule", choices=["official", "stated"], default="official",
                   help="official: the official code's exponents (top block 0.64 lr); "
                        "stated: top block 0.8 lr (layerwise_param_groups explains)")
    p.add_argument("--threads", type=cli.threads,
                   help=f"CPU threads for PyTorch (1 to {cli.MAX_THREADS})")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction,
                   help="static shapes, for GPU speed: each batch padded to a length of "
                   "--buckets, the last one filled up with rows of weight 0, each length one "
                   "torch.compile'd graph (on a GPU a CUDA graph), evaluation likewise; the "
                   "padding changes no result (docs/finetuning.md). Default: on with CUDA, off "
                   "elsewhere (--no-compile: eager, each batch padded to its longest)")
    p.add_argument("--buckets", type=bucket_list,
                   help="with --compile: the sequence lengths a batch is padded up to "
                   f"(default {','.join(map(str, DEFAULT_BUCKETS))}; the model's max length "
                   "is always one)")
    p.add_argument("--compile_cache", type=cli.out_file, metavar="FILE",
                   help="with --compile: load torch.compile's artifacts from FILE before "
                   "compiling and save them there after each task's graphs, so that a fresh "
                   "machine skips most of the compiling (machinery/compile_cache.py)")
    args = p.parse_args(argv)
    refuse_unavailable(p, args.device)     # a GPU that is not there: one line now
    if args.compile_cache and args.compile is False:
        p.error("--compile_cache keeps what --compile compiles: drop --no-compile, or leave "
                "--compile_cache out")
    if args.buckets and args.compile is not True and (args.compile is False or
                                                     pick_device(args.device).type != "cuda"):
        p.error("--buckets: only with --compile (the eager path pads each batch to its own "
                "longest example)")
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        return run(args)
    except (GlueError, CheckpointError, DeviceError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except NotImplementedError as e:    # a student copy with a part still blank: one line
        print(cli.blank_part_or_raise(e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: no results written", file=sys.stderr)
        return 130


def run(args):
    names = list(dict.fromkeys(t.strip().lower() for t in (args.tasks or "").split(",")
                               if t.strip()))
    unknown = [t for t in names if t not in TASKS]
    if unknown:
        raise GlueError(f"unknown task {unknown[0]!r}; choose from {', '.join(TASKS)}")
    if args.download:
        download_glue(args.download, names or list(TASKS))
        if not args.ckpt:
            return 0
        args.glue_dir = args.glue_dir or args.download
    if not args.ckpt or not args.glue_dir:
        raise GlueError("give --ckpt and --glue_dir (or --download DIR)")
    glue_dir = Path(args.glue_dir)
    if not glue_dir.is_dir():
        raise GlueError(f"{glue_dir}: no such GLUE folder")
    if not names:
        names = [t for t in TASKS if (glue_dir / TASKS[t].folder).is_dir()]
        skipped = [t for t in TASKS if t not in names]
        if not names:
            raise GlueError(f"{glue_dir}: holds none of the GLUE task folders "
                            f"{', '.join(t.folder for t in TASKS.values())}")
        if skipped:
            print(f"tasks: {', '.join(names)} (skipped, no folder in {glue_dir}: "
                  f"{', '.join(skipped)})")
    hp = dict(HPARAMS, lr=args.lr or HPARAMS["lr"], optimizer=args.optimizer,
              decay_rule=args.layer_decay_rule)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    if device.type == "cpu" and not args.threads and torch.get_num_threads() > 1 and \
            hasattr(os, "getloadavg") and os.getloadavg()[0] > (os.cpu_count() or 1) - 0.5:
        print(f"note: this machine is busy (load {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
              f"cores). PyTorch's {torch.get_num_threads()} threads wait for each other at every "
              "op when cores are shared, which can be 10-100x slower: try --threads 1")
    precision, autocast = pick_precision(args.precision, device)
    pre = load_pretrained(args.ckpt)
    path = Path(args.out) if args.out else \
        Path(args.ckpt).parent / f"glue_{Path(args.ckpt).stem}.json"
    # Engineering: fail now, not after hours of fine-tuning, and create nothing: the nearest
    # existing folder above the results must be writable.
    above = next(p for p in (path.parent, *path.parent.parents) if p.exists())
    if not (above.is_dir() and os.access(above, os.W_OK)):
        raise GlueError(f"{path.parent}: cannot write the results there")
    if path.is_dir():                       # else it would fail only after the fine-tuning
        raise GlueError(f"--out {path}: is a folder; give a file name such as {path / 'glue.json'}")
    state, shapes, tok, info = pre
    max_len = min(hp["max_len"], shapes["max_len"])
    compiled = device.type == "cuda" if args.compile is None else args.compile
    refusal = compile_refusal(device, precision) if compiled else None
    if refusal:                 # a GPU torch.compile cannot compile for: said, then eager
        print(refusal)
        compiled = False
    buckets = bucket_lengths(args.buckets or DEFAULT_BUCKETS, max_len)
    print(f"{info['model']} checkpoint {args.ckpt}: step {info['steps']}, encoder "
          f"{info['params'] / 1e6:.2f}M params | device {device}, {precision}, " +
          (f"compiled, buckets {','.join(map(str, buckets))}" if compiled else "eager"))

    data = {}                    # read and check every task before training any (fail early)
    for name in names:
        train, devs = read_task(glue_dir, name)
        if args.max_train and len(train) > args.max_train:     # a fixed random subset
            keep = np.random.default_rng(0).permutation(len(train))[:args.max_train]
            train = [train[i] for i in sorted(keep)]
        if TASKS[name].both_orders:
            train = both_orders(train)
        data[name] = (encode_examples(tok, train, max_len),
                      {k: encode_examples(tok, v, max_len) for k, v in devs.items()})

    results, compile_s = {}, {}
    if compiled and args.compile_cache:         # (engineering: a fresh machine compiles less)
        compile_cache.load(args.compile_cache, device)
    for name in names:
        epochs = args.epochs or TASKS[name].epochs
        static = None
        if compiled:
            static, compile_s[name] = compile_task(name, pre, device, autocast, max_len,
                                                   buckets, hp)
            if args.compile_cache:
                compile_cache.save(args.compile_cache, device)
        runs = [finetune(name, data[name], pre, s, device, autocast, epochs, hp, static=static,
                         precision=precision) for s in range(args.seeds)]
        results[name] = summarize(runs, TASKS[name].metric)

    score = float(np.mean([100 * r["median"][r["metric"]] for r in results.values()]))
    out = dict(checkpoint=str(args.ckpt), pretrain=info, tasks=results,
               glue_score=round(score, 2), glue_tasks=names,
               finetune=dict(hp, seeds=args.seeds, precision=precision, device=str(device),
                             max_len=max_len, max_train=args.max_train, epochs=args.epochs,
                             compile=compiled, buckets=list(buckets) if compiled else None,
                             compile_s=compile_s))
    print_table(results)
    missing = [t for t in TASKS if t not in names]
    print(f"GLUE score {score:.1f}: mean over {len(names)} of 8 tasks ({', '.join(names)})"
          + (f"; not run: {', '.join(missing)}" if missing else ""))
    write_json_atomic(path, out)
    print(f"wrote {path}")
    return 0


def compile_task(name, pre, device, autocast, max_len, buckets, hp, backend="inductor"):
    """Engineering: (StaticShapes with its graphs compiled, seconds it took) for one task, or
    (None, None) where torch.compile fails (machinery/static_shapes.py `compiled`)."""
    state, shapes, tok, _ = pre
    n_out = 1 if TASKS[name].regression else len(TASKS[name].labels)
    return compiled_shapes(name, lambda: build_classifier(state, shapes, n_out, hp["dropout"]),
                           buckets, max_len, hp["batch_size"], device, TASKS[name].regression,
                           autocast, tok.pad_id, backend)


def write_json_atomic(path, obj):
    """Engineering: temp file + rename, so a reader never sees half a results file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp: tmp.write_text(json.dumps(obj, indent=1)))
    except OSError as e:
        raise GlueError(f"{path}: cannot write the results ({e.strerror or e})") from None


if __name__ == "__main__":
    sys.exit(main())
