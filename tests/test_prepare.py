"""Preparing text at scale (data.py): Hugging Face datasets, parallel tokenizing, interruptions,
and the trainer's warning when the data is too small for the budget."""
import filecmp
import json
import os
import re
import time

import numpy as np
import pytest

import batches
import data
from machinery import hf_data
from machinery import tokenize_corpus
from conftest import HANG, generated_text, run_cli

FILES = ("train.bin", "train.sent.bin", "val.bin", "val.sent.bin", "tokenizer.tiktoken")
QUIET = dict(log=lambda *a, **k: None)


def same_preparation(a, b):
    """Byte-identical token streams, sentence lengths and tokenizer; meta.json alike but for
    where the text came from."""
    meta = [json.loads((d / "meta.json").read_text()) for d in (a, b)]
    for m in meta:
        m.pop("source")
    return meta[0] == meta[1] and all(filecmp.cmp(a / f, b / f, shallow=False) for f in FILES)


def one_error_line(r):
    lines = r.stderr.strip().splitlines()
    return r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error:") and \
        "Traceback" not in r.stderr


def test_sentence_cuts_are_the_line_by_line_lookbehind_rule(corpus_file):
    """The fast pattern (whole documents, starting at the punctuation) cuts exactly where the
    original rule cut each line: after . ! ? (and a closing quote or bracket) before whitespace
    and a capital, digit or opening quote - and at every line break."""
    reference = re.compile(r"""(?:(?<=[.!?])|(?<=[.!?]["')\]]))(?=\s+["'(\[]?[A-Z0-9])""")
    tricky = 'A "b." C?! D.) E.\u00a0F. (G!) "H." x.\tY.  \n2 z.\u2028Q. \u00c9t\u00e9. Fin'
    docs = list(data.read_documents(corpus_file))[:200] + [tricky, "no end", "end.\n"]
    for doc in docs:
        lines = doc.split("\n")
        want = [s for i, line in enumerate(lines)
                for s in reference.split(line + ("\n" if i < len(lines) - 1 else ""))]
        assert tokenize_corpus.split_sentences(doc) == [s for s in want if s], doc[:80]


def test_parallel_workers_write_the_same_bytes_as_one(tmp_path, corpus_file, monkeypatch):
    monkeypatch.setattr(tokenize_corpus, "CHUNK_CHARS", 40_000)       # ~10 chunks: the pool is used
    docs = list(data.read_documents(corpus_file))
    kw = dict(vocab_size=400, bpe_mb=0.1, val_every=7, **QUIET)     # val documents in chunks
    one = data.prepare(docs, tmp_path / "one", workers=1, **kw)
    data.prepare(docs, tmp_path / "two", workers=2, **kw)
    assert one["val_tokens"] > 0 and one["documents"] == len(docs)
    assert same_preparation(tmp_path / "one", tmp_path / "two")


def test_max_tokens_stops_after_the_document_that_reaches_it(tmp_path):
    docs = generated_text(3000).split("\n\n")                 # 600 short documents
    full = data.prepare(docs, tmp_path / "full", vocab_size=300, bpe_mb=1, **QUIET)
    cut = data.prepare(docs, tmp_path / "cut", vocab_size=300, bpe_mb=1, max_tokens=5000, **QUIET)
    total = cut["train_tokens"] + cut["val_tokens"]
    assert 5000 <= total < 5000 + 200 and cut["documents"] < full["documents"]
    lens = np.fromfile(tmp_path / "cut" / "train.sent.bin", dtype=np.uint32)
    assert lens[-1] == 0                                        # whole documents only


def test_an_interrupted_preparation_leaves_no_prepared_looking_folder(tmp_path, corpus_file,
                                                                      monkeypatch):
    monkeypatch.setattr(tokenize_corpus, "CHUNK_CHARS", 10_000)

    def interrupted():                  # Ctrl-C while the worker processes tokenize
        for i, d in enumerate(data.read_documents(corpus_file)):
            if i == 8:
                raise KeyboardInterrupt
            yield d
    assert len(list(data.read_documents(corpus_file))) > 8
    out = tmp_path / "out" / "c"
    # a folder left by a preparation that was killed (its process is gone) is removed too
    abandoned = tmp_path / "out" / ".c.tmp-999999999"
    abandoned.mkdir(parents=True)
    (abandoned / "train.bin").write_bytes(b"\0" * 100)
    with pytest.raises(KeyboardInterrupt):
        data.prepare(interrupted(), out, vocab_size=300, bpe_mb=0.02, workers=2, **QUIET)
    assert list((tmp_path / "out").iterdir()) == []
    with pytest.raises(data.DataError):
        data.load_meta(out)


