"""machinery/compile_cache.py (--compile_cache): what one machine compiled, loaded on a fresh one
- the same training, compiled again from the saved artifacts; and a file from elsewhere, or a
damaged one, costs one line and a compile from scratch, never the run."""
import json
import os

import pytest
import torch

from conftest import run_cli
from machinery import compile_cache

CPU = torch.device("cpu")


def test_a_fresh_machine_loads_what_the_last_one_compiled(data_dir, tmp_path):
    """Two runs of the same command, each with an empty Inductor cache of its own, as two fresh
    machines: the first compiles and saves, the second loads every artifact and trains the
    same steps to the same losses."""
    cache = tmp_path / "cache.bin"
    logs = []
    for i in range(2):
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / f"inductor{i}"))
        r = run_cli("electra_small.py", "--data", data_dir, "--size", "tiny", "--device", "cpu",
                    "--compile", "regional", "--compile_cache", cache, "--max_steps", "2",
                    "--log_every", "1", "--out_dir", tmp_path / f"run{i}", env=env)
        assert r.returncode == 0, r.stderr
        logs.append([json.loads(line) for line in (tmp_path / f"run{i}" / "log.jsonl")
                     .read_text().splitlines()])
        if i == 0:
            assert "artifacts loaded" not in r.stdout and "artifacts saved" in r.stdout
            header = json.loads(cache.read_bytes().split(b"\n", 1)[0])
            assert header["magic"] == compile_cache.MAGIC and header["artifacts"] > 0
            assert header == dict(header, **compile_cache.made_on(CPU))
    loaded = [ln for ln in r.stdout.splitlines() if "artifacts loaded" in ln]
    assert loaded and f"{header['artifacts']} compiled artifacts loaded" in loaded[0], r.stdout
    losses = [[(s["mlm_loss"], s["disc_loss"]) for s in log if "disc_loss" in s] for log in logs]
    assert len(losses[0]) == 2 and losses[0] == losses[1]


def write(path, header, blob=b"\x00\x01"):
    path.write_bytes(json.dumps(header).encode() + b"\n" + blob)
    return path


@pytest.mark.parametrize("case, says", [
    ("elsewhere", "made with torch 0.1 (here"),
    ("not ours", "not a file --compile_cache wrote"),
    ("damaged", "could not be loaded"),
    ("not json", "unreadable"),
])
def test_a_file_from_elsewhere_or_damaged_is_one_line_then_a_cold_compile(tmp_path, case, says):
    here = dict(magic=compile_cache.MAGIC, **compile_cache.made_on(CPU))
    path = tmp_path / "c.bin"
    if case == "elsewhere":
        write(path, dict(here, torch="0.1"))
    elif case == "not ours":
        write(path, {"torch": torch.__version__})
    elif case == "damaged":
        write(path, here, b"these are not torch.compile's artifacts")
    else:
        path.write_bytes(b"\x89PNG\r\n")
    before = path.read_bytes()
    lines = []
    assert compile_cache.load(path, CPU, lines.append) == 0
    assert len(lines) == 1 and says in lines[0] and "compiling from scratch" in lines[0], lines
    assert path.read_bytes() == before                       # left for the run to replace


def test_no_file_yet_is_silent_and_nothing_compiled_writes_nothing(tmp_path, monkeypatch):
    lines = []
    assert compile_cache.load(tmp_path / "none.bin", CPU, lines.append) == 0 and lines == []
    monkeypatch.setattr(torch.compiler, "save_cache_artifacts", lambda: None)
    assert compile_cache.save(tmp_path / "none.bin", CPU, lines.append) == 0
    assert lines == [] and not (tmp_path / "none.bin").exists()
