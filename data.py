"""Data, prepared once: corpus -> tokenizer -> token memmap with sentence boundaries.

Paper §2 and Appendix A. The ELECTRA input pipeline is BERT's, minus next-sentence prediction,
as the official build_pretraining_dataset.py builds it. This file is its first half, run once
per corpus: text is read document by document, a byte-level BPE is trained on a sample of it,
and every document is tokenized into one long stream of token ids (a uint16 memmap, as in
nanoGPT) together with the length of every sentence and the end of every document. Those
boundaries are what batches.py needs to build two-segment examples that never cross a document.
The second half - examples, batches and dynamic masking during training - is batches.py.

Command line (prepare a corpus once):
    python data.py --corpus ../shared/data/corpus/wiki2015-00.txt.xz --name wiki00
    python data.py --hf wikimedia/wikipedia --hf_config 20231101.en --name wiki    # pip install datasets
writes data/NAME/{train.bin, train.sent.bin, val.bin, val.sent.bin, tokenizer.tiktoken, meta.json}.
Documents are tokenized by one process per core (--workers), a chunk at a time, and written as
they come back, so a corpus of any size streams through in memory of a few MB per worker.
"""
import gzip
import io
import json
import lzma
import multiprocessing
import os
import re
import shutil
import signal
import sys
import sysconfig
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import cli
from tokenizer import Tokenizer, train_bpe

# Prepared corpora live in data/ beside the code; ELECTRA_DATA_ROOT moves them (tests use it).
DATA_ROOT = Path(os.environ.get("ELECTRA_DATA_ROOT", Path(__file__).resolve().parent / "data"))
DEMO_NAME = "demo"
TEXT_SUFFIXES = (".txt", ".txt.xz", ".txt.gz", ".jsonl")
SKIP_DIRS = {"test", "tests", "site-packages", "dist-packages", "__pycache__"}


FORMAT = 2      # meta.json "format": 2 = token stream + sentence lengths (two-segment examples)


class DataError(Exception):
    """Bad input the user can fix; the command line prints it as one line and exits 1."""


# ----------------------------------------------------------------------------- sentences

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


def load_meta(data_dir):
    path = Path(data_dir) / "meta.json"
    try:
        meta = json.loads(path.read_text())
        assert all(k in meta for k in ("vocab_size", "cls_id", "sep_id", "mask_id", "pad_id"))
    except (OSError, ValueError, AssertionError):
        raise DataError(f"{data_dir} is not a prepared data folder (no valid meta.json): "
                        "run `python data.py --corpus FILES --name NAME` first") from None
    return meta


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


def _open_text(path, raw=None):
    """A text file, decompressed; read from `raw` (the file opened in binary) when given."""
    name, source = str(path), path if raw is None else raw
    if name.endswith(".xz"):
        return lzma.open(source, "rt", encoding="utf-8")
    if name.endswith(".gz"):
        return gzip.open(source, "rt", encoding="utf-8")
    return open(path, "r", encoding="utf-8") if raw is None else \
        io.TextIOWrapper(raw, encoding="utf-8")


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


def read_documents(path, raw=None):
    """Yield documents: blank-line separated blocks of .txt files, the "text" field of .jsonl."""
    with _open_text(path, raw) as f:
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


def corpus_documents(files):
    """The documents of all files in order, and a function that says which fraction of the
    files' bytes has been read so far (compressed bytes for .xz/.gz: the ETA needs no total
    of the text, which only reading it all would give)."""
    sizes, state = [f.stat().st_size for f in files], {"done": 0, "raw": None}

    def documents():
        for f, size in zip(files, sizes):
            with open(f, "rb") as raw:
                state["raw"] = raw
                yield from read_documents(f, raw)
            state["done"], state["raw"] = state["done"] + size, None

    def fraction():
        raw = state["raw"]
        return (state["done"] + (raw.tell() if raw and not raw.closed else 0)) / max(sum(sizes), 1)
    return documents(), fraction


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


# ----------------------------------------------------------------------------- Hugging Face datasets

HF_FILE_KINDS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".jsonl.gz": "json",
                 ".json.gz": "json"}
HF_INSTALL = ("--hf needs the optional `datasets` package: pip install datasets "
              "(or give text files to --corpus)")


