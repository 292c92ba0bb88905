"""Every path through the pre-training command line. Each model / objective / generator /
two-stage combination electra_small.py accepts trains a few steps to a progress line, a log
record and a checkpoint, resumes from it, and finetune_glue.py fine-tunes the result; each
combination it refuses says so in one line and leaves nothing behind. The combinations are
built from the command line's own choices, so a choice added there is covered here without
editing this file.

The runs call electra_small.main in this process (no interpreter and torch import per run), on
the session's learnable data folder, which they only read."""
import argparse
import itertools
import json
import math
import signal
from unittest import mock

import pytest
import torch

import electra_small
import finetune_glue
from machinery.checkpoint import load_checkpoint
from config import Config
from conftest import run_cli


def cli_choices():
    """{flag: its choices}, read from the parser electra_small.parse_args builds."""
    with mock.patch.object(argparse.ArgumentParser, "parse_args", lambda self, *a, **k: self):
        parser = electra_small.parse_args([])
    return {a.dest: list(a.choices) for a in parser._actions if a.choices}


CHOICES = cli_choices()
DEFAULT = Config()                          # what a run gets without the flag


def refusal(model, objective, generator, two_stage):
    """What the command line says about a combination it refuses; None for one it trains.
    The rules: BERT is MLM alone (no ablation flag); two-stage training starts D from G, so
    only the default G and objective; a unigram or adversarial G only with ELECTRA's objective."""
    if model == "bert" and (objective, generator, two_stage) != \
            (DEFAULT.objective, DEFAULT.generator, DEFAULT.two_stage):
        return "--model bert takes no"
    if two_stage and (objective, generator) != (DEFAULT.objective, DEFAULT.generator):
        return "--two_stage combines only with the default objective and generator"
    if generator != DEFAULT.generator and objective != DEFAULT.objective:
        return "combine only with --objective electra"
    return None


def argv_of(model, objective, generator, two_stage):
    """The flags of a combination, each left out where it is the default (as a user types it);
    two-stage training gets G at D's size, which it needs."""
    argv = [f"--{name}={value}" for name, value in
            (("model", model), ("objective", objective), ("generator", generator))
            if value != getattr(DEFAULT, name)]
    return argv + (["--two_stage", "--gen_size", "1"] if two_stage else [])


def combo_id(combo):
    model, objective, generator, two_stage = combo
    return f"{model}-{objective}-{generator}-{'two_stage' if two_stage else 'one_stage'}"


COMBOS = [(argv_of(*c), refusal(*c), c) for c in itertools.product(
    CHOICES["model"], CHOICES["objective"], CHOICES["generator"], (False, True))]
ACCEPTED = [pytest.param(argv, c, id=combo_id(c)) for argv, why, c in COMBOS if why is None]
# Refused: each combination of the product that the rules exclude, two-stage training with G
# smaller than D, and BERT with the ablation flags that only shape G or weigh D's loss.
REFUSED = [pytest.param(argv, why, id=combo_id(c)) for argv, why, c in COMBOS
           if why is not None] + [
    pytest.param(["--two_stage"], "it needs --gen_size 1", id="two_stage-without-gen_size-1"),
    pytest.param(["--model", "bert", "--gen_size", "0.5"], "--model bert takes no --gen_size",
                 id="bert-gen_size"),
    pytest.param(["--model", "bert", "--disc_weight", "1"], "--model bert takes no --disc_weight",
                 id="bert-disc_weight")]

STEPS, MORE = 4, 6                          # two-stage: stage two starts at step 2


@pytest.fixture
def in_process():
    """electra_small.main and finetune_glue.main set the thread count, the global RNG and
    SIGTERM / SIGINT handlers (so a kill saves a checkpoint): put them back for other tests."""
    threads, rng = torch.get_num_threads(), torch.random.get_rng_state()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    torch.set_num_threads(threads)
    torch.random.set_rng_state(rng)
    for s, h in handlers.items():
        signal.signal(s, h)


