"""Gradescope's autograder (teaching/autograder.py, teaching/grade.py): the zip, unpacked into a
fake /autograder and run as Gradescope runs it, gives the reference full marks, a copy's blank
parts 0 and its other parts full marks, every planted wrong answer less than its part's points,
and broken submissions a valid results.json with one line per broken part; the student copy's
own command prints the public tests' score table. Run as root, the attacks of a student who
wants marks without the work (on the grader's secrets, on root, on what a part leaves behind)
earn only their honest work, and no submitted line runs as root. The zip is built once for the
module."""
import ast
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import HANG

from teaching import autograder, course, grade, plugin, runner, similar
from teaching import make_assignment as ma
from answers_wrong import WRONG, wrong_answers
from test_assignments import HIDDEN, KEPT, fill, key_lines

ROOT = Path(__file__).resolve().parent.parent
ALL = [p.name for p in course.PARTS]
HALF = ["mask", "disc_loss", "joint_loss", "adam", "electra15", "flops"]   # blank in a copy
TOP_KEYS = {"score", "execution_time", "output", "visibility", "stdout_visibility", "extra_data",
            "tests", "leaderboard"}
VISIBILITY = {"visible", "hidden", "after_due_date", "after_published"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A student copy of all eleven parts and its autograder.zip, written by one command."""
    d = tmp_path_factory.mktemp("course")
    assert ma.main(["--out", str(d / "hw"), "--autograder", str(d / "autograder.zip")]) == 0
    return d


def check_results(r):
    """results.json as Gradescope's specification describes it; {(part, kind): entry}."""
    assert set(r) <= TOP_KEYS and isinstance(r["tests"], list), set(r) - TOP_KEYS
    assert r["stdout_visibility"] in VISIBILITY and isinstance(r["output"], str)
    entries = {}
    for t in r["tests"]:
        assert isinstance(t["name"], str) and isinstance(t["output"], str) and t["output"]
        assert 0 <= t["score"] <= t["max_score"], t
        assert t["visibility"] in VISIBILITY
        x = t["extra_data"]
        if x["kind"] == "likeness":     # a near-copy of the reference: instructors only, 0 of 0
            assert t["visibility"] == "hidden" and t["score"] == t["max_score"] == 0, t
            continue
        assert t["visibility"] == ("visible" if x["kind"] == "public" else "after_due_date")
        entries[x["part"], x["kind"]] = t
    assert r["score"] == pytest.approx(sum(t["score"] for t in r["tests"]), abs=1e-6)
    json.dumps(r)                                    # plain JSON all the way down
    return entries


def likeness(r):
    """{part: similarity} of results.json's near-copy entries (instructors only)."""
    return {t["extra_data"]["part"]: t["extra_data"]["similarity"] for t in r["tests"]
            if t["extra_data"]["kind"] == "likeness"}


_PYTHON = {}


def grader_python():
    """The Python the fake autograder runs with. Not root: this one. Root: the grader runs the
    submitted code as an ordinary user and refuses to run it at all when that user cannot start
    its Python - so, where this one lies in a private folder (under /root), a virtual
    environment of the system's python3 of the same version, in /tmp, whose .pth names this
    one's site-packages (as setup.sh's /opt/electra-grader is one the user can start); the test
    skips, saying why, when there is none."""
    if "python" in _PYTHON:
        return _PYTHON["python"]
    python, why = sys.executable, None
    user = runner.Unprivileged()
    if os.geteuid() == 0 and user and not user.can_run(python):
        venv = Path(tempfile.mkdtemp(prefix="electra-grader-venv-"))
        venv.chmod(0o755)
        import atexit
        atexit.register(shutil.rmtree, venv, True)
        python = make_venv(venv)
        if python:
            probe = subprocess.run([python, "-c", "import torch, pytest"],
                                   preexec_fn=user.become, capture_output=True, timeout=HANG)
            python = python if probe.returncode == 0 else None
        why = None if python else (
            f"as root the grader runs the submitted code as user {user.name}, who cannot start "
            f"{sys.executable}, and no system python{sys.version_info[0]}."
            f"{sys.version_info[1]} here makes one it can")
    _PYTHON["python"], _PYTHON["why"] = python, why
    return python


def make_venv(venv):
    """A virtual environment at `venv` of the system's Python of this one's version, whose .pth
    names this one's site-packages (torch, pytest); its python, or None without such a Python."""
    import site
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    base = next((p for p in (f"/usr/bin/{version}", f"/usr/local/bin/{version}")
                 if os.path.exists(p)), None)
    if not base:
        return None
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True,
                   capture_output=True, timeout=HANG)
    sites = [p for p in site.getsitepackages() if os.path.isdir(p)]
    pth = next(Path(venv).glob("lib/python3*/site-packages")) / "electra-grader.pth"
    pth.write_text("\n".join(sites) + "\n")
    return str(Path(venv) / "bin" / "python")


def run(built, tmp_path, submission, root=None, **config):
    python = grader_python()
    if python is None:
        pytest.skip(_PYTHON["why"])
    return autograder.run_fake(built / "autograder.zip", submission,
                               root or tmp_path / "autograder", config=config or None,
                               python=python, timeout=HANG)


def test_the_zip_holds_what_gradescope_runs_and_no_answer(built):
    with zipfile.ZipFile(built / "autograder.zip") as zf:
        infos = {i.filename: i for i in zf.infolist()}
        names = set(infos)
        for script in ("setup.sh", "run_autograder"):             # at the root, executable
            assert infos[script].external_attr >> 16 & stat.S_IXUSR, script
        setup = zf.read("setup.sh").decode()
        run_script = zf.read("run_autograder").decode()
        texts = {n: zf.read(n).decode() for n in names if n.endswith(".py")}
    # the versions the pack was checked with: these tests run on them
    import numpy
    import torch
    assert f'"torch=={autograder.CHECKED["torch"]}"' in setup
    assert torch.__version__.split("+")[0] == autograder.CHECKED["torch"]
    assert numpy.__version__ == autograder.CHECKED["numpy"] and f"numpy=={numpy.__version__}" in setup
    assert pytest.__version__ == autograder.CHECKED["pytest"] and f"pytest=={pytest.__version__}" in setup
    # PyTorch's CPU index unless TORCH_INDEX_URL names another (a build where it is unreachable)
    assert '--index-url "$TORCH_INDEX_URL"' in setup and setup.count("--index-url") == 1
    line = next(x for x in setup.splitlines() if x.startswith("TORCH_INDEX_URL="))
    for given, used in ((None, "https://download.pytorch.org/whl/cpu"),
                        ("file:///srv/wheels", "file:///srv/wheels")):
        env = {k: v for k, v in os.environ.items() if k != "TORCH_INDEX_URL"}
        env.update({"TORCH_INDEX_URL": given} if given else {})
        out = subprocess.run(["bash", "-c", f'{line}; echo "$TORCH_INDEX_URL"'], env=env,
                             capture_output=True, text=True, timeout=HANG).stdout.strip()
        assert out == used, (given, out)
    assert subprocess.run(["bash", "-n"], input=setup, text=True, timeout=HANG).returncode == 0
    assert "requirements.txt" in setup and "http" not in run_script and "pip" not in run_script
    assert f"useradd --system --no-create-home --shell /usr/sbin/nologin {runner.USERS[0]}" in setup
    assert f"project/{HIDDEN}" in names and "project/tests/grading.json" in names
    assert "project/tests/parts/test_part_mask.py" in names and "project/tests/conftest.py" in names
    assert "project/teaching/grade.py" in names
    # the grader's copy is the student copy: no reference body in its code, for any part (but
    # the restatement test_assignments.KEPT lets every copy keep; the hidden tests compute some
    # answers their own way, as the public tests do)
    for part in ALL:
        for line in key_lines(part):
            hits = [n for n, t in texts.items() if line in t and n != f"project/{HIDDEN}"
                    and (part, n[len("project/"):]) not in KEPT]
            assert not hits, (part, line, hits)
    # the student copy has no hidden test; the zip is the same bytes when built again
    assert not (built / "hw" / ma.HIDDEN_TESTS).exists() and not (built / "hw" / HIDDEN).exists()
    autograder.write_zip(built / "hw", built / "again.zip", ROOT / ma.HIDDEN_TESTS, ma.FOLDERS,
                         {similar.FILE: ma.reference_tokens(ALL)})
    assert (built / "again.zip").read_bytes() == (built / "autograder.zip").read_bytes()
    # the reference bodies as tokens, for the likeness entry: beside the hidden tests only
    assert f"project/{similar.FILE}" in names and not (built / "hw" / similar.FILE).exists()