def hf_documents(name, config=None, split="train", text_field="text"):
    """The documents of a Hugging Face dataset, streamed, with the optional `datasets` package:
    a dataset on the hub (`openwebtext`, `wikimedia/wikipedia` with config `20231101.en`), a
    folder written by save_to_disk, or Parquet / JSON-lines files (a file or a folder of them).
    Each row's `text_field` is one document, as each line of a .jsonl given to --corpus is.
    Returns (documents, fraction, source) as corpus_documents does; every problem that can be
    seen before reading is a DataError here, before anything is written."""
    import importlib.util
    if importlib.util.find_spec("datasets") is None:
        raise DataError(HF_INSTALL)     # before asking the network anything
    path = Path(name)
    offline = bool(os.environ.get("HF_HUB_OFFLINE") or os.environ.get("HF_DATASETS_OFFLINE"))
    unreachable = False
    if not path.exists() and not offline and not _hub_reachable():
        # Without a network, datasets retries for half a minute and prints every try. Its
        # offline mode looks in the local cache alone, and fails at once when it is not there.
        os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
        unreachable = True
    try:
        import datasets
    except ImportError:
        raise DataError(HF_INSTALL) from None
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    total = None
    try:
        if path.exists():
            ds, total = _open_local_dataset(datasets, path, split)
        else:
            ds = datasets.load_dataset(name, config, split=split, streaming=True)
            try:
                total = ds.info.splits[split].num_examples
            except (AttributeError, KeyError, TypeError):
                pass
    except DataError:
        raise
    except Exception as e:              # whatever the hub, the cache or the files answer
        raise DataError(_hf_failure(name, e, unreachable)) from None
    if ds.column_names is not None:     # a streamed dataset may know its columns only later
        if text_field not in ds.column_names:
            raise DataError(f"{name} has no column {text_field!r} (it has "
                            f"{', '.join(ds.column_names)}): choose one with --text_field")
        ds = ds.select_columns([text_field])
    state = {"rows": 0}
    try:                                # batches as Arrow tables: 3x faster than Python dicts
        ds, arrow = ds.with_format("arrow"), True
    except Exception:
        arrow = False

    def documents():
        try:
            for batch in ds.iter(batch_size=1000):
                columns = batch.column_names if arrow else list(batch)
                if text_field not in columns:
                    raise DataError(f"{name} has no column {text_field!r} (it has "
                                    f"{', '.join(columns)}): choose one with --text_field")
                texts = batch[text_field]
                for text in texts.to_pylist() if arrow else texts:
                    state["rows"] += 1
                    if text is not None and not isinstance(text, str):
                        raise DataError(f"{name}: column {text_field!r} holds "
                                        f"{type(text).__name__}, not text: choose another "
                                        "with --text_field")
                    if text and text.strip():
                        yield text
        except (DataError, KeyboardInterrupt, GeneratorExit):
            raise
        except Exception as e:          # the network went away, a damaged file ...
            raise DataError(f"reading {name} failed after {state['rows']:,} rows "
                            f"({type(e).__name__}: {_first_line(e)}): nothing was written; "
                            "run the command again") from None

    fraction = (lambda: state["rows"] / total) if total else None
    source = f"{name} ({config}, {split})" if config else f"{name} ({split})"
    return documents(), fraction, source


def _open_local_dataset(datasets, path, split):
    """A save_to_disk folder (Dataset or DatasetDict), or Parquet / JSON-lines files; returns
    (dataset, rows or None)."""
    if path.is_dir() and ((path / "dataset_dict.json").exists() or (path / "state.json").exists()):
        ds = datasets.load_from_disk(str(path))
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise DataError(f"{path} has no split {split!r} (it has {', '.join(ds)}): "
                                "choose one with --hf_split")
            ds = ds[split]
        return ds, len(ds)              # memory-mapped Arrow: read as it is iterated
    files = sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]
    kinds = {f: next((k for s, k in HF_FILE_KINDS.items() if f.name.endswith(s)), None)
             for f in files}
    files = [f for f in files if kinds[f]]
    if not files or len({kinds[f] for f in files}) > 1:
        raise DataError(f"{path}: give a save_to_disk folder, or .parquet or .jsonl files "
                        "(one kind), to --hf")
    kind = kinds[files[0]]
    rows = None
    if kind == "parquet":               # the row count is in each file's footer
        import pyarrow.parquet as pq
        rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    ds = datasets.load_dataset(kind, data_files=[str(f) for f in files], split="train",
                               streaming=True)
    return ds, rows


