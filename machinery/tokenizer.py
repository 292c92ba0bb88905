"""
Byte-level BPE tokenizer: trained here in pure Python, encoded by tiktoken.

The official code uses BERT's 30,522-token WordPiece vocabulary. Its embedding
table (30,522 x 128) is a large share of the model, so to land at the paper's
~14M parameters we want a vocabulary of the same size: 30,518 BPE ranks plus
our 4 special tokens [PAD] [CLS] [SEP] [MASK] = 30,522 ids.

Byte-level BPE (GPT-2 style) starts from the 256 single bytes, so any string
can be encoded -- there is no [UNK] token -- and it learns merges of frequent
adjacent pairs. tiktoken does the encoding in fast Rust, but its named
encodings ("gpt2", ...) are downloaded on first use and this project must run
offline, so train_bpe() below learns our own ranks from the training corpus.

A "rank" list is just the tokens' byte strings in the order they were
learned: index = token id = merge priority. Every learned token is the
concatenation of two tokens with *lower* rank, so any prefix of the list is
itself a complete, valid vocabulary (handy for small experiments and tests).

The file format (to_text / save) is tiktoken's own `.tiktoken` format, one
line per rank: "base64(token) rank". Special tokens are not stored: they are
always the four ids just after the ranks.
"""

import base64
import heapq
import re
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import tiktoken

from machinery.atomic import atomic_write

SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]")

