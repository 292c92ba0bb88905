"""Data preparation and batching (data.py)."""
import gzip
import inspect
import json
import lzma

import numpy as np
import pytest
import torch

import batches
import data
from machinery import tokenize_corpus
from conftest import CORPUS, run_cli
from machinery.tokenizer import Tokenizer


def split_stream(data_dir, split="train"):
    """The prepared split as documents, each a list of sentences (token id arrays)."""
    tokens = np.memmap(data_dir / f"{split}.bin", dtype=np.uint16, mode="r")
    lens = np.fromfile(data_dir / f"{split}.sent.bin", dtype=np.uint32)
    docs, doc, pos = [], [], 0
    for n in lens.tolist():
        if n == 0:
            docs.append(doc)
            doc = []
        else:
            doc.append(np.array(tokens[pos:pos + n]))
            pos += n
    return docs


def test_prepared_folder_layout_and_round_trip(data_dir, corpus_file):
    meta = json.loads((data_dir / "meta.json").read_text())
    tok = Tokenizer.load(data_dir / "tokenizer.tiktoken")
    assert meta["vocab_size"] == tok.vocab_size <= 1000 and meta["format"] == data.FORMAT
    assert (meta["cls_id"], meta["sep_id"], meta["mask_id"]) == (tok.cls_id, tok.sep_id, tok.mask_id)
    train = np.memmap(data_dir / "train.bin", dtype=np.uint16, mode="r")
    val = np.memmap(data_dir / "val.bin", dtype=np.uint16, mode="r")
    assert len(train) == meta["train_tokens"] and len(val) == meta["val_tokens"] > 0
    # the documents come back from the stream: their sentences concatenate to them exactly,
    # and no sentence holds a special token. With fewer documents than val_every (the real-text
    # corpus) val is train's tail, and the last document may be cut in two there; with more
    # (the generated corpus, when ../shared is absent) every val_every-th document is in val.
    docs = list(data.read_documents(corpus_file))
    got = split_stream(data_dir, "train") + split_stream(data_dir, "val")
    assert meta["documents"] == len(docs) and len(got) in (len(docs), len(docs) + 1)
    assert tok.decode(np.concatenate(got[0]).tolist()) == docs[0]
    every = inspect.signature(data.prepare).parameters["val_every"].default
    in_val = [len(docs) >= every and i % every == every - 1 for i in range(len(docs))]
    expected = "".join(d for d, v in zip(docs, in_val) if not v) + \
        "".join(d for d, v in zip(docs, in_val) if v)
    assert tok.decode(np.concatenate([s for d in got for s in d]).tolist()) == expected
    assert sum(len(d) for d in got) == meta["sentences"] >= len(docs)
    if CORPUS.exists():     # real text has several sentences a document (generated text is
        assert meta["sentences"] > 2 * len(docs)        # lower-case: one "sentence" each)
    assert all(tok.decode(s.tolist()).strip() for d in got[:50] for s in d)
    assert int(train.max()) < tok.pad_id


def test_sentences_split_after_end_punctuation_only():
    line = 'He left at 5 p.m. yesterday. "Why?" she asked. (It rained!) Then 3 went.'
    parts = tokenize_corpus.split_sentences(line)
    assert "".join(parts) == line                          # nothing lost, spaces kept in front
    assert parts == ["He left at 5 p.m. yesterday.", ' "Why?" she asked.', " (It rained!)",
                     " Then 3 went."]


