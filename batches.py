"""Batches: a prepared token stream -> two-segment 128-token examples -> batches.

Paper §2 and Appendix A, the training-time half of the input pipeline (data.py prepares the
token stream once; this file reads it every step):
  1. an example is [CLS] A [SEP] B [SEP]: sentences of one document up to the target length
     (Table 6: 128), cut into two segments at a sentence boundary (segment ids 0/1, which the
     sentence-pair GLUE tasks use), padded where a document ends early (build_examples);
  2. examples are served in a shuffled order that is a pure function of (seed, epoch), so the
     data position is two integers and --resume continues exactly (PretrainingData);
  3. masking is *dynamic* ("masked positions decided on-the-fly instead of during
     preprocessing", Appendix A): every time a sequence is used it gets fresh positions m.
     The masking itself is line 1 of the algorithm, objectives.mask_tokens; this file only
     gives each batch its own random-number generator for it (mask_generator), so that a
     resumed run draws exactly the masks the uninterrupted run would have drawn.
"""
import queue
import threading
from pathlib import Path

import numpy as np
import torch

from data import FORMAT, DataError, load_meta


def load_split(data_dir, split, meta):
    """A split's token stream (uint16 memmap) and sentence lengths, checked against each other
    and against the vocabulary, so a damaged folder fails here with a clear line rather than
    later with an index error or silently wrong batches."""
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
    # A memmap reads the token stream from disk on demand: a corpus larger than memory costs
    # nothing to open, and uint16 halves its size (the vocabulary is below 65,536). The sentence
    # lengths are small (one uint32 per sentence) and read whole.
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
    """Pre-training examples as the official build_pretraining_dataset.py builds them (ELECTRA's
    version of BERT's data pipeline), from the sentence lengths of a prepared split.

    `lengths` lists each sentence's token count in stream order, 0 marking a document's end.
    Sentences are collected until they reach the target length or the document ends - so no
    example crosses a document boundary - and then cut into two segments at a sentence
    boundary: A gets about half the target ((target - 3) / 2 tokens, the -3 leaving room for
    [CLS] and two [SEP]), B the rest. 10 % of examples keep everything in A (a single segment,
    like single-sentence GLUE tasks), and 5 % get a random shorter target (5..max_len), so the
    model also sees short, padded inputs as in fine-tuning. A is trimmed to max_len - 2 and B to
    what is left after [CLS] A [SEP] ... [SEP]; text past the end is dropped, as officially.

    Two deviations, both to keep each segment one contiguous slice of the token stream (so an
    example is four integers): a sentence longer than max_len - 3 is cut to fill examples
    (the official code would keep its head and drop the rest), and once B has started
    every later sentence goes to B (the official rule could put a short later sentence back
    into A). Returns an (N, 4) int64 array of (a_start, a_len, b_start, b_len), a pure function
    of (lengths, max_len, seed), which is what makes --resume exact."""
    # Every random choice comes from one seeded stream, in a fixed order: the same corpus and
    # seed always give the same examples, so a checkpoint only needs (epoch, batch) to resume.
    coins = _uniforms(np.random.default_rng(seed))
    piece = max_len - 3                            # [CLS] A [SEP] B [SEP]: 3 special tokens
    out, cur, start, pos = [], [], 0, 0            # cur: token counts of the collected sentences
    target = max_len

    def emit():
        nonlocal cur, target
        # Where A ends: usually about half-way, so most examples have a B (and the segment-B
        # embedding that six of the eight GLUE tasks read gets trained); 10 % of the time no
        # limit, so the model also sees single-segment inputs as in CoLA and SST-2.
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
        # 5 % of examples aim at a random shorter length (official): fine-tuning inputs are
        # often short and padded, and pre-training should not be all full-length sequences.
        target = int(5 + next(coins) * (max_len - 4)) if next(coins) < 0.05 else max_len

    for n in lengths.tolist():
        if n == 0:      # end of a document: close the example (never mix two documents)
            if cur:
                emit()
            continue
        while n > 0:
            if not cur:
                start = pos
            # a sentence too long for any example fills this one up to max_len - 3 tokens;
            # the rest of it starts the next example
            k = n if n <= piece else max(1, piece - sum(cur))
            cur.append(k)
            pos, n = pos + k, n - k
            if sum(cur) >= target or n > 0:
                emit()
    if cur:
        emit()
    return np.array(out, dtype=np.int64).reshape(-1, 4)


def _uniforms(rng, block=65536):
    """An endless stream of U(0, 1) floats drawn in blocks: one numpy call per draw would cost
    more than the rest of build_examples' loop."""
    while True:
        yield from rng.random(block).tolist()


