"""benchmarks/parity.py: ours and Hugging Face's ELECTRA on the same batches learn alike (tiny size)."""
import argparse
import math

import pytest

pytest.importorskip("transformers")

from benchmarks import parity  # noqa: E402


def test_ours_and_hf_learn_alike_on_the_same_batches(learnable_data_dir, capsys):
    rows = parity.run(argparse.Namespace(
        data=str(learnable_data_dir), size="tiny", steps=60, log_every=20, seed=0, threads=1,
        precision="fp32"))
    assert [step for step, _ in rows] == [20, 40, 60]
    first, last = rows[0][1], rows[-1][1]
    for name in ("ours", "hf"):
        assert all(math.isfinite(v) for v in last[name].values())
        assert last[name]["mlm"] < first[name]["mlm"] - 0.3, (name, first, last)   # both learn
        assert last[name]["disc"] < first[name]["disc"], (name, first, last)
    # the same objective on the same data: the final-window losses agree (L_MLM within 15 %;
    # L_Disc within 35 %: this early, D's loss still depends on each library's initial weights)
    assert abs(last["ours"]["mlm"] - last["hf"]["mlm"]) < 0.15 * last["hf"]["mlm"]
    assert abs(last["ours"]["disc"] - last["hf"]["disc"]) < 0.35 * last["hf"]["disc"]
    assert "L_MLM ours" in capsys.readouterr().out


def test_bad_steps_is_one_line(capsys):
    with pytest.raises(SystemExit) as e:            # refused as the arguments are parsed
        parity.main(["--data", "x", "--steps", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: argument --steps")