# Gradescope's image (Ubuntu 22.04) runs Python 3.10: what the zip and the handout hold must
# read and run there. Syntax: ast's feature_version (best effort: it catches `except*`, not
# every newer form); the standard library: the names added in 3.11 and 3.12 that code is most
# likely to reach for, by module.
NEWER_THAN_310 = {"tomllib": None, "wsgiref.types": None,
                  "typing": {"Self", "LiteralString", "Never", "assert_never", "assert_type",
                             "reveal_type", "Required", "NotRequired", "TypeVarTuple", "Unpack",
                             "dataclass_transform", "get_overloads", "override"},
                  "datetime": {"UTC"}, "hashlib": {"file_digest"}, "contextlib": {"chdir"},
                  "asyncio": {"TaskGroup", "timeout", "Runner", "Barrier"},
                  "enum": {"StrEnum", "ReprEnum", "verify", "member", "nonmember"},
                  "math": {"cbrt", "exp2"}, "operator": {"call"}, "itertools": {"batched"},
                  "logging": {"getLevelNamesMapping"}, "re": {"NOFLAG"}, "sys": {"exception"}}
BUILTINS_NEWER_THAN_310 = {"ExceptionGroup", "BaseExceptionGroup"}


def newer_than_310(tree):
    """The uses in `tree` of the standard library's names newer than Python 3.10."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if NEWER_THAN_310.get(a.name, "") is None]
        elif isinstance(node, ast.ImportFrom) and node.module in NEWER_THAN_310:
            new = NEWER_THAN_310[node.module]
            found += [f"{node.module}.{a.name}" for a in node.names if new is None or a.name in new]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.attr in (NEWER_THAN_310.get(node.value.id) or ()):
            found.append(f"{node.value.id}.{node.attr}")
        elif isinstance(node, ast.Name) and node.id in BUILTINS_NEWER_THAN_310:
            found.append(node.id)
        elif isinstance(node, ast.Attribute) and node.attr == "add_note":   # an exception's
            found.append("add_note")
    return found


def shipped_sources(built):
    """{name: text} of every .py file in the zip and in the student copy."""
    with zipfile.ZipFile(built / "autograder.zip") as zf:
        texts = {n: zf.read(n).decode() for n in zf.namelist() if n.endswith(".py")}
    hw = built / "hw"
    texts.update({f"hw/{f.relative_to(hw).as_posix()}": f.read_text() for f in hw.rglob("*.py")
                  if "__pycache__" not in f.parts})
    return texts


def test_what_the_zip_and_the_handout_ship_reads_as_python_3_10(built):
    texts = shipped_sources(built)
    assert "project/teaching/grade.py" in texts and "hw/teaching/grade.py" in texts
    assert "project/tests/hidden/test_hidden.py" in texts and "hw/objectives.py" in texts
    for name, text in texts.items():
        tree = ast.parse(text, name, feature_version=(3, 10))
        assert not newer_than_310(tree), (name, newer_than_310(tree))
    # the checks can fail
    with pytest.raises(SyntaxError, match="3.11"):
        ast.parse("try:\n    pass\nexcept* ValueError:\n    pass\n", feature_version=(3, 10))
    planted = ("import tomllib\nfrom typing import Self, Any\nimport datetime\n"
               "t = datetime.UTC\nraise ExceptionGroup('x', [])\n")
    assert newer_than_310(ast.parse(planted)) == ["tomllib", "typing.Self", "datetime.UTC",
                                                  "ExceptionGroup"]


def python_310():
    """A `python3.10` on PATH that runs (a pyenv shim that names no installed 3.10 does not)."""
    exe = shutil.which("python3.10")
    try:
        probe = "import sys; assert sys.version_info[:2] == (3, 10)"
        ok = exe and subprocess.run([exe, "-c", probe], capture_output=True,
                                    timeout=HANG).returncode == 0
    except OSError:
        ok = False
    return exe if ok else None


def test_what_the_zip_and_the_handout_ship_compiles_under_a_real_python_3_10(built):
    exe = python_310()
    if not exe:
        pytest.skip("no python3.10 on PATH (Gradescope's Ubuntu 22.04 runs Python 3.10)")
    texts = shipped_sources(built)
    script = ("import json, sys\n"
              "for name, text in json.load(sys.stdin).items():\n"
              "    try:\n"
              "        compile(text, name, 'exec', dont_inherit=True)\n"
              "    except SyntaxError as e:\n"
              "        print(f'{name}, line {e.lineno}: {e.msg}')\n")
    out = subprocess.run([exe, "-c", script], input=json.dumps(texts), capture_output=True,
                         text=True, timeout=HANG)
    assert out.returncode == 0 and out.stdout == "", out.stdout + out.stderr
    bad = subprocess.run([exe, "-c", script], input=json.dumps({"x.py": "type X = int\n"}),
                         capture_output=True, text=True, timeout=HANG)
    assert bad.stdout.startswith("x.py, line 1:"), bad.stdout + bad.stderr      # it can fail


def submission(tmp_path, bodies=None, folder="submission"):
    """A submission as a student hands it in: the graded parts' files of the reference, in
    tmp_path / folder, with `bodies` ({part: its lines}) filled into their parts."""
    sub = tmp_path / folder
    sub.mkdir(parents=True)
    for f in {course.BY_NAME[p].file for p in ALL}:
        shutil.copy(ROOT / f, sub / f)
    for part, body in (bodies or {}).items():
        fill(sub, part, body)
    return sub


def test_the_reference_gets_full_marks(built, tmp_path):
    r = run(built, tmp_path, ROOT)
    entries = check_results(r)
    assert sorted(entries) == sorted((p, k) for p in ALL for k in ("public", "hidden"))
    for (part, kind), t in entries.items():
        assert t["score"] == t["max_score"] > 0, (part, kind, t["output"])
        n = t["extra_data"]["tests"]
        assert t["output"] == f"{n} of {n} test{'' if n == 1 else 's'} passed."
    # the points of make_assignment.POINTS, half to the hidden tests
    assert r["score"] == sum(course.POINTS.values()) == 100
    assert entries["mask", "hidden"]["max_score"] == course.POINTS["mask"] * course.HIDDEN_SHARE
    # the reference's bodies are the reference: each part listed for instructors, 100 % alike
    assert likeness(r) == {p: 1.0 for p in ALL}
    assert all(entries[p, "hidden"]["extra_data"]["tests"] >= 2 for p in ALL)


def test_a_blank_copy_gets_0_on_its_blank_parts_and_full_marks_elsewhere(built, tmp_path):
    copy = tmp_path / "half"
    ma.make_copy(copy, HALF)
    r = run(built, tmp_path, copy)
    entries = check_results(r)
    assert sorted(likeness(r)) == sorted(p for p in ALL if p not in HALF)   # blanks: not alike
    for (part, kind), t in entries.items():
        if part in HALF:
            assert t["score"] == 0 and "not written yet" in t["output"], (part, kind)
            assert t["output"].count("\n") == 0
        else:
            assert t["score"] == t["max_score"], (part, kind, t["output"])


def test_every_planted_wrong_answer_loses_points_in_public_and_hidden_tests(built, tmp_path):
    """answers_wrong.WRONG's first round, one wrong body in each of the eleven parts, handed
    in as a student would hand in the files."""
    answers = wrong_answers(WRONG[0])
    assert sorted(answers) == sorted(ALL)
    sub = submission(tmp_path, answers)
    entries = check_results(run(built, tmp_path, sub))
    for (part, kind), t in entries.items():
        assert t["score"] < t["max_score"], (part, kind, t["output"])
        assert "Failed:\n- " in t["output"] or "0 of" in t["output"], t["output"]
    assert len(WRONG[0]) == 11


# Broken submissions, one part each, the rest the reference: what a student may hand in.
BROKEN = {
    "mask": (["x = (", "return x"], "SyntaxError"),                      # does not parse
    "corrupt": (None, "markers"),                                         # markers deleted
    "sample": (None, "not sample (renamed"),                              # function renamed
    "mlm_loss": (["import no_such_module_here", "return 0"], "No module named"),
    "disc_loss": (["while True:", "    pass"], "time limit"),            # an endless loop
    "adam": (["while True:", "    print('x' * 100_000)"], "huge output"),
    "electra15": (["import ctypes", "ctypes.string_at(0)"], "crashed"),   # a segmentation fault
    "layer_decay": (["import sys", "sys.exit(3)"], "SystemExit"),
    # right answers that leave the process unfit for the parts after them: a thread and a
    # process that keep running, torch's allclose replaced (which would pass wrong answers)
    "joint_loss": (["import threading, time",
                    "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()",
                    *ma.reference_body("joint_loss")], "thread(s) running after its tests"),
    "attention": (["torch.allclose = lambda *a, **k: True", *ma.reference_body("attention")],
                  "changed torch.allclose"),
    "flops": (["import os, time", "if os.fork() == 0:", "    time.sleep(60)", "    os._exit(0)",
               *ma.reference_body("flops")], "process(es) running after its tests"),
}


def left_running(root):
    """The processes whose environment names the fake /autograder `root`: what a grading there
    left behind."""
    found = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if f"AUTOGRADER_ROOT={root}".encode() in (d / "environ").read_bytes().split(b"\0"):
                found.append(int(d.name))
        except OSError:
            pass
    return found


def test_broken_submissions_get_one_line_each_and_the_rest_is_graded(built, tmp_path):
    sub = submission(tmp_path, {part: body for part, (body, _) in BROKEN.items() if body},
                     "submission/my-folder")          # a zipped folder, one level down
    text = (sub / "objectives.py").read_text()
    x_line = text.splitlines().index("    x = (") + 1           # the syntax error, from 1
    text = text.replace("    # BEGIN ASSIGNMENT corrupt\n", "")
    text = text.replace("def sample(logits", "def sample_tokens(logits")
    (sub / "objectives.py").write_text(text)
    limits = {p: course.TIME_LIMIT_S for p in ALL}
    limits["disc_loss"] = 3                              # the endless loop's part, short
    r = run(built, tmp_path, tmp_path / "submission", time_limit_s=limits)
    entries = check_results(r)
    for (part, kind), t in entries.items():
        if part in BROKEN:
            assert t["score"] == 0, (part, kind, t["output"])
            assert BROKEN[part][1] in t["output"] and t["output"].count("\n") == 0, t["output"]
        else:
            assert t["score"] == t["max_score"], (part, kind, t["output"])
    assert f"objectives.py, line {x_line}: SyntaxError" in entries["mask", "public"]["output"]
    # an exception raised in a body says where: the line within the body, as the student wrote it
    assert entries["mlm_loss", "public"]["output"].endswith(
        "(objectives.py, line 1 of the mlm_loss body)"), entries["mlm_loss", "public"]["output"]
    assert "stopped after 3 s" in entries["disc_loss", "hidden"]["output"]
    assert left_running(tmp_path / "autograder") == []        # the fork was stopped


def test_a_grader_that_cannot_start_still_leaves_results(built, tmp_path):
    root = tmp_path / "autograder"
    (root / "source").mkdir(parents=True)
    autograder.unpack(built / "autograder.zip", root / "source")
    (root / "submission").mkdir()
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON="/bin/false")
    subprocess.run([str(root / "source" / "run_autograder")], env=env, capture_output=True,
                   timeout=HANG, check=True)
    r = json.loads((root / "results" / "results.json").read_text())
    assert r["score"] == 0 and r["tests"] == [] and "could not start" in r["output"]
    # the grader itself failing (here: its points file broken) also ends in a results.json
    (root / "source" / "project" / "tests" / "grading.json").write_text("{broken")
    (root / "results" / "results.json").unlink()
    env["AUTOGRADER_PYTHON"] = sys.executable
    subprocess.run([str(root / "source" / "run_autograder")], env=env, capture_output=True,
                   timeout=HANG, check=True)
    r = json.loads((root / "results" / "results.json").read_text())
    assert r["score"] == 0 and "the grader failed (JSONDecodeError" in r["output"]


def test_a_torch_that_cannot_load_is_named_in_every_part(built, tmp_path):
    """An image whose torch does not import (as the CUDA build under a 768 MB limit): every
    entry says what the import raised, not pytest's count of errors."""
    if grader_python() is None:
        pytest.skip(_PYTHON["why"])
    here = Path(tempfile.mkdtemp(prefix="electra-torch-"))     # where its user can start it
    here.chmod(0o755)
    site = here / "site"
    site.mkdir()
    (site / "torch.py").write_text('raise ImportError("libtorch_cpu.so: failed to map segment")\n')
    python = here / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={site} exec {grader_python()} "$@"\n')
    python.chmod(0o755)
    try:
        r = autograder.run_fake(built / "autograder.zip", ROOT, tmp_path / "autograder",
                                python=python, timeout=HANG)
    finally:
        shutil.rmtree(here)
    entries = check_results(r)
    assert sorted(entries) == sorted((p, k) for p in ALL for k in ("public", "hidden"))
    for t in entries.values():
        assert t["score"] == 0 and "ImportError: libtorch_cpu.so: failed to map segment" in \
            t["output"] and t["output"].count("\n") == 0, t["output"]


