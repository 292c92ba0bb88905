"""Batches: a prepared token stream -> two-segment examples of 128 tokens -> batches.

An example is [CLS] A [SEP] B [SEP]: sentences of one document, up to 128 tokens (§3.3), in
two segments (`build_examples`); no next-sentence prediction reads them (Appendix A). Masking
is dynamic, "decided on-the-fly" (Appendix A): each time a sequence is used,
`objectives.mask_tokens` draws fresh positions m, with a random source seeded by the data
position (`PretrainingData.mask_generator`).
"""
import queue
import threading
from pathlib import Path

import numpy as np
import torch

from data import FORMAT, DataError, load_meta
from objectives import mask_slots, mask_tokens


def load_split(data_dir, split, meta):
    """A split's token stream and sentence lengths.

    Engineering: a uint16 memmap, checked against the lengths and the vocabulary: a damaged
    folder fails here, in one clear line."""
    bin_path, len_path = Path(data_dir) / f"{split}.bin", Path(data_dir) / f"{split}.sent.bin"
    redo = "prepare it again with `python data.py --corpus FILES --name NAME`"
    if meta.get("format") != FORMAT:
        raise DataError(f"{data_dir} was prepared by an older version of data.py (no sentence "
                        f"boundaries, which two-segment examples need): {redo}")
    for path in (bin_path, len_path):
        if not path.is_file():
            raise DataError(f"{path} is missing: {redo}")
    if bin_path.stat().st_size % 2 or len_path.stat().st_size % 4:
        raise DataError(f"{bin_path.parent}: {split}.bin or {split}.sent.bin is not a whole "
                        f"number of entries (truncated copy?): {redo}")
    if bin_path.stat().st_size == 0:
        raise DataError(f"{bin_path} is empty: {redo} with more text")
    # Engineering: a memmap reads the stream from disk on demand, so a corpus larger than
    # memory costs nothing to open.
    tokens = np.memmap(bin_path, dtype=np.uint16, mode="r")
    lengths = np.fromfile(len_path, dtype=np.uint32)
    if int(lengths.sum(dtype=np.int64)) != len(tokens):
        raise DataError(f"{bin_path.parent}: {split}.sent.bin does not match {split}.bin "
                        f"(files from different preparations?): {redo}")
    top = int(tokens.max())
    if top >= meta["vocab_size"]:
        raise DataError(f"{bin_path} holds token id {top}, outside the vocabulary of "
                        f"{meta['vocab_size']} in meta.json: {redo}")
    return tokens, lengths


def build_examples(lengths, max_len, seed):
    """Examples from a split's sentence lengths (0 at a document's end): sentences are
    collected up to the target length or the document's end, then cut at a sentence boundary,
    A about half, B the rest. Returns (N, 4) int64 rows (a_start, a_len, b_start, b_len), a
    pure function of (lengths, max_len, seed).

    Details: as the official build_pretraining_dataset.py builds them, 10 % of examples keep
    all in A, 5 % get a random shorter target. Two departures, so that a segment is one slice
    of the stream: a sentence longer than the example is split across consecutive examples (its
    rest starts the next one) rather than truncated, and once B has started every later
    sentence goes to B."""
    # One seeded stream for every random choice.
    coins = _uniforms(np.random.default_rng(seed))
    piece = max_len - 3                            # [CLS] A [SEP] B [SEP]: 3 special tokens
    out, cur, start, pos = [], [], 0, 0            # cur: token counts of the collected sentences
    target = max_len

    def emit():
        nonlocal cur, target
        # Where A ends: about half-way, so most examples have a B (six of the eight GLUE tasks
        # read its segment embedding).
        first_target = 1 << 30 if next(coins) < 0.1 else (target - 3) // 2
        a = b = 0
        for n in cur:
            if b == 0 and (a == 0 or a + n < first_target or
                           (a < first_target and next(coins) < 0.5)):
                a += n
            else:
                b += n
        a_len = min(a, max_len - 2)
        b_len = min(b, max(0, max_len - a_len - 3))
        out.append((start, a_len, start + a, b_len))
        cur = []
        target = int(5 + next(coins) * (max_len - 4)) if next(coins) < 0.05 else max_len

    for n in lengths.tolist():
        if n == 0:      # end of a document: close the example (never mix two documents)
            if cur:
                emit()
            continue
        while n > 0:
            if not cur:
                start = pos
            # a sentence too long for any example fills this one; its rest starts the next
            k = n if n <= piece else max(1, piece - sum(cur))
            cur.append(k)
            pos, n = pos + k, n - k
            if sum(cur) >= target or n > 0:
                emit()
    if cur:
        emit()
    return np.array(out, dtype=np.int64).reshape(-1, 4)


