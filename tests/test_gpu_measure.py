"""benchmarks/gpu_measure.sh: the GPU measurement's stages. Without a GPU only the wiring can be checked:
the script parses, refuses an unknown stage, and at the smoke scale on a CPU (DEVICE=cpu
SIZE=tiny) bench, finetune and all each succeed on their own in an empty WORK (as on a lent
machine that lost the previous command's files), a sub-run that fails or runs out of time is a
line of summary.txt that stops nothing, and a missing transformers is one line. Every stage
refuses bad arguments, a GPU torch cannot see (CUDA_VISIBLE_DEVICES="" hides one) and a
missing input in one line before it writes anything, and `check` records only a verdict."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HANG, ROOT
import plot_results

SCRIPT = ROOT / "benchmarks" / "gpu_measure.sh"
GLUE = ROOT.parent / "shared" / "data" / "glue"


def fake_glue(tmp_path):
    """A GLUE folder that passes the script's check for TASKS=rte (its files are never read by
    a stage that refuses)."""
    rte = tmp_path / "glue" / "RTE"
    rte.mkdir(parents=True)
    (rte / "train.tsv").write_text("index\tsentence1\tsentence2\tlabel\n")
    (rte / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n")
    return str(tmp_path / "glue")


def stage(*args, **env):
    env = {**os.environ, "DEVICE": "cpu", "SIZE": "tiny", "PY": sys.executable, "WORKERS": "1",
           "OMP_NUM_THREADS": "1", **env}
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=HANG)


def test_the_script_parses_and_refuses_an_unknown_stage(tmp_path):
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    r = stage("bogus", tmp_path / "res", WORK=str(tmp_path / "work"))
    assert r.returncode == 2 and r.stderr.startswith("usage:")
    assert "all [MINUTES=9]" in r.stderr and "wait [SECONDS=500]" in r.stderr   # the defaults


def one_error_line(r, *words):
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error:"), r.stdout + r.stderr
    assert "Traceback" not in r.stdout and all(w in lines[0] for w in words), (words, lines[0])


def test_carry_needs_data_from(tmp_path):
    """carry copies from DATA_FROM only: left out, one line says to set it, and .carry/ is not
    touched (no folder is assumed that a user may not have)."""
    env = {k: v for k, v in os.environ.items() if k != "DATA_FROM"}
    r = subprocess.run(["bash", str(SCRIPT), "carry"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=HANG)
    one_error_line(r, "DATA_FROM", "corpus/", "glue/")


def test_bad_minutes_and_seconds_are_one_line(tmp_path):
    """wait takes whole seconds, all minutes (0.5 is fine): anything else is one line with an
    example, not bash's 'unbound variable' or arithmetic error."""
    work, res = tmp_path / "work", tmp_path / "res"
    for args, words in [(("wait", "abc"), ["wait abc", "whole number", "wait 500"]),
                        (("wait", "1.5"), ["wait 1.5", "whole number"]),
                        (("wait", "0"), ["wait 0"]),
                        (("all", "9x"), ["all 9x", "positive number", "all 9"]),
                        (("all", "-1"), ["all -1"])]:
        one_error_line(stage(*args, res, WORK=str(work)), *words)
        assert not work.exists() and not res.exists()


def test_every_gpu_stage_refuses_at_once_when_torch_sees_no_gpu(corpus_file, tmp_path):
    """With DEVICE=cuda and no GPU visible, check, bench, start, finetune and all each say so in
    one line before anything is prepared, checked or written (check used to run its self-check
    and record compile_ok=no, so that a later all, on a fixed torch, pre-trained eagerly)."""
    work, res = tmp_path / "work", tmp_path / "res"
    glue = fake_glue(tmp_path)
    for args in [("check",), ("bench",), ("start",), ("finetune",), ("all", 9)]:
        r = stage(*args, res, WORK=str(work), CORPUS=str(corpus_file.parent), DEVICE="cuda",
                  CUDA_VISIBLE_DEVICES="", GLUE=glue, TASKS="rte")
        one_error_line(r, "DEVICE=cuda", "no CUDA GPU")
        assert not work.exists() and not res.exists(), args
    # a DEVICE that is neither: one line too
    one_error_line(stage("bench", res, WORK=str(work), DEVICE="gpu"), "DEVICE=gpu")
    # the inputs a stage needs, checked before it starts: prepare's text, finetune's GLUE, and
    # (with no checkpoint to fine-tune) the text finetune would pre-train on first
    (tmp_path / "empty").mkdir()
    empty = str(tmp_path / "empty")
    one_error_line(stage("prepare", res, WORK=str(work), CORPUS=empty), "CORPUS=")
    one_error_line(stage("finetune", res, WORK=str(work), GLUE=empty, TASKS="rte"), "GLUE=", "rte")
    one_error_line(stage("finetune", res, WORK=str(work), GLUE=glue, TASKS="rte", CORPUS=empty),
                   "CORPUS=")
    assert not work.exists() and not res.exists()


