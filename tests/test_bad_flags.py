"""Every flag of every command line, given zero, negative, empty and absurd values: one
`error: ...` line on stderr that names the flag, exit status 2 (argparse's) or 1, no traceback,
and nothing written - the checks run before any model is built, data read or folder created.

Each case calls the script's main() in this process, in an empty working folder, with paths that
do not exist: a check that did not fire would end in another error (which names no flag) or write
something, and fail here. FILE in a case stands for an existing file, DIR for an existing folder."""
import argparse
import importlib
import os
import subprocess
import sys

import pytest
import torch

from machinery import cli

# (script, base arguments every case of it adds, [(arguments, what the error line must name)])
# A case is [args...] (the line must name args[0], the flag) or ([args...], "text").
SCRIPTS = {
    "electra_small": (["--data", "nodata", "--out_dir", "o", "--size", "tiny"], [
        ["--hours", "0"], ["--hours", "-1"], ["--hours", "nan"], ["--hours", "inf"],
        ["--hours", ""], ["--hours", "six"],
        ["--max_steps", "0"], ["--max_steps", "-5"], ["--max_steps", "2.5"], ["--max_steps", ""],
        ["--flops", "0"], ["--flops", "nan"], ["--flops", "-1e14"],
        (["--hours", "1", "--max_steps", "2"], "--max_steps"),
        ["--data", ""], ["--out_dir", ""], (["--out_dir", "FILE"], "--out_dir"),
        ["--save_at", "0.5,2"], ["--save_at", "abc"], ["--save_at", "nan"], ["--save_at", "0"],
        ["--device", "gpu"], ["--device", ""],
        ["--seed", "-1"], ["--seed", str(2 ** 32)], ["--seed", "x"],
        ["--model", "gpt"], ["--size", "huge"], ["--objective", ""], ["--generator", "big"],
        ["--gen_size", "0"], ["--gen_size", "-1"], ["--gen_size", "1e9"], ["--gen_size", "nan"],
        ["--gen_size", "0.001"], (["--size", "small", "--gen_size", "0.6"], "--gen_size"),
        (["--two_stage"], "--gen_size 1"),
        (["--generator", "unigram", "--objective", "electra15"], "--objective electra"),
        (["--model", "bert", "--gen_size", "0.5"], "--gen_size"),
        ["--gumbel_tau", "0"], ["--gumbel_tau", "-1"], ["--gumbel_tau", "nan"],
        ["--gumbel_start", "1"], ["--gumbel_start", "-0.1"], ["--gumbel_weight", "0"],
        ["--gumbel_weight", "1.5"], (["--gumbel_tau", "0.5"], "--generator gumbel"),
        (["--generator", "adversarial", "--gumbel_start", "0.2"], "--gumbel_start"),
        (["--model", "bert", "--gumbel_weight", "0.5"], "--gumbel_weight"),
        ["--disc_weight", "-1"], ["--disc_weight", "nan"], ["--disc_weight", "inf"],
        ["--mask_prob", "0"], ["--mask_prob", "1"], ["--mask_prob", "1.5"],
        ["--mask_prob", "-0.1"], ["--mask_prob", "nan"], ["--mask_prob", "0.001"],
        ["--batch_size", "0"], ["--batch_size", "-3"], ["--batch_size", "1e9"],
        ["--batch_size", "2.5"],
        ["--lr", "0"], ["--lr", "-1"], ["--lr", "nan"], ["--lr", "inf"],
        ["--optimizer", "sgd"],
        ["--log_every", "0"], ["--log_every", "-1"],
        ["--ckpt_every_min", "0"], ["--ckpt_every_min", "-1"], ["--ckpt_every_min", "nan"],
        ["--save_every", "-1"],
        ["--threads", "0"], ["--threads", "-1"], ["--threads", "100000"],
        ["--precision", "fp8"], ["--loss_scale", "0"], ["--loss_scale", "nan"], ["--profile", "0"], ["--profile", "-1"],
        ["--compile_cache", "c.bin"], (["--compile", "--compile_cache", "no/c.bin"], "--compile_cache"),
        (["--compile", "regional", "--compile_cache", "DIR"], "--compile_cache"),
        (["--bogus"], "--bogus")]),
    "data": (["--name", "n", "--out_root", "root"], [
        ["--corpus", ""], (["--corpus", "c.txt", ""], "--corpus"), ["--hf", ""],
        (["--corpus", "c.txt", "--hf", "x"], "--hf"),
        (["--hf", "x", "--hf_config", ""], "--hf_config"),
        (["--hf", "x", "--hf_split", ""], "--hf_split"),
        (["--hf", "x", "--text_field", ""], "--text_field"),
        (["--corpus", "c.txt", "--name", ""], "--name"),
        (["--corpus", "c.txt", "--name", "a/b"], "--name"),
        (["--corpus", "c.txt", "--out_root", ""], "--out_root"),
        (["--corpus", "c.txt", "--out_root", "FILE"], "--out_root"),
        (["--corpus", "c.txt", "--vocab_size", "3"], "--vocab_size"),
        (["--corpus", "c.txt", "--vocab_size", "0"], "--vocab_size"),
        (["--corpus", "c.txt", "--vocab_size", "70000"], "--vocab_size"),
        (["--corpus", "c.txt", "--bpe_mb", "0"], "--bpe_mb"),
        (["--corpus", "c.txt", "--bpe_mb", "-1"], "--bpe_mb"),
        (["--corpus", "c.txt", "--bpe_mb", "nan"], "--bpe_mb"),
        (["--corpus", "c.txt", "--max_tokens", "0"], "--max_tokens"),
        (["--corpus", "c.txt", "--max_tokens", "-1"], "--max_tokens"),
        (["--corpus", "c.txt", "--workers", "0"], "--workers"),
        (["--corpus", "c.txt", "--threads", "100000"], "--threads")]),
    "finetune_glue": (["--ckpt", "none.pt", "--glue_dir", "glue"], [
        ["--ckpt", ""], ["--glue_dir", ""], ["--seeds", "0"], ["--seeds", "-1"],
        ["--out", ""], ["--device", "tpu"], ["--precision", "fp8"],
        (["--no-compile", "--compile_cache", "c.bin"], "--compile_cache"),
        (["--compile", "--compile_cache", "no/c.bin"], "--compile_cache"),
        ["--download", ""], (["--download", "FILE"], "--download"),
        ["--max_train", "0"], ["--max_train", "-10"], ["--epochs", "0"], ["--epochs", "-2"],
        ["--lr", "0"], ["--lr", "1"], ["--lr", "-1"], ["--lr", "nan"],
        ["--optimizer", "sgd"], ["--layer_decay_rule", "none"],
        ["--threads", "0"], ["--threads", "5000"],
        (["--tasks", "wnli"], "wnli")]),
    "analysis.inspect_discriminator": (["--ckpt", "none.pt", "the cat", "--out", "o"], [
        ["--ckpt", ""], ["--topk", "0"], ["--topk", "-1"], ["--n", "0"], ["--n", "-1"],
        ["--n_sentences", "0"], ["--bins", "0"], ["--bins", "1000000000"],
        ["--data", ""], ["--text", ""], ["--glue_dir", ""], ["--bert", ""],
        ["--out", ""], (["--out", "FILE"], "--out"), ["--seed", "-1"],
        ["--threads", "0"], ["--threads", "100000"],
        ["--label_words", "great"], (["--prompt", "no slot"], "--prompt")]),
    "analysis.serve": (["--ckpt", "none.pt"], [
        ["--ckpt", ""], ["--host", ""], ["--port", "-1"], ["--port", "65536"], ["--port", "x"],
        ["--threads", "0"], ["--threads", "100000"]]),
    "interop.export_hf": (["--ckpt", "none.pt", "--out", "o"], [
        ["--ckpt", ""], ["--out", ""], (["--out", "FILE"], "--out")]),
    "plot_results": (["--results", "none.json"], [
        ["--results", ""], ["--logs", ""], ["--out_dir", ""], (["--out_dir", "FILE"], "--out_dir"),
        (["--results"], "no results")]),
    "benchmarks.bench": (["--which", "ours", "--size", "tiny", "--steps", "1", "--device", "cpu"], [
        ["--batch_size", "0"], ["--batch_size", "-3"], ["--batch_size", "1e9"],
        ["--steps", "0"], ["--steps", "-1"], ["--warmup", "0"], ["--warmup", "-1"],
        ["--threads", "0"], ["--threads", "100000"],
        ["--json", ""], (["--json", "DIR"], "--json"), ["--json", "nodir/out.json"],
        ["--which", ""], ["--which", "ours,gpt"], ["--size", "huge"], ["--device", "tpu"],
        ["--precision", "fp8"]]),
    "benchmarks.parity": (["--data", "nodata"], [
        ["--data", ""], ["--steps", "0"], ["--steps", "-1"], ["--log_every", "0"],
        ["--seed", "-1"], ["--threads", "0"], ["--size", "huge"], ["--precision", "fp16"]]),
    "teaching.make_assignment": ([], [
        ["--out", ""], (["--out", "copy", "--parts", "nonsense"], "--parts"),
        (["--out", "FILE"], "--out"), (["--list", "extra"], "extra")]),
}
if not torch.cuda.is_available():       # where there is a GPU, --device cuda is valid
    SCRIPTS["electra_small"][1].append(["--device", "cuda"])
    SCRIPTS["finetune_glue"][1].append(["--device", "cuda"])
    SCRIPTS["benchmarks.bench"][1].append(["--device", "cuda"])

