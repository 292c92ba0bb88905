"""Tests for finetune_glue.py: layer-wise learning rates, the schedule, batching, loading the
encoder from a checkpoint, an end-to-end fine-tune that learns, a real-GLUE run, and the
command line's errors (one line, exit 1, no traceback, no results file).

A tiny ELECTRA checkpoint is pre-trained once per session with the project's own commands
(data.py, electra_small.py --size tiny). Everything runs with one CPU thread: tiny models gain
nothing from more, and on a shared machine extra threads only wait on each other."""
import json
import lzma
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import HANG
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import finetune_glue as fg  # noqa: E402
import glue  # noqa: E402
from machinery.checkpoint import load_checkpoint, save_checkpoint  # noqa: E402
from encoder import EncoderConfig  # noqa: E402
from test_glue import A, B, Y, write_glue  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"


pytestmark = pytest.mark.usefixtures("one_thread")   # conftest: restores the count after


def corpus_text(n_chars=300_000):
    """Real text when the shared corpus is here, else generated sentences."""
    shard = SHARED / "corpus" / "wiki2015-01.txt.xz"
    if shard.exists():
        with lzma.open(shard, "rt", encoding="utf-8") as f:
            text = f.read(n_chars)
        return text[:text.rfind("\n\n")]
    rng = random.Random(0)
    words = ("the of and a to in is was for on that with as by it from at his an were are "
             "which this be or has had first new one their its after two city river year "
             "people world war school music team game family water house").split()
    docs = [" ".join(" ".join(rng.choice(words) for _ in range(rng.randint(6, 20))) + "."
                     for _ in range(rng.randint(3, 8))) for _ in range(3000)]
    return "\n\n".join(docs)


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory):
    """A tiny pre-trained ELECTRA checkpoint made by the real commands. Only 3 steps: tiny
    discriminators trained longer collapse to one [CLS] vector for every input, which takes
    fine-tuning many steps to undo (a property of the toy, not of the code)."""
    d = tmp_path_factory.mktemp("pretrain")
    (d / "corpus.txt").write_text(corpus_text(), encoding="utf-8")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for cmd in (["data.py", "--corpus", str(d / "corpus.txt"), "--name", "tiny",
                 "--vocab_size", "2000", "--bpe_mb", "1", "--out_root", str(d)],
                ["electra_small.py", "--data", str(d / "tiny"), "--size", "tiny",
                 "--max_steps", "3", "--log_every", "1", "--out_dir", str(d / "out"),
                 "--threads", "1"]):
        p = subprocess.run([sys.executable, *cmd], cwd=ROOT, capture_output=True, text=True,
                           env=env, timeout=HANG)
        assert p.returncode == 0, p.stderr
    return d / "out" / "ckpt.pt"


def run_main(args, capsys):
    code = fg.main([*args, "--threads", "1"])
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- optimizer

def test_glorot_init_where_the_official_code_uses_tf_default():
    # the GLUE head, the embedding projections of G and D and D's output layer: Glorot
    # uniform (TF's default for a bare tf.layers.dense); everything else N(0, 0.02) truncated
    from config import Config
    from ablations import build_model
    torch.manual_seed(0)
    enc = EncoderConfig(hidden=256, layers=1, heads=4, ffn=64)
    clf = fg.Classifier(vocab_size=50, emb_size=128, max_len=32, enc=enc, n_out=2)
    pre = build_model(Config(vocab_size=500, disc=EncoderConfig(hidden=256, layers=1, heads=4,
                                                                ffn=64)))
    bound = lambda lin: (6 / sum(lin.weight.shape)) ** 0.5
    for lin in (clf.head, pre.discriminator.encoder.proj, pre.generator.encoder.proj,
                pre.discriminator.head_out):
        w = lin.weight
        assert w.abs().max() <= bound(lin) and w.abs().max() > 0.9 * bound(lin)
        if w.numel() > 100:
            assert w.std().item() == pytest.approx(bound(lin) / 3 ** 0.5, rel=0.15)  # uniform
        assert (lin.bias == 0).all()
    for w in (pre.discriminator.encoder.blocks[0].ffn_in.weight, pre.discriminator.head_dense.weight):
        assert w.std().item() == pytest.approx(0.02, rel=0.15) and w.abs().max() <= 0.04