def test_a_run_past_its_time_budget_still_writes_every_part(built, tmp_path):
    """The whole run stops within tests/grading.json's budget_s (under Gradescope's limit), and
    every part not graded by then says so (here a budget too short to start the tests)."""
    entries = check_results(run(built, tmp_path, ROOT, budget_s=0.5))
    assert sorted(entries) == sorted((p, k) for p in ALL for k in ("public", "hidden"))
    for t in entries.values():
        assert t["score"] == 0 and "time ran out" in t["output"], t["output"]


def test_a_student_copy_prints_the_public_score_table(tmp_path):
    out = tmp_path / "hw2"
    assert ma.main(["--out", str(out), "--parts", "sample,flops", "--points", "sample=10"]) == 0
    assert json.loads((out / "tests" / "grading.json").read_text())["points"] == \
        {"sample": 10, "flops": course.POINTS["flops"]}
    assert "- **Points**: 10 (5 for the public tests, 5 for the hidden tests)" in \
        (out / "ASSIGNMENTS.md").read_text()
    fill(out, "flops", ma.reference_body("flops"))
    fill(out, "sample", ["return logits.detach().argmax(-1)"])      # a wrong answer
    runs = [subprocess.run([sys.executable, "teaching/grade.py"], cwd=out, capture_output=True,
                           text=True, timeout=HANG) for _ in range(2)]
    assert runs[0].returncode == 0, runs[0].stderr
    lines = runs[0].stdout.splitlines()
    assert any(l.startswith(" 2 sample (public)") and "of 5" in l and "of 5.00" in l
               for l in lines), lines
    assert any(l.startswith("11 flops (public)") and "2 of 2" in l and "4.00 of 4.00" in l
               for l in lines), lines
    assert "sample (public): " in runs[0].stdout and "is a sample not the argmax" in runs[0].stdout
    assert "worth 9.00 more points on Gradescope" in runs[0].stdout     # 5 + 4
    # the same numbers on every run (the times aside)
    strip = [[l[:-8] for l in r.stdout.splitlines()] for r in runs]
    assert strip[0] == strip[1]


