"""teaching/make_assignment.py: student copies fail exactly the blanked parts' tests, a filled-in part
passes its tests - the public ones and the autograder's hidden ones (teaching/hidden_tests.py) -
with every correct answer of tests/answers_correct.py, and the plausible wrong answers of
tests/answers_wrong.py fail both."""
import ast
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from answers_correct import ALTERNATIVES, body_of
from answers_wrong import WRONG, WRONG_HIDDEN_ONLY, wrong_answers
from conftest import HANG

from teaching import autograder, course
from teaching import make_assignment as ma

ROOT = Path(__file__).resolve().parent.parent


HIDDEN = autograder.HIDDEN                    # where the autograder puts the hidden tests


def run_tests(folder, *paths):
    """pytest in `folder`: {test file stem: [outcome of each test]} from a JUnit report; the
    hidden tests of a part count under "hidden_<part>"."""
    report = folder / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={report}", *paths], cwd=folder, capture_output=True,
                   text=True, timeout=HANG)
    by_file = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        stem = case.get("classname").split(".")[-1]
        if stem == "test_hidden":                   # test_<part>__<what>
            stem = "hidden_" + case.get("name")[len("test_"):].split("__")[0]
        failed = any(c.tag in ("failure", "error") for c in case)
        by_file.setdefault(stem, []).append("failed" if failed else "passed")
    return by_file


def hidden_ids(parts):
    """The node ids of the hidden tests of `parts`, as the autograder selects them."""
    tree = ast.parse((ROOT / ma.HIDDEN_TESTS).read_text())
    return [f"{HIDDEN}::{f.name}" for f in tree.body if isinstance(f, ast.FunctionDef)
            and f.name.startswith("test_") and f.name[5:].split("__")[0] in parts]


def fill(folder, part, body):
    """Write `body` (lines) into part's region of the student copy."""
    path = folder / course.BY_NAME[part].file
    path.write_text(ma.replace_body(path.read_text(), part, body))


def test_every_part_is_marked_once_in_its_file_and_nothing_else_is():
    marked = {}
    for f in ROOT.glob("*.py"):
        for part in ma.regions(f.read_text()):
            marked.setdefault(part, []).append(f.name)
    assert sorted(marked) == sorted(course.BY_NAME)
    for part, files in marked.items():
        assert files == [course.BY_NAME[part].file], part
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
    assert all(f"(`{p.name}`)" in md for p in course.PARTS if p.name in blank)
    assert not any(f"(`{p.name}`)" in md for p in course.PARTS if p.name not in blank)
    results = run_tests(out)
    assert sorted(results) == sorted(f"test_part_{p.name}" for p in course.PARTS)
    for stem, outcomes in results.items():
        part = stem[len("test_part_"):]
        want = "failed" if part in blank else "passed"
        assert outcomes and set(outcomes) == {want}, (stem, outcomes)


def grade(tmp_path, answers):
    """A copy with the parts of `answers` blank, each filled with its body, and the hidden tests
    beside the public ones: {part: outcomes of its public tests, "hidden_<part>": of its hidden
    tests}."""
    out = tmp_path / "student"
    ma.make_copy(out, list(answers))
    (out / HIDDEN).parent.mkdir()
    (out / HIDDEN).write_text((ROOT / ma.HIDDEN_TESTS).read_text())
    for part, body in answers.items():
        fill(out, part, body_of(body))
    results = run_tests(out, *(f"tests/parts/test_part_{p}.py" for p in answers),
                        *hidden_ids(answers))
    return {k.replace("test_part_", ""): set(v) for k, v in results.items()}


def test_every_part_has_a_correct_alternative():
    assert sorted(ALTERNATIVES[0]) == sorted(course.BY_NAME)
    for answers in ALTERNATIVES:
        for part, body in answers.items():
            assert body_of(body) != ma.reference_body(part), part


@pytest.mark.parametrize("round_", range(len(ALTERNATIVES)))
def test_filled_parts_pass_with_another_correct_answer(tmp_path, round_):
    """Every answer the contract allows passes the public tests and the hidden ones."""
    answers = ALTERNATIVES[round_]
    assert grade(tmp_path, answers) == {key: {"passed"} for part in answers
                                        for key in (part, f"hidden_{part}")}


@pytest.mark.parametrize("round_", range(len(WRONG)))
def test_plausible_wrong_answers_fail_their_part(tmp_path, round_):
    """Each wrong answer fails a public test of its part, and a hidden one: the hidden tests
    catch every mistake on their own."""
    answers = wrong_answers(WRONG[round_])
    results = grade(tmp_path, answers)
    for part in answers:
        assert "failed" in results[part], part
        assert "failed" in results[f"hidden_{part}"], f"hidden tests of {part}"


def test_wrong_answers_of_the_edge_cases_fail_the_hidden_tests(tmp_path):
    """The public tests pass them (else they belong in WRONG); the hidden ones do not."""
    for i, round_ in enumerate(WRONG_HIDDEN_ONLY):
        answers = wrong_answers(round_)
        results = grade(tmp_path / f"round{i}", answers)
        for part in answers:
            assert results[part] == {"passed"}, f"public tests of {part} catch it: to WRONG"
            assert "failed" in results[f"hidden_{part}"], f"hidden tests of {part}"


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
    assert (ROOT / "ASSIGNMENTS.md").read_text() == ma.assignments_md([p.name for p in course.PARTS])


# Restatements of a part's answer outside its region that the copy keeps on purpose: ablations.py
# (needed by every copy: build_model, and Part 10 lives there) wires G, corrupt and D for the
# two-stage and adversarial ablations the way Part 6 wires them for ELECTRA.
KEPT = {("joint_loss", "ablations.py")}
# The answers to the "think about" questions and the method of the reference bodies, as the
# reference states them: none of it may reach a copy with the part blank.
ANSWER_PHRASES = {
    "mask": ["its sample is usually the original"],
    "sample": ["CDF(i-1) <= u < CDF(i)", "log(-torch.log", "searchsorted(cdf"],
    "corrupt": ["flag perfectly good text", 'labelling those tokens "replaced"'],
}