def _hub_reachable(timeout=10):
    """Whether the Hugging Face hub answers at all (any HTTP answer counts), within `timeout`
    seconds."""
    import urllib.error
    import urllib.request
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout)
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


def _hf_failure(name, e, unreachable):
    """One line for a dataset that could not be opened: what happened, and what to do."""
    text = _first_line(e)
    if "scripts are no longer supported" in text:
        return (f"{name} is published as a loading script, which this version of datasets no "
                "longer runs: choose a dataset stored as Parquet (e.g. wikimedia/wikipedia "
                "--hf_config 20231101.en), or pip install 'datasets<4'")
    if unreachable or "offline" in text.lower() or "couldn't reach" in text.lower():
        return (f"cannot reach the Hugging Face hub, and {name} is not in the local cache: "
                "connect to the internet, or copy the dataset here (Parquet files or a "
                "save_to_disk folder) and give its path to --hf")
    if type(e).__name__ in ("DatasetNotFoundError", "FileNotFoundError", "RepositoryNotFoundError"):
        return f"{name}: no such dataset on the hub or on disk ({text}): check the name"
    return f"could not open {name} ({type(e).__name__}: {text})"


def _first_line(e):
    lines = str(e).strip().splitlines()
    return (lines[0] if lines else type(e).__name__)[:300]


# ----------------------------------------------------------------------------- preparation

def prepare(documents, out_dir, vocab_size=30522, bpe_mb=20, val_every=200, workers=None,
            max_tokens=None, fraction=None, source="", log=print, live=False):
    """Tokenize `documents` (an iterable of str, read once) into out_dir atomically.

    The BPE is trained on the first `bpe_mb` MB of documents (a sample is enough: merge ranks
    learned on 20 MB of English barely change with more). Every `val_every`-th document goes
    to val.bin. Documents are tokenized by `workers` processes, a chunk at a time, and written
    as they come back, so memory stays small whatever the corpus; `max_tokens` stops after the
    document that reaches it. `fraction()`, if given, says how much of the input has been read
    (for the ETA). Everything is written into a temporary folder renamed into place at the end,
    so an interrupted preparation leaves nothing half-written."""
    out_dir = Path(out_dir)
    check_out_dir(out_dir)              # before any work: an earlier preparation is replaced
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    _remove_abandoned(out_dir)
    try:
        tmp.mkdir(parents=True)
    except OSError as e:                # --out_root is a file, or read-only
        raise DataError(f"{out_dir}: cannot create it ({e.strerror or e}): choose another "
                        "--out_root") from None
    workers, pool = workers or default_workers(), None
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
        # More than a chunk of text (or more to come after the sample): worker processes pay
        # off, and they start up while the BPE trains.
        more = size > CHUNK_CHARS or size >= bpe_mb * 1_000_000
        pool = start_workers(workers) if workers > 1 and more else None
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
        n_docs, n_sents = 0, 0
        progress = Progress(log, live, fraction, max_tokens)
        log(f"tokenizing with {workers if pool else 1} worker process"
            f"{'es' * bool(pool)} ...")
        chunks = tokenized_chunks(_chunks(_chain(sample, docs)), tok, pool, workers,
                                  tmp / "tokenizer.tiktoken")
        try:
            for ids, lens, doc_tokens, doc_entries, n_bytes in chunks:
                if max_tokens:                  # stop after the document that reaches it
                    reach = sum(counts.values()) + np.cumsum(doc_tokens)
                    k = int(np.searchsorted(reach, max_tokens)) + 1
                    if k < len(doc_tokens):
                        ids, lens = ids[:doc_tokens[:k].sum()], lens[:doc_entries[:k].sum()]
                        doc_tokens, doc_entries = doc_tokens[:k], doc_entries[:k]
                # every val_every-th document of the whole corpus is held out
                in_val = np.arange(n_docs, n_docs + len(doc_tokens)) % val_every == val_every - 1
                val_tok, val_len = np.repeat(in_val, doc_tokens), np.repeat(in_val, doc_entries)
                for split, t, l in (("train", ~val_tok, ~val_len), ("val", val_tok, val_len)):
                    ids[t].tofile(files[split])
                    lens[l].tofile(sent_files[split])
                    counts[split] += int(t.sum())
                n_docs += len(doc_tokens)
                n_sents += len(lens) - len(doc_tokens)
                progress.update(n_docs, n_bytes, sum(counts.values()))
                if max_tokens and sum(counts.values()) >= max_tokens:
                    break
        finally:
            chunks.close()
        progress.done()
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
        # An earlier preparation of the same name is moved aside, and deleted only once the new
        # one is in place: whatever interrupts this, one whole preparation stays at out_dir.
        old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
        if out_dir.exists():
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
        return meta
    finally:
        if pool is not None:            # the workers finish their chunk (Ctrl-C) and stop
            pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(tmp, ignore_errors=True)


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


