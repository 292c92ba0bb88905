"""The trainer end to end on a CPU: learning, budgets, checkpoints, resume, bad input."""
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from machinery.checkpoint import load_checkpoint
from machinery import progress
from config import Config
from conftest import HANG, ROOT, run_cli

TINY = ["--size", "tiny", "--threads", "1"]   # one thread: a busy machine slows it least


def read_log(out):
    """{step: record}; a resumed run re-logs steps, the last record wins."""
    recs = [json.loads(l) for l in (out / "log.jsonl").read_text().splitlines() if l.strip()]
    return {r["step"]: r for r in recs}


def one_error_line(r):
    lines = r.stderr.strip().splitlines()
    return r.returncode != 0 and len(lines) == 1 and lines[0].startswith("error:") and \
        "Traceback" not in r.stderr


def in_process(capsys, *args):
    """electra_small.py's main(args) in this process (a fresh Python costs a second or two of
    imports per run; the runs that must be a process of their own - killed, interrupted, the
    default command - still start one): its exit status and what it printed, as run_cli gives
    them. An exception that escaped main() would fail the test as a traceback fails the command
    line."""
    import electra_small
    capsys.readouterr()
    try:
        rc = electra_small.main([str(a) for a in args])
    except SystemExit as e:                     # argparse's refusals
        rc = e.code
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, rc, out, err)


def test_the_plain_step_trains_as_the_default_path(one_thread):
    """train.electra_step, the step a student reads, against the step training runs:
    train.training_step (L_MLM and x̂ fused, machinery/mlm_output.py) and the whole step
    compiled (machinery/step.py; backend aot_eager, the graphs Inductor would compile run op by
    op with eager's random numbers). Three steps of the tiny model (one block, dropout on) from
    the same seed, batches, masks and learning rates: L_MLM and L_Disc agree at every step to
    rel 1e-5, and every weight after the three steps to 1e-6 absolute. Measured (2-core CPU,
    float32): losses rel 2.1e-7 at most, weights 1.2e-7 (one float32 unit at 1: the fused
    softmax rounds differently), while the three updates move the weights by up to 0.026."""
    import copy
    from dataclasses import replace
    import train
    from ablations import build_model
    from batches import PretrainingData, synthetic_arrays
    from config import SIZES
    from machinery.step import compile_step
    cpu = torch.device("cpu")
    cfg = replace(Config(), **SIZES["tiny"], vocab_size=100)
    cfg = replace(cfg, disc=replace(cfg.disc, layers=1))
    arrays = synthetic_arrays(cfg.vocab_size, 8 * cfg.batch_size * cfg.seq_len, 0)
    data = lambda: PretrainingData("(synthetic)", "train", cfg.batch_size, cfg.seq_len, 0,
                                   arrays=arrays)
    torch.manual_seed(0)
    plain = build_model(cfg)
    fused, compiled, before = copy.deepcopy(plain), copy.deepcopy(plain), copy.deepcopy(plain)
    assert fused.fused_mlm and compiled.fused_mlm                    # the default
    opts = [train.make_optimizer(m, cfg, cpu) for m in (plain, fused, compiled)]
    torch._dynamo.reset()
    step = compile_step(train.update, compiled, opts[2], cfg.grad_clip, cpu, "fp32",
                        backend="aot_eager")
    streams = [data(), data(), data()]
    for i in range(3):
        lr = 1e-3 * (i + 1)
        torch.manual_seed(i)                     # dropout and the sample x̂: the same draws
        batch = streams[0].next_batch()
        losses = train.electra_step(plain, opts[0], batch, lr, cfg, streams[0].meta,
                                    streams[0].mask_generator())
        torch.manual_seed(i)
        eager = train.training_step(fused, opts[1], train.masked_batch(streams[1], cfg,
                                                                       fused.masking)[0],
                                    lr, cfg, cpu, "fp32")
        torch.manual_seed(i)
        graph = step(train.masked_batch(streams[2], cfg, compiled.masking)[0], lr)
        for stats in (eager, graph):
            for k, loss in zip(("mlm_loss", "disc_loss"), losses):
                assert stats[k].item() == pytest.approx(loss.item(), rel=1e-5), (i, k)
    for other in (fused, compiled):
        worst = max((a - b).abs().max().item() for a, b in zip(plain.parameters(),
                                                                other.parameters()))
        assert worst < 1e-6
    moved = max((a - b).abs().max().item() for a, b in zip(plain.parameters(),
                                                            before.parameters()))
    assert moved > 1e-3                          # three updates: the comparison means something


