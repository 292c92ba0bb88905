"""Sentences and tokens: the part of preparing a corpus (data.py) that scales with its size.

The official build_pretraining_dataset.py builds examples from sentences, so every document is
cut into sentences and tokenized with the sentence ends kept in token space. This is the step
that grows with the corpus - billions of tokens for Wikipedia or OpenWebText - so it runs in one
process per core (tiktoken releases no work to threads inside one document), a chunk of about
1 MB of documents at a time, and reports MB/s and the time left as it goes. data.py calls it and
writes the chunks as they come back; the output is byte-identical at any number of workers.
"""
import multiprocessing
import os
import re
import signal
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from machinery.tokenizer import Tokenizer


def split_sentences(text):
    """Cut text into sentences: after . ! or ? (maybe closed by a quote or bracket) where
    whitespace and a capital, digit or opening quote follow, and after every line break. The
    whitespace stays at the start of the next sentence, so the sentences' tokens are exactly the
    text's tokens (a byte-level BPE sees " The" and "The" as different tokens)."""
    ends = [e for e in sentence_ends(text) if e < len(text)]
    return [text[a:b] for a, b in zip([0] + ends, ends + [len(text)])]


def sentence_ends(text):
    """The character offsets at which split_sentences cuts `text`."""
    return [m.end() for m in SENTENCE_END.finditer(text)]


# The pattern starts at the punctuation rather than with a lookbehind: a lookbehind is tried at
# every character of the text, which made sentence splitting cost half as much as tokenizing.
# [^\S\n] is whitespace within a line; a line break always ends a sentence.
SENTENCE_END = re.compile(r"""[.!?]["')\]]?(?=[^\S\n]+["'(\[]?[A-Z0-9])|\n""")



# ----------------------------------------------------------------------------- tokenizing

def tokenize_documents(tok, docs):
    """Tokenize a list of documents and find their sentences in token space.

    Returns ids (uint16, the documents one after the other), lens (uint32: the token count of
    every sentence, 0 after each document), and per document how many of ids and of lens are
    its own (doc_tokens, doc_entries), and the documents' size in UTF-8 bytes.

    Encoding every sentence on its own would cost a call per sentence, so whole documents are
    encoded and each sentence's end is found by its *byte* offset: the tokens' bytes
    concatenate to the document's UTF-8, and BPE never merges across the whitespace where
    split_sentences cuts, so every sentence end is a token end."""
    ids, ends_b, offset = [], [], 0
    for doc in docs:
        ends = sentence_ends(doc)
        if not ends or ends[-1] != len(doc):
            ends.append(len(doc))
        if not doc.isascii():           # character offsets -> UTF-8 byte offsets
            try:
                cp = np.frombuffer(doc.encode("utf-32-le"), dtype=np.uint32)
            except UnicodeEncodeError:  # lone surrogates (from JSON escapes): not UTF-8 text
                doc = doc.encode("utf-8", "replace").decode("utf-8")
                cp = np.frombuffer(doc.encode("utf-32-le"), dtype=np.uint32)
            n_bytes = np.cumsum(1 + (cp >= 0x80) + (cp >= 0x800) + (cp >= 0x10000))
            ends = n_bytes[np.array(ends) - 1]
        ends = np.asarray(ends, dtype=np.int64)
        ids.append(_encode(tok, doc))
        ends_b.append(ends + offset)
        offset += int(ends[-1])
    doc_tokens = np.array([len(t) for t in ids], dtype=np.int64)
    ids = np.concatenate(ids) if ids else np.zeros(0, np.uint32)
    # Over all documents at once: the byte offset where each token ends, the first token that
    # reaches each sentence's end, and so the tokens in each sentence.
    tok_end = np.cumsum(_token_bytes(tok)[ids])
    assert not len(ids) or tok_end[-1] == offset, "tokens do not spell the documents' bytes"
    ends_t = np.searchsorted(tok_end, np.concatenate(ends_b)) + 1
    lens = np.diff(np.minimum(ends_t, len(ids)), prepend=0)
    # Drop empty sentences (a cut inside a token), then a 0 after each document's sentences.
    doc_of = np.repeat(np.arange(len(ends_b)), [len(e) for e in ends_b])
    kept = np.bincount(doc_of[lens > 0], minlength=len(ends_b))
    lens = np.insert(lens[lens > 0], np.cumsum(kept), 0).astype(np.uint32)
    return ids.astype(np.uint16), lens, doc_tokens, kept + 1, offset


