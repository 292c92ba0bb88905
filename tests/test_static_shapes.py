"""Tests for fine-tuning with static shapes (machinery/static_shapes.py, finetune_glue.py
--compile): the batches' shapes and weights, the same losses, weights and dev metrics as the
eager path, the command line's flags (machinery/glue_cli.py), and the eager fallback when
compiling fails.

The graphs are compiled with backend "aot_eager": Dynamo and AOTAutograd trace the same graphs as
with Inductor, without generating code, so a test takes seconds. Dropout is 0 where the two
paths are compared: compiled kernels draw other random numbers than eager ones."""
import functools
import json
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import finetune_glue as fg  # noqa: E402
from conftest import generated_text, save_tiny  # noqa: E402
from glue import TASKS, encode_examples, read_task  # noqa: E402
from machinery import compile_cache, glue_cli  # noqa: E402
from machinery.device import pick_precision  # noqa: E402
from machinery.static_shapes import Padded, StaticShapes, bucket_lengths  # noqa: E402
from machinery.tokenizer import Tokenizer, train_bpe  # noqa: E402
from test_glue import A, B, Y, write_glue  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")   # conftest: restores the count after
CPU = torch.device("cpu")
FP32 = pick_precision("fp32", CPU)[1]
WORDS = "the a man dog cat house river car book tree road sun old new big red sees finds".split()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """An untrained tiny checkpoint (2 blocks of 64, max length 64) with a small tokenizer."""
    tok = Tokenizer(train_bpe(generated_text(400).split("\n"), 300))
    return save_tiny(tmp_path_factory.mktemp("ckpt") / "ckpt.pt", tok)


def pairs_glue(root, n_train=44, n_dev=30, seed=0):
    """An RTE and an STS-B folder of sentence pairs from 3 to 24 words: every bucket gets
    batches, and 44 examples at batch 8 leave a partial last batch."""
    rng = random.Random(seed)

    def sent():
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 24))) + "."
    rows = [(sent(), sent()) for _ in range(n_train + n_dev)]
    a, b = [r[0] for r in rows], [r[1] for r in rows]
    y = [i % 2 for i in range(len(rows))]
    write_glue(root, a[:n_train], b[:n_train], y[:n_train], ["RTE", "STS-B"],
               dev_rows=(a[n_train:], b[n_train:], y[n_train:]))
    return root


def run_both(name, glue_dir, ckpt, monkeypatch, epochs=3):
    """Fine-tune `name` eagerly and with static shapes, dropout 0: for each, (epoch losses,
    final weights, dev metrics)."""
    pre = fg.load_pretrained(ckpt)
    state, shapes, tok, _ = pre
    hp = dict(fg.HPARAMS, dropout=0.0, lr=1e-3, batch_size=8)
    train, devs = read_task(glue_dir, name)
    data = (encode_examples(tok, train, 64), {k: encode_examples(tok, v, 64)
                                              for k, v in devs.items()})
    models = []
    build = fg.build_classifier
    monkeypatch.setattr(fg, "build_classifier", lambda *a: models.append(build(*a)) or models[-1])
    out = []
    for compiled in (False, True):
        static = None
        if compiled:
            static, _ = glue_cli.compile_task(fg, name, pre, CPU, FP32, 64, (16, 32), hp,
                                              backend="aot_eager")
            assert static is not None and static.buckets == [16, 32, 64]
        lines = []
        r = fg.finetune(name, data, pre, 0, CPU, FP32, epochs, hp, log=lambda s, **k: lines.append(s),
                        static=static)
        losses = [float(s.split("train loss ")[1].split()[0]) for s in lines]
        out.append((losses, {k: v.detach().clone() for k, v in models[-1].state_dict().items()},
                    r["metrics"]))
    return out


# ----------------------------------------------------------------------------- batches

def test_bucket_lengths_end_at_the_models_length():
    assert bucket_lengths((32, 64, 128), 128) == [32, 64, 128]
    assert bucket_lengths((32, 64, 128), 64) == [32, 64]
    assert bucket_lengths((32, 64), 128) == [32, 64, 128]      # every example fits one
    assert bucket_lengths((256,), 128) == [128]