def _uniforms(rng, block=65536):
    """Engineering: U(0, 1) floats drawn in blocks (one numpy call each would cost more than
    the rest of build_examples' loop)."""
    while True:
        yield from rng.random(block).tolist()


class PretrainingData:
    """The examples of a split, padded to seq_len, shuffled as a pure function of (seed,
    epoch): the data position is two integers, saved in every checkpoint."""

    def __init__(self, data_dir, split, batch_size, seq_len, seed=0, rank=0, world=1,
                 arrays=None):
        """Engineering: `arrays` (tokens, lengths, meta) in place of a prepared folder's
        files, for the benchmark's synthetic corpus (benchmarks/bench.py)."""
        self.dir = Path(data_dir)
        if arrays is None:
            self.meta = load_meta(self.dir)
            self.tokens, lengths = load_split(self.dir, split, self.meta)
        else:
            self.tokens, lengths, self.meta = arrays
        self.examples = build_examples(lengths, seq_len, seed)
        self.n_seqs, self.seq_len = len(self.examples), seq_len
        if self.n_seqs < batch_size:
            raise DataError(f"{self.dir}/{split}.bin holds {self.n_seqs} examples of up to "
                            f"{seq_len} tokens, fewer than one batch of {batch_size}: "
                            "prepare more text or lower --batch_size")
        # Engineering: with N processes (torchrun) each reads its own 1/N of every batch.
        self.batch_size, self.seed, self.rank, self.world = batch_size, seed, rank, world
        self.local = batch_size // world
        self.cls, self.sep, self.pad = self.meta["cls_id"], self.meta["sep_id"], self.meta["pad_id"]
        self.epoch, self.batch = 0, 0
        self._order_epoch, self._order = None, None
        # Engineering: for assemble, the memmap as a plain ndarray, and the column numbers
        self._stream = self.tokens.view(np.ndarray)
        self._columns = np.arange(seq_len)[None, :]

    def batches_per_epoch(self):
        return self.n_seqs // self.batch_size

    def state_dict(self):
        return {"epoch": self.epoch, "batch": self.batch, "format": FORMAT}

    def load_state_dict(self, state):
        if state.get("format") != FORMAT:
            raise DataError("the checkpoint's data position refers to the older data layout "
                            "(one packed stream); resuming it would not continue where it "
                            "stopped: start a new run with this version")
        self.epoch, self.batch = int(state["epoch"]), int(state["batch"])

    def mask_generator(self):
        """A torch RNG seeded by the data position: a resumed run draws exactly the masks it
        would have."""
        g = torch.Generator()
        # Engineering: modulo $2^64$, the seeds torch accepts.
        g.manual_seed((((self.seed * 1_000_003 + self.epoch) * 1_000_003 + self.batch) * 1009
                       + self.rank) % 2 ** 64)
        return g

    def next_batch(self):
        """The next batch, int64 (B, seq_len): x, segment_ids (1 on B and its closing [SEP]) and pad_mask
        (True on the non-padding tokens: padding stays out of attention, masking and $L_Disc$)."""
        if self._order_epoch != self.epoch:
            rng = np.random.default_rng([self.seed, self.epoch])
            self._order, self._order_epoch = rng.permutation(self.n_seqs), self.epoch
        first = self.batch * self.batch_size + self.rank * self.local   # this rank's slice
        rows = self.examples[self._order[first:first + self.local]]
        x, seg = self.assemble(rows)
        self.batch += 1
        if self.batch >= self.batches_per_epoch():
            self.epoch, self.batch = self.epoch + 1, 0
        x = torch.from_numpy(x)
        return dict(x=x, segment_ids=torch.from_numpy(seg), pad_mask=x != self.pad)


    def assemble(self, rows):
        """Examples -> x = [CLS] A [SEP] B [SEP] [PAD]... and segment_ids, (rows, seq_len)
        int64.

        Engineering: column j holds A's token $j − 1$ for $1 ≤ j ≤ a$ and B's token
        $j − 2 − a$ for $2 + a ≤ j < 2 + a + b$: one gather fills both segments, whole-array
        numpy, no loop over rows: on a GPU the batch thread
        (`Prefetcher`) runs this beside the one that launches the step, and a Python loop
        would hold the GIL for a fifth of every step."""
        a0, a, b0, b = (rows[:, i:i + 1] for i in range(4))           # (rows, 1) each
        j = self._columns                                             # (1, seq_len)
        in_a = (j >= 1) & (j <= a)
        in_b = (j >= 2 + a) & (j < 2 + a + b)
        src = np.where(in_a, a0 - 1, b0 - 2 - a) + j                  # stream index per column
        # Engineering: outside A and B src points anywhere: clipped into the stream, then
        # replaced by [PAD].
        tokens = self._stream.take(src.clip(0, len(self._stream) - 1))
        x = np.where(in_a | in_b, tokens, self.pad).astype(np.int64)
        x[:, 0] = self.cls
        r = np.arange(len(rows))
        x[r, 1 + a[:, 0]] = self.sep                                  # after A
        has_b = b[:, 0] > 0
        x[r[has_b], (2 + a + b)[has_b, 0]] = self.sep                 # after B, if any
        seg = ((j >= 2 + a) & (j <= 2 + a + b) & (b > 0)).astype(np.int64)   # B and its [SEP]
        return x, seg