def _chunks(docs, chunk_chars=None):
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


def check_out_dir(out_dir):
    """prepare() replaces out_dir, so out_dir must be an earlier preparation, an empty folder
    or nothing yet. `--name ..`, or a name that happens to be one of the user's own folders,
    must never cost a single file."""
    if out_dir.name in ("", ".", "..") or out_dir.resolve() == Path(__file__).resolve().parent:
        raise DataError(f"{out_dir}: not a folder for prepared data: give a --name such as wiki00")
    if out_dir.exists() and not out_dir.is_dir():
        raise DataError(f"{out_dir} is a file, not a data folder: choose another --name")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / "meta.json").is_file():
        raise DataError(f"{out_dir} holds files but is not a prepared data folder (no "
                        "meta.json), so it is not replaced: choose another --name or --out_root")


def _remove_abandoned(out_dir):
    """Remove the temporary folders of earlier preparations of out_dir whose process is gone
    (killed, or a power cut): gigabytes of tokens must not stay hidden on the disk. Only where
    a process can be asked whether it is alive without harm (POSIX; on Windows os.kill ends it)."""
    if os.name != "posix" or not out_dir.parent.is_dir():
        return
    for folder in out_dir.parent.glob(f".{out_dir.name}.tmp-*"):
        pid = folder.name.rsplit("-", 1)[-1]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:                 # alive, another user's
            pass


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
    p = cli.Parser(description="Prepare a pre-training corpus (tokenizer + memmaps).")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--corpus", nargs="+", type=cli.nonempty,
                     help=".txt, .txt.xz, .txt.gz, .jsonl files or folders of them")
    src.add_argument("--hf", metavar="DATASET", type=cli.nonempty,
                     help="a Hugging Face dataset (needs `pip install datasets`): a hub name such "
                          "as openwebtext or wikimedia/wikipedia, a save_to_disk folder, or "
                          ".parquet / .jsonl files")
    p.add_argument("--hf_config", type=cli.nonempty, default=None,
                   help="the dataset's configuration (Wikipedia: 20231101.en)")
    p.add_argument("--hf_split", type=cli.nonempty, default="train",
                   help="the dataset's split (default: train)")
    p.add_argument("--text_field", type=cli.nonempty, default="text",
                   help="the column that holds the text")
    p.add_argument("--name", required=True, help="output folder name under data/")
    p.add_argument("--out_root", type=cli.out_folder, default=str(DATA_ROOT),
                   help="where data/NAME goes")
    p.add_argument("--vocab_size", type=cli.int_range(261, 65536), default=30522,
                   help="BPE ranks + 4 special tokens: 261 to 65536 (the ids are uint16)")
    p.add_argument("--bpe_mb", type=cli.positive_float, default=20,
                   help="MB of text the BPE is trained on")
    p.add_argument("--max_tokens", type=cli.positive_int, default=None,
                   help="stop after the document that reaches this many tokens")
    p.add_argument("--workers", "--threads", type=cli.threads, default=None,
                   help=f"tokenizer processes (default: every core; at most {cli.MAX_THREADS})")
    args = p.parse_args(argv)
    try:
        if not re.fullmatch(r"[\w.-]+", args.name):
            raise DataError(f"--name {args.name!r}: use letters, digits, '.', '_' or '-'")
        out = Path(args.out_root) / args.name
        check_out_dir(out)              # before a download starts, not after
        if args.hf:
            docs, fraction, source = hf_documents(args.hf, args.hf_config, args.hf_split,
                                                  args.text_field)
            print(f"preparing {source} into {out}")
        else:
            files = find_corpus_files(args.corpus)
            docs, fraction = corpus_documents(files)
            source = " ".join(map(str, files))
            print(f"preparing {len(files)} file(s) into {out}")
        meta = prepare(docs, out, args.vocab_size, args.bpe_mb, workers=args.workers,
                       max_tokens=args.max_tokens, fraction=fraction, source=source,
                       log=lambda *a, **k: print(*a, **k, flush=True), live=sys.stdout.isatty())
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
