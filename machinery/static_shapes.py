"""Fine-tuning with static shapes, for GPUs (machinery; no paper section - read
finetune_glue.finetune first: with --compile it runs the same lines, with fixed shapes).

Eager fine-tuning pads each batch to its own longest example (finetune_glue.collate), so
nearly every batch has a shape of its own. On a GPU a 14M-parameter model at batch 32 is bound
by kernel launches, not by its matrix products: about 900 examples/s on an H200
(docs/gpu-runs/h200-2026-11-26/finetune.txt). A compiled graph - and a CUDA graph, which
replays a whole step with one launch - holds for one shape only, so here the shapes are few:

- Sequence-length buckets (default 32, 64, 128; --buckets): a batch is padded to the smallest
  bucket that holds its longest example. The batches are the eager path's own
  (finetune_glue.length_batches), so every step sees the same examples in the same order.
- Every step has the same number of rows: the last, partial batch of an epoch (and of the dev
  set) is filled up with copies of its first example at weight 0. Copies rather than rows of
  padding: a row with every position masked would attend to nothing, softmax over no key is
  NaN, and 0 ⋅ NaN is NaN.
- Padding changes nothing: padded positions are masked out of attention as in the eager path,
  the loss is the weighted mean $Σ w_i ℓ_i / Σ w_i$ - the mean over the real rows - and padded
  rows' predictions are dropped before any metric (tests/test_static_shapes.py compares with
  the eager path step for step).
- One graph per bucket, for training (forward, loss and, through AOTAutograd, backward) and
  one per bucket for evaluation: torch.compile with dynamic=False, and on CUDA mode
  "reduce-overhead", which replays each as a CUDA graph. They are compiled before the first
  step on a dummy batch (`warm_up`), so their cost is measured apart from the examples/s.
- Outside the graphs, eager as before: the learning-rate schedule, gradient clipping and Adam
  (optim.py), whose foreach operations touch all parameters in a few kernels per group.

Dropout stays on (Table 7's 0.1), drawn by the compiled kernels: the same distribution as
eager, not the same numbers; with dropout 0 the two paths agree to float rounding.
"""
import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

DEFAULT_BUCKETS = (32, 64, 128)
EVAL_ROWS = 128                         # the eager predict()'s batch size
MAX_BUCKET = 8192


def bucket_list(text):
    """A `type=` for --buckets: comma-separated sequence lengths, e.g. 32,64,128."""
    try:
        lengths = sorted({int(t) for t in text.split(",")})
    except ValueError:
        lengths = []
    if not lengths or not all(1 <= n <= MAX_BUCKET for n in lengths):
        raise argparse.ArgumentTypeError(f"must be sequence lengths from 1 to {MAX_BUCKET} "
                                         f"separated by commas, e.g. 32,64,128, got {text!r}")
    return lengths


def bucket_lengths(buckets, max_len):
    """The buckets that fit max_len, with max_len itself as the last: every example fits one."""
    return sorted({b for b in buckets if b < max_len} | {max_len})


class Padded:
    """A split's examples padded once to the longest bucket: (N, L) numpy arrays of token ids
    and segment ids and the lengths, from which a batch is a slice. Small integer types: MNLI's
    393k examples at 128 tokens take 150 MB so (int16 ids for a vocabulary below 32,768, as
    Table 6's 30,522), 800 MB as int64."""

    def __init__(self, inputs, pad_id, width):
        top = max([pad_id] + [max(x) for x, _ in inputs if x])
        self.ids = np.full((len(inputs), width), pad_id,
                           dtype=np.int16 if top < 2 ** 15 else np.int32)
        self.seg = np.zeros((len(inputs), width), dtype=np.int8)
        self.lengths = np.array([len(x) for x, _ in inputs])
        for r, (x, s) in enumerate(inputs):
            self.ids[r, :len(x)], self.seg[r, :len(s)] = x, s
        self.pad_id = pad_id