def test_batch_is_padded_to_its_bucket_and_filled_with_weight_zero_rows():
    inputs = [([1, 5, 2], [0, 0, 0]), ([1, 5, 6, 2, 7, 2], [0, 0, 0, 0, 1, 1]),
              ([1] + [5] * 20 + [2], [0] * 22)]
    static = StaticShapes([4, 8], 32, 5, CPU, regression=False, backend="aot_eager")
    data = Padded(inputs, 9, static.buckets[-1])
    labels = torch.tensor([1.0, 0.0, 1.0])
    ids, seg, mask, y, w = static.batch(data, np.array([1, 0]), 5, labels)
    assert ids.shape == (5, 8) and static.bucket(6) == 8          # 6 tokens: the 8-bucket
    assert ids[0].tolist() == [1, 5, 6, 2, 7, 2, 9, 9] and seg[0].tolist() == [0, 0, 0, 0, 1, 1, 0, 0]
    assert ids[1].tolist() == [1, 5, 2, 9, 9, 9, 9, 9] and mask.sum(1).tolist() == [6, 3, 6, 6, 6]
    assert torch.equal(ids[2:], ids[:1].expand(3, 8))             # copies of the first row...
    assert w.tolist() == [1, 1, 0, 0, 0] and y.tolist() == [0, 1, 0, 0, 0]   # ...at weight 0
    assert static.batch(data, np.array([2]), 5)[0].shape == (5, 32)   # 22 tokens: max_len


# ----------------------------------------------------------------------------- equality

def test_same_losses_weights_and_metrics_as_eager(tiny, tmp_path, monkeypatch):
    """RTE-shaped pairs (classification) and STS-B (regression), 3 epochs at batch 8 over
    buckets 16, 32, 64: the eager path and the static one agree to float rounding."""
    g = pairs_glue(tmp_path / "glue")
    for name in ("rte", "stsb"):
        (l_e, w_e, m_e), (l_s, w_s, m_s) = run_both(name, g, tiny, monkeypatch)
        assert len(l_e) == len(l_s) == 3
        np.testing.assert_allclose(l_s, l_e, rtol=1e-4, atol=1e-5)
        assert l_e[0] != l_e[-1]                                  # it trained
        for k in w_e:
            torch.testing.assert_close(w_s[k], w_e[k], rtol=1e-4, atol=1e-5, msg=k)
        assert m_s.keys() == m_e.keys()
        metric = TASKS[name].metric
        if name == "stsb":   # correlations of predictions equal to rounding
            assert m_s[metric] == pytest.approx(m_e[metric], abs=1e-4)
        else:
            assert m_s == m_e


def test_dev_predictions_equal_eager(tiny):
    """150 dev examples of 3 to 60 tokens: an eval batch of 128 rows and a partial one of 22
    filled up with weight-0 copies, over every bucket; regression outputs, compared as numbers."""
    state, shapes, tok, _ = fg.load_pretrained(tiny)
    torch.manual_seed(0)
    model = fg.build_classifier(state, shapes, 1, 0.1)
    rng = np.random.default_rng(0)
    inputs = [([tok.cls_id] + rng.integers(10, 200, n).tolist() + [tok.sep_id], [0] * (n + 2))
              for n in rng.integers(1, 59, 150)]
    eager = fg.predict(model, inputs, tok.pad_id, CPU, FP32, regression=True)
    static = StaticShapes([16, 32], 64, 8, CPU, regression=True, backend="aot_eager")
    got = static.predict(model, inputs, tok.pad_id, FP32)
    assert len({static.bucket(len(x)) for x, _ in inputs}) == 3 and eager.std() > 1e-3
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-6)