def test_check_records_compile_ok_only_from_a_verdict(tmp_path):
    """WORK/compile_ok is yes when the self-check passes, no when it ran and printed FAILED;
    a self-check that never reached a verdict (no GPU, a crash) records nothing - the next all
    checks again - and check says so and exits non-zero. (A fake python answers for
    selfcheck.py; the versions are the real python's.)"""
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\nif [ "$1" = benchmarks/selfcheck.py ]; then\n'
                    '  echo "$@" > "$FAKE_ARGS"; printf "%s\\n" "$FAKE_OUT"; exit "$FAKE_RC"\nfi\n'
                    f'exec "{sys.executable}" "$@"\n')
    # the compile cache an earlier command saved (CACHE) is where the self-check loads it from
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "selfcheck-tiny-regional-all.bin").write_bytes(b"saved before")
    fake.chmod(0o755)
    cases = [(0, "selfcheck: PASSED at tiny", "yes"),
             (1, "step 1: ...\nselfcheck: FAILED at tiny: losses differ", "no"),
             (2, "error: --device cuda: no CUDA GPU is visible to PyTorch (see --help)", None),
             (1, "Traceback (most recent call last):\nRuntimeError: CUDA out of memory", None)]
    for i, (rc, out, verdict) in enumerate(cases):
        work, res = tmp_path / f"work{i}", tmp_path / f"res{i}"
        r = stage("check", res, WORK=str(work), PY=str(fake), FAKE_RC=str(rc), FAKE_OUT=out,
                  CACHE=str(cache), FAKE_ARGS=str(tmp_path / "args"))
        mine = res / "compile_cache" / "selfcheck-tiny-regional-all.bin"
        assert f"--compile_cache {mine}" in (tmp_path / "args").read_text()
        assert mine.read_bytes() == b"saved before"
        ok = (work / "compile_ok").read_text().strip() if (work / "compile_ok").exists() else None
        assert ok == verdict, (out, ok, r.stdout)
        assert r.returncode == (0 if verdict else 1), r.stdout + r.stderr
        if not verdict:
            assert "could not run" in r.stdout and "FAILED its self-check" not in r.stdout


def test_prepare_then_status_on_a_cpu(corpus_file, tmp_path):
    """prepare writes the corpus where bench/start read it (WORK/data/corpus) and its output
    into RES; status, with no run started, says so."""
    work, res = tmp_path / "work", tmp_path / "res"
    r = stage("prepare", res, WORK=str(work), CORPUS=str(corpus_file.parent))
    assert r.returncode == 0, r.stdout + r.stderr
    meta = json.loads((work / "data" / "corpus" / "meta.json").read_text())
    # SIZE=tiny asks data.py for 1,000 tokens; the generated corpus (without ../shared) runs
    # out of merges sooner, so the vocabulary is at most that, never only the 256 bytes
    assert 256 < meta["vocab_size"] <= 1000 and meta["train_tokens"] > 0
    assert "done:" in (res / "prepare.txt").read_text()
    r = stage("status", res, WORK=str(work))
    assert r.returncode == 0 and "not running" in (res / "status.txt").read_text()
    # nothing prepared, and no text to prepare: one line naming CORPUS
    (tmp_path / "no_text").mkdir()
    r = stage("bench", res, WORK=str(tmp_path / "empty"), CORPUS=str(tmp_path / "no_text"))
    assert r.returncode == 1 and r.stderr.startswith("error: no corpus files")
    assert "CORPUS=" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_corpus_data_py_prepared_is_used_as_it_is(data_dir, tmp_path):
    """CORPUS may name a folder data.py prepared (meta.json): prepare links it where the
    stages read the corpus instead of preparing text; left out, CORPUS is the one corpus
    prepared in data/, and where several are, one line asks which."""
    work, res = tmp_path / "work", tmp_path / "res"
    r = stage("prepare", res, WORK=str(work), CORPUS=str(data_dir))
    assert r.returncode == 0, r.stdout + r.stderr
    assert (work / "data" / "corpus").resolve() == Path(data_dir).resolve()
    assert "used as it is" in (res / "prepare.txt").read_text()
    # the default, read where the script runs: several prepared corpora are one error line
    home = tmp_path / "checkout"
    (home / "benchmarks").mkdir(parents=True)
    (home / "benchmarks" / "gpu_measure.sh").write_text(SCRIPT.read_text())
    for name in ("a", "b"):
        (home / "data" / name).mkdir(parents=True)
        (home / "data" / name / "meta.json").write_text("{}")
    env = {**os.environ, "DEVICE": "cpu", "SIZE": "tiny", "PY": sys.executable}
    env.pop("CORPUS", None)
    r = subprocess.run(["bash", "benchmarks/gpu_measure.sh", "prepare", str(res)], cwd=home,
                       env=env, capture_output=True, text=True, timeout=HANG)
    assert r.returncode == 1 and r.stderr.startswith("error: CORPUS: data/ holds several")
    assert len(r.stderr.strip().splitlines()) == 1