class StaticShapes:
    """The compiled graphs of one fine-tuning run's shapes. rows: the training batch size;
    backend: torch.compile's ("inductor"; "aot_eager" traces the same graphs without generating
    code, which the tests use)."""

    def __init__(self, buckets, max_len, rows, device, regression, backend="inductor"):
        self.buckets = bucket_lengths(buckets, max_len)
        self.rows, self.device, self.regression = rows, device, regression
        self.cuda_graphs = device.type == "cuda" and backend == "inductor"
        # Enough graphs for every bucket, training and evaluation, of several tasks in one
        # process (a head of another width is another graph); past the limit Dynamo would
        # quietly run eagerly.
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))
        kw = dict(dynamic=False, backend=backend,
                  mode="reduce-overhead" if self.cuda_graphs else None)
        self._loss = torch.compile(weighted_loss, **kw)
        self._logits = torch.compile(logits_of, **kw)

    def bucket(self, n_tokens):
        return next(b for b in self.buckets if b >= n_tokens)

    def batch(self, data, idx, rows, labels=None):
        """The examples idx of a Padded split at full shape: (ids, segment ids, pad mask,
        labels or None, weights), rows x bucket, on the device."""
        n, T = len(idx), self.bucket(int(data.lengths[idx].max()))
        full = np.concatenate([idx, np.repeat(idx[:1], rows - n)])
        w = torch.zeros(rows)
        w[:n] = 1.0
        ids = torch.from_numpy(data.ids[full, :T]).long()
        out = [ids, torch.from_numpy(data.seg[full, :T]).long(), ids != data.pad_id]
        if labels is not None:
            y = labels[full]
            out.append(y.float() if self.regression else y.long())
        out.append(w)
        if self.device.type != "cuda":
            return [t.to(self.device) for t in out]
        # Pinned (page-locked) memory: the copy is queued and the CPU goes on to the next step
        # while the GPU works; from ordinary memory the CPU would wait for the copy.
        return [t.pin_memory().to(self.device, non_blocking=True) for t in out]

    def loss(self, model, data, idx, labels, autocast):
        """The training loss of batch idx (backward is the caller's, as in the eager loop)."""
        ids, seg, mask, y, w = self.batch(data, idx, self.rows, labels)
        if self.cuda_graphs:    # a new step: the previous replay's outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        with autocast():
            return self._loss(model, ids, seg, mask, y, w, self.regression)

    @torch.inference_mode()
    def predict(self, model, inputs, pad_id, autocast):
        """Dev-set predictions in input order, as finetune_glue.predict, from full batches."""
        model.eval()
        data = Padded(inputs, pad_id, self.buckets[-1])
        order = np.argsort(data.lengths, kind="stable")
        out = np.empty(len(inputs), dtype=np.float32)
        for s in range(0, len(order), EVAL_ROWS):
            idx = order[s:s + EVAL_ROWS]
            ids, seg, mask, _ = self.batch(data, idx, EVAL_ROWS)
            if self.cuda_graphs:
                torch.compiler.cudagraph_mark_step_begin()
            with autocast():
                logits = self._logits(model, ids, seg, mask)[:len(idx)]
            out[idx] = (logits[:, 0] if self.regression else logits.argmax(-1)).float().cpu().numpy()
        return out

    def warm_up(self, model, autocast, pad_id):
        """Compile every graph now, on dummy batches (weight 0: no parameter changes; the
        gradients are dropped): training and evaluation at each bucket. CUDA graphs are
        recorded on a later call than the first, hence three calls there.

        The gradients are dropped after *every* backward, as the training loop drops them
        after every step: a parameter's .grad left from one call would be added to by the next,
        and on CUDA that .grad is memory of the backward graph's pool, which the next replay
        overwrites ("accessing tensor output of CUDAGraphs that has been overwritten by a
        subsequent run", seen on an H200 with torch 2.11: docs/gpu-runs/h200-2026-11-28)."""
        was_training = model.training
        calls = 3 if self.cuda_graphs else 1
        for T in self.buckets:
            fake = [([pad_id + 1] * T, [0] * T)]
            data = Padded(fake, pad_id, T)
            labels = torch.zeros(1)
            model.train()
            for _ in range(calls):
                (self.loss(model, data, np.zeros(1, dtype=np.int64), labels, autocast) * 0).backward()
                model.zero_grad(set_to_none=True)
            for _ in range(calls):
                self.predict(model, fake, pad_id, autocast)
        model.train(was_training)
        if self.device.type == "cuda":
            torch.cuda.synchronize()


def weighted_loss(model, ids, segment_ids, pad_mask, y, w, regression):
    """The eager loop's loss (MSE for STS-B, else cross-entropy) as a mean over the rows of
    weight 1: rows of weight 0 add nothing to it, nor to the gradients."""
    logits = model(ids, segment_ids, pad_mask)
    per_row = (logits[:, 0] - y) ** 2 if regression else \
        F.cross_entropy(logits, y, reduction="none")
    return (per_row * w).sum() / w.sum()


def logits_of(model, ids, segment_ids, pad_mask):
    return model(ids, segment_ids, pad_mask)


def compiled_shapes(name, make_model, buckets, max_len, rows, device, regression, autocast,
                    pad_id, backend="inductor"):
    """(StaticShapes with its graphs compiled, seconds it took) for task `name`, or (None,
    None) after one line where torch.compile fails here: the task runs eagerly. The graphs are
    compiled on a model of the task's shape (make_model()) that is then thrown away; every
    seed's model reuses them (Dynamo takes the weights as inputs)."""
    t0 = time.time()
    try:
        static = StaticShapes(buckets, max_len, rows, device, regression, backend)
        static.warm_up(make_model().to(device), autocast, pad_id)
    except Exception as e:      # (a missing C compiler, an unsupported setup): eager instead
        print(f"{name}: torch.compile failed ({type(e).__name__}: "
              f"{(str(e).splitlines() or [''])[0][:120]}); fine-tuning eagerly", flush=True)
        return None, None
    seconds = round(time.time() - t0, 1)
    print(f"{name}: compiled {2 * len(static.buckets)} graphs (training and evaluation at "
          f"lengths {','.join(map(str, static.buckets))}) in {seconds:.1f} s", flush=True)
    return static, seconds