@pytest.fixture(scope="session")
def glue_task(tmp_path_factory):
    """A tiny SST-2 in GLUE's layout (tests only read it)."""
    d = tmp_path_factory.mktemp("glue")
    (d / "SST-2").mkdir()
    rows = [("the cat sees the ball in the morning", 1), ("a dog likes the river", 0)] * 12
    for split, n in (("train", 24), ("dev", 8)):
        (d / "SST-2" / f"{split}.tsv").write_text(
            "sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows[:n]))
    return d


def test_the_combinations_come_from_the_command_line():
    # a sanity check on the enumeration itself: the paper's variants are all here
    assert {"electra", "bert"} <= set(CHOICES["model"])
    assert {"electra", "electra15", "replace_mlm", "all_tokens_mlm"} <= set(CHOICES["objective"])
    assert {"mlm", "unigram", "adversarial"} <= set(CHOICES["generator"])
    assert len(COMBOS) == len(CHOICES["model"]) * len(CHOICES["objective"]) * \
        len(CHOICES["generator"]) * 2 and len(ACCEPTED) >= 8


@pytest.mark.parametrize("argv, combo", ACCEPTED)
def test_an_accepted_combination_trains_resumes_and_fine_tunes(
        argv, combo, learnable_data_dir, glue_task, tmp_path, capsys, in_process):
    model, objective, generator, two_stage = combo
    out = tmp_path / "run"
    common = ["--data", str(learnable_data_dir), "--threads", "1", "--log_every", "2",
              "--out_dir", str(out)]
    code = electra_small.main([*common, "--size", "tiny", "--max_steps", str(STEPS), *argv])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    line = next(l for l in stdout.splitlines() if l.startswith(f"step {STEPS} |"))
    rec = json.loads((out / "log.jsonl").read_text().splitlines()[-1])
    assert rec["step"] == STEPS and math.isfinite(rec["mlm_loss"]), rec
    assert rec["model"] == model
    if model == "bert":
        assert rec["disc_loss"] is None and "L_Disc" not in line
    else:                                   # two-stage: D trains in stage two, from step 3
        assert math.isfinite(rec["disc_loss"]) and "L_Disc" in line
        # D detects replaced tokens except where the ablation makes it a masked LM
        detects = objective not in ("replace_mlm", "all_tokens_mlm")
        assert (rec["replaced_share"] is not None) == detects, rec
        assert ("replaced: recall" in line) == detects, line
    ckpt = load_checkpoint(out / "ckpt.pt")
    cfg = Config.from_dict(ckpt["config"])
    assert ckpt["step"] == STEPS and cfg.model == model
    if model == "electra":
        assert (cfg.objective, cfg.generator, cfg.two_stage) == (objective, generator, two_stage)
    # --resume continues it (the config comes from the checkpoint)
    assert electra_small.main([*common, "--resume", "--max_steps", str(MORE)]) == 0
    stdout, stderr = capsys.readouterr()
    assert f"resuming at step {STEPS}" in stdout and f"step {MORE} |" in stdout, stdout + stderr
    assert load_checkpoint(out / "ckpt.pt")["step"] == MORE
    # the checkpoint is what fine-tuning starts from
    code = finetune_glue.main(["--ckpt", str(out / "ckpt.pt"), "--glue_dir", str(glue_task),
                               "--tasks", "sst2", "--epochs", "1", "--threads", "1", "--out",
                               str(tmp_path / "glue.json")])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    res = json.loads((tmp_path / "glue.json").read_text())
    assert res["pretrain"]["model"] == model and res["pretrain"]["steps"] == MORE
    assert 0 <= res["tasks"]["sst2"]["median"]["acc"] <= 1


@pytest.mark.parametrize("argv, message", REFUSED)
def test_a_refused_combination_says_so_in_one_line(argv, message, learnable_data_dir,
                                                   tmp_path, capsys, in_process):
    out = tmp_path / "run"
    code = electra_small.main(["--data", str(learnable_data_dir), "--size", "tiny", "--max_steps",
                               "2", "--out_dir", str(out), *argv])
    stdout, stderr = capsys.readouterr()
    lines = stderr.strip().splitlines()
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert message in lines[0], lines[0]
    assert stdout == "" and not out.exists()            # nothing said or left behind


def test_a_refusal_through_the_real_command_line(learnable_data_dir, tmp_path):
    out = tmp_path / "run"
    r = run_cli("electra_small.py", "--data", learnable_data_dir, "--size", "tiny", "--out_dir",
                out, "--generator", "unigram", "--objective", "replace_mlm")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr and not out.exists()