def test_the_reading_path_stays_short():
    """train.py reads on a few screens (under 250 lines) and no function in the reading path's
    files (the .py files at the root) runs over 100 lines: resume, DDP, the NaN check, MFU,
    threads, profiling, compiling and checkpoints live in machinery/."""
    import ast
    assert len((ROOT / "train.py").read_text().splitlines()) < 250
    long = [f"{p.name}:{n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for p in sorted(ROOT.glob("*.py")) for n in ast.walk(ast.parse(p.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.end_lineno - n.lineno + 1 > 100]
    assert not long, long


def test_short_run_learns(learnable_data_dir, tmp_path, capsys):
    out = tmp_path / "run"
    r = in_process(capsys, "--data", learnable_data_dir, "--out_dir", out, *TINY,
                   "--max_steps", "300", "--log_every", "100")
    assert r.returncode == 0, r.stderr
    assert "params" in r.stdout and "training FLOPs/step" in r.stdout
    log = read_log(out)          # (on one machine G's accuracy went 10.6 % -> 20.6 %, L_Disc fell)
    first, last = log[100], log[300]
    assert last["disc_loss"] < first["disc_loss"], (first, last)
    assert last["gen_acc"] > first["gen_acc"] + 0.03, (first, last)
    assert last["mlm_loss"] < first["mlm_loss"]
    assert last["flops"] == pytest.approx(3 * first["flops"])
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["step"] == 300 and ckpt["tokenizer"].strip()


def test_discriminator_leaves_the_plateau(learnable_data_dir, tmp_path, capsys):
    # On learnable text D catches replaced tokens within 100 steps, and what it flags is mostly
    # right. Flagging at random would be right for only the replaced share (~13 %), and the
    # "everything is real" plateau has recall 0. AdamW, as in --size laptop: with the official
    # optimizer and so short a warm-up, D collapses (docs/plateau.md).
    out = tmp_path / "run"
    r = in_process(capsys, "--data", learnable_data_dir, "--out_dir", out, *TINY,
                   "--optimizer", "torch", "--max_steps", "200", "--log_every", "50")
    assert r.returncode == 0, r.stderr
    at100 = read_log(out)[100]
    assert at100["disc_acc_replaced"] >= 0.15 and at100["disc_precision_replaced"] >= 0.5, at100
    assert "recall" in r.stdout and "precision" in r.stdout and "(plateau 0." in r.stdout
    # below the plateau's loss, the entropy of the replaced share, and that entropy is H(r)
    r_ = at100["replaced_share"]
    assert 0.05 < r_ < 0.2
    assert at100["disc_prior_entropy"] == pytest.approx(-r_ * math.log(r_) -
                                                        (1 - r_) * math.log(1 - r_))
    assert at100["disc_loss"] < at100["disc_prior_entropy"] - 0.02, at100
    # it left the plateau: one line says so, at the first record that shows it, and the run
    # does not close with the plateau note
    said = [ln for ln in r.stdout.splitlines() if "D has left the plateau" in ln]
    assert len(said) == 1 and said[0].startswith("step "), r.stdout
    first = int(said[0].split(":")[0].split()[1])
    assert first <= 100 and progress.off_plateau(read_log(out)[first]), said
    assert "never left the plateau" not in r.stdout


def test_a_run_that_ends_on_the_plateau_says_so(learnable_data_dir, tmp_path, capsys):
    # Ten steps are far too few for D to leave the plateau: the closing line must say so, why,
    # and what to do, with the figures of the last log line.
    out = tmp_path / "run"
    r = in_process(capsys, "--data", learnable_data_dir, "--out_dir", out, *TINY,
                   "--max_steps", "10", "--log_every", "5")
    assert r.returncode == 0, r.stderr
    last = r.stdout.strip().splitlines()[-1]
    rec = read_log(out)[10]
    assert rec["disc_loss"] > 0.9 * rec["disc_prior_entropy"]
    assert last.startswith("note: D never left the plateau") and "--max_steps" in last, last
    assert f"step 10: L_Disc {rec['disc_loss']:.4f} against the plateau's " \
           f"{rec['disc_prior_entropy']:.3f}" in last


def test_off_plateau_needs_both_recall_and_a_loss_below_the_plateau():
    from machinery.progress import PLATEAU_LOSS, PLATEAU_RECALL, off_plateau, plateau_note
    h = 0.37
    rec = lambda recall, loss: {"step": 5, "disc_acc_replaced": recall, "disc_loss": loss,
                                "disc_prior_entropy": h}
    assert off_plateau(rec(PLATEAU_RECALL, PLATEAU_LOSS * h - 0.01))
    assert not off_plateau(rec(PLATEAU_RECALL - 0.01, 0.5 * h))    # low loss, few caught
    assert not off_plateau(rec(0.4, PLATEAU_LOSS * h + 0.01))       # random flags at init
    assert not off_plateau(rec(None, 0.5 * h))                      # no replaced token seen
    bert = {"step": 5, "disc_acc_replaced": None, "disc_loss": None, "disc_prior_entropy": None}
    assert not off_plateau(bert) and plateau_note(bert) is None
    assert "recall 3.0%" in plateau_note(rec(0.03, h))


def test_log_record_counts_the_plateau_from_the_replaced_share():
    import argparse
    from machinery.progress import progress_line
    from machinery.run_log import log_record
    cfg = Config(batch_size=2, seq_len=50)
    sums = dict(mlm_loss=torch.tensor(6.0), disc_loss=torch.tensor(0.6),
                gen_correct=torch.tensor([3.0, 10.0]), disc_correct=torch.tensor([90.0, 100.0]),
                replaced_correct=torch.tensor([4.0, 12.0]),
                replaced_flagged=torch.tensor([4.0, 5.0]))
    args = argparse.Namespace(hours=None, flops=None, max_steps=10)
    rec = log_record(sums, 2, 1.0, None, cfg, args, dict(step=2, flops=0.0, elapsed=1.0), 1.0,
                     None, 1e-3, 1)
    assert rec["replaced_share"] == pytest.approx(0.12)
    assert rec["disc_prior_entropy"] == pytest.approx(0.3669, abs=1e-4)   # H(0.12) in nats
    assert rec["disc_loss"] == pytest.approx(0.3)
    assert rec["disc_acc_replaced"] == pytest.approx(1 / 3)
    assert rec["disc_precision_replaced"] == pytest.approx(0.8)
    assert "L_Disc 0.3000 (plateau 0.367)" in progress_line(rec)
    assert rec["gpu_peak_bytes"] is None                    # on a GPU: its peak allocation


def test_the_log_holds_a_gpus_peak_memory(monkeypatch):
    """On a GPU each log record holds torch.cuda.max_memory_allocated (the run's peak, CUDA
    graphs' pools included); tested with the CUDA call replaced, as no GPU is needed here."""
    from machinery.run_log import gpu_peak_bytes
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: 3 * 2 ** 30)
    assert gpu_peak_bytes(torch.device("cuda", 0)) == 3 * 2 ** 30
    assert gpu_peak_bytes(torch.device("cpu")) is None


