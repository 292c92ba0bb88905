"""Data: corpus -> tokenizer -> two-segment 128-token examples -> batches with dynamic masking.

Paper §2 and Appendix A. The ELECTRA input pipeline is BERT's, minus next-sentence prediction,
as the official build_pretraining_dataset.py builds it:
  1. text is tokenized once and stored as one long stream of token ids (a uint16 memmap, as in
     nanoGPT), plus the length of every sentence and the end of every document;
  2. an example is [CLS] A [SEP] B [SEP]: sentences of one document up to the target length
     (Table 6: 128), cut into two segments at a sentence boundary (segment ids 0/1, which the
     sentence-pair GLUE tasks use), padded where a document ends early (build_examples);
  3. masking is *dynamic* ("masked positions decided on-the-fly instead of during
     preprocessing", Appendix A): every time a sequence is used it gets fresh positions m.
     The masking itself is line 1 of the algorithm, objectives.mask_tokens; this file only
     gives each batch its own random-number generator for it (mask_generator), so that a
     resumed run draws exactly the masks the uninterrupted run would have drawn.

Command line (prepare a corpus once):
    python data.py --corpus ../shared/data/corpus/wiki2015-00.txt.xz --name wiki00
writes data/wiki00/{train.bin, train.sent.bin, val.bin, val.sent.bin, tokenizer.tiktoken, meta.json}.
"""
import argparse
import gzip
import json
import lzma
import os
import queue
import re
import shutil
import sys
import sysconfig
import threading
import time
from pathlib import Path

import numpy as np
import torch

from tokenizer import Tokenizer, train_bpe

# Prepared corpora live in data/ beside the code; ELECTRA_DATA_ROOT moves them (tests use it).
DATA_ROOT = Path(os.environ.get("ELECTRA_DATA_ROOT", Path(__file__).resolve().parent / "data"))
DEMO_NAME = "demo"
TEXT_SUFFIXES = (".txt", ".txt.xz", ".txt.gz", ".jsonl")
SKIP_DIRS = {"test", "tests", "site-packages", "dist-packages", "__pycache__"}


FORMAT = 2      # meta.json "format": 2 = token stream + sentence lengths (two-segment examples)


class DataError(Exception):
    """Bad input the user can fix; the command line prints it as one line and exits 1."""


# ----------------------------------------------------------------------------- batches

def split_sentences(line):
    """Cut a paragraph into sentences: after . ! or ? (maybe closed by a quote or bracket) where
    whitespace and a capital, digit or opening quote follow. The whitespace stays at the start
    of the next sentence, so the sentences' tokens are exactly the paragraph's tokens (a
    byte-level BPE sees " The" and "The" as different tokens)."""
    return SENTENCE_END.split(line)


SENTENCE_END = re.compile(r"""(?:(?<=[.!?])|(?<=[.!?]["')\]]))(?=\s+["'(\[]?[A-Z0-9])""")


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

    def __init__(self, data_dir, split, batch_size, seq_len, seed=0, rank=0, world=1):
        self.dir = Path(data_dir)
        self.meta = load_meta(self.dir)
        self.tokens, lengths = load_split(self.dir, split, self.meta)
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
        g.manual_seed(((self.seed * 1_000_003 + self.epoch) * 1_000_003 + self.batch) * 1009
                      + self.rank)
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
        # Always seq_len wide, padded: static shapes (no recompilation on a GPU), and the pad
        # positions are excluded everywhere by pad_mask rather than by cutting the tensor.
        x = np.full((len(rows), self.seq_len), self.pad, dtype=np.int64)
        seg = np.zeros_like(x)
        for r, (a0, a, b0, b) in enumerate(rows.tolist()):
            x[r, 0], x[r, 1:1 + a], x[r, 1 + a] = self.cls, self.tokens[a0:a0 + a], self.sep
            if b:                                   # segment B and its [SEP]
                x[r, 2 + a:2 + a + b], x[r, 2 + a + b] = self.tokens[b0:b0 + b], self.sep
                seg[r, 2 + a:3 + a + b] = 1
        self.batch += 1
        if self.batch >= self.batches_per_epoch():
            self.epoch, self.batch = self.epoch + 1, 0
        x = torch.from_numpy(x)
        return dict(x=x, segment_ids=torch.from_numpy(seg), pad_mask=x != self.pad)


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