def test_warmup_then_linear_decay():
    total, warmup = 100, 10
    m = [fg.lr_multiplier(s, total, warmup) for s in range(1, total + 1)]
    assert m[0] == pytest.approx(0.1) and m[9] == pytest.approx(0.91)   # step 10: 1 * (1 - 9/100)
    assert m[-1] == pytest.approx(0.01) and all(a > b for a, b in zip(m[9:], m[10:]))
    assert all(a < b for a, b in zip(m[:9], m[1:10]))


def test_length_batches_cover_everything_once_with_little_padding():
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 128, size=1000)
    batches = fg.length_batches(lengths, 32, np.random.default_rng(1))
    assert sorted(np.concatenate(batches).tolist()) == list(range(1000))
    assert all(len(b) <= 32 for b in batches)
    padded = sum(len(b) * lengths[b].max() for b in batches)
    naive = sum(len(b) * lengths[b].max() for b in np.array_split(rng.permutation(1000), 32))
    assert padded < 0.6 * naive                     # grouping by length saves most padding
    again = fg.length_batches(lengths, 32, np.random.default_rng(2))
    assert [b.tolist() for b in again] != [b.tolist() for b in batches]   # shuffled per epoch


def test_collate_pads_to_longest_in_batch():
    inputs = [([1, 5, 2], [0, 0, 0]), ([1, 5, 6, 2, 7, 2], [0, 0, 0, 0, 1, 1])]
    ids, seg, mask = fg.collate(inputs, [0, 1], pad_id=9, device="cpu")
    assert ids.tolist() == [[1, 5, 2, 9, 9, 9], [1, 5, 6, 2, 7, 2]]
    assert seg.tolist() == [[0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 1]]
    assert mask.sum(1).tolist() == [3, 6]


# ----------------------------------------------------------------------------- checkpoint

def test_loads_discriminator_only_and_bert_encoder(tiny_ckpt, tmp_path):
    state, shapes, tok, info = fg.load_pretrained(tiny_ckpt)
    assert state and all(k.startswith(("embeddings.", "encoder.")) for k in state)
    assert info["model"] == "electra" and info["steps"] == 3
    assert info["params"] == sum(v.numel() for v in state.values())
    model = fg.build_classifier(state, shapes, 2, 0.1)
    ck = load_checkpoint(tiny_ckpt)
    assert torch.equal(model.encoder.blocks[0].attn.qkv.weight,
                       ck["model"]["discriminator.encoder.blocks.0.attn.qkv.weight"])
    # a BERT checkpoint keeps its encoder under mlm.*; pretend D's weights are BERT's
    ck["config"]["model"] = "bert"
    ck["model"] = {k.replace("discriminator.", "mlm."): v for k, v in ck["model"].items()
                   if k.startswith("discriminator.")}
    ck.pop("kind"), ck.pop("version")
    save_checkpoint(tmp_path / "bert.pt", ck)
    s2, _, _, info2 = fg.load_pretrained(tmp_path / "bert.pt")
    assert info2["model"] == "bert" and info2["objective"] == "mlm" and s2.keys() == state.keys()


# ----------------------------------------------------------------------------- end to end

def synthetic_sst2(root, n_train, n_dev=200, seed=0):
    """Label 1 iff the sentence contains "wonderful": learnable only through attention."""
    rng = random.Random(seed)
    words = ("the a man woman dog cat house city river car book tree road sun day night old "
             "new big small red blue walks sees finds likes takes near over under").split()
    d = root / "SST-2"
    d.mkdir(parents=True)
    for split, n in (("train", n_train), ("dev", n_dev)):
        rows = []
        for i in range(n):
            w = [rng.choice(words) for _ in range(rng.randint(5, 12))]
            if i % 2:
                w.insert(rng.randrange(len(w) + 1), "wonderful")
            rows.append(f"{' '.join(w)}\t{i % 2}")
        rng.shuffle(rows)
        (d / f"{split}.tsv").write_text("sentence\tlabel\n" + "\n".join(rows) + "\n")
    return root


