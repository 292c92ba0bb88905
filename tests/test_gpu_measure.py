"""benchmarks/gpu_measure.sh: the GPU measurement's stages. Without a GPU only the wiring can be checked:
the script parses, refuses an unknown stage, and a stage that needs no GPU (prepare) runs at
the smoke scale (SIZE=tiny) and leaves its files where the later stages look for them."""
import json
import os
import subprocess
import sys

from conftest import HANG, ROOT

SCRIPT = ROOT / "benchmarks" / "gpu_measure.sh"


def stage(*args, **env):
    env = dict(os.environ, DEVICE="cpu", SIZE="tiny", PY=sys.executable, WORKERS="1",
               OMP_NUM_THREADS="1", **env)
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=HANG)


def test_the_script_parses_and_refuses_an_unknown_stage(tmp_path):
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    r = stage("bogus", tmp_path / "res", WORK=str(tmp_path / "work"))
    assert r.returncode == 2 and r.stderr.startswith("usage:")


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
    r = stage("bench", res, WORK=str(tmp_path / "empty"))      # nothing prepared there
    assert r.returncode == 1 and r.stderr.startswith("error: no prepared corpus")