CASES = [pytest.param(script, base, *(c if isinstance(c, tuple) else (c, c[0])),
                      id=f"{script}:{' '.join(c[0] if isinstance(c, tuple) else c) or 'empty'}")
         for script, (base, cases) in SCRIPTS.items() for c in cases]


def snapshot(folder):
    return {str(p.relative_to(folder)): p.stat().st_size for p in folder.rglob("*")}


@pytest.mark.parametrize("script, base, args, names", CASES)
def test_bad_flag_is_one_line_and_writes_nothing(script, base, args, names, tmp_path,
                                                 monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)             # relative paths (and default outputs) land here
    (tmp_path / "FILE").write_text("keep me")
    (tmp_path / "DIR").mkdir()
    args = [str(tmp_path / a) if a in ("FILE", "DIR") else a for a in args]
    before = snapshot(tmp_path)
    main = importlib.import_module(script).main
    try:
        code = main([*base, *args])
    except SystemExit as e:                 # argparse refuses while parsing
        code = e.code
    out, err = capsys.readouterr()
    lines = err.splitlines()                # one line, no blank one before it
    assert code in (1, 2), (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("error:") and names in lines[0], err
    assert "Traceback" not in out + err
    assert snapshot(tmp_path) == before
    assert (tmp_path / "FILE").read_text() == "keep me"


def test_each_type_names_what_it_accepts():
    """The shared checks: the range in the message, and values at the edges on the right side."""
    for check, good, bad in [(cli.positive_int, ["1", "1e6", " 7 "], ["0", "-1", "2.5", "nan", ""]),
                             (cli.non_negative_int, ["0", "3"], ["-1", "x"]),
                             (cli.threads, ["1", str(cli.MAX_THREADS)], [str(cli.MAX_THREADS + 1)]),
                             (cli.seed, ["0", str(cli.MAX_SEED)], ["-1", str(cli.MAX_SEED + 1)]),
                             (cli.positive_float, ["1e-9", "1e30"], ["0", "-1", "nan", "inf"]),
                             (cli.non_negative_float, ["0", "50"], ["-0.5", "nan", "-inf"]),
                             (cli.share, ["0.15", "0.999"], ["0", "1", "nan", "-0.1"]),
                             (cli.nonempty, ["x", "a b"], ["", "  "])]:
        for text in good:
            check(text)
        for text in bad:
            with pytest.raises(argparse.ArgumentTypeError, match="must be"):
                check(text)
    assert cli.positive_int("1e6") == 1_000_000 and isinstance(cli.positive_int("1e6"), int)


def test_seeds_past_the_mask_generators_range_train(tmp_path):
    """Seeds above ~18,000 overflowed the mask generator's seed (a traceback at the first batch):
    every seed the command line accepts now gives a working generator."""
    from batches import PretrainingData
    d = PretrainingData.__new__(PretrainingData)
    d.seed, d.epoch, d.batch, d.rank = cli.MAX_SEED, 3, 10 ** 6, 7
    assert torch.randint(10, (4,), generator=d.mask_generator()).shape == (4,)


def test_a_refused_run_leaves_no_out_dir(data_dir, tmp_path, capsys):
    """A check that needs the data (here: a batch larger than the data) fails after the run
    created its out_dir: the empty folder is removed, one line names --batch_size."""
    import electra_small
    out = tmp_path / "o"
    assert electra_small.main(["--data", str(data_dir), "--out_dir", str(out), "--size", "tiny",
                               "--batch_size", "65536", "--threads", "1"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--batch_size" in lines[0] and not out.exists()
    assert os.listdir(tmp_path) == []


def test_a_student_copy_with_a_blank_part_says_so_in_one_line(data_dir, tmp_path):
    """Training in a student copy whose Part 2 (sample) is still blank stops at the first step
    with one line naming the part and ASSIGNMENTS.md - no traceback, no out_dir left behind;
    any other NotImplementedError is a bug and keeps its traceback."""
    from teaching import make_assignment
    copy = tmp_path / "student"
    make_assignment.make_copy(copy, ["sample"])
    r = subprocess.run([sys.executable, "electra_small.py", "--size", "tiny", "--max_steps", "5",
                        "--data", str(data_dir), "--out_dir", str(tmp_path / "o"),
                        "--threads", "1"], cwd=copy, capture_output=True, text=True)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert len(lines) == 1 and "Part 2 (sample" in lines[0] and "ASSIGNMENTS.md" in lines[0], lines
    assert not (tmp_path / "o").exists()
    assert cli.blank_part(NotImplementedError("no sparse kernel")) is None
    with pytest.raises(NotImplementedError, match="no sparse kernel"):
        cli.blank_part_or_raise(NotImplementedError("no sparse kernel"))
    assert cli.blank_part(ValueError("Part 2 (x): y. See ASSIGNMENTS.md")) is None