def load_meta(data_dir):
    path = Path(data_dir) / "meta.json"
    try:
        meta = json.loads(path.read_text())
        assert all(k in meta for k in ("vocab_size", "cls_id", "sep_id", "mask_id", "pad_id"))
    except (OSError, ValueError, AssertionError):
        raise DataError(f"{data_dir} is not a prepared data folder (no valid meta.json): "
                        "run `python data.py --corpus FILES --name NAME` first") from None
    return meta


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


def load_tokenizer(data_dir):
    return Tokenizer.load(Path(data_dir) / "tokenizer.tiktoken")


# ----------------------------------------------------------------------------- reading corpora

def find_corpus_files(paths):
    """Expand folders; check every file exists, is a supported kind, and is non-empty text."""
    files = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(TEXT_SUFFIXES))
            if not found:
                raise DataError(f"{p}: folder holds no {', '.join(TEXT_SUFFIXES)} files")
            files += found
        elif not p.exists():
            raise DataError(f"{p}: no such file or folder")
        elif not p.name.endswith(TEXT_SUFFIXES):
            raise DataError(f"{p}: unsupported file type; use {', '.join(TEXT_SUFFIXES)}")
        else:
            files.append(p)
    for f in files:
        _check_text(f)
    return files


def _open_text(path):
    name = str(path)
    if name.endswith(".xz"):
        return lzma.open(path, "rt", encoding="utf-8")
    if name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, "r", encoding="utf-8")


def _check_text(path):
    try:
        with _open_text(path) as f:
            head = f.read(1 << 16)
    except (UnicodeDecodeError, OSError, EOFError, lzma.LZMAError) as e:
        raise DataError(f"{path}: not readable UTF-8 text ({type(e).__name__}); "
                        "give .txt/.txt.xz/.txt.gz/.jsonl files of text") from None
    if "\x00" in head:
        raise DataError(f"{path}: looks binary (NUL bytes); give text files")
    if not head.strip():
        raise DataError(f"{path}: file is empty")


def read_documents(path):
    """Yield documents: blank-line separated blocks of .txt files, the "text" field of .jsonl."""
    with _open_text(path) as f:
        try:
            if str(path).endswith(".jsonl"):
                for i, line in enumerate(f, 1):
                    if line.strip():
                        try:
                            text = json.loads(line)["text"]
                        except (ValueError, KeyError, TypeError):
                            raise DataError(f"{path}:{i}: not a JSON object with a \"text\" "
                                            "field") from None
                        if text.strip():
                            yield text
                return
            doc = []
            for line in f:
                if line.strip():
                    doc.append(line.rstrip("\n"))
                elif doc:
                    yield "\n".join(doc)
                    doc = []
            if doc:
                yield "\n".join(doc)
        except UnicodeDecodeError:
            raise DataError(f"{path}: not valid UTF-8 text past its start") from None


