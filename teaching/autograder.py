"""Teaching: Gradescope's autograder.zip for a student copy, and a fake /autograder to check it.

teaching/make_assignment.py --autograder writes the zip beside the student copy; it holds, as
Gradescope's autograder specification asks:

    setup.sh          at the root: run once when Gradescope builds the image (Ubuntu 22.04 base):
                      Python, a virtual environment, CPU-only PyTorch (from PyTorch's CPU index,
                      or the index $TORCH_INDEX_URL names) and requirements.txt
    run_autograder    at the root: run for every submission; grades /autograder/submission with
                      project/teaching/grade.py into /autograder/results/results.json, and writes
                      a results.json saying so if the grader itself cannot start
    project/          the student copy's code and tests (the grader's own copy of every file that
                      is not an assignment body), tests/grading.json (points, time limits) and
                      the hidden tests, tests/hidden/test_hidden.py

Nothing in it downloads at grading time: setup.sh installs everything when the image is built.
`run_fake` unpacks a zip into a folder laid out as /autograder (source/, submission/,
results/), runs its run_autograder there with AUTOGRADER_ROOT pointing at it, and returns the
results.json; `python teaching/grade.py --check ZIP` prints it as a table. This file imports
nothing of the project, so make_assignment.py and grade.py can both use it."""
import json
import os
import shutil
import stat
import subprocess
import tempfile
import zipfile
from pathlib import Path

VENV = "/opt/electra-grader"          # setup.sh's virtual environment, run_autograder's Python
PROJECT = "project"                   # the grader's copy inside the zip (and /autograder/source)
HIDDEN = "tests/hidden/test_hidden.py"
USER = "electra-student"              # who runs the submitted code (teaching/runner.py USERS[0])


def installed_versions(names=("torch", "numpy", "pytest", "tiktoken", "matplotlib")):
    """The versions installed where the pack is built - where `python teaching/grade.py --check`
    checks it and tests/test_autograder.py runs: a local tag such as torch's "+cpu" dropped."""
    from importlib.metadata import version
    return {n: version(n).split("+")[0] for n in names}


# The versions the pack was checked with: those of the environment that builds it (and checks
# it). setup.sh installs these and no others, so that an image built later grades as the check
# did, whatever newer releases exist by then.
CHECKED = installed_versions()

SETUP_SH = f"""#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder's image (base image:
# Ubuntu 22.04). It installs Python, a virtual environment at {VENV} with
# CPU-only PyTorch (the default wheel brings CUDA libraries a grader never uses) and the
# project's requirements. Nothing is downloaded later, while grading.
# TORCH_INDEX_URL (default: PyTorch's CPU index, as Gradescope needs it) names another index for
# the PyTorch wheel, to build this image where that index cannot be reached; pip's own settings
# (PIP_FIND_LINKS, PIP_CONSTRAINT, ...) apply as usual.
set -euo pipefail
TORCH_INDEX_URL="${{TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}}"
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv python3-pip
python3 -m venv {VENV}
{VENV}/bin/pip install --no-cache-dir --upgrade pip
{VENV}/bin/pip install --no-cache-dir "{{torch}}" \\
    --index-url "$TORCH_INDEX_URL"
# the versions the pack was checked with, then requirements.txt (which they satisfy)
{VENV}/bin/pip install --no-cache-dir {" ".join(f"{k}=={v}" for k, v in CHECKED.items() if k != "torch")}
{VENV}/bin/pip install --no-cache-dir -r /autograder/source/{PROJECT}/requirements.txt
{VENV}/bin/python -c "import numpy, pytest, torch; print('torch', torch.__version__, 'ready')"
# The user the submitted code's worker runs as (teaching/runner.py's Unprivileged): not root,
# so it can neither read the tests nor write the grader or results.json.
id {USER} >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin {USER}
# The grader's own files - the hidden tests, the reference bodies' tokens - root's alone from
# now on (unzip left them readable by everyone); run_autograder locks them again first thing.
chmod -R go-rwx /autograder/source
"""

RUN_AUTOGRADER = f"""#!/usr/bin/env bash
# Gradescope runs this for every submission. It grades /autograder/submission with the grader's
# own copy of the project (/autograder/source/{PROJECT}) and writes
# /autograder/results/results.json. AUTOGRADER_ROOT (default /autograder) and
# AUTOGRADER_PYTHON (default {VENV}/bin/python) let it run anywhere else,
# as `python teaching/grade.py --check` does.
# All of it is one function, read whole before any line runs: bash reads a script as it goes,
# so lines written into this file while it runs would run too.
main() {{
  local ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
  local PYTHON="${{AUTOGRADER_PYTHON:-{VENV}/bin/python}}"
  # the grader's own files (the hidden tests, the reference bodies' tokens): root's alone
  # before anything else runs
  chmod -R go-rwx "$ROOT/source"
  [ -x "$PYTHON" ] || PYTHON=python3
  mkdir -p "$ROOT/results"
  "$PYTHON" "$ROOT/source/{PROJECT}/teaching/grade.py" --gradescope --root "$ROOT"
  local status=$?
  # nothing else after the grader, but for a grader that could not start: then no submitted
  # code ran either, and a results.json says so
  if [ "$status" -ne 0 ]; then
    rm -rf "$ROOT/results/results.json"
    cat > "$ROOT/results/results.json" <<EOF
{{"score": 0, "stdout_visibility": "hidden", "tests": [],
 "output": "The grader could not start (exit status $status): tell your instructor."}}
EOF
  fi
  exit 0
}}
main "$@"
exit 0
"""


