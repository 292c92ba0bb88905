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
writes data/wiki00/{train.bin, train.sent.bin, val.bin, val.sent.bin, tokenizer.tiktoken, meta.json}.
"""
import argparse
import gzip
import json
import lzma
import os
import re
import shutil
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np
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

def split_sentences(line):
    """Cut a paragraph into sentences: after . ! or ? (maybe closed by a quote or bracket) where
    whitespace and a capital, digit or opening quote follow. The whitespace stays at the start
    of the next sentence, so the sentences' tokens are exactly the paragraph's tokens (a
    byte-level BPE sees " The" and "The" as different tokens)."""
    return SENTENCE_END.split(line)


SENTENCE_END = re.compile(r"""(?:(?<=[.!?])|(?<=[.!?]["')\]]))(?=\s+["'(\[]?[A-Z0-9])""")


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
    check_out_dir(out_dir)              # before any work: an earlier preparation is replaced
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
    except OSError as e:                # --out_root is a file, or read-only
        raise DataError(f"{out_dir}: cannot create it ({e.strerror or e}): choose another "
                        "--out_root") from None
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
        # An earlier preparation of the same name is moved aside, and deleted only once the new
        # one is in place: whatever interrupts this, one whole preparation stays at out_dir.
        old = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
        if out_dir.exists():
            os.replace(out_dir, old)
        os.replace(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
        return meta
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