def test_an_mfu_above_100_percent_measures_the_peak_again():
    """A CPU's peak measured beside other jobs is too low; an interval above 100 % MFU (which
    cannot be) measures it again and keeps the larger; a lower second measure changes nothing."""
    from machinery.run_log import peak_again
    said = []
    peak, mfu = peak_again(1e9, 3.0, torch.device("cpu"), 1, said.append,
                                 measure=lambda device: (6e9, "measured"))
    assert (peak, mfu) == (6e9, pytest.approx(0.5)) and "measured again" in said[0]
    assert peak_again(1e9, 3.0, torch.device("cpu"), 2, said.append,
                            measure=lambda device: (4e8, "measured")) == (1e9, 3.0)
    assert len(said) == 1


def test_killed_run_resumes_to_the_same_next_step_loss(data_dir, tmp_path, capsys):
    args = ["--data", data_dir, *TINY, "--max_steps", "40", "--log_every", "1"]
    ref = tmp_path / "ref"
    r = in_process(capsys, *args, "--out_dir", ref)
    assert r.returncode == 0, r.stderr
    # the same run, checkpointing every 10 steps, killed with SIGKILL (no chance to save)
    out = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "electra_small.py", *map(str, args), "--out_dir",
                             str(out), "--save_every", "10"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + HANG
    while time.time() < deadline and proc.poll() is None:
        if (out / "log.jsonl").exists() and max(read_log(out), default=0) >= 23:
            break
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    saved = load_checkpoint(out / "ckpt.pt")["step"]
    assert 10 <= saved < 40, saved
    r = in_process(capsys, "--out_dir", out, "--resume", "--data", data_dir, "--threads", "1",
                   "--log_every", "1")
    assert r.returncode == 0, r.stderr
    assert f"resuming at step {saved}" in r.stdout
    a, b = read_log(ref), read_log(out)
    for step in range(saved + 1, 41):
        assert b[step]["mlm_loss"] == pytest.approx(a[step]["mlm_loss"], rel=1e-5, abs=1e-6), step
        assert b[step]["disc_loss"] == pytest.approx(a[step]["disc_loss"], rel=1e-5, abs=1e-6)


