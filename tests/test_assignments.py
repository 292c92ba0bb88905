"""teaching/make_assignment.py: student copies fail exactly the blanked parts' tests, a filled-in part
passes its tests, and plausible wrong answers fail them (issue: teaching, §1)."""
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import HANG

from teaching import make_assignment as ma

ROOT = Path(__file__).resolve().parent.parent


def run_tests(folder, *paths):
    """pytest in `folder`: {test file stem: [outcome of each test]} from a JUnit report."""
    report = folder / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={report}", *paths], cwd=folder, capture_output=True,
                   text=True, timeout=HANG)
    by_file = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        stem = case.get("classname").split(".")[-1]
        failed = any(c.tag in ("failure", "error") for c in case)
        by_file.setdefault(stem, []).append("failed" if failed else "passed")
    return by_file


def fill(folder, part, body):
    """Write `body` (lines) into part's region of the student copy."""
    path = folder / ma.BY_NAME[part].file
    path.write_text(ma.replace_body(path.read_text(), part, body))


def test_every_part_is_marked_once_in_its_file_and_nothing_else_is():
    marked = {}
    for f in ROOT.glob("*.py"):
        for part in ma.regions(f.read_text()):
            marked.setdefault(part, []).append(f.name)
    assert sorted(marked) == sorted(ma.BY_NAME)
    for part, files in marked.items():
        assert files == [ma.BY_NAME[part].file], part
        assert ma.reference_body(part), part
        assert (ROOT / "tests" / "parts" / f"test_part_{part}.py").is_file(), part


@pytest.mark.parametrize("blank", [
    # two complementary halves: every part's tests run once with the part blank and once with
    # it written while the parts of the other half are blank
    ["mask", "disc_loss", "joint_loss", "adam", "electra15", "flops"],
    ["sample", "corrupt", "mlm_loss", "attention", "layer_decay"],
])
def test_student_copy_fails_exactly_the_blanked_parts(tmp_path, blank):
    out = tmp_path / "student"
    assert ma.main(["--out", str(out), "--parts", ",".join(blank)]) == 0
    assert "raise NotImplementedError" in (out / "objectives.py").read_text()
    md = (out / "ASSIGNMENTS.md").read_text()
    assert all(f"(`{p.name}`)" in md for p in ma.PARTS if p.name in blank)
    assert not any(f"(`{p.name}`)" in md for p in ma.PARTS if p.name not in blank)
    results = run_tests(out)
    assert sorted(results) == sorted(f"test_part_{p.name}" for p in ma.PARTS)
    for stem, outcomes in results.items():
        part = stem[len("test_part_"):]
        want = "failed" if part in blank else "passed"
        assert outcomes and set(outcomes) == {want}, (stem, outcomes)


def torch_round_mask():
    """Part 1 with k = torch.round(0.15 n) - round half to even, where the reference rounds
    half up: at n = 30, 70, 110 real tokens the two differ by one, and the rule allows both."""
    body = [l.replace("torch.floor(mask_prob * n + 0.5)", "torch.round(mask_prob * n)")
            for l in ma.reference_body("mask")]
    assert body != ma.reference_body("mask")
    return body


def test_filled_parts_pass_with_the_reference_or_another_correct_answer(tmp_path):
    out = tmp_path / "student"
    ma.make_copy(out, ["disc_loss", "sample", "adam", "mask"])
    fill(out, "mask", torch_round_mask())                    # the reference: floor(x + 0.5)
    fill(out, "disc_loss", ma.reference_body("disc_loss"))
    fill(out, "sample", [                                    # the Gumbel-max trick, not the CDF
        "u = torch.rand(logits.shape, generator=generator).clamp(1e-12, 1 - 1e-7)",
        "return (logits.detach().float() - torch.log(-torch.log(u))).argmax(-1)"])
    fill(out, "adam", [                                      # a plain loop, no _foreach
        "for p, g, m_, v_ in zip(params, grads, m, v):",
        "    m_.mul_(b1).add_(g, alpha=1 - b1)",
        "    v_.mul_(b2).addcmul_(g, g, value=1 - b2)",
        "    p.sub_(lr * (m_ / (v_.sqrt() + eps) + wd * p))"])
    results = run_tests(out, "tests/parts/test_part_disc_loss.py",
                        "tests/parts/test_part_sample.py", "tests/parts/test_part_adam.py",
                        "tests/parts/test_part_mask.py")
    assert {k: set(v) for k, v in results.items()} == {
        "test_part_disc_loss": {"passed"}, "test_part_sample": {"passed"},
        "test_part_adam": {"passed"}, "test_part_mask": {"passed"}}