def key_lines(part):
    """The reference body's code lines long enough to be its own (not `return out`)."""
    return [l.strip() for l in ma.reference_body(part)
            if len(l.strip()) >= 25 and not l.strip().startswith("#")]


def test_every_file_of_a_copy_with_every_part_blank_imports(tmp_path):
    """What a copy leaves out (LEFT_OUT) takes along every file that imports it: each module
    the copy ships imports there (selfcheck.py once imported bench.py, which was left out)."""
    out = tmp_path / "student"
    ma.make_copy(out, [p.name for p in course.PARTS])
    names = sorted(".".join(f.relative_to(out).with_suffix("").parts) for f in out.rglob("*.py")
                   if f.relative_to(out).parts[0] not in ("tests", "notebooks"))  # (scripts)
    assert (out / "notebooks" / "colab.py").is_file()
    assert "benchmarks.step_cost" in names and "objectives" in names and len(names) > 40
    script = ("import importlib, sys\n"
              "for n in sys.argv[1:]:\n"
              "    try:\n"
              "        importlib.import_module(n)\n"
              "    except ImportError as e:\n"
              "        print(n, e)\n")
    r = subprocess.run([sys.executable, "-c", script, *names], cwd=out, capture_output=True,
                       text=True, timeout=HANG)
    assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr[-2000:]


def test_the_copy_holds_no_blanked_answer_anywhere(tmp_path):
    out = tmp_path / "student"
    ma.make_copy(out, [p.name for p in course.PARTS])
    texts = {str(f.relative_to(out)): f.read_text() for f in out.rglob("*")
             if f.suffix in (".py", ".md", ".txt")}
    assert "objectives.py" in texts and "docs/plateau.md" in texts
    assert not (out / ma.INSTRUCTOR_NOTES.relative_to(ma.ROOT)).exists()
    assert not (out / "benchmarks" / "bench.py").exists()          # its Gumbel sampler and corrupt: LEFT_OUT
    for part in course.BY_NAME:
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


# Words that name a way of computing a part (the reference's or another's): a blank part's
# message says what to compute, not how, so none of them may appear in it.
METHOD_WORDS = {
    "mask": ["score", "topk", "top k", "top-k", "randperm", "sort", "multinomial"],
    "sample": ["cdf", "gumbel", "searchsorted", "multinomial", "cumsum", "argmax", "invert"],
    "corrupt": ["scatter", "index", "column", "torch.where", "clone"],
    "mlm_loss": ["cross_entropy", "log_softmax", "gather"],
    "disc_loss": ["binary_cross_entropy", "with_logits", "logsigmoid"],
    "joint_loss": ["no_grad", "detach", "real_tokens"],
    "attention": ["scaled_dot_product", "permute", "view", "transpose", "reshape", "split"],
    "adam": ["_foreach", "lerp", "addcmul", "loop"],
    "layer_decay": ["startswith", "split", "setdefault", "regular expression", "re.match"],
    "electra15": ["scatter", "index", "zeros", "&"],
    "flops": ["per head, then", "loop"],
}


def test_a_blank_part_says_what_to_compute_not_how():
    assert sorted(METHOD_WORDS) == sorted(course.BY_NAME)
    for p in course.PARTS:
        message = ma.stub(p.name)[0]
        assert message.startswith(f'raise NotImplementedError("Part {course.PARTS.index(p) + 1} '
                                  f'({p.name}, paper {p.section}): ')
        named = [w for w in METHOD_WORDS[p.name] if w in message.lower()]
        assert not named, (p.name, named, message)
    # the check can fail: the words are those of the reference bodies
    assert "topk" in "\n".join(ma.reference_body("mask"))
    assert "searchsorted" in "\n".join(ma.reference_body("sample"))


def test_every_relative_link_in_a_copy_resolves(tmp_path):
    """A copy leaves files out (docs/instructor-notes.md, and benchmarks/bench.py, parity.py and
    hf_electra.py when Part 2 or 3 is blank): its README and documents link only what it has,
    and its README's note names every project file the README mentions that the copy lacks."""
    out = tmp_path / "student"
    ma.make_copy(out, [p.name for p in course.PARTS])
    assert not (out / "benchmarks" / "bench.py").exists()
    links = 0
    for md in [out / "README.md", out / "ASSIGNMENTS.md", *sorted((out / "docs").glob("*.md"))]:
        for m in ma.LINK.finditer(md.read_text()):
            target = m.group(2)
            if target.startswith(("http:", "https:", "mailto:", "#")):
                continue
            links += 1
            assert (md.parent / target.split("#")[0]).exists(), (md.name, target)
    assert links > 40                          # the README and docs link a lot: all checked
    readme = (out / "README.md").read_text()
    note = readme.split("\n\n")[1]
    assert note.startswith("> **A student copy**") and "ASSIGNMENTS.md" in note
    for path in set(re.findall(r"`([\w./-]+\.(?:py|sh|md))`", readme)):
        if (ROOT / path).is_file() and not (out / path).exists() and \
                not path.startswith("tests/"):
            assert f"`{path}`" in note, path
    # the reference README does link what copies lack, so the check can fail
    assert "](docs/instructor-notes.md)" in (ROOT / "README.md").read_text()
    assert "](docs/instructor-notes.md)" not in readme
    # the license goes with the code: a copy is the project, and MIT asks for its notice
    assert "[LICENSE](LICENSE)" in readme
    assert (out / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