# Engineering: past this many passes over the same examples a run mostly learns them by
# heart.
MAX_PASSES = 4
MORE_TEXT = "python data.py --hf wikimedia/wikipedia --hf_config 20231101.en --name wiki"


def repetition_warning(steps, data):
    """Engineering: one line when `steps` steps of `data` would go through its examples more
    than MAX_PASSES times, naming the command that prepares more text; None otherwise."""
    passes = steps * data.batch_size / data.n_seqs
    if passes <= MAX_PASSES:
        return None
    return (f"warning: this budget goes through {data.dir}'s {data.n_seqs:,} training examples "
            f"about {passes:,.0f} times ({steps:,.0f} steps of {data.batch_size}): it will "
            f"learn them by heart more than the language: prepare more text with `{MORE_TEXT}` "
            "(or --corpus FILES) and train with --data data/wiki")


def synthetic_arrays(vocab_size, n_tokens, seed=0):
    """Engineering: random ids in sentences and documents, a stand-in corpus for
    benchmarks/bench.py without --data."""
    rng = np.random.default_rng(seed)
    lengths, total = [], 0
    while total < n_tokens:
        doc = rng.integers(4, 41, size=int(rng.integers(1, 21))).tolist()
        lengths += doc + [0]                                          # 0: the document ends
        total += sum(doc)
    lengths = np.array(lengths, dtype=np.uint32)
    tokens = rng.integers(0, vocab_size - 4, size=total, dtype=np.uint16)
    V = vocab_size
    meta = dict(vocab_size=V, pad_id=V - 4, cls_id=V - 3, sep_id=V - 2, mask_id=V - 1)
    return tokens, lengths, meta


def draw_slots(x, special_ids, seq_len, mask_prob=0.15):
    """Engineering: for the tools that draw m on one unpadded text x (1, T) as a training step
    would (the inspector, its page, teaching/one_step.py): enough slots for mask_tokens'
    $k = round(p n)$, at least 1, capped by training's slot count mask_slots(seq_len).
    mask_slots(T) alone falls below k on a short text (0 for T < 7); where it does not, it is
    kept, and with it every seeded draw made so far."""
    k = mask_tokens(x, special_ids, 0, min(mask_slots(seq_len, mask_prob), x.shape[1]),
                    mask_prob, generator=torch.Generator()).weights.sum()   # k only: no draw
    return max(mask_slots(x.shape[1], mask_prob), int(k))


def pinned(value):
    """Engineering: a page-locked copy of a tensor, or of each tensor of a NamedTuple such as
    `objectives.Masked` (the same type back), so that it copies to a GPU asynchronously."""
    if isinstance(value, torch.Tensor):
        return value.pin_memory()
    return type(value)(*(t.pin_memory() for t in value))


class Prefetcher:
    """Engineering: prepares batches in a background thread while the GPU computes (reading,
    masking and copying into pinned memory would otherwise stall it). Each item is (batch,
    data position after it): the trainer checkpoints the position of the last batch it used."""

    def __init__(self, make_batch, depth=4):
        self.make_batch, self.queue = make_batch, queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.thread.start()

    def _work(self):
        try:
            while not self.stop.is_set():
                item = self.make_batch()
                item = ({k: pinned(v) for k, v in item[0].items()}, item[1])
                while not self.stop.is_set():
                    try:
                        self.queue.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        pass
        except Exception as e:              # surface errors in the training thread
            self.queue.put(e)

    def __call__(self):
        item = self.queue.get()
        if isinstance(item, Exception):
            raise item
        return item

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
