"""benchmarks/bench.py: the command line and its JSON, and the wiring of the Hugging Face contender.
No test asserts a speed: timings depend on the machine; these check what is being timed."""
import json
import math
import re
from dataclasses import replace

import pytest
import torch

from conftest import HANG, run_cli
from config import SIZES, Config


def test_bench_command_line_writes_positive_numbers(tmp_path):
    out = tmp_path / "bench.json"
    # one thread: on a busy 2-core machine OpenMP barriers can stall for seconds
    r = run_cli("benchmarks/bench.py", "--size", "tiny", "--steps", "2", "--warmup", "1",
                "--which", "ours,bert", "--threads", "1", "--precision", "fp32", "--json", out,
                timeout=HANG)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    h = res["header"]
    assert h["torch"] == torch.__version__ and h["device"].startswith("CPU")
    assert (h["batch_size"], h["seq_len"]) == (16, 64)
    assert [x["name"] for x in res["results"]] == ["ours", "bert"]
    for x in res["results"]:
        for k in ("steps_per_s", "tokens_per_s", "ms_per_step", "flops_per_step", "mfu",
                  "step_mem_bytes", "state_bytes", "params"):
            assert x[k] > 0, (x["name"], k, x[k])
        assert x["tokens_per_s"] == pytest.approx(x["steps_per_s"] * 16 * 64)
        assert x["ms_per_step"] == pytest.approx(1000 / x["steps_per_s"])
        assert len(x["step_times_s"]) == 2 and min(x["step_times_s"]) > 0
        assert x["state_bytes"] >= 3 * 4 * x["params"]          # fp32 weights + Adam's m and v
        assert x["mode"] == "eager" and x["mem_kind"] == "peak RSS growth"
        assert math.isfinite(x["last_mlm_loss"]) and 5 < x["last_mlm_loss"] < 15   # ~ln 30522
    ours, bert = res["results"]
    assert ours["flops_per_step"] > bert["flops_per_step"]     # ELECTRA also runs G
    assert res["ratios"] == {}                                 # no hf, no ratio
    lines = r.stdout.splitlines()
    assert "CPU, 1 thread |" in lines[0] and "torch" in lines[0]
    assert any(l.startswith("ours ") and "tok/s" in l for l in lines)
    assert any(l.startswith("bert ") and "MFU" in l for l in lines)
    # A step's costs, side by side, in the words tools read (no hf here: "n/a")
    ops = re.search(r"^eager ops per step: ours (\d+), bert (\d+), hf n/a$", r.stdout, re.M)
    assert ops and (int(ops[1]), int(ops[2])) == (ours["eager_ops"], bert["eager_ops"])
    # BERT is ELECTRA's D without G: fewer operations. ~1,000 for ours at this size (two blocks
    # each for G and D); the bound catches a per-parameter loop creeping back into a step.
    assert bert["eager_ops"] < ours["eager_ops"] < 1200
    mem = re.search(r"^activation memory at batch 16: ours (\d+) MiB, bert (\d+) MiB, hf n/a$",
                    r.stdout, re.M)
    assert mem and int(mem[1]) == round(ours["activation_bytes"] / 2 ** 20)
    assert 0 < bert["activation_bytes"] < ours["activation_bytes"]
    assert re.search(r"^compiled step: 1 graph\(s\), 0 graph break\(s\), 0 recompile\(s\) "
                     r"over 3 steps$", r.stdout, re.M), r.stdout
    assert res["compiled_step"] == dict(graphs=1, breaks=0, recompiles=0, steps=3,
                                        backend="aot_eager")


def test_op_counter_and_saved_bytes_count_what_they_say():
    from benchmarks import step_cost
    lin = torch.nn.Linear(100, 50, bias=False)
    x = torch.randn(10, 100)
    with step_cost.OpCounter() as ops, step_cost.saved_bytes(lin) as saved:
        lin(x).relu().sum().backward()
    # the matmul saves x (10 x 100 floats; its weight is not counted), relu its output (10 x 50)
    assert saved.total == (10 * 100 + 10 * 50) * 4
    assert 5 <= ops.n <= 20                      # forward 3-4, backward ~8: no more, no fewer
    with step_cost.OpCounter() as ops:
        torch.ones(3).add_(1)
    assert ops.n == 2


def test_bench_rejects_unknown_contenders():
    r = run_cli("benchmarks/bench.py", "--which", "ours,gpt", timeout=HANG)
    assert r.returncode == 2 and "gpt" in r.stderr


# ----------------------------------------------------------------------------- HF wiring

def hf_pair():
    pytest.importorskip("transformers")
    from benchmarks import bench
    from benchmarks.hf_electra import HFElectra
    cfg = replace(Config(), **SIZES["tiny"], vocab_size=100)
    torch.manual_seed(0)
    return bench, cfg, HFElectra(cfg)


def test_hf_generator_and_discriminator_share_one_embedding():
    _, _, model = hf_pair()
    g, d = model.generator, model.discriminator
    assert d.electra.embeddings is g.electra.embeddings
    word = g.electra.embeddings.word_embeddings.weight
    assert d.electra.embeddings.word_embeddings.weight is word
    assert g.generator_lm_head.weight is word                  # HF ties G's output layer
    # counted once: training updates one tensor from both losses
    assert sum(p is word for p in model.parameters()) == 1
    assert g.config.embedding_size == 32 and d.config.hidden_size == 64
    assert g.config.hidden_size == 16                          # 1/4 of D (Table 6)