def test_padding_does_not_leak_into_the_loss(tiny):
    """One batch: the weighted loss of a batch padded to 64 tokens and 8 rows equals the eager
    mean over its 3 real rows; so do the gradients."""
    state, shapes, tok, _ = fg.load_pretrained(tiny)
    torch.manual_seed(0)
    model = fg.build_classifier(state, shapes, 2, 0.0)
    inputs = [([tok.cls_id] + list(range(10, 10 + n)) + [tok.sep_id], [0] * (n + 2))
              for n in (4, 9, 14)]
    labels = torch.tensor([0.0, 1.0, 1.0])
    idx = np.arange(3)
    logits = model(*fg.collate(inputs, idx, tok.pad_id, CPU))
    eager = torch.nn.functional.cross_entropy(logits, labels.long())
    g_eager = torch.autograd.grad(eager, list(model.parameters()))
    static = StaticShapes([64], 64, 8, CPU, regression=False, backend="aot_eager")
    loss = static.loss(model, Padded(inputs, tok.pad_id, 64), idx, labels, FP32)
    g_static = torch.autograd.grad(loss, list(model.parameters()))
    assert loss.item() == pytest.approx(eager.item(), rel=1e-5)
    for a, b in zip(g_static, g_eager):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_warm_up_drops_the_gradients_after_every_backward(tiny, monkeypatch):
    """Each warm-up call starts with no gradient on any parameter: on CUDA a gradient left from
    the previous call lies in the backward graph's memory, which the next replay overwrites
    (seen on a GPU as "accessing tensor output of CUDAGraphs that has been overwritten"). The
    CUDA path's three calls per bucket are stood in for (cuda_graphs=True on the CPU, where
    mark_step_begin is harmless)."""
    state, shapes, tok, _ = fg.load_pretrained(tiny)
    model = fg.build_classifier(state, shapes, 2, 0.0)
    static = StaticShapes([16], 16, 4, CPU, regression=False, backend="aot_eager")
    static.cuda_graphs = True
    seen, loss = [], StaticShapes.loss

    def spy(self, model, *a, **k):
        seen.append(sum(p.grad is not None for p in model.parameters()))
        return loss(self, model, *a, **k)
    monkeypatch.setattr(StaticShapes, "loss", spy)
    static.warm_up(model, FP32, tok.pad_id)
    assert len(seen) == 3 and seen == [0, 0, 0]
    assert all(p.grad is None for p in model.parameters())


# ----------------------------------------------------------------------------- command line

def test_cli_compile_runs_every_layout_and_records_it(tiny, tmp_path, monkeypatch, capsys):
    """--compile on MNLI (two dev splits, 3 classes) and STS-B: one compile per task, reused
    by both seeds; the results say it was compiled, at which lengths, in how long. With
    --compile_cache the cache is loaded once before the first compile and saved after each
    task's (machinery/compile_cache.py; tests/test_compile_cache.py tests what they do)."""
    monkeypatch.setattr(glue_cli, "compile_task", functools.partial(glue_cli.compile_task,
                                                                    backend="aot_eager"))
    calls = []
    monkeypatch.setattr(compile_cache, "load", lambda path, dev: calls.append(("load", path)))
    monkeypatch.setattr(compile_cache, "save", lambda path, dev: calls.append(("save", path)))
    write_glue(tmp_path / "g", A * 4, B * 4, Y * 4, ["MNLI", "STS-B"])
    out, cache = tmp_path / "r.json", tmp_path / "c.bin"
    code = fg.main(["--ckpt", str(tiny), "--glue_dir", str(tmp_path / "g"), "--epochs", "1",
                    "--seeds", "2", "--compile", "--buckets", "16", "--out", str(out),
                    "--threads", "1", "--compile_cache", str(cache)])
    assert calls == [("load", str(cache)), ("save", str(cache)), ("save", str(cache))]
    stdout, err = capsys.readouterr()
    assert code == 0, err
    r = json.loads(out.read_text())
    assert set(r["tasks"]["mnli"]["median"]) == {"acc", "acc_mm"}
    assert len(r["tasks"]["stsb"]["seeds"]) == 2 and r["glue_tasks"] == ["stsb", "mnli"]
    f = r["finetune"]
    assert f["compile"] is True and f["buckets"] == [16, 64]
    assert set(f["compile_s"]) == {"stsb", "mnli"}
    assert stdout.count("compiled 4 graphs") == 2 and "compiled, buckets 16,64" in stdout