def torch_requirement(requirements):
    """The torch setup.sh installs (CPU-only): the version the pack was checked with, which
    requirements.txt's range must allow (ValueError when it does not)."""
    for line in requirements.splitlines():
        spec = line.split("#")[0].strip()
        if spec.startswith("torch") and not _allows(spec[len("torch"):], CHECKED["torch"]):
            raise ValueError(f"requirements.txt asks for {spec}, but the pack was checked with "
                             f"torch {CHECKED['torch']}")
    return f"torch=={CHECKED['torch']}"


def _allows(spec, version):
    """Whether a requirement's version clauses (">=2.2,<=2.14.1") allow `version` (numbers)."""
    import operator
    import re
    ops = {">=": operator.ge, "<=": operator.le, "==": operator.eq, ">": operator.gt,
           "<": operator.lt, "!=": operator.ne}
    key = lambda v: tuple(int(x) for x in re.findall(r"\d+", v)[:3])
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        m = re.match(r"(>=|<=|==|!=|>|<)\s*([\d.]+)$", clause)
        if m and not ops[m.group(1)](key(version), key(m.group(2))):
            return False
    return True


def files_of(copy, folders):
    """The files of a student copy the grader needs: the code, the tests and their points, the
    requirements (relative paths)."""
    out = [f for d in ("",) + tuple(folders) for f in sorted((copy / d).glob("*.py"))]
    out += sorted(f for f in (copy / "tests").rglob("*") if f.is_file()
                  and f.suffix in (".py", ".json") and "__pycache__" not in f.parts)
    out.append(copy / "requirements.txt")
    return [f.relative_to(copy).as_posix() for f in out]


def _add(zf, name, data, executable=False):
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))   # the same bytes every build
    info.external_attr = ((0o755 if executable else 0o644) | stat.S_IFREG) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, data)


def write_zip(copy, path, hidden_tests, folders, extra=None):
    """Write autograder.zip for the student copy in `copy` to `path` (replaced whole, or left
    as it was when writing fails); `extra` {path in the project: bytes} adds the grader's own
    files (the reference bodies' tokens)."""
    copy, path = Path(copy), Path(path)
    requirements = (copy / "requirements.txt").read_text()
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with zipfile.ZipFile(tmp, "w") as zf:
            _add(zf, "setup.sh", SETUP_SH.replace("{torch}", torch_requirement(requirements)),
                 executable=True)
            _add(zf, "run_autograder", RUN_AUTOGRADER, executable=True)
            for rel in files_of(copy, folders):
                _add(zf, f"{PROJECT}/{rel}", (copy / rel).read_bytes())
            _add(zf, f"{PROJECT}/{HIDDEN}", Path(hidden_tests).read_bytes())
            for rel, data in (extra or {}).items():
                _add(zf, f"{PROJECT}/{rel}", data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def zip_config(path):
    """The tests/grading.json of an autograder.zip (parts, points, time limits); ValueError
    saying what is wrong when the zip is not one that write_zip wrote."""
    need = ["setup.sh", "run_autograder", f"{PROJECT}/teaching/grade.py",
            f"{PROJECT}/tests/grading.json"]
    with zipfile.ZipFile(path) as zf:
        missing = [n for n in need if n not in zf.namelist()]
        if missing:
            raise ValueError(f"not an autograder.zip (it has no {', '.join(missing)})")
        try:
            cfg = json.loads(zf.read(f"{PROJECT}/tests/grading.json"))
            if not (cfg["parts"] and set(cfg["parts"]) <= set(cfg["points"])):
                raise KeyError("parts")
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"its {PROJECT}/tests/grading.json is not the one "
                             "teaching/make_assignment.py writes") from None
    return cfg


def unpack(path, source):
    """Unzip as Gradescope does, keeping each file's permissions (run_autograder executable)."""
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            target = Path(zf.extract(info, source))
            mode = info.external_attr >> 16 & 0o777
            if mode:
                target.chmod(mode)


def run_fake(zip_path, submission, root=None, config=None, python=None, timeout=3600):
    """Grade `submission` (a folder, copied as a student's upload) with the autograder in
    zip_path, in a fake /autograder at `root` (a new temporary folder when None): its
    results.json as a dict. `config` updates the zip's tests/grading.json first (tests use it for
    short time limits)."""
    root = Path(root) if root else Path(tempfile.mkdtemp(prefix="autograder-"))
    source = root / "source"
    source.mkdir(parents=True)
    unpack(zip_path, source)
    if config:
        path = source / PROJECT / "tests" / "grading.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}, indent=2))
    shutil.copytree(submission, root / "submission",
                    ignore=shutil.ignore_patterns("__pycache__", ".git", "data", "out*"))
    env = dict(os.environ, AUTOGRADER_ROOT=str(root))
    if python:
        env["AUTOGRADER_PYTHON"] = str(python)
    (root / "results").mkdir()
    with open(root / "results" / "stdout", "wb") as log:      # as Gradescope keeps it
        subprocess.run([str(source / "run_autograder")], cwd=root, env=env, timeout=timeout,
                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    return json.loads((root / "results" / "results.json").read_text())