def test_hf_loss_and_replaced_labels():
    bench, cfg, model = hf_pair()
    b = bench.make_batches(cfg, n=1)["electra"][0]
    loss, stats = model(**b)
    assert torch.isfinite(loss) and torch.isfinite(stats["disc_loss"])
    assert loss.item() == pytest.approx((stats["mlm_loss"] + 50 * stats["disc_loss"]).item())
    x, xc, lab = b["x"], stats["x_corrupt"], stats["is_replaced"]
    assert torch.equal(lab.bool(), xc != x)                    # labels compare with the original
    used = torch.zeros_like(x, dtype=torch.bool).scatter(1, b["masked"].positions, b["masked"].weights > 0)
    assert not (xc != x)[~used].any()                          # only used mask slots change
    assert lab.sum() > 0                                       # a random G mostly replaces
    loss.backward()
    assert model.generator.electra.embeddings.word_embeddings.weight.grad.abs().sum() > 0


def test_hf_a_sample_equal_to_the_original_counts_as_real(monkeypatch):
    """Force G to predict the original token everywhere: nothing may be labelled replaced."""
    bench, cfg, model = hf_pair()
    b = bench.make_batches(cfg, n=1)["electra"][0]
    forward = model.generator.forward

    def confident(*a, **kw):
        out = forward(*a, **kw)
        out.logits = out.logits + 1e4 * torch.nn.functional.one_hot(b["x"], cfg.vocab_size)
        return out
    monkeypatch.setattr(model.generator, "forward", confident)
    loss, stats = model(**b)
    assert torch.isfinite(loss)
    assert torch.equal(stats["x_corrupt"], b["x"]) and stats["is_replaced"].sum() == 0


# ----------------------------------------------------------------------------- what is timed

def test_bench_steps_on_training_batches_made_in_the_timed_step(monkeypatch):
    """bench times train.py's step: batches of two-segment examples with padding (pad_mask,
    segment_ids), masked by train.masked_batch - on a CPU made inside the timed step, as
    training makes them in line."""
    from benchmarks import bench
    from objectives import ELECTRA
    import train
    cfg = replace(Config(), **SIZES["tiny"])
    b = bench.make_batches(cfg, n=2)["electra"][0]
    assert set(b) == {"x", "segment_ids", "pad_mask", "masked"}
    assert (~b["pad_mask"]).any() and b["segment_ids"].any()        # padding and segment B
    assert torch.equal(b["pad_mask"], b["x"] != cfg.vocab_size - 4)
    ref, _ = train.masked_batch(bench.bench_data(cfg), cfg, ELECTRA.masking)
    assert all(torch.equal(b[k], ref[k]) for k in ("x", "segment_ids", "pad_mask"))
    assert torch.equal(b["masked"].positions, ref["masked"].positions)
    made = []
    monkeypatch.setattr(bench, "masked_batch",
                        lambda *a: made.append(1) or train.masked_batch(*a))
    c = bench.Contender("ours", cfg, bench.bench_data(cfg), torch.device("cpu"), False, "fp32")
    c.timed_block(3)
    assert len(made) == 3 and len(c.times) == 1 and c.times[0] > 0


def test_bench_refuses_a_data_folder_that_is_not_prepared(tmp_path):
    r = run_cli("benchmarks/bench.py", "--size", "tiny", "--data", tmp_path, timeout=HANG)
    assert r.returncode == 1 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_roofline_counts_bytes_and_flops_and_prices_launches():
    from benchmarks import step_cost
    a, b = torch.randn(64, 128), torch.randn(128, 32)
    with step_cost.RooflineCounter() as rc:
        torch.mm(a, b)
    (moved, flops), = rc.ops
    assert moved == (64 * 128 + 128 * 32 + 64 * 32) * 4 and flops == 2 * 64 * 128 * 32
    with step_cost.RooflineCounter() as rc:
        a.t().detach()                                          # views: nothing moved
    assert rc.ops == [(0, 0), (0, 0)]
    card = dict(bandwidth=1e9, peak=1e12)                       # 1 GB/s, 1 TFLOP/s
    eager, graph = step_cost.roofline([(1000, 0), (0, 10 ** 9)], card)
    assert graph == pytest.approx(1e-6 + 1e-3)                  # bytes-bound + FLOP-bound
    assert eager == pytest.approx(graph + 2 * step_cost.LAUNCH_S)


def test_compiled_gap_times_each_network_beside_hugging_faces():
    """benchmarks/compiled_gap.py: D alone and G's encoder alone, ours and HF's, side by side
    (traced with aot_eager at the tiny size: the wiring, not a speed)."""
    pytest.importorskip("transformers")
    r = run_cli("benchmarks/compiled_gap.py", "--size", "tiny", "--backend", "aot_eager",
                "--which", "networks", "--rounds", "2", "--warmup", "1", "--threads", "1",
                timeout=HANG)
    assert r.returncode == 0, r.stderr
    times = dict(re.findall(r"^  (\w+) +([\d.]+) ms \(median of 2\)$", r.stdout, re.M))
    assert set(times) == {"ours_D", "hf_D", "ours_G", "hf_G"} and all(float(t) > 0 for t in
                                                                       times.values())
    assert re.search(r"^  ours_D / hf_D speed: [\d.]+x", r.stdout, re.M), r.stdout


def test_a_contender_whose_step_trains_nothing_is_refused(monkeypatch, capsys):
    """A step that updates no weight times well and means nothing (as Hugging Face's compiled
    step did when its backward was traced across its graph breaks): one line, exit 1."""
    from benchmarks import bench

    def trains_nothing(model, opt, batch, lr, cfg, device, precision, loss_scale=None):
        return dict(mlm_loss=torch.tensor(10.0))
    monkeypatch.setattr(bench, "training_step", trains_nothing)
    code = bench.main(["--size", "tiny", "--steps", "1", "--warmup", "1", "--which", "ours",
                       "--threads", "1", "--precision", "fp32"])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert "ours's eager step left some weights unchanged" in err and "does not train" in err