def test_plausible_wrong_answers_fail_their_part(tmp_path):
    wrong = {
        # L_Disc over the masked positions only (what "ELECTRA 15%" does on purpose)
        "joint_loss": [l.replace("scored = real_tokens(x, pad_mask)",
                                 "scored = torch.zeros_like(x, dtype=torch.bool).scatter("
                                 "1, masked.positions, masked.weights > 0)")
                       for l in ma.reference_body("joint_loss")],
        # a sample equal to the original labelled "replaced": the label is "was in m"
        "corrupt": ["x_hat = torch.where(masked.weights > 0, x_hat, masked.targets)",
                    "in_m = torch.zeros_like(x, dtype=torch.bool).scatter("
                    "1, masked.positions, masked.weights > 0)",
                    "return x.scatter(1, masked.positions, x_hat), in_m"],
        # torch's AdamW rule: bias-corrected moments
        "adam": ["t = float(self.state[params[0]]['step'])",
                 "for p, g, m_, v_ in zip(params, grads, m, v):",
                 "    m_.mul_(b1).add_(g, alpha=1 - b1)",
                 "    v_.mul_(b2).addcmul_(g, g, value=1 - b2)",
                 "    m_hat, v_hat = m_ / (1 - b1 ** t), v_ / (1 - b2 ** t)",
                 "    p.sub_(lr * (m_hat / (v_hat.sqrt() + eps) + wd * p))"],
        # the most likely token instead of a sample
        "sample": ["return logits.detach().argmax(-1)"],
        # a sum over the slots instead of the mean
        "mlm_loss": [l.replace(" / weights.sum().clamp(min=1.0)", "")
                     for l in ma.reference_body("mlm_loss")],
        # k = ceil(0.15 n), a reading the rule does not allow: one too many for most n
        "mask": [l.replace("torch.floor(mask_prob * n + 0.5)", "torch.ceil(mask_prob * n)")
                 for l in ma.reference_body("mask")],
    }
    assert wrong["joint_loss"] != ma.reference_body("joint_loss")
    assert wrong["mlm_loss"] != ma.reference_body("mlm_loss")
    assert wrong["mask"] != ma.reference_body("mask")
    out = tmp_path / "student"
    ma.make_copy(out, list(wrong))
    for part, body in wrong.items():
        fill(out, part, body)
    results = run_tests(out, *(f"tests/parts/test_part_{p}.py" for p in wrong))
    for part in wrong:
        assert "failed" in results[f"test_part_{part}"], part


@pytest.mark.parametrize("args, message", [
    (["--parts", "mask"], "--out is required"),
    (["--out", "{tmp}/x", "--parts", "mask,telepathy"], "unknown part telepathy"),
    (["--out", "{tmp}/full"], "not an empty folder"),
    (["--out", str(ROOT / "student")], "inside the project"),
])
def test_bad_arguments_are_one_line(tmp_path, capsys, args, message):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert ma.main(args) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"
    assert not (tmp_path / "x").exists() and not (ROOT / "student").exists()


def test_the_committed_assignments_md_is_the_generated_one():
    """ASSIGNMENTS.md in the repository is what make_assignment writes for all parts:
    regenerate it with `python -c "from teaching import make_assignment as m; m.write_md()"`."""
    assert (ROOT / "ASSIGNMENTS.md").read_text() == ma.assignments_md([p.name for p in ma.PARTS])


# Restatements of a part's answer outside its region that the copy keeps on purpose: ablations.py
# (needed by every copy: build_model, and Part 10 lives there) wires G, corrupt and D for the
# two-stage and adversarial ablations the way Part 6 wires them for ELECTRA.
KEPT = {("joint_loss", "ablations.py")}
# The answers to the "think about" questions and the method of the reference bodies, as the
# reference states them: none of it may reach a copy with the part blank.
ANSWER_PHRASES = {
    "mask": ["keeps its predictions sensible"],
    "sample": ["CDF(i-1) <= u < CDF(i)", "log(-torch.log", "searchsorted(cdf"],
    "corrupt": ["flag perfectly good text", 'labelling those tokens "replaced"'],
}


def key_lines(part):
    """The reference body's code lines long enough to be its own (not `return out`)."""
    return [l.strip() for l in ma.reference_body(part)
            if len(l.strip()) >= 25 and not l.strip().startswith("#")]


def test_the_copy_holds_no_blanked_answer_anywhere(tmp_path):
    out = tmp_path / "student"
    ma.make_copy(out, [p.name for p in ma.PARTS])
    texts = {str(f.relative_to(out)): f.read_text() for f in out.rglob("*")
             if f.suffix in (".py", ".md", ".txt")}
    assert "objectives.py" in texts and "docs/plateau.md" in texts
    assert not (out / ma.INSTRUCTOR_NOTES.relative_to(ma.ROOT)).exists()
    assert not (out / "benchmarks" / "bench.py").exists()          # its Gumbel sampler and corrupt: LEFT_OUT
    for part in ma.BY_NAME:
        assert key_lines(part), part
        for line in key_lines(part) + ANSWER_PHRASES.get(part, []):
            hits = [f for f, t in texts.items() if line in t and (part, f) not in KEPT]
            assert not hits, (part, line, hits)
    # the reference does hold them, so the check can fail
    ref = (ma.ROOT / "machinery" / "mlm_output.py").read_text()
    assert "searchsorted(cdf" in ref and "# BEGIN ANSWER sample" in ref
    assert all(p in (ma.ROOT / "objectives.py").read_text() for ps in ANSWER_PHRASES.values()
               for p in ps if "log(-torch" not in p)


def test_the_copy_trains_with_the_students_sample(tmp_path):
    """machinery/mlm_output.py's sampler is replaced by a call to objectives.sample: with Part 2 blank the
    fused path says so; with an answer filled in, it samples through it."""
    out = tmp_path / "student"
    ma.make_copy(out, ["sample"])
    code = (
        "import torch\nfrom machinery import mlm_output\n"
        "z, E = torch.randn(2, 3, 8), torch.randn(11, 8)\n"
        "t, w = torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3)\n"
        "try:\n"
        "    mlm_output.mlm_output(z, E, torch.zeros(11), t, w)\n"
        "except NotImplementedError as e:\n"
        "    print('blank:', e)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=out, capture_output=True, text=True)
    assert "blank: Part 2 (sample" in r.stdout, r.stderr
    fill(out, "sample", ["return logits.detach().argmax(-1) * 0 + 7"])     # a marker answer
    r = subprocess.run([sys.executable, "-c", code.replace(
        "    mlm_output.mlm_output(z, E, torch.zeros(11), t, w)",
        "    print('x_hat', mlm_output.mlm_output(z, E, torch.zeros(11), t, w)[1].tolist())")],
        cwd=out, capture_output=True, text=True)
    assert "x_hat [[7, 7, 7], [7, 7, 7]]" in r.stdout, r.stderr
