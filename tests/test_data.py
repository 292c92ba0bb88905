"""Data preparation and batching (data.py)."""
import gzip
import json
import lzma

import numpy as np
import pytest

import data
from conftest import CORPUS, run_cli
from tokenizer import Tokenizer


def test_prepared_folder_layout_and_round_trip(data_dir, corpus_file):
    meta = json.loads((data_dir / "meta.json").read_text())
    tok = Tokenizer.load(data_dir / "tokenizer.tiktoken")
    assert meta["vocab_size"] == tok.vocab_size <= 1000
    assert (meta["cls_id"], meta["sep_id"], meta["mask_id"]) == (tok.cls_id, tok.sep_id, tok.mask_id)
    train = np.memmap(data_dir / "train.bin", dtype=np.uint16, mode="r")
    val = np.memmap(data_dir / "val.bin", dtype=np.uint16, mode="r")
    assert len(train) == meta["train_tokens"] and len(val) == meta["val_tokens"] > 0
    # the stream decodes back to the documents, with [SEP] between them
    docs = list(data.read_documents(corpus_file))
    stream = np.concatenate([train, val])
    assert (stream == tok.sep_id).sum() == len(docs)
    first = tok.decode(train[:np.argmax(train == tok.sep_id)].tolist())
    assert first == docs[0]


def test_batches_are_cls_window_sep_and_resumable(data_dir):
    d = data.PretrainingData(data_dir, "train", batch_size=4, seq_len=32, seed=1)
    x = d.next_batch()
    assert x.shape == (4, 32) and (x[:, 0] == d.cls).all() and (x[:, -1] == d.sep).all()
    state = d.state_dict()
    following = [d.next_batch() for _ in range(3)]
    d2 = data.PretrainingData(data_dir, "train", batch_size=4, seq_len=32, seed=1)
    d2.load_state_dict(state)
    assert all((a == b).all() for a, b in zip(following, [d2.next_batch() for _ in range(3)]))
    # every window is a real slice of the stream
    tokens = np.memmap(data_dir / "train.bin", dtype=np.uint16, mode="r")
    w = x[0, 1:-1].numpy()
    starts = np.flatnonzero(tokens[: len(tokens) - 30] == w[0])
    assert any((tokens[s:s + 30] == w).all() for s in starts)


def test_epochs_reshuffle_and_cover_every_window(data_dir):
    d = data.PretrainingData(data_dir, "train", batch_size=8, seq_len=64, seed=0)
    n = d.batches_per_epoch()
    first = [d.next_batch()[:, 1].tolist() for _ in range(n)]
    assert d.state_dict() == {"epoch": 1, "batch": 0}
    second = [d.next_batch()[:, 1].tolist() for _ in range(n)]
    assert first != second


def test_reads_txt_gz_xz_jsonl_and_folders(tmp_path):
    (tmp_path / "a.txt").write_text("one two\nthree\n\nfour five\n")
    with gzip.open(tmp_path / "b.txt.gz", "wt") as f:
        f.write("gz doc\n")
    with lzma.open(tmp_path / "c.txt.xz", "wt") as f:
        f.write("xz doc\n\nxz doc two\n")
    (tmp_path / "d.jsonl").write_text('{"text": "json doc"}\n\n{"text": "json two"}\n')
    files = data.find_corpus_files([tmp_path])
    docs = [d for f in files for d in data.read_documents(f)]
    assert docs == ["one two\nthree", "four five", "gz doc", "xz doc", "xz doc two",
                    "json doc", "json two"]


@pytest.mark.parametrize("name, content, message", [
    ("missing.txt", None, "no such file"),
    ("empty.txt", b"", "empty"),
    ("binary.txt", b"\x00\x01\x02binary\xff\xfe" * 100, "text"),
    ("nofield.jsonl", b'{"txt": 1}\n', "text"),
    ("table.csv", b"a,b\n", "unsupported"),
])
def test_bad_corpus_gives_one_line_and_writes_nothing(tmp_path, name, content, message):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    r = run_cli("data.py", "--corpus", path, "--name", "bad", "--out_root", tmp_path / "out",
                "--vocab_size", "300")
    err = r.stderr.strip().splitlines()
    assert r.returncode != 0 and len(err) == 1 and message in err[0], r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out" / "bad").exists()
    assert not any((tmp_path / "out").glob(".*tmp*")) if (tmp_path / "out").exists() else True


def test_cli_prepares_a_real_shard_sample(tmp_path):
    if not CORPUS.exists():
        pytest.skip("../shared/data/corpus is absent (only on the project's machines)")
    with lzma.open(CORPUS / "books-00.txt.xz", "rt", encoding="utf-8") as f:
        text = f.read(300_000)
    with lzma.open(tmp_path / "books.txt.xz", "wt", encoding="utf-8") as f:
        f.write(text)
    r = run_cli("data.py", "--corpus", tmp_path / "books.txt.xz", "--name", "books",
                "--out_root", tmp_path, "--vocab_size", "800", "--bpe_mb", "1")
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "books" / "meta.json").read_text())
    assert meta["vocab_size"] == 800
    assert meta["train_tokens"] < len(text.encode()) / 2.5    # BPE compresses English text


def test_demo_corpus_exists_offline():
    docs = []
    for d in data.demo_documents(max_mb=0.5):
        docs.append(d)
    text = " ".join(docs)
    assert len(text) > 400_000 and text.count(" the ") > 1000