def test_cli_default_is_eager_on_the_cpu(tiny, tmp_path, capsys):
    write_glue(tmp_path / "g", A, B, Y, ["RTE"])
    out = tmp_path / "r.json"
    assert fg.main(["--ckpt", str(tiny), "--glue_dir", str(tmp_path / "g"), "--epochs", "1",
                    "--out", str(out), "--threads", "1", "--precision", "fp32"]) == 0
    assert "| device cpu, fp32, eager" in capsys.readouterr()[0]
    f = json.loads(out.read_text())["finetune"]
    assert f["compile"] is False and f["buckets"] is None and f["compile_s"] == {}


def test_a_failed_compile_fine_tunes_eagerly(tiny, tmp_path, monkeypatch, capsys):
    def broken(*a, **k):
        raise RuntimeError("no C++ compiler found\nmore")
    monkeypatch.setattr(StaticShapes, "warm_up", broken)
    write_glue(tmp_path / "g", A, B, Y, ["RTE"])
    out = tmp_path / "r.json"
    assert fg.main(["--ckpt", str(tiny), "--glue_dir", str(tmp_path / "g"), "--epochs", "1",
                    "--compile", "--out", str(out), "--threads", "1"]) == 0
    stdout = capsys.readouterr()[0]
    assert "rte: torch.compile failed (RuntimeError: no C++ compiler found); fine-tuning " \
           "eagerly" in stdout
    r = json.loads(out.read_text())
    assert "rte seed 0 epoch 1/1" in stdout and r["tasks"]["rte"]
    assert r["finetune"]["compile_s"] == {"rte": None}          # the record says it ran eagerly


@pytest.mark.parametrize("args, needle", [
    (["--buckets", "0", "--compile"], "--buckets"), (["--buckets", "x", "--compile"], "--buckets"),
    (["--buckets", "", "--compile"], "--buckets"), (["--buckets", "32,-1", "--compile"], "--buckets"),
    (["--buckets", "32,64"], "only with --compile"),
    (["--buckets", "32", "--no-compile"], "only with --compile"),
    (["--compile=yes"], "--compile")])
def test_bad_flags_one_line(args, needle, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    if not torch.cuda.is_available() or "--no-compile" in args:
        with pytest.raises(SystemExit) as e:
            fg.main(["--ckpt", "none.pt", "--glue_dir", "glue", *args])
        assert e.value.code == 2
        err = capsys.readouterr()[1]
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], err
        assert not list(tmp_path.iterdir())


def test_speed_benchmark_runs_both_side_by_side(tiny, tmp_path, capsys):
    from benchmarks import finetune_speed
    g = pairs_glue(tmp_path / "glue")
    out = tmp_path / "speed.json"
    assert finetune_speed.main(["--ckpt", str(tiny), "--glue_dir", str(g), "--task", "rte",
                                "--backend", "aot_eager", "--rounds", "1", "--threads", "1",
                                "--buckets", "16,32", "--json", str(out)]) == 0
    stdout = capsys.readouterr()[0]
    assert "round 1 eager" in stdout and "round 1 static" in stdout and "took" in stdout
    r = json.loads(out.read_text())
    assert r["buckets"] == [16, 32, 64] and r["train_examples"] == 44 and r["compile_s"] >= 0
    assert len(r["runs"]["eager"]) == len(r["runs"]["static"]) == 1
    assert all(x["train_examples_per_s"] > 0 for v in r["runs"].values() for x in v)


def test_help_names_the_flags(capsys):
    with pytest.raises(SystemExit):
        glue_cli.parse_args(["--help"], TASKS)
    text = " ".join(capsys.readouterr()[0].split())
    assert "--compile, --no-compile" in text and "--buckets" in text
    assert "CUDA graph" in text and "weight 0" in text and "32,64,128" in text