def test_end_to_end_learns_synthetic_task(tiny_ckpt, tmp_path, capsys):
    g = synthetic_sst2(tmp_path / "glue", 600)
    out = tmp_path / "r.json"
    # a 2-layer toy needs a larger lr than Table 7's 3e-4 to learn in a few hundred steps
    code, stdout, err = run_main(["--ckpt", str(tiny_ckpt), "--glue_dir", str(g), "--out",
                                  str(out), "--epochs", "5", "--lr", "1e-3", "--seeds", "2"],
                                 capsys)
    assert code == 0, err
    r = json.loads(out.read_text())
    t = r["tasks"]["sst2"]
    assert t["metric"] == "acc" and [s["seed"] for s in t["seeds"]] == [0, 1]
    assert t["median"]["acc"] > 0.75, stdout                 # chance is 0.5
    assert t["spread"]["acc"][0] <= t["median"]["acc"] <= t["spread"]["acc"][1]
    assert r["glue_tasks"] == ["sst2"] and r["glue_score"] == pytest.approx(
        100 * t["median"]["acc"], abs=0.01)
    assert "sst2 seed 1 epoch 5/5 | train loss" in stdout and "examples/s" in stdout
    assert "skipped, no folder" in stdout                   # the 7 other tasks are named
    assert r["finetune"]["lr"] == 1e-3 and fg.HPARAMS["lr"] == 3e-4   # Table 7 left intact


def test_fp16_fine_tuning_runs_near_fp32(tiny_ckpt, tmp_path, capsys):
    """--precision fp16 (with loss scaling, machinery/loss_scale.py) on the CPU: the results
    say fp16, the epoch's line counts the skipped steps, and the training loss of the epoch
    (160 examples, 5 steps) is fp32's within rel 1e-2."""
    g = synthetic_sst2(tmp_path / "glue", 160, n_dev=32)
    losses = {}
    for precision in ("fp32", "fp16"):
        out = tmp_path / f"{precision}.json"
        code, stdout, err = run_main(["--ckpt", str(tiny_ckpt), "--glue_dir", str(g), "--out",
                                      str(out), "--epochs", "1", "--precision", precision],
                                     capsys)
        assert code == 0, err
        assert json.loads(out.read_text())["finetune"]["precision"] == precision
        assert (f"device cpu, {precision}" in stdout) and \
            (("fp16 skipped " in stdout) == (precision == "fp16")), stdout
        losses[precision] = [float(line.split("train loss ")[1].split(" ")[0])
                             for line in stdout.splitlines() if "train loss" in line]
    assert len(losses["fp16"]) == 1
    assert losses["fp16"] == pytest.approx(losses["fp32"], rel=1e-2)


def test_real_glue_rte_and_mrpc(tiny_ckpt, tmp_path, capsys):
    g = SHARED / "glue"
    if not (g / "RTE").is_dir() or not (g / "MRPC").is_dir():
        pytest.skip(f"{g} with RTE and MRPC is absent (real GLUE data only on the dev machine)")
    out = tmp_path / "r.json"
    code, stdout, err = run_main(["--ckpt", str(tiny_ckpt), "--glue_dir", str(g), "--tasks",
                                  "rte,mrpc", "--max_train", "200", "--epochs", "1",
                                  "--out", str(out)], capsys)
    assert code == 0, err
    r = json.loads(out.read_text())
    assert set(r) >= {"checkpoint", "pretrain", "tasks", "glue_score", "glue_tasks"}
    assert set(r["pretrain"]) == {"model", "objective", "flops", "steps", "elapsed_s",
                                  "params", "device"}
    assert r["pretrain"]["model"] == "electra" and r["pretrain"]["steps"] == 3
    assert r["finetune"]["max_train"] == 200 and r["glue_tasks"] == ["rte", "mrpc"]
    for name, keys in (("rte", {"acc"}), ("mrpc", {"acc", "f1"})):
        t = r["tasks"][name]
        assert set(t) == {"metric", "seeds", "median", "spread"} and t["metric"] == "acc"
        assert set(t["median"]) == keys and set(t["seeds"][0]) == {"seed", "metrics", "time_s"}
        assert all(0.0 <= v <= 1.0 for v in t["median"].values())
    assert 0 <= r["glue_score"] <= 100
    assert "GLUE score" in stdout and "2 of 8 tasks (rte, mrpc)" in stdout
    # MRPC trained on both orders of its 200 pairs: 400 examples in one epoch
    assert "mrpc seed 0 epoch 1/1" in stdout


