"""Data, prepared once: corpus -> tokenizer -> a stream of token ids with sentence boundaries.

The paper pre-trains on BERT's data, Wikipedia and BooksCorpus (§3.1). This code trains a
byte-level BPE on your own corpus (machinery/tokenizer.py), so any text can be prepared
offline, and keeps every sentence's length and every document's end, where batches.py cuts
examples.

Details: the official code tokenizes with BERT's WordPiece vocabulary (model/tokenization.py);
this code's BPE has 30,522 entries by default, BERT's size.

    python data.py --corpus my_corpus.txt.xz --name mine
    python data.py --hf wikimedia/wikipedia --hf_config 20231101.en --name wiki

(the second needs `pip install datasets`) write data/NAME/: each split's token ids (uint16, as
nanoGPT) and sentence lengths, tokenizer.tiktoken and meta.json.

Engineering: one worker process per core tokenizes a chunk of documents at a time, written as it
comes back, so any corpus streams through in a few MB per worker
(machinery/tokenize_corpus.py; --hf: machinery/hf_data.py).
"""
import gzip
import io
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
from machinery import cli
from machinery import tokenize_corpus
from machinery.hf_data import DatasetError, hf_documents
from machinery.tokenize_corpus import (Progress, default_workers, document_chunks, start_workers,
                             tokenized_chunks)
from machinery.tokenizer import Tokenizer, train_bpe

# Engineering: prepared corpora live in data/ beside the code; ELECTRA_DATA_ROOT moves them.
DATA_ROOT = Path(os.environ.get("ELECTRA_DATA_ROOT", Path(__file__).resolve().parent / "data"))
DEMO_NAME = "demo"
TEXT_SUFFIXES = (".txt", ".txt.xz", ".txt.gz", ".jsonl")
SKIP_DIRS = {"test", "tests", "site-packages", "dist-packages", "__pycache__"}


FORMAT = 2      # meta.json "format": 2 = token stream + sentence lengths (two-segment examples)


class DataError(Exception):
    """Engineering: bad input the user can fix: the command line prints one line and exits
    1."""


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
    path = Path(data_dir) / "tokenizer.tiktoken"
    try:
        return Tokenizer.load(path)
    except (OSError, ValueError) as e:  # missing, truncated or edited by hand
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise DataError(f"{path}: not a usable tokenizer ({why}): prepare the folder again "
                        "with `python data.py --corpus FILES --name NAME`") from None


# ----------------------------------------------------------------------------- reading corpora

def find_corpus_files(paths):
    """Engineering: expand folders; check every file exists, is a supported kind, and is
    non-empty text."""
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
    """Engineering: a text file, decompressed; read from `raw` (the file opened in binary)
    when given."""
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
    """Engineering: the documents of all files in order, and a function giving the fraction of
    their bytes read so far (for the ETA)."""
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
    """The built-in demo corpus, enough to watch ELECTRA learn offline.

    Details: the Python language reference (pydoc_data) and the docstrings of the standard
    library and installed packages, there wherever the requirements are: odd English."""
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
            # Engineering: site-packages is walked as its own root; tests are code more than
            # prose.
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