class PretrainingData:
    """The examples of a prepared split ([CLS] A [SEP] B [SEP], padded to seq_len), in a
    shuffled order that is a pure function of (seed, epoch), so the data position is just two
    integers (epoch, batch) - saved in every checkpoint, which makes --resume exact."""

    def __init__(self, data_dir, split, batch_size, seq_len, seed=0, rank=0, world=1,
                 arrays=None):
        """`arrays` (tokens, lengths, meta) in place of a prepared folder's files: the
        benchmark's synthetic corpus (benchmarks/bench.py), cut into examples the same way."""
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
        # With N processes (torchrun) each rank reads its own 1/N slice of every global batch.
        self.batch_size, self.seed, self.rank, self.world = batch_size, seed, rank, world
        self.local = batch_size // world
        self.cls, self.sep, self.pad = self.meta["cls_id"], self.meta["sep_id"], self.meta["pad_id"]
        self.epoch, self.batch = 0, 0
        self._order_epoch, self._order = None, None
        # for assemble: the memmap as a plain ndarray (no memmap subclass per slice; pages are
        # still read on demand) and the column numbers 0 .. seq_len - 1
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
        """A torch RNG seeded by the data position, so masks differ every time a sequence is
        seen (dynamic masking), yet a resumed run draws exactly the masks it would have."""
        g = torch.Generator()
        # (modulo 2**64, the seeds torch accepts: any --seed above ~18,000 would overflow it)
        g.manual_seed((((self.seed * 1_000_003 + self.epoch) * 1_000_003 + self.batch) * 1009
                       + self.rank) % 2 ** 64)
        return g

    def next_batch(self):
        """The next (B / world) examples as int64 tensors of shape (B / world, seq_len):
        x ([CLS] A [SEP] B [SEP] [PAD]...), segment_ids (0 for [CLS] A [SEP], 1 for B [SEP]) and
        pad_mask (True on real tokens); advances the position. The shape never changes, so a
        GPU sees static shapes; padding is excluded by pad_mask from attention, masking and
        L_Disc."""
        if self._order_epoch != self.epoch:
            # the epoch's order is a pure function of (seed, epoch): no state to save but two
            # integers, and every process of a data-parallel run computes the same order
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
        """Examples (a_start, a_len, b_start, b_len) -> x = [CLS] A [SEP] B [SEP] [PAD]... and
        segment_ids, as (rows, seq_len) int64 arrays. Always seq_len wide, padded: static shapes
        (no recompilation on a GPU); pad_mask excludes the padding everywhere.

        Whole-array numpy, no loop over rows: on a GPU the batch thread (Prefetcher) runs this
        beside the thread that launches the step, and a Python loop would hold the GIL for
        ~1.3 ms a batch of 128 x 128, which at 140 steps/s is a fifth of every step. Column j
        of row r holds A's token j - 1 (1 <= j <= a), or B's token j - 2 - a (2 + a <= j <
        2 + a + b): one gather from the token stream fills both segments."""
        a0, a, b0, b = (rows[:, i:i + 1] for i in range(4))           # (rows, 1) each
        j = self._columns                                             # (1, seq_len)
        in_a = (j >= 1) & (j <= a)
        in_b = (j >= 2 + a) & (j < 2 + a + b)
        src = np.where(in_a, a0 - 1, b0 - 2 - a) + j                  # stream index per column
        # (outside A and B src points anywhere: clipped into the stream, then replaced by [PAD])
        tokens = self._stream.take(src.clip(0, len(self._stream) - 1))
        x = np.where(in_a | in_b, tokens, self.pad).astype(np.int64)
        x[:, 0] = self.cls
        r = np.arange(len(rows))
        x[r, 1 + a[:, 0]] = self.sep                                  # after A
        has_b = b[:, 0] > 0
        x[r[has_b], (2 + a + b)[has_b, 0]] = self.sep                 # after B, if any
        seg = ((j >= 2 + a) & (j <= 2 + a + b) & (b > 0)).astype(np.int64)   # B and its [SEP]
        return x, seg


# Past this many passes over the same examples a run mostly learns them by heart: a budget that
# needs more wants more text, not more steps.
MAX_PASSES = 4
MORE_TEXT = "python data.py --hf wikimedia/wikipedia --hf_config 20231101.en --name wiki"


def repetition_warning(steps, data):
    """One line when `steps` steps of `data` (a PretrainingData) would go through its examples
    more than MAX_PASSES times, naming the command that prepares more text; None otherwise."""
    passes = steps * data.batch_size / data.n_seqs
    if passes <= MAX_PASSES:
        return None
    return (f"warning: this budget goes through {data.dir}'s {data.n_seqs:,} training examples "
            f"about {passes:,.0f} times ({steps:,.0f} steps of {data.batch_size}): it will "
            f"learn them by heart more than the language: prepare more text with `{MORE_TEXT}` "
            "(or --corpus FILES) and train with --data data/wiki")


def synthetic_arrays(vocab_size, n_tokens, seed=0):
    """A stand-in for a prepared split, for benchmarks/bench.py without --data: random ids
    below the specials, in sentences of 4-40 tokens and documents of 1-20 sentences (so
    examples have two segments, and padding where a document ends early, as real text gives),
    and a meta with the specials last, as machinery/tokenizer.py puts them."""
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


class Prefetcher:
    """Prepares batches in a background thread while the GPU computes (reading the memmap,
    masking, copying into pinned memory cost CPU time that would otherwise stall the GPU).
    Each item is (batch, data position after it): the trainer checkpoints the position of the
    last batch it *used*, not of the ones waiting in the queue, so --resume stays exact."""

    def __init__(self, make_batch, depth=4):
        self.make_batch, self.queue = make_batch, queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.thread.start()

    def _work(self):
        try:
            while not self.stop.is_set():
                item = self.make_batch()
                item = ({k: v.pin_memory() for k, v in item[0].items()}, item[1])
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