# GPT-2's split pattern: contractions, letter runs, digit runs, punctuation
# runs (each optionally led by one space), then whitespace. BPE never merges
# across these chunks, so e.g. " the" can become one token but "the." cannot.
PAT_STR = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# The same pattern for Python's `re`, which has no \p{...} classes:
# [^\W\d_] ~ letters, \d ~ numbers, (?:[^\s\w]|_) ~ neither letter, number nor
# space. The classes differ slightly at the edges (e.g. Python counts "²" as a
# letter). That only changes which merges get learned, never correctness:
# tiktoken always encodes with PAT_STR, and any ranks list is a valid vocab.
_TRAIN_PAT = re.compile(r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")


def _merge_word(word, a, b, new):
    """Replace each non-overlapping (a, b) in `word`, left to right, by `new`.
    Returns None if the pair does not occur (the word index was stale)."""
    out, i, n = [], 0, len(word)
    while i < n:
        try:
            j = word.index(a, i)  # jump to the next `a` in C, not one by one
        except ValueError:
            break
        if j + 1 < n and word[j + 1] == b:
            out.extend(word[i:j])
            out.append(new)
            i = j + 2
        else:
            out.extend(word[i:j + 1])
            i = j + 1
    if not out:
        return None
    out.extend(word[i:])
    return out if len(out) < n else None


def train_bpe(texts, n_ranks: int, progress: bool = False) -> list[bytes]:
    """Learn up to `n_ranks` byte-level BPE tokens from `texts` (iterable of str).

    Returns the ordered token byte strings, index = rank: the 256 single bytes
    first (rank i = bytes([i])), then the merged tokens in the order learned.
    Returns fewer than n_ranks if the text runs out of pairs to merge.
    """
    if n_ranks < 256:
        raise ValueError(f"n_ranks must be >= 256 (the single bytes), got {n_ranks}")
    t0 = time.time()
    # Count each distinct chunk once. Real text has ~100x fewer distinct
    # chunks than total chunks, so BPE below runs on unique words weighted
    # by count instead of rescanning the corpus for every merge.
    chunk_counts = Counter()
    for text in texts:
        chunk_counts.update(_TRAIN_PAT.findall(text))
    words, counts = [], []  # words[i]: current token ids of distinct chunk i
    for chunk, c in chunk_counts.items():
        b = chunk.encode("utf-8")
        if len(b) > 1:  # single bytes hold no pairs
            words.append(list(b))
            counts.append(c)
    if progress:
        print(f"bpe: {sum(chunk_counts.values()):,} chunks, {len(chunk_counts):,} distinct, "
              f"counted in {time.time() - t0:.1f}s", file=sys.stderr)
    del chunk_counts

    ranks = [bytes([i]) for i in range(256)]
    index = {tok: i for i, tok in enumerate(ranks)}
    pair_counts = defaultdict(int)  # (a, b) -> weighted count over all words
    where = defaultdict(set)  # (a, b) -> indices of words that (may) contain it
    for i, (w, c) in enumerate(zip(words, counts)):
        for p in zip(w, w[1:]):
            pair_counts[p] += c
            where[p].add(i)

    # Max-heap of (-count, left bytes, right bytes, pair). Comparing the bytes
    # breaks count ties deterministically, so runs are reproducible. Entries
    # go stale as counts change; instead of updating them in place we check
    # the popped count against pair_counts (lazy invalidation). A pair's count
    # only grows in the merge that creates it (it must contain the new token)
    # and only shrinks afterwards, so a stale entry is always popped too early,
    # never too late, and re-pushing it with the current count is enough.
    heap = [(-c, ranks[a], ranks[b], (a, b)) for (a, b), c in pair_counts.items()]
    heapq.heapify(heap)

    t1, n_merges = time.time(), 0
    while len(ranks) < n_ranks and heap:
        negc, ba, bb, pair = heapq.heappop(heap)
        c = pair_counts.get(pair, 0)
        if c != -negc:
            if c > 0:
                heapq.heappush(heap, (-c, ba, bb, pair))
            continue
        a, b = pair
        # Two different pairs can spell the same bytes ("ab"+"c", "a"+"bc");
        # reuse the existing id so every rank stays unique.
        new = index.get(ba + bb)
        if new is None:
            new = index[ba + bb] = len(ranks)
            ranks.append(ba + bb)
        n_merges += 1
        # Only words that contained the pair change: retract their old pairs,
        # add their new ones, and sum the differences.
        delta = defaultdict(int)
        for i in where.pop(pair):
            w = words[i]
            out = _merge_word(w, a, b, new)
            if out is None:
                continue
            c = counts[i]
            for p in zip(w, w[1:]):
                delta[p] -= c
            for p in zip(out, out[1:]):
                delta[p] += c
                if new in p:
                    where[p].add(i)
            words[i] = out
        for p, d in delta.items():
            if d:
                c = pair_counts[p] + d
                if c > 0:
                    pair_counts[p] = c
                    if new in p:  # new pairs get an entry; old ones only shrank
                        heapq.heappush(heap, (-c, ranks[p[0]], ranks[p[1]], p))
                else:
                    del pair_counts[p]
        if progress and n_merges % 1000 == 0:
            dt = time.time() - t1
            print(f"bpe: {len(ranks):,}/{n_ranks:,} ranks, {n_merges / dt:.0f} merges/s, "
                  f"last {ranks[new]!r} x{-negc:,}", file=sys.stderr)
    if progress:
        print(f"bpe: done, {len(ranks):,} ranks from {n_merges:,} merges in {time.time() - t0:.1f}s",
              file=sys.stderr)
    return ranks


class Tokenizer:
    """A trained ranks list wrapped as a tiktoken Encoding, plus 4 special ids."""

    def __init__(self, ranks: list[bytes]):
        ranks = list(ranks)
        if len(ranks) < 256 or any(ranks[i] != bytes([i]) for i in range(256)):
            raise ValueError("ranks must start with the 256 single bytes, rank i = bytes([i])")
        if not all(isinstance(t, bytes) and t for t in ranks):
            raise ValueError("every rank must be a non-empty bytes object")
        if len(set(ranks)) != len(ranks):
            raise ValueError("ranks contain duplicate tokens")
        self.ranks = ranks
        n = len(ranks)
        # Specials go right after the ranks, so a vocab of size n+4 covers all.
        self.special_ids = [n + i for i in range(len(SPECIAL_TOKENS))]
        self.pad_id, self.cls_id, self.sep_id, self.mask_id = self.special_ids
        self.vocab_size = n + len(SPECIAL_TOKENS)
        self.enc = tiktoken.Encoding(
            f"electra_bpe_{n}",
            pat_str=PAT_STR,
            mergeable_ranks={tok: i for i, tok in enumerate(ranks)},
            special_tokens=dict(zip(SPECIAL_TOKENS, self.special_ids)),
            explicit_n_vocab=self.vocab_size,
        )

    def encode(self, text: str) -> list[int]:
        # encode_ordinary: "[MASK]" typed in the data is just text, so the
        # corpus can never inject real special tokens.
        return self.enc.encode_ordinary(text)

    def encode_batch(self, texts: list[str], num_threads: int = 8) -> list[list[int]]:
        return self.enc.encode_ordinary_batch(list(texts), num_threads=num_threads)

    def decode(self, ids) -> str:
        if hasattr(ids, "tolist"):  # torch / numpy arrays
            ids = ids.tolist()
        return self.enc.decode([int(i) for i in ids])

    def to_text(self) -> str:
        return "".join(f"{base64.b64encode(t).decode('ascii')} {i}\n"
                       for i, t in enumerate(self.ranks))

    @classmethod
    def from_text(cls, text: str) -> "Tokenizer":
        if not isinstance(text, str):
            raise ValueError(f"tokenizer text must be a str, got {type(text).__name__}")
        ranks = []
        for lineno, line in enumerate(text.splitlines(), 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 2:
                raise ValueError(f"tokenizer line {lineno}: expected 'base64 rank', got {line[:60]!r}")
            try:
                tok = base64.b64decode(parts[0], validate=True)
                rank = int(parts[1])
            except ValueError:  # binascii.Error is a ValueError subclass
                raise ValueError(f"tokenizer line {lineno}: bad base64 or rank in {line[:60]!r}") from None
            if rank != len(ranks):
                raise ValueError(f"tokenizer line {lineno}: expected rank {len(ranks)}, got {rank}")
            ranks.append(tok)
        return cls(ranks)

    def save(self, path):
        # Write-then-rename: a crash mid-write never leaves a truncated file.
        text = self.to_text()
        atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="ascii"))

    @classmethod
    def load(cls, path) -> "Tokenizer":
        # Not tiktoken.load: that one is built around a download cache.
        with open(path, encoding="ascii") as f:
            return cls.from_text(f.read())

    def __repr__(self):
        return f"Tokenizer(vocab_size={self.vocab_size})"
