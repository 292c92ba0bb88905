"""teaching/one_step.py: the Annotated ELECTRA's step table (docs/one_step.json) follows the
rules of §2 - x_masked and x_corrupt differ from x only at m, x̂ is given exactly at m,
is_replaced says where x_corrupt differs from x - both the committed one and one written from a
tiny model, reproducibly; bad input is one line and writes nothing."""
import json

from conftest import ROOT, run_cli, save_tiny


def check_step(rows, m):
    """The rules of §2 on one step's table: x_masked and x_corrupt differ from x only at m,
    x̂ is given exactly at m, and is_replaced says where x_corrupt differs from x."""
    T = len(rows["x"])
    assert all(len(r) == T for r in rows.values())
    assert rows["x"][0] == "[CLS]" and rows["x"][-1] == "[SEP]" and 0 not in m and T - 1 not in m
    for t in range(T):
        assert (rows["m"][t] == "✓") == (t in m)
        assert (rows["x_hat"][t] != "") == (t in m)
        if t not in m:
            assert rows["x_masked"][t] == rows["x"][t] == rows["x_corrupt"][t]
            assert rows["is_replaced"][t] == 0
        else:
            assert rows["x_masked"][t] in ("[MASK]", rows["x"][t])
            assert rows["x_corrupt"][t] == rows["x_hat"][t]
            assert rows["is_replaced"][t] == int(rows["x_corrupt"][t] != rows["x"][t])
        assert 0 <= float(rows["p_replaced"][t]) <= 1


def test_the_committed_step_table_follows_section_2():
    data = json.loads((ROOT / "docs" / "one_step.json").read_text(encoding="utf-8"))
    check_step(data["rows"], data["m"])
    assert data["checkpoint"]["step"] > 0                  # a trained G and D, not random ones
    assert data["command"].startswith("python teaching/one_step.py")


def test_one_step_of_a_tiny_model(tmp_path, learnable_data_dir, one_thread):
    from data import load_tokenizer
    from teaching import one_step
    ckpt = save_tiny(tmp_path / "tiny.pt", load_tokenizer(learnable_data_dir))
    model, tok, cfg, step = one_step.load(ckpt)
    data = one_step.one_step(model, tok, cfg, "the cat sees the ball in the morning.", seed=1)
    check_step(data["rows"], data["m"])
    assert len(data["m"]) == max(1, round(0.15 * (len(data["rows"]["x"]) - 2)))
    assert data == one_step.one_step(model, tok, cfg, "the cat sees the ball in the morning.",
                                     seed=1)                                    # reproducible
    p = run_cli("teaching/one_step.py", "--ckpt", ckpt, "--text", "the cat " * 40, "--out",
                tmp_path / "s.json")              # past the checkpoint's 64 trained positions
    assert p.returncode == 2 and p.stderr.startswith("error: ") and p.stderr.count("\n") == 1
    assert "at most 62" in p.stderr and not (tmp_path / "s.json").exists()
    p = run_cli("teaching/one_step.py", "--ckpt", tmp_path / "none.pt", "--out",
                tmp_path / "s.json")
    assert p.returncode == 2 and p.stderr.startswith("error: ") and p.stderr.count("\n") == 1
    assert not (tmp_path / "s.json").exists()
    bert = save_tiny(tmp_path / "bert.pt", load_tokenizer(learnable_data_dir), model="bert")
    p = run_cli("teaching/one_step.py", "--ckpt", bert, "--out", tmp_path / "s.json")
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert "not an ELECTRA checkpoint" in p.stderr and not (tmp_path / "s.json").exists()