def test_in_a_student_copy_a_part_that_does_not_parse_stops_only_itself(tmp_path):
    """Run in a student copy, the grader's own files are the student's: a syntax error in one
    part's body must not stop another part of the same file (the autograder grades it)."""
    out = tmp_path / "hw3"
    assert ma.main(["--out", str(out), "--parts", "mask,sample"]) == 0
    fill(out, "sample", ma.reference_body("sample"))
    fill(out, "mask", ["x = (", "return x"])                      # does not parse
    run = subprocess.run([sys.executable, "teaching/grade.py"], cwd=out, capture_output=True,
                         text=True, timeout=HANG)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert any(l.startswith(" 2 sample (public)") and "5 of 5" in l and "4.00 of 4.00" in l
               for l in lines), run.stdout
    assert any(l.startswith(" 1 mask (public)") and "none ran" in l and "0.00 of 6.00" in l
               for l in lines), run.stdout
    assert "mask (public): 0 points: objectives.py, line" in run.stdout
    assert "SyntaxError" in run.stdout and "sample (public): " not in run.stdout


@pytest.mark.parametrize("args, message", [
    (["--autograder", "{tmp}/ag.tar"], "name a .zip file"),
    (["--autograder", "{tmp}/nowhere/ag.zip"], "no folder"),
    (["--autograder", "{tmp}/hw/ag.zip"], "inside the student copy"),
    (["--points", "mask=ten"], "must be a number"),
    (["--points", "mask=-1"], "must be a number"),
    (["--points", "flops=3"], "not one of the chosen parts"),
    (["--points", "mask=5,mask=6"], "mask given twice"),
    (["--points", "mask=0"], "every chosen part is worth 0 points"),
    (["--points", "mask=3.333"], "at most 2 decimals"),
    (["--parts", ","], "no part named"),
    (["--parts", "mask,sample,mask"], "mask named twice"),
])
def test_bad_arguments_are_one_line_and_write_nothing(tmp_path, capsys, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    assert ma.main(["--out", str(tmp_path / "hw"), "--parts", "mask", *args]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not any(tmp_path.iterdir())


def test_hidden_results_shown_when_the_instructor_chooses(tmp_path, capsys):
    """--shown after_published: the hidden entries' visibility in results.json, and what the
    handout's ASSIGNMENTS.md and results.json's text tell students; a value Gradescope does not
    know is one line."""
    d = tmp_path / "course"
    d.mkdir()
    assert ma.main(["--out", str(d / "hw"), "--parts", "mask,sample", "--shown",
                    "after_published", "--autograder", str(d / "ag.zip")]) == 0
    assert "shown when the grades are published" in (d / "hw" / "ASSIGNMENTS.md").read_text()
    assert "replaced" not in capsys.readouterr().out
    assert ma.main(["--out", str(d / "hw-b"), "--parts", "mask,sample", "--shown",
                    "after_published", "--autograder", str(d / "ag.zip")]) == 0
    assert "note: " + str(d / "ag.zip") + " existed and is replaced" in capsys.readouterr().out
    if grader_python() is None:
        pytest.skip(_PYTHON["why"])
    r = autograder.run_fake(d / "ag.zip", ROOT, tmp_path / "autograder",
                            python=grader_python(), timeout=HANG)
    hidden = [t for t in r["tests"] if t["extra_data"]["kind"] == "hidden"]
    assert len(hidden) == 2 and {t["visibility"] for t in hidden} == {"after_published"}
    assert r["score"] == 20 and "when the grades are published" in r["output"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        ma.main(["--out", str(tmp_path / "hw2"), "--shown", "later"])
    err = capsys.readouterr().err
    assert e.value.code != 0 and err.count("\n") == 1 and "--shown" in err, err
    assert not (tmp_path / "hw2").exists()


def test_check_refuses_what_is_not_a_zip(tmp_path, capsys):
    (tmp_path / "x.zip").write_text("not a zip")
    assert grade.main(["--check", str(tmp_path / "x.zip")]) == 1
    err = capsys.readouterr().err
    assert "not a zip file" in err and err.count("\n") == 1
    assert grade.main(["--check", str(tmp_path / "nothere.zip")]) == 1
    err = capsys.readouterr().err
    assert "nothere.zip: no such file" in err and err.count("\n") == 1


def test_check_refuses_a_zip_that_is_no_autograder_or_was_built_for_another_handout(
        built, tmp_path, capsys):
    """A student's zip of files, an autograder.zip without its points, or the zip of another
    handout checked against this one: one line each, exit 1, nothing graded."""
    with zipfile.ZipFile(tmp_path / "files.zip", "w") as zf:
        zf.writestr("objectives.py", "x = 1\n")
    with zipfile.ZipFile(built / "autograder.zip") as src, \
            zipfile.ZipFile(tmp_path / "old.zip", "w") as zf:
        for info in src.infolist():
            if not info.filename.endswith("grading.json"):
                zf.writestr(info, src.read(info))
    assert ma.main(["--out", str(tmp_path / "hw2"), "--parts", "sample,flops",
                    "--autograder", str(tmp_path / "hw2.zip")]) == 0
    capsys.readouterr()
    for args, message in [(["files.zip"], "not an autograder.zip (it has no setup.sh"),
                          (["old.zip"], "it has no project/tests/grading.json"),
                          (["hw2.zip", "--submission", str(built / "hw")],
                           "grades sample, flops, but")]:
        assert grade.main(["--check", str(tmp_path / args[0]), *args[1:]]) == 1
        out, err = capsys.readouterr()
        assert message in err and err.count("\n") == 1 and not out, (err, out)
    assert ma.main(["--out", str(tmp_path / "hw3"), "--parts", "sample,flops",
                    "--points", "sample=3"]) == 0        # the same parts, other points: a note
    capsys.readouterr()
    assert grade.handout_config(tmp_path / "hw3")["points"] == {"sample": 3, "flops": 8}
    assert grade.handout_config(tmp_path) is None and grade.handout_config(ROOT) is None
    assert autograder.zip_config(tmp_path / "hw2.zip")["points"] == {"sample": 8, "flops": 8}


def test_a_bare_assert_that_fails_says_what_it_checked(tmp_path):
    """pytest's first line for `assert torch.allclose(...)` without a message is `assert False`:
    the entry shows the assert statement instead."""
    (tmp_path / "test_x.py").write_text(
        "def test_x(got, want):\n    assert torch.allclose(got,\n                          want)\n")
    crash = SimpleNamespace(message="assert False\n +  where False = <built-in method allclose>",
                            path=str(tmp_path / "test_x.py"), lineno=2)
    report = SimpleNamespace(longrepr=SimpleNamespace(reprcrash=crash))
    assert plugin._message(report) == "failed: assert torch.allclose(got, want)"
    crash.message = "AssertionError: rows differ\nassert False"     # a message of its own
    assert plugin._message(report) == "AssertionError: rows differ"
    crash.message, crash.lineno = "assert False", 1                 # no assert on that line
    assert plugin._message(report) == "assert False"
    crash.message = ("RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. "
                     "DefaultCPUAllocator: can't allocate memory: you tried to allocate "
                     "2000000000 bytes. Error code 12 (Cannot allocate memory)")
    assert plugin._message(report) == ("out of memory: a tensor of 2,000 MB more did not fit "
                                       "(the grader has 768 MB in all)")
    # raised in a part's body: where, kept when a long message is cut
    report.raised_in_body = "encoder.py, line 2 of the attention body"
    crash.message = "NameError: name 'math' is not defined"
    assert plugin._message(report) == ("NameError: name 'math' is not defined (encoder.py, "
                                       "line 2 of the attention body)")
    crash.message = "RuntimeError: " + "x" * 400
    line = plugin._message(report)
    assert len(line) == plugin.MESSAGE_CHARS and line.endswith(
        "xx... (encoder.py, line 2 of the attention body)"), line


def test_what_a_test_printed_is_not_kept_for_the_parts_after_it(tmp_path):
    """pytest keeps each test's captured output with its item and its report for the whole run:
    a part whose tests each printed up to MAX_OUTPUT held it all, and the parts after it ran
    out of memory under Gradescope's 768 MB. The plugin drops it once the test is done."""
    (tmp_path / "test_x.py").write_text(
        "def test_prints():\n"
        "    print('x' * 2_000_000)\n"
        "    assert False, 'printed'\n\n\n"
        "def test_nothing_kept(request):\n"
        "    first = request.session.items[0]\n"
        "    assert first.name == 'test_prints' and not first._report_sections\n"
        "    reports = request.config.pluginmanager.get_plugin('terminalreporter').stats\n"
        "    assert reports['failed'] and not any(r.sections for r in reports['failed'])\n")
    log = tmp_path / "log.jsonl"
    env = dict(os.environ, **{runner.LOG_ENV: str(log)}, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                    "teaching.plugin", "--tb=no", "--rootdir", str(tmp_path), "test_x.py"],
                   cwd=tmp_path, env=env, capture_output=True, timeout=HANG)
    done = {r["done"]: r for r in map(json.loads, log.read_text().splitlines()) if "done" in r}
    assert not done["test_x.py::test_prints"]["passed"]
    assert done["test_x.py::test_nothing_kept"]["passed"], done["test_x.py::test_nothing_kept"]


# Run as root, as on Gradescope, the grader runs the submitted code's workers as an ordinary user.
as_root = pytest.mark.skipif(os.geteuid() != 0 or not runner.Unprivileged(),
                             reason="the grader changes user only when it runs as root")


@as_root
def test_as_root_the_workers_run_as_a_user_who_reads_their_copy_and_writes_only_home():
    """The layout grade.py makes: the workers' copy (code) readable, the tests' copy (tree, the
    hidden tests in it) the grader's alone, the results root's."""
    user = runner.Unprivileged()
    work = Path(tempfile.mkdtemp(prefix="electra-grade-test-"))   # as the grader's, in /tmp
    results = work / "results"                                   # root's, as on Gradescope
    (work / "code").mkdir()
    (work / "tree" / "tests" / "hidden").mkdir(parents=True)
    results.mkdir(mode=0o755)
    (work / "code" / "x.py").write_text("x = 1\n")
    (work / "tree" / "tests" / "hidden" / "test_hidden.py").write_text("secret\n")
    home = user.prepare(work, work / "code")
    (work / "tree").chmod(0o700)
    script = ("id -u; cat x.py; cat ../tree/tests/hidden/test_hidden.py || echo hidden refused; "
              "echo x >> x.py || echo code refused; "
              f"echo x > {results}/results.json || echo results refused; "
              f"kill -0 {os.getpid()} || echo grader refused; echo x > $HOME/h && echo home")
    out = subprocess.run(["/bin/sh", "-c", script], cwd=work / "code", capture_output=True,
                         text=True, env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
                         preexec_fn=runner.child_setup(user), timeout=HANG).stdout.split()
    assert out == [str(user.uid), "x", "=", "1", "hidden", "refused", "code", "refused",
                   "results", "refused", "grader", "refused", "home"]
    assert (work / "code" / "x.py").read_text() == "x = 1\n"
    shutil.rmtree(work)


@as_root
def test_a_submission_run_as_root_cannot_touch_the_results_or_the_graders_files(built, tmp_path):
    """The whole autograder, as root: the mask part's body tries to write results.json and the
    grader's points file, then does its work. Both writes fail; the part is graded as usual.
    Needs a Python the ordinary user can run (setup.sh's /opt/electra-grader is; one under
    /root is not: grader_python makes one)."""
    sub = submission(tmp_path)
    attack = ["import os as _os", "_root = _os.environ['AUTOGRADER_ROOT']",
              "for _p in ('results/results.json', 'source/project/tests/grading.json'):",
              "    try:",
              "        open(_os.path.join(_root, _p), 'w').write('{\"score\": 999}')",
              "    except OSError:",
              "        pass"]
    fill(sub, "mask", attack + ma.reference_body("mask"))
    root = tmp_path / "autograder"
    r = run(built, tmp_path, sub)
    entries = check_results(r)
    assert r["score"] == 100, r["score"]
    assert entries["mask", "public"]["score"] == entries["mask", "public"]["max_score"]
    assert json.loads((root / "source/project/tests/grading.json").read_text())["parts"]


# Hostile bodies, one part each: each does its attack, then raises as a blank body does (or, for
# corrupt, returns x unchanged), so that its honest work earns 0. The tests run in a process that never runs the submitted code (its
# worker does), so none may earn a point; the three parts left as the reference keep theirs.
ATTACKS = {
    # pytest's reports and hooks rewritten, as a student who knows pytest would
    "mask": ["import gc, sys",
             "for _o in gc.get_objects():",
             "    if type(_o).__name__ in ('TestReport', 'CallInfo'):",
             "        _o.outcome, _o.excinfo = 'passed', None",
             "try:",
             "    import _pytest.runner as _r",
             "    _r.call_and_report = lambda item, when, log=True, **k: None",
             "    _r.check_interactive_exception = lambda *a: False",
             "except Exception:",
             "    pass",
             "raise NotImplementedError"],
    # torch's comparison functions patched to say yes
    "sample": ["torch.allclose = lambda *a, **k: True",
               "torch.equal = lambda *a, **k: True",
               "torch.Tensor.__eq__ = lambda *a, **k: True",
               "raise NotImplementedError"],
    # the hidden tests' file read, wherever it may be; then the test's x_hat set in place to
    # the original tokens and nothing computed (the test keeps its own x_hat: 0, one line)
    "corrupt": ["import glob, os",
                "_root = os.environ.get('AUTOGRADER_ROOT', '/autograder')",
                "for _p in glob.glob('/tmp/electra-grade-*/tree/tests/hidden/*.py') + "
                "glob.glob(_root + '/source/project/tests/hidden/*.py'):",
                "    try:",
                "        print(open(_p).read()[:100])",
                "    except OSError:",
                "        pass",
                "x_hat.copy_(x.gather(1, masked.positions))",
                "return x.clone(), torch.zeros_like(x, dtype=torch.bool)"],
    # the garbage collector walked for the tests' objects and expected values
    "mlm_loss": ["import gc",
                 "_found = [o for o in gc.get_objects() if isinstance(o, dict) and "
                 "('expect' in o or 'want' in o)]",
                 "raise NotImplementedError"],
    # results.json written with full marks
    "disc_loss": ["import os",
                  "_root = os.environ.get('AUTOGRADER_ROOT', '/autograder')",
                  "try:",
                  "    open(_root + '/results/results.json', 'w').write('{\"score\": 100, "
                  "\"tests\": []}')",
                  "except OSError:",
                  "    pass",
                  "raise NotImplementedError"],
    # the grader's tests' process killed (found by its command line)
    "flops": ["import os, signal",
                   "for _pid in os.listdir('/proc'):",
                   "    try:",
                   "        _cmd = open(f'/proc/{_pid}/cmdline', 'rb').read()",
                   "        if b'teaching.plugin' in _cmd:",
                   "            os.kill(int(_pid), signal.SIGKILL)",
                   "    except (OSError, ValueError):",
                   "        pass",
                   "raise NotImplementedError"],
    # os._exit with a success code
    "attention": ["import os", "os._exit(0)"],
    # a flood of output
    "adam": ["import os, sys",
             "for _ in range(40):",
             "    try:",
             "        os.write(1, b'x' * 2 ** 20)",
             "        sys.stderr.write('y' * 2 ** 20)",
             "    except OSError:",
             "        pass",
             "raise NotImplementedError"],
}


# A worker that lies about gradients: L_Disc detached from `loss` (a planted wrong answer), and
# the worker's backward replaced by one that answers made-up gradients (ones). The values are
# right, so the value tests pass; no gradient test may.
LYING_GRADIENTS = [
    "import sys as _sys",
    "def _lie(self, msg):",
    "    return {'grads': [torch.ones_like(t) for t in self.graphs[msg['call']][1]]}",
    "_sys.modules['__main__'].Worker.backward = _lie",
    *[line.replace("self.disc_weight * loss_disc", "self.disc_weight * loss_disc.detach()")
      for line in ma.reference_body("joint_loss")]]


def test_hostile_bodies_earn_only_what_their_honest_work_earns(built, tmp_path):
    """One submission, eight attacks in eight parts, a worker lying about gradients in a ninth,
    the reference in the other two: the attacked parts get 0 in their public and hidden tests,
    the liar only its value tests, the others full marks, and the score is theirs alone
    (results.json written by the grader after the attack that wrote it)."""
    sub = submission(tmp_path, {**ATTACKS, "joint_loss": LYING_GRADIENTS})
    r = run(built, tmp_path, sub)
    entries = check_results(r)
    for (part, kind), t in entries.items():
        if part in ATTACKS:
            assert t["score"] == 0 and t["output"].count("\n") == 0, (part, kind, t["output"])
        elif part != "joint_loss":
            assert t["score"] == t["max_score"], (part, kind, t["output"])
    liar = entries["joint_loss", "public"]
    assert liar["extra_data"]["passed"] == 3 and liar["extra_data"]["tests"] == 5, liar["output"]
    assert "- the loss trains both networks:" in liar["output"] and \
        "- no gradient from l disc into the generator:" in liar["output"], liar["output"]
    assert entries["joint_loss", "hidden"]["score"] == 0, entries["joint_loss", "hidden"]["output"]
    assert r["score"] == pytest.approx(liar["score"] + sum(
        course.POINTS[p] for p in ALL if p not in ATTACKS and p != "joint_loss"))
    assert "not written yet" in entries["mask", "public"]["output"]
    assert "exit status 0" in entries["attention", "public"]["output"]
    assert "InPlaceChange: corrupt changed its argument x_hat in place" in \
        entries["corrupt", "public"]["output"]
    assert left_running(tmp_path / "autograder") == []


def test_likeness_to_the_reference_ignores_names_and_formatting():
    """A reference body with its variables renamed, its comments gone and its lines rewrapped is
    still 100 % alike; another correct answer is not a near-copy; a blank body is nothing."""
    from answers_correct import ALTERNATIVES, body_of
    from teaching import similar
    ref = ma.reference_body("attention")
    text = "\n".join(l for l in ref if not l.strip().startswith("#"))
    for old, new in (("q, k, v", "query, key, value"), ("a = ", "attended = "),
                     ("(a.", "(attended."), ("B, T, H", "batch, length, width"),
                     ("(B, T, H)", "(batch, length, width)"), ("(B, T, 3", "(batch, length, 3"),
                     ("H // self", "width // self")):
        text = text.replace(old, new)
    renamed = text.replace("attn_mask=attn_mask,\n", "attn_mask=attn_mask,").splitlines()
    assert renamed != ref
    want = similar.tokens(ref)
    assert similar.similarity(similar.tokens(renamed), want) == 1.0
    assert similar.similarity(similar.tokens(body_of(ALTERNATIVES[0]["attention"])), want) < \
        similar.NEAR_COPY
    assert similar.similarity(similar.tokens(ma.stub("attention")), want) < 0.1


# ---------------------------------------------------------------------------- secrets and root
# What the grader keeps from the submitted code (teaching/grade.py lock_secrets, run_autograder,
# runner.Unprivileged, remote.finish): the attacks below found a way through each before.

def test_the_final_results_json_cannot_be_blocked_or_replaced(tmp_path):
    """A folder at results.json.tmp (the old fixed temporary name) and one at results.json
    itself: the grader's write still leaves its own results.json, a file, whole."""
    results = tmp_path / "results"
    (results / "results.json.tmp").mkdir(parents=True)
    (results / "results.json").mkdir()
    (results / "results.json" / "x").write_text("forged")
    grade.write_json(results / "results.json", {"score": 7})
    assert json.loads((results / "results.json").read_text()) == {"score": 7}
    grade.write_json(results / "results.json", {"score": 8})                   # and again
    assert json.loads((results / "results.json").read_text()) == {"score": 8}
    assert sorted(p.name for p in results.iterdir()) == ["results.json", "results.json.tmp"]


def test_lines_written_into_run_autograder_while_it_runs_never_run(tmp_path):
    """bash reads a script as it goes: a grader (here a stand-in Python) that appends lines to
    run_autograder while it runs would have them run after it, as root. The script is one
    function, read whole first."""
    root = tmp_path / "autograder"
    (root / "source" / "project" / "teaching").mkdir(parents=True)
    script = root / "source" / "run_autograder"
    script.write_text(autograder.RUN_AUTOGRADER)
    script.chmod(0o755)
    marker = tmp_path / "injected"
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n"
                      f"printf '\\necho injected > {marker}\\n' >> {script}\n"
                      f"echo '{{\"score\": 1, \"tests\": []}}' > {root}/results/results.json\n")
    python.chmod(0o755)
    env = dict(os.environ, AUTOGRADER_ROOT=str(root), AUTOGRADER_PYTHON=str(python))
    subprocess.run([str(script)], env=env, capture_output=True, timeout=HANG, check=True)
    assert f"echo injected > {marker}" in script.read_text()        # the lines were written
    assert not marker.exists()                                      # and never ran
    assert json.loads((root / "results" / "results.json").read_text())["score"] == 1
    assert not os.stat(root / "source").st_mode & 0o077       # the source: root's (its owner's)


def real_root():
    """A fresh autograder root laid out as Gradescope's /autograder: in /tmp, mode 755, so
    that the workers' user can reach everything a real one would let it reach."""
    root = Path(tempfile.mkdtemp(prefix="autograder-", dir="/tmp"))
    root.chmod(0o755)
    return root / "autograder", root


@as_root
def test_as_root_no_submitted_line_runs_when_its_user_cannot_start_the_python(built, tmp_path):
    """A grader Python the student user cannot start (one under a folder only root enters): no
    part is graded, each says what to fix in one line, and the submission - which would write
    a marker, rewrite run_autograder and block results.json - never ran."""
    private = tmp_path / "private"                      # tmp_path: root's alone (mode 700)
    private.mkdir(mode=0o700)
    python = make_venv(private / "venv")               # as a Python under /root
    if python is None:
        pytest.skip(f"no system python{sys.version_info[0]}.{sys.version_info[1]} to make a "
                    f"grader's Python with")
    assert not runner.Unprivileged().can_run(python)
    root, top = real_root()
    marker = Path(top) / "ran-as"
    sub = submission(tmp_path)
    fill(sub, "mask", ["import os",
                       "_r = os.environ.get('AUTOGRADER_ROOT', '/autograder')",
                       f"open({str(marker)!r}, 'w').write(str(os.getuid()))",
                       "open(_r + '/source/run_autograder', 'a').write('\\necho hacked\\n')",
                       "os.mkdir(_r + '/results/results.json.tmp')",
                       *ma.reference_body("mask")])
    try:
        r = autograder.run_fake(built / "autograder.zip", sub, root, python=python, timeout=HANG)
        entries = check_results(r)
        assert not marker.exists(), marker.read_text()
        assert "hacked" not in (root / "source" / "run_autograder").read_text()
        assert r["score"] == 0 and len(entries) == 2 * len(ALL)
        for t in entries.values():
            assert t["output"].count("\n") == 0 and "must not run as root" in t["output"] and \
                "cannot start the grader's Python" in t["output"], t["output"]
    finally:
        shutil.rmtree(top)


# The attacks of a student who wants marks without the work, run by the workers' user in a root
# laid out as /autograder. Each gains only when its attack works (else it does what its honest
# work earns), so each part's score says whether it got through.
PROBE_FILE = "electra-probe"


def _gated(attack, gain):
    """A body that runs `attack` (lines setting _won) and then `gain` if it won, else raises
    as a blank body does."""
    return ["_won = False", *attack, "if not _won:", "    raise NotImplementedError",
            *gain]


# markers of the secrets, built so that these lines do not hold them (the probe reads the
# submission too): the hidden tests, the reference bodies' tokens, the instructor's notes
_MARKERS = ["_marks = ['def test_' + 'mask__', 'VOCAB = 30' + '522', '{\"mask\"' + ': [',",
            "          '# Instructor' + \"'s notes\", 'test_hidden.py' + '::test_']"]

PROBE = [
    # every path under the autograder's root and the grader's folders in /tmp, the secret
    # files by name too, every inherited descriptor, the environment and every process's
    # environment and command line (which would name the hidden tests)
    "import builtins, glob, os",
    "if not hasattr(builtins, '_probe'):",
    *["    " + l for l in _MARKERS],
    "    _root = os.environ.get('AUTOGRADER_ROOT', '/autograder')",
    "    _paths = [_root + '/source/project/tests/hidden/test_hidden.py',",
    "              _root + '/source/project/tests/hidden/reference.json']",
    "    for _top in [_root] + glob.glob('/tmp/electra-grade-*'):",
    "        for _d, _ds, _fs in os.walk(_top):",
    "            _paths += [os.path.join(_d, _f) for _f in _fs]",
    "            _paths += [os.path.join(_d, _x, 'tests/hidden/test_hidden.py') for _x in _ds]",
    "    _paths += ['/proc/self/fd/' + _f for _f in os.listdir('/proc/self/fd')]",
    "    _paths += [f'/proc/{_p}/{_w}' for _p in os.listdir('/proc') if _p.isdigit()",
    "               for _w in ('environ', 'cmdline')]",
    "    _found, _tried = [], 0",
    "    for _p in _paths:",
    "        _tried += 1",
    "        try:",
    "            with open(_p, 'rb') as _f:",
    "                _text = _f.read(4 << 20).decode('utf-8', 'replace')",
    "        except OSError:",
    "            continue",
    "        if any(_m in _text for _m in _marks):",
    "            _found.append(_p)",
    "    _env = ' '.join(f'{k}={v}' for k, v in os.environ.items())",
    "    _found += ['environment' for _m in _marks if _m in _env][:1]",
    "    builtins._probe = (f'PROBE uid {os.getuid()} tried {_tried} hidden-tried "
    "{sum(\"test_hidden\" in _p for _p in _paths)} found {_found[:3]}')",
    "raise RuntimeError(builtins._probe)"]

BATTERY = {
    # a probe reading every path it can reach: it finds no secret (and earns nothing: it raises)
    "mask": PROBE,
    # the reference rebuilt from the grader's own files: it runs only if it could read them
    "adam": _gated(["import glob, os",
                    "_r = os.environ.get('AUTOGRADER_ROOT', '/autograder')",
                    "for _p in [_r + '/source/project/tests/hidden/reference.json'] + "
                    "glob.glob('/tmp/electra-grade-*/tree/tests/hidden/*'):",
                    "    try:",
                    "        _won = bool(open(_p).read())",
                    "    except OSError:",
                    "        pass"], ma.reference_body("adam")),
    # the hidden tests raised as the error message students see at once
    "sample": ["import glob, os",
               "_r = os.environ.get('AUTOGRADER_ROOT', '/autograder')",
               "for _p in [_r + '/source/project/tests/hidden/test_hidden.py'] + "
               "glob.glob('/tmp/electra-grade-*/tree/tests/hidden/test_hidden.py'):",
               "    try:",
               "        raise ValueError(open(_p).read()[:3000])",
               "    except OSError:",
               "        pass",
               "raise NotImplementedError"],
    # the test's x_hat changed in place to the original tokens, nothing computed
    "corrupt": ["x_hat.copy_(x.gather(1, masked.positions))",
                "return x.clone(), torch.zeros_like(x, dtype=torch.bool)"],
    # run_autograder rewritten while bash reads it: a line after the grader's forges results.json
    "disc_loss": _gated(["import os",
                         "_r = os.environ.get('AUTOGRADER_ROOT', '/autograder')",
                         "try:",
                         "    with open(_r + '/source/run_autograder', 'r+') as _f:",
                         "        _t = _f.read().replace('status=$?', 'echo \\'{\"score\": 100, "
                         "\"tests\": [], \"output\": \"forged\"}\\' > \"$ROOT/results/results.json\"; "
                         "status=$?', 1)",
                         "        _f.seek(0)",
                         "        _f.write(_t)",
                         "    _won = True",
                         "except OSError:",
                         "    pass"], ma.reference_body("disc_loss")),
    # results.json forged, and the grader's final write blocked by a folder at its old
    # temporary name
    "mlm_loss": _gated(["import os",
                        "_r = os.environ.get('AUTOGRADER_ROOT', '/autograder')",
                        "try:",
                        "    os.mkdir(_r + '/results/results.json.tmp')",
                        "    open(_r + '/results/results.json', 'w').write('{\"score\": 100}')",
                        "    _won = True",
                        "except OSError:",
                        "    pass"], ma.reference_body("mlm_loss")),
    # a correct body that starts 40 processes and replaces its worker's end-of-part report
    "joint_loss": ["import builtins, os, sys, time",
                   "sys.modules['__main__'].Worker.finish = lambda self, msg: {'why': None}",
                   "if not hasattr(builtins, '_forked'):",
                   "    builtins._forked = True",
                   "    for _ in range(40):",
                   "        if os.fork() == 0:",
                   "            time.sleep(120)",
                   "            os._exit(0)",
                   *ma.reference_body("joint_loss")],
    # code that detects it is being graded, then reaches for the tests' process (root's):
    # its environment, its memory, its folder, a signal
    "attention": _gated(["import os, pwd, signal",
                         "if 'AUTOGRADER_ROOT' in os.environ or os.getuid() != 0:",
                         "    for _p in [p for p in os.listdir('/proc') if p.isdigit()]:",
                         "        try:",
                         "            if os.stat(f'/proc/{_p}').st_uid != 0:",
                         "                continue",
                         "        except OSError:",
                         "            continue",
                         "        for _try in (lambda: open(f'/proc/{_p}/environ').read(),",
                         "                     lambda: open(f'/proc/{_p}/mem', 'rb').read(1),",
                         "                     lambda: os.listdir(f'/proc/{_p}/cwd'),",
                         "                     lambda: os.kill(int(_p), signal.SIGCONT)):",
                         "            try:",
                         "                _try()",
                         "                _won = True",
                         "            except (OSError, ValueError):",
                         "                pass"], ma.reference_body("attention")),
    # a file left outside its home, for later parts or later runs to find
    "layer_decay": ["import os",
                    "for _d in ('/tmp', '/dev/shm', '/var/tmp'):",
                    "    try:",
                    f"        open(os.path.join(_d, '{PROBE_FILE}-left'), 'w').write('x')",
                    "    except OSError:",
                    "        pass",
                    *ma.reference_body("layer_decay")],
    # root regained: setuid, sudo, su, a write to /etc
    "electra15": _gated(["import os, subprocess",
                         "for _try in (lambda: os.setuid(0), lambda: os.setgid(0),",
                         "             lambda: open('/etc/electra-probe', 'w'),",
                         "             lambda: subprocess.run(['sudo', '-n', 'true'], check=True,"
                         " timeout=20, capture_output=True),",
                         "             lambda: subprocess.run(['su', '-c', 'true'], check=True,"
                         " timeout=20, capture_output=True, stdin=subprocess.DEVNULL)):",
                         "    try:",
                         "        _try()",
                         "        _won = True",
                         "    except Exception:",
                         "        pass"], ma.reference_body("electra15")),
    # an answer keyed on the public tests' inputs (their sequences, 3 and 128): right there only
    "flops": ["if seq not in (3, 128):",
              "    return 0",
              *ma.reference_body("flops")],
}


@as_root
def test_attacks_on_the_secrets_and_on_root_earn_only_their_honest_work(built, tmp_path):
    """Eleven attacks in one submission, graded in a root laid out as /autograder, the workers
    run by the student's user: the probe opens no secret file; every attack scores 0 but the
    shape-keyed flops, which keeps the public tests it is right on and the one hidden case of
    the same shape; nothing is left running or on disk; results.json and run_autograder are
    the grader's."""
    root, top = real_root()
    sub = submission(tmp_path, BATTERY)
    try:
        r = run(built, tmp_path, sub, root=root)
        entries = check_results(r)
        outputs = "\n".join(t["output"] for t in r["tests"])
        probe = entries["mask", "public"]["output"]
        uid = runner.Unprivileged().uid
        assert f"PROBE uid {uid} tried " in probe and "found [] (" in probe, probe
        tried = int(probe.split(" tried ")[1].split()[0])
        assert tried > 50 and int(probe.split("hidden-tried ")[1].split()[0]) >= 3, probe
        for (part, kind), t in entries.items():
            if part == "flops":
                continue
            assert t["score"] == 0 and t["output"].count("\n") == 0, (part, kind, t["output"])
        assert "def test_" not in outputs and "VOCAB" not in outputs   # no hidden test shown
        assert "InPlaceChange: corrupt changed its argument x_hat in place" in \
            entries["corrupt", "public"]["output"]
        assert "40 process(es)" in entries["joint_loss", "public"]["output"]
        assert "outside its home" in entries["layer_decay", "public"]["output"]
        flops = entries["flops", "public"], entries["flops", "hidden"]
        assert flops[0]["score"] == flops[0]["max_score"], flops[0]["output"]
        assert flops[1]["extra_data"]["passed"] == 1 and flops[1]["extra_data"]["tests"] == 4
        assert r["score"] == pytest.approx(course.POINTS["flops"] * 5 / 8)
        assert "forged" not in (root / "source" / "run_autograder").read_text()
        assert not (root / "results" / "results.json.tmp").exists()
        assert not any(Path(d, f"{PROBE_FILE}-left").exists()
                       for d in ("/tmp", "/dev/shm", "/var/tmp"))
        assert left_running(root) == []
    finally:
        shutil.rmtree(top)
