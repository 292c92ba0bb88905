"""notebooks/colab.py, the Colab notebook's source: it runs end to end as a script at a tiny
size on the CPU (what only Colab has is skipped, with a line for each), and
notebooks/colab.ipynb is what jupytext makes of it (skipped without jupytext)."""
import json
import os

import pytest

from conftest import HANG, ROOT, run_cli

SOURCE, NOTEBOOK = ROOT / "notebooks" / "colab.py", ROOT / "notebooks" / "colab.ipynb"


def test_the_notebook_runs_as_a_script_at_a_tiny_size(tmp_path):
    """Every cell, at the tiny size: pre-training stopped after 5 of 10 steps and continued
    with --resume, as after a Colab disconnect; the curve, D, fine-tuning beside the paper."""
    env = dict(os.environ, ELECTRA_NOTEBOOK_TINY="1", ELECTRA_NOTEBOOK_WORK=str(tmp_path),
               OMP_NUM_THREADS="1")
    r = run_cli(SOURCE, timeout=HANG, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "skipped (not on Colab): git clone" in r.stdout
    assert "skipped (tiny run): downloading GLUE" in r.stdout
    assert "a checkpoint is there: continuing it" in r.stdout and "resuming at step 5" in r.stdout
    log = [json.loads(line) for line in (tmp_path / "out" / "log.jsonl").read_text().splitlines()]
    assert log[-1]["step"] == 10
    assert (tmp_path / "training_curve.png").exists()
    assert "P(replaced)" in r.stdout or "sentence.png" in r.stdout          # a look inside D
    results = json.loads((tmp_path / "glue.json").read_text())
    assert list(results["tasks"]) == ["sst2"]
    assert "sst2" in r.stdout.split("this run")[1] and "89.1" in r.stdout   # beside the paper


def test_the_ipynb_is_the_source_in_sync():
    jupytext = pytest.importorskip("jupytext")
    made = jupytext.reads(SOURCE.read_text(), fmt="py:percent")
    kept = json.loads(NOTEBOOK.read_text())
    cells = lambda cs: [(c["cell_type"], "".join(c["source"]) if isinstance(c["source"], list)
                         else c["source"]) for c in cs]
    assert cells(kept["cells"]) == cells(made["cells"]), \
        "notebooks/colab.ipynb is out of date: jupytext --to ipynb notebooks/colab.py"