def _encode(tok, text):
    """tok.encode(text) as a uint32 array: tiktoken hands over its buffer without building a
    Python list of ints (encode_to_numpy, tiktoken >= 0.8; with no special tokens allowed or
    disallowed it is encode_ordinary: "[MASK]" in the text stays text)."""
    if hasattr(tok.enc, "encode_to_numpy"):
        return tok.enc.encode_to_numpy(text, disallowed_special=())
    return np.array(tok.encode(text), dtype=np.uint32)


def _token_bytes(tok):
    if not hasattr(tok, "_n_bytes"):
        tok._n_bytes = np.array([len(r) for r in tok.ranks] + [0] * len(tok.special_ids))
    return tok._n_bytes


def default_workers():
    """The cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:              # macOS, Windows
        return os.cpu_count() or 1


def start_workers(workers):
    """A pool of `workers` processes, started at once so that they start up (import numpy and
    tiktoken) while the BPE trains. "spawn" starts them the same way on every system and never
    copies a parent that has touched a GPU; a script of your own that calls prepare() therefore
    needs the `if __name__ == "__main__":` guard."""
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_ignore_ctrl_c)
    for _ in range(workers):            # processes start on demand: one per waiting task
        pool.submit(int)
    return pool


def _ignore_ctrl_c():
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C is the main process's to handle


_worker_tok = {}                        # tokenizer file -> Tokenizer, inside a worker process


def _tokenize_in_worker(tok_file, docs):
    if tok_file not in _worker_tok:
        _worker_tok[tok_file] = Tokenizer.load(tok_file)
    return tokenize_documents(_worker_tok[tok_file], docs)


def tokenized_chunks(chunks, tok, pool=None, workers=1, tok_file=None):
    """tokenize_documents over `chunks` (lists of documents), results in the input's order.

    With a pool (start_workers) each chunk goes to a process of its own, which loads the
    tokenizer from tok_file once: tokenizing and sentence splitting both run in parallel,
    which tiktoken's own threads would not give (the splitting is Python, held to one core by
    the GIL). At most two chunks per worker are in flight, so however fast the corpus is read
    it is never held in memory. Without a pool, everything runs here."""
    if pool is None:
        for docs in chunks:
            yield tokenize_documents(tok, docs)
        return
    pending = deque()
    for docs in chunks:
        pending.append(pool.submit(_tokenize_in_worker, str(tok_file), docs))
        if len(pending) >= 2 * workers:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


CHUNK_CHARS = 1 << 20


def document_chunks(docs, chunk_chars=None):
    """Documents in lists of about 1 MB: big enough that handing one to a process costs
    little, small enough to keep every worker busy to the end."""
    chunk, size, chunk_chars = [], 0, chunk_chars or CHUNK_CHARS
    for d in docs:
        chunk.append(d)
        size += len(d)
        if size >= chunk_chars:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


class Progress:
    """MB/s, tokens and ETA of a preparation: one line rewritten in place on a terminal (live),
    a plain line every `every` seconds in a log. The ETA comes from `fraction()` (how much of
    the input has been read) or from --max_tokens, whichever is further along."""

    def __init__(self, log, live, fraction=None, max_tokens=None, every=30.0):
        self.log, self.live, self.fraction, self.max_tokens = log, live, fraction, max_tokens
        self.every, self.t0, self.last, self.mb, self.shown = every, time.time(), 0.0, 0.0, False

    def update(self, n_docs, n_bytes, n_tokens):
        self.mb += n_bytes / 1e6
        now = time.time()
        if now - self.last < (0.5 if self.live else self.every):
            return
        self.last, dt = now, now - self.t0
        done = max((self.fraction() or 0) if self.fraction else 0,
                   n_tokens / self.max_tokens if self.max_tokens else 0)
        eta = f", ETA {_hms(dt * (1 - done) / done)}" if 0.001 < done < 1 else ""
        line = (f"tokenized {n_docs:,} documents, {self.mb:,.0f} MB, {n_tokens:,} tokens "
                f"({self.mb / max(dt, 1e-9):.1f} MB/s{eta})")
        if self.live:
            self.log(f"\r{line}\033[K", end="")
            self.shown = True
        elif dt >= self.every:          # a log gets no line for a short preparation
            self.log(line)

    def done(self):
        if self.shown:
            self.log("")
        dt = time.time() - self.t0
        self.log(f"tokenized {self.mb:,.1f} MB in {_hms(dt)} ({self.mb / max(dt, 1e-9):.1f} MB/s)")


def _hms(seconds):
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"