def test_all_checks_every_input_before_its_first_stage(corpus_file, tmp_path):
    """all refuses at once, in one line naming the variable, what a later stage would have
    failed on after minutes: no GLUE tasks, no corpus, a GPU torch cannot see, bad minutes.
    Nothing is prepared, checked or trained first."""
    work, res = tmp_path / "work", tmp_path / "res"
    (tmp_path / "empty").mkdir()
    cases = [
        (dict(GLUE=str(tmp_path / "empty"), TASKS="rte,cola"), 9, ["GLUE=", "rte cola", "--download"]),
        (dict(GLUE=str(tmp_path / "empty"), CORPUS=str(tmp_path / "empty")), 9, ["CORPUS="]),
        (dict(GLUE=str(tmp_path / "empty")), "soon", ["positive number"]),
        (dict(DEVICE="cuda", CUDA_VISIBLE_DEVICES="", GLUE=fake_glue(tmp_path), TASKS="rte"), 9,
         ["DEVICE=cuda", "no CUDA GPU"]),
    ]
    for env, minutes, words in cases:
        env = dict(dict(WORK=str(work), CORPUS=str(corpus_file.parent)), **env)
        r = stage("all", minutes, res, **env)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error:"), r.stderr
        assert all(w in lines[0] for w in words), (words, lines[0])
        assert not (work / "data").exists() and not (work / "compile_ok").exists()
        assert "selfcheck" not in (res / "summary.txt").read_text() if (res / "summary.txt").exists() else True


def test_every_setting_is_checked_before_anything_starts(tmp_path):
    """A bad setting (an environment variable) is one line naming it, before anything is
    checked, prepared or written - not bash's 'unbound variable' (LIMIT_TASK=abc under SIZE=tiny)
    nor a sub-run that fails minutes later (SIZE=huge, SEEDS=x)."""
    work, res = tmp_path / "work", tmp_path / "res"
    for env, words in [(dict(LIMIT_TASK="abc"), ["LIMIT_TASK=abc", "positive whole number"]),
                       (dict(SEEDS="x"), ["SEEDS=x"]), (dict(CHECK_LAYERS="0"), ["CHECK_LAYERS=0"]),
                       (dict(FT_RESERVE="-3"), ["FT_RESERVE=-3"]), (dict(HOURS="1h"), ["HOURS=1h"]),
                       (dict(SIZE="huge"), ["SIZE=huge", "tiny"]), (dict(MODEL="gpt"), ["MODEL=gpt"]),
                       (dict(COMPILE="yes"), ["COMPILE=yes"]),
                       (dict(TASKS="rte,foo"), ["TASKS", "'foo'", "cola,sst2"])]:
        for args in [("all", 9), ("bench",), ("finetune",)]:
            one_error_line(stage(*args, res, WORK=str(work), **env), *words)
            assert not work.exists() and not res.exists(), (env, args)
    # the sizes the script accepts are the configuration's
    from config import SIZES
    accepted = re.search(r"case \$SIZE in ([\w|]+)\)", SCRIPT.read_text()).group(1).split("|")
    assert sorted(accepted) == sorted(SIZES)


def summary(res):
    return (res / "summary.txt").read_text()