def test_examples_follow_the_official_recipe():
    # 3 documents of 40 sentences of 10 tokens: examples end at document ends, most have two
    # segments cut at a sentence boundary, a few are single-segment or shorter than max_len
    lens = np.array(([10] * 40 + [0]) * 3, dtype=np.uint32)
    ex = batches.build_examples(lens, max_len=64, seed=0)
    doc_of = lambda pos: pos // 400
    a0, a, b0, b = ex.T
    assert (a >= 1).all() and (a + b + 2 + (b > 0) <= 64).all()
    assert ((b0 == a0 + ((b0 - a0) // 10) * 10)).all()     # B starts at a sentence boundary
    assert (doc_of(a0) == doc_of(np.maximum(a0, b0 + np.maximum(b, 1) - 1))).all()
    assert 0.6 < (b > 0).mean() < 1.0                       # most have a segment B
    # a sentence longer than max_len - 3 is cut into pieces instead of being dropped
    ex = batches.build_examples(np.array([500, 0], dtype=np.uint32), max_len=64, seed=0)
    assert ex[:, 1].sum() + ex[:, 3].sum() >= 500 - 61 and len(ex) >= 8
    # a pure function of (lengths, max_len, seed): what makes --resume exact
    assert (batches.build_examples(lens, 64, 1) == batches.build_examples(lens, 64, 1)).all()


def test_batches_have_segments_padding_and_resume(data_dir):
    d = batches.PretrainingData(data_dir, "train", batch_size=16, seq_len=64, seed=1)
    b = d.next_batch()
    x, seg, pad = b["x"], b["segment_ids"], b["pad_mask"]
    assert x.shape == seg.shape == pad.shape == (16, 64) and (x[:, 0] == d.cls).all()
    assert ((x != d.pad) == pad).all()
    for r in range(16):                    # [CLS] A [SEP] (B [SEP]) [PAD]...: segment ids 0/1
        n = int(pad[r].sum())
        assert (pad[r, :n]).all() and not pad[r, n:].any() and x[r, n - 1] == d.sep
        s = seg[r, :n]
        assert s[0] == 0 and (s[1:] >= s[:-1]).all() and not seg[r, n:].any()
        assert (x[r, :n] == d.sep).sum() == 1 + int(s.any())
    state = d.state_dict()
    following = [d.next_batch() for _ in range(3)]
    d2 = batches.PretrainingData(data_dir, "train", batch_size=16, seq_len=64, seed=1)
    d2.load_state_dict(state)
    assert all(all((a[k] == c[k]).all() for k in a) for a, c in
               zip(following, [d2.next_batch() for _ in range(3)]))


def rows_one_by_one(d, rows):
    """The examples -> x, segment_ids, row by row: what PretrainingData.assemble computes with
    whole arrays, written the plain way as the reference it must equal."""
    x = np.full((len(rows), d.seq_len), d.pad, dtype=np.int64)
    seg = np.zeros_like(x)
    for r, (a0, a, b0, b) in enumerate(rows.tolist()):
        x[r, 0], x[r, 1:1 + a], x[r, 1 + a] = d.cls, d.tokens[a0:a0 + a], d.sep
        if b:
            x[r, 2 + a:2 + a + b], x[r, 2 + a + b] = d.tokens[b0:b0 + b], d.sep
            seg[r, 2 + a:3 + a + b] = 1
    return x, seg


@pytest.mark.parametrize("seq_len", [64, 16])
def test_whole_array_batches_equal_the_row_by_row_reference(data_dir, seq_len):
    """Every example of the corpus at two lengths (16: most examples are cut, A fills the row),
    plus the edge cases: no B, A of one token, A and B filling the row exactly."""
    d = batches.PretrainingData(data_dir, "train", batch_size=4, seq_len=seq_len, seed=2)
    L = seq_len
    edge = np.array([[0, 1, 1, 0], [0, L - 2, 0, 0], [5, 3, 8, L - 6], [0, 0, 0, 0]],
                    dtype=np.int64)
    for rows in (d.examples, edge):
        x, seg = d.assemble(rows)
        ref_x, ref_seg = rows_one_by_one(d, rows)
        assert (x == ref_x).all() and (seg == ref_seg).all()
        assert x.dtype == seg.dtype == np.int64


def test_the_gpu_prefetcher_pins_a_whole_training_batch(data_dir, monkeypatch):
    """On a GPU the trainer takes its batches from batches.Prefetcher, which pins every value
    of a batch - the masks (objectives.Masked) too - so that they reach the GPU asynchronously.
    Without a GPU pinning is impossible, so Tensor.pin_memory is replaced by a marked copy."""
    import objectives
    pinned = []

    def pin(t):
        pinned.append(t)
        return t.clone()
    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    d = batches.PretrainingData(data_dir, "train", batch_size=4, seq_len=64, seed=1)

    def make_batch():
        b = d.next_batch()
        b["masked"] = objectives.mask_tokens(b["x"], (d.pad, d.cls, d.sep), d.meta["mask_id"], 9,
                                             generator=torch.Generator().manual_seed(0))
        return b, d.state_dict()
    fetch = batches.Prefetcher(make_batch, depth=1)
    try:
        batch, _ = fetch()
    finally:
        fetch.close()
    assert isinstance(batch["masked"], objectives.Masked)
    assert len(pinned) >= 3 + len(objectives.Masked._fields)     # x, segments, padding, masks


def test_masking_never_picks_padding_and_padding_is_not_scored(data_dir):
    import torch
    from config import SIZES, Config
    from dataclasses import replace
    import objectives
    from ablations import build_model
    d = batches.PretrainingData(data_dir, "train", batch_size=16, seq_len=64, seed=2)
    b = d.next_batch()
    b["pad_mask"][:, 40:] = False                        # force padding into every row
    b["x"] = b["x"].masked_fill(~b["pad_mask"], d.pad)
    m = objectives.mask_tokens(b["x"], (d.pad, d.cls, d.sep), d.meta["mask_id"], 10,
                         generator=torch.Generator().manual_seed(0))
    used = m.positions[m.weights > 0]
    assert (used < 40).all()
    cfg = replace(Config(), **SIZES["tiny"], vocab_size=d.meta["vocab_size"])
    model = build_model(cfg)
    torch.manual_seed(0)
    _, s1 = model(**b, masked=m)
    # changing what sits under the padding changes nothing: it is neither read nor scored
    b2 = dict(b, x=b["x"].masked_fill(~b["pad_mask"], 7))
    m2 = m._replace(x_masked=m.x_masked.masked_fill(~b["pad_mask"], 7))
    torch.manual_seed(0)
    _, s2 = model(**b2, masked=m2)
    assert torch.allclose(s1["disc_loss"], s2["disc_loss"], atol=1e-5)
    assert s1["disc_correct"][1] == b["pad_mask"].sum()


def test_epochs_reshuffle(data_dir):
    d = batches.PretrainingData(data_dir, "train", batch_size=8, seq_len=64, seed=0)
    n = d.batches_per_epoch()
    first = [d.next_batch()["x"][:, 1].tolist() for _ in range(n)]
    assert d.state_dict()["epoch"] == 1 and d.state_dict()["batch"] == 0
    second = [d.next_batch()["x"][:, 1].tolist() for _ in range(n)]
    assert first != second


def test_damaged_folders_fail_with_one_clear_line(data_dir, tmp_path):
    import shutil
    def copy():
        dst = tmp_path / f"d{len(list(tmp_path.iterdir()))}"
        shutil.copytree(data_dir, dst)
        return dst
    bad = copy(); (bad / "train.bin").unlink()
    with pytest.raises(data.DataError, match="train.bin is missing"):
        batches.PretrainingData(bad, "train", 4, 64)
    bad = copy(); (bad / "train.bin").write_bytes((bad / "train.bin").read_bytes()[:-1])
    with pytest.raises(data.DataError, match="not a whole number"):
        batches.PretrainingData(bad, "train", 4, 64)
    bad = copy(); t = np.fromfile(bad / "train.bin", dtype=np.uint16); t[5] = 60000
    t.tofile(bad / "train.bin")
    with pytest.raises(data.DataError, match="outside the vocabulary"):
        batches.PretrainingData(bad, "train", 4, 64)
    bad = copy(); meta = json.loads((bad / "meta.json").read_text()); del meta["format"]
    (bad / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(data.DataError, match="older version"):
        batches.PretrainingData(bad, "train", 4, 64)


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
    ("second.jsonl", b'{"text": "fine"}\nnot json\n', "second.jsonl:2"),   # found while preparing
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
    assert not (tmp_path / "out").exists()        # nor --out_root, made for nothing


def test_preparing_never_replaces_a_folder_that_is_not_a_preparation(tmp_path, corpus_file):
    """data.py replaces out_root/NAME. A user's own folder there, or `--name ..` (out_root's
    parent, which holds everything else), is refused with one line, and nothing in it is lost;
    an earlier preparation of the same name is replaced, with no leftovers beside it."""
    home = tmp_path / "home"
    (home / "mine").mkdir(parents=True)
    (home / "mine" / "notes.txt").write_text("keep")
    (home / "data").mkdir()
    for out_root, name in ((home / "data", ".."), (home, "mine")):
        r = run_cli("data.py", "--corpus", corpus_file, "--name", name, "--out_root", out_root,
                    "--vocab_size", "300")
        err = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(err) == 1 and "--name" in err[0], r.stderr
        assert (home / "mine" / "notes.txt").read_text() == "keep"
    quiet = dict(bpe_mb=1, log=lambda *a, **k: None)
    data.prepare(data.read_documents(corpus_file), home / "data" / "c", vocab_size=300, **quiet)
    data.prepare(data.read_documents(corpus_file), home / "data" / "c", vocab_size=280, **quiet)
    assert data.load_meta(home / "data" / "c")["vocab_size"] == 280
    assert sorted(p.name for p in (home / "data").iterdir()) == ["c"]


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