def test_hours_budget_lays_the_schedule_over_wall_clock_time(data_dir, tmp_path, capsys):
    out, hours = tmp_path / "timed", 12 / 3600
    r = in_process(capsys, "--data", data_dir, "--out_dir", out, *TINY,
                   "--hours", str(hours), "--log_every", "1", "--save_at", "0.5,1")
    assert r.returncode == 0, r.stderr
    # Judged in steps, not seconds (a busy machine makes each step slower, never wrong): every
    # step but the last began before the deadline, and the last one ended after it.
    log = read_log(out)
    budget, steps = hours * 3600, sorted(log)
    assert all(log[s]["elapsed_s"] < budget for s in steps[:-1])
    ckpt = load_checkpoint(out / "ckpt.pt")
    assert ckpt["step"] == steps[-1] and ckpt["elapsed_s"] == log[steps[-1]]["elapsed_s"] >= budget
    # each saved at the first step whose schedule progress reached its share - progress being
    # the training time (wall-clock time less the first step's setup) over the time left for it
    setup = ckpt["setup_s"]
    progress = lambda s: max(0.0, log[s]["elapsed_s"] - setup) / (budget - setup)
    for f in ("0.5", "1"):
        part = load_checkpoint(out / f"ckpt_{f}.pt")
        assert part["elapsed_s"] >= float(f) * budget
        assert progress(part["step"]) >= float(f)
        assert part["step"] == 1 or progress(part["step"] - 1) < float(f)
    assert load_checkpoint(out / "ckpt_0.5.pt")["step"] < ckpt["step"]
    lrs = [log[s]["lr"] for s in sorted(log)]
    assert max(lrs) > 10 * lrs[-1] and lrs[-1] < 2e-3 * 0.05