def demo_documents(max_mb=20):
    """The built-in demo corpus: documentation that exists wherever the requirements are
    installed - the Python language reference (pydoc_data) and the docstrings of the standard
    library and the installed packages. Small and odd English, but enough to watch ELECTRA
    learn offline; prepare a real corpus with data.py for real results."""
    budget = max_mb * 1_000_000
    try:
        from pydoc_data.topics import topics
        for text in topics.values():
            budget -= len(text)
            yield text
    except ImportError:
        pass
    docstring = re.compile(r'"""(.*?)"""', re.S)
    roots = dict.fromkeys(sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib"))
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            # site-packages is walked as its own root; tests are code more than prose
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
            for name in sorted(filenames):
                if not name.endswith(".py"):
                    continue
                try:
                    source = Path(dirpath, name).read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    continue
                for m in docstring.finditer(source):
                    text = "\n".join(l.strip() for l in m.group(1).splitlines()).strip()
                    if len(text.split()) >= 8:                  # skip one-line stubs
                        budget -= len(text)
                        yield text
                if budget <= 0:
                    return


# ----------------------------------------------------------------------------- preparation

def prepare(documents, out_dir, vocab_size=30522, bpe_mb=20, val_every=200, threads=None,
            source="", log=print):
    """Tokenize `documents` (an iterable of str, read once) into out_dir atomically.

    The BPE is trained on the first `bpe_mb` MB of documents (a sample is enough: merge ranks
    learned on 20 MB of English barely change with more). Every `val_every`-th document goes
    to val.bin. Everything is written into a temporary folder renamed into place at the end,
    so an interrupted preparation leaves nothing half-written."""
    out_dir = Path(out_dir)
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    threads = threads or os.cpu_count()
    try:
        docs = iter(documents)
        sample, size = [], 0
        for d in docs:                                      # the BPE sample, kept for step 2
            sample.append(d)
            size += len(d)
            if size >= bpe_mb * 1_000_000:
                break
        if not sample:
            raise DataError("the corpus holds no text")
        t0 = time.time()
        log(f"training a {vocab_size}-token byte-level BPE on {size / 1e6:.1f} MB of text ...")
        tok = Tokenizer(train_bpe(sample, vocab_size - 4))
        tok.save(tmp / "tokenizer.tiktoken")
        log(f"BPE trained in {time.time() - t0:.0f}s: vocabulary {tok.vocab_size}")
        assert tok.vocab_size <= 65536, "uint16 memmaps need a vocabulary below 65536"

        # Each split is a token stream (split.bin, uint16) plus the token count of every
        # sentence in it, 0 after each document (split.sent.bin, uint32): build_examples cuts
        # two-segment examples at those boundaries when training starts.
        counts = {"train": 0, "val": 0}
        files = {s: open(tmp / f"{s}.bin", "wb") for s in counts}
        sent_files = {s: open(tmp / f"{s}.sent.bin", "wb") for s in counts}
        n_docs, n_chars, n_sents, t0 = 0, 0, 0, time.time()

        # Sentence boundaries in token space. Encoding every sentence on its own would cost a
        # thread-pool round trip per sentence (slower than the tokenizing itself), so whole
        # documents are encoded and each sentence's end is found by its *byte* offset: the
        # tokens' bytes concatenate to the document's UTF-8, and BPE never merges across the
        # whitespace where split_sentences cuts, so every sentence end is a token end.
        token_bytes = np.array([len(r) for r in tok.ranks] + [0] * len(tok.special_ids))

        def flush(chunk):
            nonlocal n_docs, n_chars, n_sents
            for doc, ids in zip(chunk, tok.encode_batch(chunk, num_threads=threads)):
                split = "val" if n_docs % val_every == val_every - 1 else "train"
                ids = np.array(ids, dtype=np.uint16)
                # the document as sentences that concatenate back to it ("\n" ends a line's
                # last sentence), their UTF-8 end offsets, and the token count up to each
                lines = doc.split("\n")
                sents = [t for i, line in enumerate(lines)
                         for t in split_sentences(line + ("\n" if i < len(lines) - 1 else ""))]
                ends_b = np.cumsum([len(t.encode("utf-8")) for t in sents])
                ends_t = np.searchsorted(np.cumsum(token_bytes[ids]), ends_b) + 1
                lens = np.diff(np.minimum(ends_t, len(ids)), prepend=0)
                lens = np.append(lens[lens > 0], 0).astype(np.uint32)   # 0: end of document
                ids.tofile(files[split])
                lens.tofile(sent_files[split])
                counts[split] += len(ids)
                n_docs, n_sents = n_docs + 1, n_sents + len(lens) - 1
            n_chars += sum(map(len, chunk))
            rate = n_chars / 1e6 / max(time.time() - t0, 1e-9)
            log(f"\rtokenized {n_docs:,} documents, {n_chars / 1e6:,.1f} MB, "
                f"{sum(counts.values()):,} tokens ({rate:.1f} MB/s)", end="")

        chunk = []
        for d in _chain(sample, docs):
            chunk.append(d)
            if len(chunk) == 2000:
                flush(chunk)
                chunk = []
        if chunk:
            flush(chunk)
        log("")
        for f in (*files.values(), *sent_files.values()):
            f.close()
        if counts["val"] == 0:          # under `val_every` documents: hold out train's tail
            counts = _hold_out_tail(tmp, val_every)
        if counts["train"] == 0:
            raise DataError("the corpus holds no text (only blank lines?)")
        meta = dict(format=FORMAT, vocab_size=tok.vocab_size, pad_id=tok.pad_id,
                    cls_id=tok.cls_id, sep_id=tok.sep_id, mask_id=tok.mask_id,
                    train_tokens=counts["train"], val_tokens=counts["val"], documents=n_docs,
                    sentences=n_sents, source=source)
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
        return meta
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _hold_out_tail(folder, val_every):
    """Move the last sentences of train (about 1/val_every of its tokens, at least 4096 or
    half) into val, for corpora with fewer documents than `val_every`."""
    tokens = np.fromfile(folder / "train.bin", dtype=np.uint16)
    lens = np.fromfile(folder / "train.sent.bin", dtype=np.uint32)
    want = max(len(tokens) // val_every, min(len(tokens) // 2, 4096))
    ends = np.cumsum(lens[::-1], dtype=np.int64)            # tokens in the last j+1 entries
    j = min(int(np.searchsorted(ends, want)) + 1, len(lens) - 1)
    cut = len(lens) - j                                     # first entry that goes to val
    n_train = int(lens[:cut].sum(dtype=np.int64))
    tokens[:n_train].tofile(folder / "train.bin")
    tokens[n_train:].tofile(folder / "val.bin")
    train_lens = lens[:cut] if lens[cut - 1] == 0 else np.append(lens[:cut], 0)  # close the doc
    train_lens.astype(np.uint32).tofile(folder / "train.sent.bin")
    lens[cut:].tofile(folder / "val.sent.bin")
    return {"train": n_train, "val": len(tokens) - n_train}


def _chain(first, rest):
    yield from first
    yield from rest


def prepare_demo(log=print):
    """Prepare data/demo from the built-in corpus on first use; return its folder."""
    out = DATA_ROOT / DEMO_NAME
    if not (out / "meta.json").exists():
        log("note: no --data given, so training on the built-in DEMO corpus (Python docstrings "
            "and docs); for real results prepare text with `python data.py --corpus FILES "
            "--name NAME` and pass --data data/NAME")
        prepare(demo_documents(), out, source="built-in demo corpus (Python documentation)",
                log=log)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description="Prepare a pre-training corpus (tokenizer + memmaps).")
    p.add_argument("--corpus", nargs="+", required=True,
                   help=".txt, .txt.xz, .txt.gz, .jsonl files or folders of them")
    p.add_argument("--name", required=True, help="output folder name under data/")
    p.add_argument("--out_root", default=str(DATA_ROOT), help="where data/NAME goes")
    p.add_argument("--vocab_size", type=int, default=30522, help="BPE ranks + 4 special tokens")
    p.add_argument("--bpe_mb", type=float, default=20, help="MB of text the BPE is trained on")
    p.add_argument("--threads", type=int, default=None, help="tokenizer threads (default: all)")
    args = p.parse_args(argv)
    try:
        if not re.fullmatch(r"[\w.-]+", args.name):
            raise DataError(f"--name {args.name!r}: use letters, digits, '.', '_' or '-'")
        if not 260 < args.vocab_size <= 65536:
            raise DataError(f"--vocab_size {args.vocab_size}: must be in 261..65536 (uint16 ids)")
        files = find_corpus_files(args.corpus)
        print(f"preparing {len(files)} file(s) into {args.out_root}/{args.name}")
        docs = (d for f in files for d in read_documents(f))
        meta = prepare(docs, Path(args.out_root) / args.name, args.vocab_size, args.bpe_mb,
                       threads=args.threads, source=" ".join(map(str, files)),
                       log=lambda *a, **k: print(*a, **k, flush=True))
    except DataError as e:
        print(f"\nerror: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: nothing was written", file=sys.stderr)
        return 130
    print(f"done: {meta['train_tokens']:,} train and {meta['val_tokens']:,} val tokens, "
          f"vocabulary {meta['vocab_size']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