def test_mnli_reports_matched_and_mismatched(tiny_ckpt, tmp_path, capsys):
    write_glue(tmp_path / "g", A * 4, B * 4, Y * 4, ["MNLI", "STS-B"])
    out = tmp_path / "r.json"
    code, _, err = run_main(["--ckpt", str(tiny_ckpt), "--glue_dir", str(tmp_path / "g"),
                             "--epochs", "1", "--out", str(out)], capsys)
    assert code == 0, err
    r = json.loads(out.read_text())
    assert set(r["tasks"]["mnli"]["median"]) == {"acc", "acc_mm"}
    assert set(r["tasks"]["stsb"]["median"]) == {"spearman", "pearson"}
    assert r["tasks"]["stsb"]["metric"] == "spearman" and r["glue_tasks"] == ["stsb", "mnli"]


# ----------------------------------------------------------------------------- errors

def assert_clean_failure(code, out, err, results, *needles):
    assert code == 1
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err + out
    for n in needles:
        assert n in lines[0], lines[0]
    assert not results.exists() and not list(results.parent.glob(".*tmp*"))


def test_cli_errors_one_line(tiny_ckpt, tmp_path, capsys):
    write_glue(tmp_path / "g", A, B, Y, ["RTE"])
    res = tmp_path / "res" / "r.json"
    common = ["--ckpt", str(tiny_ckpt), "--glue_dir", str(tmp_path / "g"), "--out", str(res)]
    assert_clean_failure(*run_main([*common, "--tasks", "rte,wnli"], capsys), res,
                         "unknown task 'wnli'")
    assert_clean_failure(*run_main([*common, "--tasks", "rte,mrpc"], capsys), res,
                         "MRPC", "no such folder")
    (tmp_path / "afile").write_text("x")                      # results dir is a file
    assert_clean_failure(*run_main([*common[:4], "--out", str(tmp_path / "afile" / "r.json")],
                                   capsys), res, "cannot write the results")
    assert_clean_failure(*run_main([*common[:2], "--glue_dir", str(tmp_path)], capsys), res,
                         "holds none of the GLUE task folders")
    (tmp_path / "outdir").mkdir()             # --out names a folder: refused before fine-tuning
    assert_clean_failure(*run_main([*common[:4], "--out", str(tmp_path / "outdir")], capsys),
                         res, "is a folder")
    assert not any((tmp_path / "outdir").iterdir())
    bad = tmp_path / "g" / "RTE" / "dev.tsv"
    bad.write_text(bad.read_text() + "9\tonly\tthree\n")
    assert_clean_failure(*run_main([*common, "--tasks", "rte"], capsys), res,
                         f"{bad}:5:", "columns")
    assert not res.parent.exists()        # refused after --out was checked: no folder made
    junk = tmp_path / "junk.pt"
    junk.write_bytes(os.urandom(2000))
    assert_clean_failure(*run_main(["--ckpt", str(junk), *common[2:]], capsys), res, "junk.pt")
    torch.save({"kind": "something-else"}, tmp_path / "other.pt")
    assert_clean_failure(*run_main(["--ckpt", str(tmp_path / "other.pt"), *common[2:]],
                                   capsys), res, "not an ELECTRA-Small pre-training checkpoint")
    assert_clean_failure(*run_main(["--ckpt", str(tmp_path / "none.pt"), *common[2:]], capsys),
                         res, "no such checkpoint")


def test_cli_subprocess_bad_checkpoint(tmp_path):
    """The real command line: exit 1, one line on stderr, no traceback, no results file."""
    (tmp_path / "bad.pt").write_bytes(b"PK\x03\x04 truncated zip")
    write_glue(tmp_path / "g", A, B, Y, ["RTE"])
    res = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "finetune_glue.py", "--ckpt", str(tmp_path / "bad.pt"),
                        "--glue_dir", str(tmp_path / "g"), "--out", str(res)], cwd=ROOT,
                       capture_output=True, text=True, timeout=HANG)
    assert_clean_failure(p.returncode, p.stdout, p.stderr, res, "bad.pt")


def test_download_fails_fast_offline(tmp_path, capsys, monkeypatch):
    # port 9 (discard) on localhost refuses the connection: what an offline machine sees
    monkeypatch.setitem(glue.GLUE_URLS, "rte", "http://127.0.0.1:9/RTE.zip")
    t0 = time.time()
    code, out, err = run_main(["--download", str(tmp_path / "glue"), "--tasks", "rte"], capsys)
    assert time.time() - t0 < 60          # refused at once, not a network timeout
    assert code == 1 and len(err.strip().splitlines()) == 1 and "cannot download" in err
    assert not (tmp_path / "glue" / "RTE").exists()
    assert not list((tmp_path / "glue").iterdir())           # no half-unpacked leftovers