def test_ctrl_c_saves_a_checkpoint(data_dir, tmp_path):
    out = tmp_path / "int"
    proc = subprocess.Popen([sys.executable, "electra_small.py", "--data", str(data_dir),
                             "--out_dir", str(out), *TINY, "--log_every", "1"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + HANG
    while time.time() < deadline and not ((out / "log.jsonl").exists() and
                                          max(read_log(out), default=0) >= 5):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=HANG)
    assert proc.returncode == 130, err
    assert "continue with --resume" in err and "Traceback" not in err
    assert load_checkpoint(out / "ckpt.pt")["step"] >= 5


@pytest.mark.parametrize("extra, message", [
    (["--hours", "0"], "--hours"),
    (["--hours", "-1"], "--hours"),
    (["--max_steps", "0"], "--max_steps"),
    (["--save_at", "0.5,2"], "--save_at"),
    (["--two_stage"], "gen_size 1"),                             # ablations that do not combine
    (["--generator", "unigram", "--objective", "electra15"], "combine"),
    (["--mask_prob", "1.5"], "--mask_prob"),
    (["--mask_prob", "0"], "--mask_prob"),
])
def test_bad_budget_is_one_line(data_dir, tmp_path, capsys, extra, message):
    r = in_process(capsys, "--data", data_dir, "--out_dir", tmp_path / "o", *TINY, *extra)
    assert one_error_line(r) and message in r.stderr, r.stderr
    assert not (tmp_path / "o").exists()


def test_unprepared_data_folder_is_one_line(tmp_path, capsys):
    (tmp_path / "raw").mkdir()
    r = in_process(capsys, "--data", tmp_path / "raw", "--out_dir", tmp_path / "o", *TINY)
    assert one_error_line(r) and "data.py" in r.stderr, r.stderr


def test_bad_checkpoints_are_refused_and_never_overwritten(data_dir, tmp_path, capsys):
    out = tmp_path / "o"
    r = in_process(capsys, "--data", data_dir, "--out_dir", out, *TINY, "--max_steps", "3")
    assert r.returncode == 0, r.stderr
    good = (out / "ckpt.pt").read_bytes()
    # a second run into the same folder without --resume must not overwrite progress
    r = in_process(capsys, "--data", data_dir, "--out_dir", out, *TINY, "--max_steps", "3")
    assert one_error_line(r) and "--resume" in r.stderr
    assert (out / "ckpt.pt").read_bytes() == good
    # resuming with another model size
    r = in_process(capsys, "--data", data_dir, "--out_dir", out, "--resume", "--size", "small")
    assert one_error_line(r) and "different config" in r.stderr, r.stderr
    # a truncated checkpoint
    (out / "ckpt.pt").write_bytes(good[: len(good) // 2])
    r = in_process(capsys, "--data", data_dir, "--out_dir", out, "--resume")
    assert one_error_line(r) and "truncated" in r.stderr, r.stderr
    assert not list(out.glob(".*tmp*"))


def test_mask_prob_reaches_the_masking(data_dir, tmp_path, capsys):
    """--mask_prob (Table 6's "Mask percent") sets the config, and with it how many slots
    mask_tokens fills: 40 % of 64 tokens needs more slots than 15 %."""
    out = tmp_path / "o"
    r = in_process(capsys, "--data", data_dir, "--out_dir", out, *TINY, "--max_steps", "1",
                   "--mask_prob", "0.4")
    assert r.returncode == 0, r.stderr
    cfg = Config.from_dict(load_checkpoint(out / "ckpt.pt")["config"])
    assert cfg.mask_prob == 0.4 and cfg.n_slots > Config(seq_len=cfg.seq_len).n_slots


def test_plain_mlm_trains_the_same_numbers_as_the_fused_output(data_dir, tmp_path, capsys):
    """--plain_mlm (objectives.sample + mlm_loss, the assignment's code path) and the default
    fused machinery/mlm_output.py give the same losses step by step, and resume either way. Both run in
    float32: under bf16 autocast (--precision auto on a CPU with AVX512-BF16) the two paths
    round differently, 1e-4 apart after four steps, so the comparison would depend on the CPU."""
    args = ["--data", data_dir, *TINY, "--max_steps", "4", "--log_every", "1",
            "--precision", "fp32"]
    runs = {}
    for name, extra in (("fused", []), ("plain", ["--plain_mlm"])):
        r = in_process(capsys, *args, *extra, "--out_dir", tmp_path / name)
        assert r.returncode == 0, r.stderr
        runs[name] = read_log(tmp_path / name)
        cfg = Config.from_dict(load_checkpoint(tmp_path / name / "ckpt.pt")["config"])
        assert cfg.fused_mlm == (name == "fused")
    for step in range(1, 5):
        for key in ("mlm_loss", "disc_loss"):
            assert runs["plain"][step][key] == pytest.approx(runs["fused"][step][key], rel=1e-4)
    r = in_process(capsys, *args[:4], "--max_steps", "6", "--resume", "--out_dir",
                   tmp_path / "plain")
    assert r.returncode == 0, r.stderr


def test_checkpoint_holds_no_pickled_code(data_dir, tmp_path, capsys):
    out = tmp_path / "o"
    r = in_process(capsys, "--data", data_dir, "--out_dir", out, *TINY, "--max_steps", "2")
    assert r.returncode == 0, r.stderr
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)        # would raise on pickled objects
    for key in ("config", "model", "optimizer", "step", "flops", "elapsed_s", "rng", "data",
                "tokenizer"):
        assert key in ckpt, key
    assert ckpt["data_dir"] == str(Path(data_dir).resolve())     # the analyses' held-out text


def test_default_command_builds_the_demo_corpus_offline(tmp_path):
    env = dict(os.environ, ELECTRA_DATA_ROOT=str(tmp_path / "data"))
    r = run_cli("electra_small.py", "--out_dir", tmp_path / "o", *TINY, "--max_steps", "2",
                env=env)
    assert r.returncode == 0, r.stderr
    assert "DEMO corpus" in r.stdout + r.stderr
    meta = json.loads((tmp_path / "data" / "demo" / "meta.json").read_text())
    assert meta["vocab_size"] == 30522 and meta["train_tokens"] > 1_000_000


def test_out_dir_that_is_a_file_is_one_line(data_dir, tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("keep me")
    r = in_process(capsys, "--data", data_dir, "--out_dir", f, *TINY, "--max_steps", "2")
    assert one_error_line(r) and "is a file" in r.stderr, r.stderr
    assert f.read_text() == "keep me"
    # a folder that cannot be made (a file on its path): one line, not mkdir's traceback
    r = in_process(capsys, "--data", data_dir, "--out_dir", f / "run", *TINY, "--max_steps", "2")
    assert one_error_line(r) and "--out_dir" in r.stderr and "cannot create" in r.stderr, r.stderr
    assert f.read_text() == "keep me"


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_data_folder_with_a_broken_tokenizer_is_one_line(data_dir, tmp_path, capsys, damage):
    """A prepared folder whose tokenizer.tiktoken was cut short (an interrupted copy) or lost:
    one line that says to prepare it again, and the run's out_dir is not left behind."""
    import shutil
    bad = tmp_path / "data"
    shutil.copytree(data_dir, bad)
    tok = bad / "tokenizer.tiktoken"
    if damage == "truncated":
        text = tok.read_text()
        tok.write_text(text[:text.index("\n", 1000) - 2])     # the last line cut short
    else:
        tok.unlink()
    out = tmp_path / "o"
    r = in_process(capsys, "--data", bad, "--out_dir", out, *TINY, "--max_steps", "2")
    assert one_error_line(r) and "tokenizer.tiktoken" in r.stderr and "data.py" in r.stderr, \
        r.stderr
    assert not out.exists()


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(data_dir, tmp_path, capsys):
    # an absurd learning rate makes the weights, then the loss, overflow within a few steps;
    # checkpoints are due every 2 steps, so a NaN state would be saved if nothing checked
    out = tmp_path / "o"
    r = in_process(capsys, "--data", data_dir, "--out_dir", out, *TINY, "--max_steps",
                   "60", "--log_every", "50", "--save_every", "2", "--lr", "1e30")
    assert one_error_line(r) and "NaN or infinite at step" in r.stderr, r.stderr
    step = int(r.stderr.split("at step ")[1].split(";")[0])
    assert 1 <= step <= 60
    assert not list(out.glob(".*tmp*"))
    if step > 2:                                   # a checkpoint from before the NaN is kept
        ckpt = load_checkpoint(out / "ckpt.pt")
        assert ckpt["step"] < step
        assert all(torch.isfinite(v).all() for v in ckpt["model"].values())
    else:
        assert not (out / "ckpt.pt").exists()


def test_disk_full_during_a_checkpoint_keeps_the_previous_one(data_dir, tmp_path, monkeypatch,
                                                             capsys):
    import errno
    import electra_small
    out = tmp_path / "o"
    assert electra_small.main(["--data", str(data_dir), "--out_dir", str(out), *TINY,
                               "--max_steps", "2"]) == 0
    good = (out / "ckpt.pt").read_bytes()
    real_save = torch.save

    def full_disk(obj, f, *a, **k):                # half the bytes reach the disk, then ENOSPC
        real_save(obj, f, *a, **k)
        data = open(f, "rb").read()
        open(f, "wb").write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(torch, "save", full_disk)
    capsys.readouterr()
    code = electra_small.main(["--data", str(data_dir), "--out_dir", str(out), "--resume",
                               "--max_steps", "4", *TINY])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "No space left" in err[0] and "intact" in err[0], err
    assert (out / "ckpt.pt").read_bytes() == good
    assert not list(out.glob(".*tmp*"))
    assert load_checkpoint(out / "ckpt.pt")["step"] == 2


def test_sigkill_during_a_checkpoint_write_keeps_the_previous_one(tmp_path):
    # a writer killed half-way through: ckpt.pt is still the old, complete file, and the
    # hidden temporary it leaves is removed by the next start
    path = tmp_path / "ckpt.pt"
    script = f"""
import sys, time, torch
sys.path.insert(0, {str(ROOT)!r})
from machinery.checkpoint import save_checkpoint
save_checkpoint({str(path)!r}, {{"config": {{}}, "model": {{}}, "step": 1, "tokenizer": "x"}})
real = torch.save
def slow(obj, f, *a, **k):
    real(obj, f, *a, **k)
    data = open(f, "rb").read()
    open(f, "wb").write(data[: len(data) // 2])
    print("writing", flush=True)
    time.sleep(60)
torch.save = slow
save_checkpoint({str(path)!r}, {{"config": {{}}, "model": {{}}, "step": 2, "tokenizer": "x"}})
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert load_checkpoint(path)["step"] == 1
    leftovers = list(tmp_path.glob(".*tmp*"))
    assert len(leftovers) == 1
    from machinery.checkpoint import remove_stale_temporaries
    assert remove_stale_temporaries(tmp_path) == [leftovers[0].name]
    assert not list(tmp_path.glob(".*tmp*")) and load_checkpoint(path)["step"] == 1


def test_resume_refuses_zero_byte_and_other_vocabulary_checkpoints(data_dir, learnable_data_dir,
                                                                   tmp_path, capsys):
    out = tmp_path / "o"
    r = in_process(capsys, "--data", data_dir, "--out_dir", out, *TINY, "--max_steps", "2")
    assert r.returncode == 0, r.stderr
    good = (out / "ckpt.pt").read_bytes()
    # the same run resumed on data with another tokenizer (vocabulary 300 instead of 1000)
    r = in_process(capsys, "--data", learnable_data_dir, "--out_dir", out, "--resume")
    assert one_error_line(r) and "another tokenizer" in r.stderr, r.stderr
    assert (out / "ckpt.pt").read_bytes() == good
    # a zero-byte checkpoint (a copy that failed, a full disk outside this program)
    (out / "ckpt.pt").write_bytes(b"")
    r = in_process(capsys, "--data", data_dir, "--out_dir", out, "--resume")
    assert one_error_line(r) and "cannot be read as a checkpoint" in r.stderr, r.stderr


def test_two_stage_run_switches_half_way_through_the_hooks(data_dir, tmp_path, capsys):
    """The loop knows nothing of two-stage training: the model's on_progress hook starts stage
    two at half the budget, and schedule_progress gives each stage its own warm-up and decay."""
    out = tmp_path / "two"
    r = in_process(capsys, "--data", data_dir, "--out_dir", out, *TINY, "--two_stage",
                   "--gen_size", "1", "--max_steps", "8", "--log_every", "1")
    assert r.returncode == 0, r.stderr
    assert "step 4: stage two - D initialised from G, G frozen" in r.stdout
    log = read_log(out)
    assert log[4]["disc_loss"] is None and log[5]["disc_loss"] is not None
    assert log[5]["lr"] < log[4]["lr"] < log[3]["lr"]     # stage two warms up again from 0


@pytest.mark.parametrize("size, vocab", [("laptop", 8192), ("laptop_deep", 8192),
                                         ("small", 30522), (None, 30522)])
def test_the_demo_corpus_gets_the_vocabulary_its_recipe_needs(size, vocab, tmp_path, monkeypatch):
    """No --data: the demo corpus is prepared with 8,192 tokens for the laptop recipes (a 30k
    vocabulary would be 95 % of their D) and BERT's 30,522 otherwise, in separate folders."""
    import data
    import electra_small
    asked = []

    def fake_prepare_demo(vocab_size=30522, log=print):
        asked.append(vocab_size)
        raise data.DataError("stop here")      # the test needs only the question asked
    monkeypatch.setattr(electra_small, "prepare_demo", fake_prepare_demo)
    code = electra_small.main([*(["--size", size] if size else []), "--max_steps", "1",
                               "--out_dir", str(tmp_path / "o")])
    assert code == 1 and asked == [vocab]
    assert data.demo_dir(vocab).name == ("demo" if vocab == 30522 else f"demo-{vocab}")
