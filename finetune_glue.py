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
(the default on a GPU) each batch is padded further, to one of a few lengths, each length one
compiled graph (machinery/static_shapes.py). The command line - flags, checks, the results
file - is machinery/glue_cli.py.
"""
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from machinery.checkpoint import CheckpointError, load_checkpoint
from machinery.loss_scale import make_loss_scale
from machinery.static_shapes import Padded
from encoder import Embeddings, Encoder, EncoderConfig, init_weights
from glue import TASKS, task_metrics
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

def main(argv=None):
    """Engineering: the command line, machinery/glue_cli.py, handed this file and glue.py
    (machinery imports nothing of the core)."""
    import glue
    from machinery import glue_cli
    return glue_cli.main(argv, sys.modules[__name__], glue)


if __name__ == "__main__":
    sys.exit(main())