def prepare(documents, out_dir, vocab_size=30522, bpe_mb=20, val_every=200, workers=None,
            max_tokens=None, fraction=None, source="", log=print, live=False):
    """Tokenize `documents` (an iterable of str, read once) into out_dir, with a BPE trained
    on the first `bpe_mb` MB.

    Details: merges barely change with more text; every `val_every`-th document goes to
    val.bin; it stops after `max_tokens`.

    Engineering: written into a temporary folder renamed into place: an interrupted
    preparation leaves nothing half-written."""
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
        # Engineering: with more than a chunk of text, worker processes pay off; they start
        # while the BPE trains.
        more = size > tokenize_corpus.CHUNK_CHARS or size >= bpe_mb * 1_000_000
        pool = start_workers(workers) if workers > 1 and more else None
        t0 = time.time()
        log(f"training a {vocab_size}-token byte-level BPE on {size / 1e6:.1f} MB of text ...")
        tok = Tokenizer(train_bpe(sample, vocab_size - 4))
        tok.save(tmp / "tokenizer.tiktoken")
        log(f"BPE trained in {time.time() - t0:.0f}s: vocabulary {tok.vocab_size}")
        assert tok.vocab_size <= 65536, "uint16 memmaps need a vocabulary below 65536"

        # Each split: a token stream (split.bin, uint16) and the token count of every sentence,
        # 0 after each document (split.sent.bin, uint32), where build_examples cuts.
        counts = {"train": 0, "val": 0}
        files = {s: open(tmp / f"{s}.bin", "wb") for s in counts}
        sent_files = {s: open(tmp / f"{s}.sent.bin", "wb") for s in counts}
        n_docs, n_sents = 0, 0
        progress = Progress(log, live, fraction, max_tokens)
        log(f"tokenizing with {workers if pool else 1} worker process"
            f"{'es' * bool(pool)} ...")
        chunks = tokenized_chunks(document_chunks(_chain(sample, docs)), tok, pool, workers,
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
        # Engineering: an earlier preparation of the same name goes only once the new one is
        # in place.
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


def check_out_dir(out_dir):
    """Engineering: prepare() replaces out_dir: it must be an earlier preparation, an empty
    folder or nothing, so no --name can cost the user a file."""
    if out_dir.name in ("", ".", "..") or out_dir.resolve() == Path(__file__).resolve().parent:
        raise DataError(f"{out_dir}: not a folder for prepared data: give a --name such as wiki00")
    if out_dir.exists() and not out_dir.is_dir():
        raise DataError(f"{out_dir} is a file, not a data folder: choose another --name")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / "meta.json").is_file():
        raise DataError(f"{out_dir} holds files but is not a prepared data folder (no "
                        "meta.json), so it is not replaced: choose another --name or --out_root")


def _remove_abandoned(out_dir):
    """Engineering: remove the temporary folders of earlier preparations of out_dir whose
    process is gone (killed, a power cut), on POSIX (on Windows os.kill would end a live
    one)."""
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
    """Engineering: move the last sentences of train (about 1/val_every of its tokens, at
    least 4096 or half) into val, for corpora with fewer documents than `val_every`."""
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


def demo_dir(vocab_size=30522):
    """The demo corpus's folder: data/demo (BERT's 30,522 tokens), data/demo-8192 (8,192)."""
    return DATA_ROOT / (DEMO_NAME if vocab_size == 30522 else f"{DEMO_NAME}-{vocab_size}")


def prepare_demo(vocab_size=30522, log=print):
    """Prepare the built-in corpus with this vocabulary on first use; return its folder."""
    out = demo_dir(vocab_size)
    if not (out / "meta.json").exists():
        log("note: no --data given, so training on the built-in DEMO corpus (Python docstrings "
            "and docs); for real results prepare text with `python data.py --corpus FILES "
            "--name NAME` and pass --data data/NAME")
        prepare(demo_documents(), out, vocab_size, source="built-in demo corpus (Python "
                "documentation)", log=log)
    return out


def end_live_line():
    """Engineering: a terminal's live progress line (rewritten in place) ends before an error
    is printed."""
    if sys.stdout.isatty():
        print(flush=True)


# Engineering: the command line. Bad input (DataError, DatasetError) is one `error:` line and
# exit code 1; Ctrl-C leaves nothing written.
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
    existed = Path(args.out_root).exists()      # a refused run removes it if it made it empty
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
    except (DataError, DatasetError) as e:
        end_live_line()
        print(f"error: {e}", file=sys.stderr)
        cli.remove_if_left_empty(args.out_root, existed)
        return 1
    except KeyboardInterrupt:
        end_live_line()
        print("interrupted: nothing was written", file=sys.stderr)
        cli.remove_if_left_empty(args.out_root, existed)
        return 130
    print(f"done: {meta['train_tokens']:,} train and {meta['val_tokens']:,} val tokens, "
          f"vocabulary {meta['vocab_size']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