@pytest.mark.extras                     # (without transformers, the hf contender's one line)
def test_bench_alone_prepares_and_a_failing_sub_run_stops_nothing(corpus_file, tmp_path):
    """bench in an empty WORK prepares the corpus itself, and ours, the profile and torchrun
    each record theirs; then, with every limit 1 s, each sub-run that runs out of its time is
    recorded as such and the next one still runs."""
    work, res = tmp_path / "work", tmp_path / "res"
    r = stage("bench", res, WORK=str(work), CORPUS=str(corpus_file.parent), WHICH="ours,hf",
              LIMIT_DDP="1200", LIMIT_PROFILE="1200", LIMIT_BENCH="1200")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (work / "data" / "corpus" / "meta.json").exists()
    s = summary(res)
    assert "bench ours: ok" in s and "profile: ok" in s and "torchrun (default network): ok" in s
    results = json.loads((res / "bench_gpu.json").read_text())["results"]
    ours = next(r for r in results if r["name"] == "ours")      # looked up by name: hf may come first
    assert ours["tokens_per_s"] > 0
    try:
        import transformers  # noqa: F401
    except ImportError:
        assert "bench hf: skipped, transformers not installed" in s and "Traceback" not in r.stdout
    # every sub-run out of time, and each after the first still runs and says so
    r = stage("bench", res, WORK=str(work), WHICH="bert", LIMIT_BENCH="1", LIMIT_PROFILE="1",
              LIMIT_DDP="1")
    again = summary(res).split("bench bert")[1]
    assert r.returncode == 0 and "bench bert: TIMED OUT at its limit of 1 s" in summary(res)
    assert "profile: TIMED OUT" in again and "torchrun (default network): TIMED OUT" in again


@pytest.mark.skipif(not GLUE.is_dir(), reason="needs ../shared/data/glue")
def test_finetune_alone_pre_trains_first(corpus_file, tmp_path):
    work, res = tmp_path / "work", tmp_path / "res"
    r = stage("finetune", res, WORK=str(work), CORPUS=str(corpus_file.parent), GLUE=str(GLUE),
              TASKS="rte", SEEDS="1", PRE_STEPS="8", LIMIT_TASK="1200")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no checkpoint" in summary(res) and "pretrain: ok" in summary(res)
    assert "finetune rte: ok" in summary(res)
    assert json.loads((res / "glue_gpu.json").read_text())["glue_tasks"] == ["rte"]


@pytest.mark.skipif(not GLUE.is_dir(), reason="needs ../shared/data/glue")
def test_all_in_minutes_then_again_bert_at_the_same_flops(corpus_file, tmp_path):
    """all: check (the self-check, traced on a CPU, at CHECK_LAYERS), prepare, a pre-training run
    over the time left (--hours), fine-tuning (one seed, the smallest task first, unless SEEDS
    and TASKS say); a second all on the same WORK trains BERT-Small at the first run's FLOPs."""
    work, res = tmp_path / "work", tmp_path / "res"
    env = dict(WORK=str(work), CORPUS=str(corpus_file.parent), GLUE=str(GLUE), TASKS="rte",
               POINTS=str(tmp_path / "none.jsonl"), PROFILE="3",
               FT_RESERVE="300", PRE_MIN="10", LIMIT_CHECK="1200", LIMIT_TASK="1200",
               CHECK_LAYERS="1")
    r = stage("all", 0.5, res, **env)          # (too few: pre-training gets PRE_MIN)
    assert r.returncode == 0, r.stdout + r.stderr
    s = summary(res)
    assert "selfcheck: ok" in s and "finetune rte: ok" in s and "bench" not in s
    assert "PASSED at tiny, 1 of its 2 layers" in (res / "check.txt").read_text()
    secs = int(re.search(r"all: pretrain: (\d+) s \(eager, --hours\)", s)[1])
    assert secs == 10 and f"--hours {10 / 3600:g}" in (res / "pretrain.txt").read_text()
    log = [json.loads(l) for l in (res / "pretrain_log.jsonl").read_text().splitlines()]
    assert log[-1]["step"] > 0
    ft = (res / "finetune.txt").read_text()
    assert "--seeds 1" in ft                                   # all's default: one seed
    assert json.loads((res / "glue_gpu.json").read_text())["glue_tasks"] == ["rte"]
    r = stage("all", 0.5, res, **env)
    assert r.returncode == 0, r.stdout + r.stderr
    bert = [json.loads(l) for l in (res / "pretrain_log_bert.jsonl").read_text().splitlines()]
    assert bert[-1]["model"] == "bert" and "--flops " in (res / "pretrain_bert.txt").read_text()
    if "pretrain_bert: ok" in summary(res):           # (not stopped at its limit)
        assert bert[-1]["flops"] >= log[-1]["flops"]
    assert (res / "glue_gpu_bert.json").exists()
    # each all appended its point: ELECTRA, then BERT-Small at (up to) its FLOPs; next, ELECTRA
    points = [json.loads(l) for l in (res / "points.jsonl").read_text().splitlines()]
    assert [p["pretrain"]["model"] for p in points] == ["electra", "bert"]
    electra = points[0]
    assert electra["glue_tasks"] == ["rte"] and electra["tasks"]["rte"]["metric"] == "acc"
    assert electra["pretrain"]["steps"] == log[-1]["step"]
    assert electra["pretrain"]["flops"] == log[-1]["flops"]
    assert electra["pretrain"]["passes_over_corpus"] > 0 and "all 0.5" in electra["command"]
    assert "Name" in (res / "profile.txt").read_text()        # the profiled steps' table
    assert electra["profile"]["steps"] == 3 and electra["profile"]["top"][0]["share"] > 0
    nxt = subprocess.run([sys.executable, "benchmarks/record_point.py", "--next",
                          str(res / "points.jsonl")], cwd=ROOT, capture_output=True, text=True)
    assert nxt.stdout.strip() == "electra"
    assert plot_results.main(["--results", str(res / "points.jsonl"), "--out_dir",
                              str(tmp_path / "plots")]) == 0