def test_hf_dataset_folder_and_parquet_prepare_like_the_same_text_as_corpus(tmp_path,
                                                                           corpus_file):
    datasets = pytest.importorskip("datasets")
    docs = list(data.read_documents(corpus_file))
    ds = datasets.Dataset.from_dict({"id": list(range(len(docs))), "text": docs})
    ds.save_to_disk(str(tmp_path / "disk"))
    datasets.DatasetDict({"train": ds, "test": ds.select(range(3))}).save_to_disk(
        str(tmp_path / "dict"))
    ds.to_parquet(str(tmp_path / "docs.parquet"))
    common = ["--out_root", str(tmp_path / "out"), "--vocab_size", "400", "--bpe_mb", "0.1"]
    # in this process (datasets is imported once); the command line's own run is the test below
    assert data.main(["--corpus", str(corpus_file), "--name", "corpus", *common]) == 0
    for name, source in (("disk", tmp_path / "disk"), ("dict", tmp_path / "dict"),
                         ("parquet", tmp_path / "docs.parquet")):
        assert data.main(["--hf", str(source), "--name", name, *common]) == 0
        assert same_preparation(tmp_path / "out" / "corpus", tmp_path / "out" / name), name
    # a column or split that is not there: one line naming the ones that are
    for extra, message in ((["--text_field", "body"], "--text_field"),
                           (["--hf_split", "validation"], "--hf_split")):
        with pytest.raises(hf_data.DatasetError, match=message):
            hf_data.hf_documents(str(tmp_path / "dict"), split=extra[1] if "split" in extra[0]
                              else "train", text_field=extra[1] if "field" in extra[0] else "text")


def test_hf_hub_name_offline_fails_in_one_line(tmp_path):
    pytest.importorskip("datasets")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               HF_HOME=str(tmp_path / "hf_home"))          # an empty cache
    t0 = time.time()
    r = run_cli("data.py", "--hf", "openwebtext", "--name", "owt", "--out_root",
                tmp_path / "out", env=env, timeout=HANG)
    assert one_error_line(r) and "cannot reach the Hugging Face hub" in r.stderr, r.stderr
    assert time.time() - t0 < 300 and not (tmp_path / "out" / "owt").exists()   # no network wait


def test_hf_without_datasets_says_what_to_install(tmp_path):
    blocked = tmp_path / "blocked" / "datasets"         # `import datasets` fails first
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('no datasets here')\n")
    env = dict(os.environ, PYTHONPATH=str(blocked.parent), HF_HUB_OFFLINE="1")
    r = run_cli("data.py", "--hf", "openwebtext", "--name", "owt", "--out_root",
                tmp_path / "out", env=env)
    assert one_error_line(r) and "pip install datasets" in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def test_repetition_warning_for_a_tiny_corpus_and_a_long_budget(tmp_path):
    out = tmp_path / "small"
    data.prepare(generated_text(400).split("\n\n"), out, vocab_size=300, bpe_mb=1, **QUIET)
    d = batches.PretrainingData(out, "train", batch_size=16, seq_len=64)
    per_pass = d.n_seqs / 16                             # steps for one pass over the examples
    assert batches.repetition_warning(3 * per_pass, d) is None
    line = batches.repetition_warning(20 * per_pass, d)
    assert line.startswith("warning:") and "about 20 times" in line and "data.py --hf" in line
    assert "\n" not in line
    # the trainer says it once, at the start of a step budget
    r = run_cli("electra_small.py", "--data", out, "--size", "tiny", "--threads", "1",
                "--log_every", "5", "--max_steps", str(int(4.5 * per_pass) + 1), "--out_dir",
                tmp_path / "run")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("warning: this budget goes through") == 1, r.stdout