def test_a_point_without_glue_and_the_next_point_from_the_records(corpus_file, tmp_path):
    """TASKS=none pre-trains and records the point without a GLUE score; with an ELECTRA point
    in POINTS and no BERT point beside it, all trains BERT-Small to its FLOPs."""
    work, res = tmp_path / "work", tmp_path / "res"
    points = tmp_path / "points.jsonl"
    points.write_text(json.dumps({"pretrain": {"model": "electra", "flops": 2e12}}) + "\n")
    r = stage("all", 0.2, res, WORK=str(work), CORPUS=str(corpus_file.parent), TASKS="none",
              POINTS=str(points), PRE_MIN="5", LIMIT_CHECK="1200", CHECK_LAYERS="1")
    assert r.returncode == 0, r.stdout + r.stderr
    s = summary(res)
    assert "BERT-Small to ELECTRA's 2e+12 FLOPs" in s and "finetune" not in s
    rec = json.loads((res / "points.jsonl").read_text())
    assert rec["pretrain"]["model"] == "bert" and rec["glue_tasks"] == [] and rec["glue_score"] is None
    # pack: the results as a few files, for a machine that hands back only a few; the compile
    # caches in parts where they are larger than such a machine's 16 MiB a file
    (res / "compile_cache" / "pretrain-bert-tiny-regional.bin").write_bytes(os.urandom(17 << 20))
    r = stage("pack", tmp_path / "packed", res)
    assert r.returncode == 0 and "results.tar.gz" in r.stdout, r.stdout + r.stderr
    packed = tmp_path / "packed"
    assert sorted(p.name for p in packed.iterdir()) == [
        "compile_cache.tar.gz.00", "compile_cache.tar.gz.01", "points.jsonl", "results.tar.gz",
        "summary.txt"]
    assert all(p.stat().st_size <= 15 << 20 for p in packed.iterdir())
    assert (packed / "points.jsonl").read_bytes() == (res / "points.jsonl").read_bytes()
    import tarfile
    with tarfile.open(packed / "results.tar.gz") as t:
        names = t.getnames()
    assert "./pretrain_log_bert.jsonl" in names and not any("compile_cache" in n for n in names)
    # unpacked as docs/gpu.md says, into the next machine's CACHE
    unpack = subprocess.run(f"cat {packed}/compile_cache.tar.gz* | tar -xzf - -C {tmp_path}",
                            shell=True)
    assert unpack.returncode == 0 and (tmp_path / "compile_cache" / "pretrain-bert-tiny-regional"
                                       ".bin").read_bytes() == \
        (res / "compile_cache" / "pretrain-bert-tiny-regional.bin").read_bytes()
    one_error_line(stage("pack"), "pack DEST")
