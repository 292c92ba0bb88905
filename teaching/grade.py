"""Teaching: the grader of the assignments - the same on Gradescope and on a student's machine.

    python teaching/grade.py                  # in a student copy: the public tests' score table
    python teaching/grade.py --submission DIR # the same for the files in DIR
    python teaching/grade.py --gradescope     # what the autograder's run_autograder runs
    python teaching/grade.py --check hw1-autograder.zip [--submission DIR]   # for instructors

Each part is graded from the code between its `# BEGIN ASSIGNMENT <part>` and `# END ASSIGNMENT
<part>` markers only. The grader copies its own files - the project's code, the tests, the points
(tests/grading.json) - into a fresh folder, puts each part's submitted body into its own copy of
the part's file, and runs the part's tests there: nothing a submission holds outside its bodies
(an edited test, a changed helper) takes part, and the other parts of the file stay the grader's.
The tests of every part run in one pytest process (one start of PyTorch; teaching/runner.py),
and call the submitted bodies in a worker process per part, in a copy of the project without the
tests (teaching/remote.py, teaching/worker.py): only values come back, and every verdict is the
tests' own. A part that loops past its time limit or crashes its worker gets 0 with one line
saying why, and the tests go on with the parts left. Before any test runs, a part gets 0 with one line for: its file missing
from the submission, its markers missing, doubled or moved out of its function (renamed or
deleted), or a syntax error in its body. Inside a part each test is worth the same share; a
failed test shows its assertion's one-line message, never a traceback. Output is capped: a part
that prints more fails with one line.

With --gradescope it reads /autograder/submission (or $AUTOGRADER_ROOT/submission), runs the
hidden tests too (tests/hidden/test_hidden.py, shipped only in the autograder: Gradescope shows
them after the due date) and writes results.json in Gradescope's format: one entry per part for
the public tests and one for the hidden tests, a score, a one-line output each. results.json is
written before the first test runs (every part "not graded") and again at the end, and the whole
run stops within the time budget of tests/grading.json, so Gradescope always finds one. Run as
root (Gradescope's way), the grader locks its own files (the hidden tests, the reference tokens)
to root before any submitted code runs, and runs the workers as an ordinary user - never as
root: with no user who can start its Python it grades nothing and says why in every part. A body that is a near-copy of the reference gets an entry instructors alone see
(teaching/similar.py).

It imports neither torch nor the project's code: the tests do that, in their own process."""
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path

if not __package__:   # run as a path (python teaching/grade.py): import from the project root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machinery import cli
from teaching import autograder, course, similar
from teaching import make_assignment as ma
from teaching import runner
from teaching.runner import HIDDEN, is_hidden, test_name

HERE = Path(__file__).resolve().parents[1]             # the grader's own copy of the project
CONFIG = Path("tests") / "grading.json"
SKIP_DIRS = {"__pycache__", ".git", "__MACOSX", ".ipynb_checkpoints"}
GRADESCOPE_ROOT = "/autograder"


class Refused(Exception):
    """A part that cannot be graded; its message is the one line the student sees."""


# ---------------------------------------------------------------------------- the submission

def find_file(submission, rel):
    """The submitted file for `rel` (e.g. objectives.py): at that path, else the shallowest file
    of that name anywhere in the submission (a student may upload a zipped folder)."""
    exact = submission / rel
    if exact.is_file():
        return exact
    found = [p for p in submission.rglob(Path(rel).name) if p.is_file()
             and not SKIP_DIRS & set(p.relative_to(submission).parts)]
    found.sort(key=lambda p: (not p.as_posix().endswith(rel), len(p.parts), p.as_posix()))
    return found[0] if found else None


def indent_of(line):
    return len(line) - len(line.lstrip())


def enclosing(lines, i):
    """The names of the classes and functions that line i sits in, outermost first."""
    names, level = [], indent_of(lines[i])
    for line in reversed(lines[:i]):
        s = line.strip()
        if not s or s.startswith("#") or indent_of(line) >= level:
            continue
        level = indent_of(line)
        m = re.match(r"(?:async\s+)?(?:def|class)\s+(\w+)", s)
        if m:
            names.insert(0, m.group(1))
        if level == 0:
            break
    return names


def submitted_body(text, part, name):
    """The lines between part's markers in a submitted file, without the markers' indentation,
    and the line number of its BEGIN marker; Refused when they cannot be graded."""
    lines = text.splitlines()
    marks = {"BEGIN": [], "END": []}
    for i, line in enumerate(lines):
        m = ma.MARK.match(line)
        if m and m.group(3) == part:
            marks[m.group(2)].append(i)
    begin, end = marks["BEGIN"], marks["END"]
    tag = f"`# BEGIN ASSIGNMENT {part}` / `# END ASSIGNMENT {part}`"
    if not begin or not end:
        raise Refused(f"{name} has no {tag} markers (deleted?): the grader grades only the "
                      f"code between them; put them back around your code")
    if len(begin) > 1 or len(end) > 1 or end[0] < begin[0]:
        raise Refused(f"{name} has the {tag} markers more than once or out of order: keep "
                      f"one pair, around your code")
    b, e = begin[0], end[0]
    want = BY_NAME_FUNC[part]
    found = enclosing(lines, b)
    if found[-len(want):] != want:
        raise Refused(f"{name}: the markers of part {part} are inside "
                      f"{'.'.join(found) or 'no function'}, not {'.'.join(want)} (renamed or "
                      f"moved?): keep the function's name and signature as handed out")
    indent = ma.MARK.match(lines[b]).group(1)
    body = [l[len(indent):] if l.startswith(indent) else l.strip() for l in lines[b + 1:e]]
    return body, b + 1


BY_NAME_FUNC = {p.name: p.where.split(": ")[1].split(".") for p in course.PARTS}


def handout(source, rel, parts):
    """The grader's file `rel` as handed out: the body of every graded part in it is the stub,
    whatever the grader's copy holds. (Run in a student copy, the grader's copy is the
    student's own: a part that does not parse there must not stop the others.)"""
    text = (source / rel).read_text()
    for part in parts:
        if course.BY_NAME[part].file == rel and part in ma.regions(text):
            text = ma.replace_body(text, part, ma.stub(part))
    return text


def splice(source, submission, parts):
    """{file: text} of the grader's files of the graded parts, handed out, with each good
    part's submitted body in place, and {part: reason} for the parts refused before any test
    runs."""
    refused, texts = {}, {}
    for part in parts:
        rel = course.BY_NAME[part].file
        if rel not in texts:                  # once per file: read and blanked as handed out
            texts[rel] = handout(source, rel, parts)
        own = texts[rel]
        try:
            path = find_file(submission, rel)
            if path is None:
                raise Refused(f"no {rel} in the submission: upload it (it holds part {part})")
            try:
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as e:
                raise Refused(f"{rel} cannot be read as UTF-8 text ({e.__class__.__name__}): save "
                              f"it as UTF-8 and upload it again")
            body, first = submitted_body(text, part, rel)
            new = ma.replace_body(own, part, body)
            try:
                compile(new, rel, "exec")
            except SyntaxError as e:             # (IndentationError and TabError are ones)
                start = ma.regions(own)[part][0] + 2          # the body's first line, from 1
                where = (f"line {e.lineno - start + first + 1}"
                         if e.lineno and start <= e.lineno < start + len(body) else
                         f"the code of part {part}")
                raise Refused(f"{rel}, {where}: {e.__class__.__name__}: {e.msg} - Python "
                              f"cannot read it, so no test of this part ran")
        except Refused as r:
            refused[part] = str(r)
            continue
        texts[rel] = new
    return texts, refused


def make_tree(source, dest, texts, tests=True):
    """A fresh copy of the grader's code (and tests) in dest, with the files of `texts`."""
    for d in ("",) + ma.FOLDERS:
        (dest / d).mkdir(parents=True, exist_ok=True)
        for f in sorted((source / d).glob("*.py")):
            shutil.copy(f, dest / d / f.name)
    if not tests:
        for rel, text in texts.items():
            (dest / rel).write_text(text)
        return
    shutil.copytree(source / "tests", dest / "tests",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
    for rel, text in texts.items():
        (dest / rel).write_text(text)
    (dest / "pytest.ini").write_text("[pytest]\n")     # the tree is the rootdir; no other ini


# ---------------------------------------------------------------------------- scores


def entry(part, kind, tests, max_score, reason=None, shown="after_due_date"):
    """One results.json test entry: a part's public or hidden tests."""
    p = course.BY_NAME[part]
    n = course.PARTS.index(p) + 1
    passed = sum(ok for _, ok, _ in tests)
    if reason:
        score, output = 0.0, f"0 points: {reason}" + ("" if reason[-1] in ".?!" else ".")
    elif not tests:
        score, output = 0.0, "0 points: no test of this part ran."
    else:
        score = round(max_score * passed / len(tests), 2)
        fails = [(name, msg) for name, ok, msg in tests if not ok]
        of = f"of {len(tests)} test{'' if len(tests) == 1 else 's'} passed"
        output = f"{passed} {of}."
        if fails and len(fails) == len(tests) and len({m for _, m in fails}) == 1:
            output = f"0 {of}: {fails[0][1]}"
        elif fails:
            output += " Failed:\n" + "\n".join(f"- {test_name(t)}: {m}" for t, m in fails)
    return {"name": f"Part {n}: {p.title} ({part}) - {kind} tests",
            "number": f"{n}.{1 if kind == 'public' else 2}",
            "score": score, "max_score": max_score, "output": output,
            "visibility": "visible" if kind == "public" else shown,
            "extra_data": {"part": part, "kind": kind, "passed": 0 if reason else passed,
                           "tests": len(tests)}}


def shares(cfg, part):
    """(public, hidden) points of a part."""
    points = float(cfg["points"][part])
    public = round(points * (1 - cfg["hidden_share"]), 2)
    return public, round(points - public, 2)


def score_entries(cfg, parts, hidden, results, collected, refused):
    tests = []
    for part in parts:
        public_max, hidden_max = shares(cfg, part)
        ran = [(nid, *results.get(nid, (False, "did not finish")))
               for nid in collected.get(part, [])]
        reason = refused.get(part)
        tests.append(entry(part, "public", [t for t in ran if not is_hidden(t[0])],
                           public_max, reason))
        if hidden:
            tests.append(entry(part, "hidden", [t for t in ran if is_hidden(t[0])],
                               hidden_max, reason,
                               cfg.get("hidden_visibility", course.DEFAULT_SHOWN)))
    return tests


def results_json(tests, seconds, parts, note=None):
    total = round(sum(t["score"] for t in tests), 2)
    hidden = {t["visibility"] for t in tests} - {"visible"}
    when = course.SHOWN.get(min(hidden), "later") if hidden else ""
    text = (f"Graded: {', '.join(parts)}, each from the code between its # BEGIN ASSIGNMENT and "
            f"# END ASSIGNMENT markers only. Every test of a part is worth the same share of it. "
            + (f"Public tests are shown now; the hidden tests (the same contract on other seeds, "
               f"shapes and edge cases) {when}, and with them the total." if hidden else ""))
    return {"score": total, "execution_time": int(round(seconds)), "output": note or text,
            "stdout_visibility": "hidden", "visibility": "visible", "tests": tests}


def table(results):
    """The score table of a results.json, as printed to the terminal."""
    rows = [f"{'part':<24}{'tests':>14}{'points':>18}{'seconds':>13}"]
    fails = []
    for t in results["tests"]:
        x = t.get("extra_data", {})
        label = f"{t['number'].split('.')[0]:>2} {x.get('part', '?')} ({x.get('kind', '?')})"
        secs = f"{x['seconds']:.1f}" if x.get("kind") == "public" and "seconds" in x else ""
        ran = f"{x.get('passed', 0):>8} of {x['tests']:<3}" if x.get("tests") else f"{'none ran':>14}"
        rows.append(f"{label:<24}{ran}{t['score']:>10.2f} of {t['max_score']:<6.2f}{secs:>8}")
        if t["score"] < t["max_score"]:
            fails.append(f"{x.get('part')} ({x.get('kind')}): {t['output']}")
    total = sum(t["max_score"] for t in results["tests"])
    rows.append(f"{'total':<24}{'':>14}{results['score']:>10.2f} of {total:.2f}")
    return "\n".join(rows + ([""] + fails if fails else []))


def near_copies(source, submission, parts):
    """results.json entries, for instructors only (`hidden`, 0 of 0 points), for the parts whose
    submitted body is a near-copy of the reference body (teaching/similar.py), with its
    similarity. Nothing when the grader has no reference tokens (a student copy)."""
    try:
        reference = json.loads((source / similar.FILE).read_text())
    except (OSError, ValueError):
        return []
    out = []
    for part in parts:
        rel = course.BY_NAME[part].file
        try:
            body, _ = submitted_body(find_file(submission, rel).read_text(encoding="utf-8"),
                                     part, rel)
        except (OSError, UnicodeDecodeError, AttributeError, Refused):
            continue
        ratio = similar.similarity(similar.tokens(body), reference.get(part) or [])
        if ratio >= similar.NEAR_COPY:
            n = course.PARTS.index(course.BY_NAME[part]) + 1
            out.append({
                "name": f"Part {n}: {course.BY_NAME[part].title} ({part}) - likeness to the "
                        f"reference body (instructors only)",
                "number": f"{n}.3", "score": 0.0, "max_score": 0.0, "visibility": "hidden",
                "output": f"The submitted body is {ratio:.0%} like the reference body once names "
                          f"and formatting are normalised: a near-copy? Read it. The score is "
                          f"not changed by this.",
                "extra_data": {"part": part, "kind": "likeness", "similarity": round(ratio, 3)}})
    return out


# ---------------------------------------------------------------------------- the grader

def load_config(source):
    path = source / CONFIG
    if path.is_file():
        return json.loads(path.read_text())
    return ma.grading_config([p.name for p in course.PARTS])     # the project itself: every part


def handout_config(folder):
    """The tests/grading.json of a handout (None for any other folder, or an unreadable one)."""
    try:
        cfg = json.loads((Path(folder) / CONFIG).read_text())
        return cfg if isinstance(cfg.get("parts"), list) else None
    except (OSError, ValueError, AttributeError):
        return None


def write_json(path, data):
    """Write results.json whole: a new file of a name nobody can guess or block, moved over
    `path` (a folder or anything else found at `path` is removed first)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(data, indent=2, ensure_ascii=False))
        os.chmod(tmp, 0o644)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def lock_secrets(project):
    """Before any submitted code runs (Gradescope): the grader's own copy - the hidden tests,
    the reference bodies' tokens, the points - readable by root alone. The autograder's
    `source` folder is locked whole when `project` sits in one, as unzipped on Gradescope
    (run_autograder and setup.sh lock it too: the first moment each can)."""
    hidden = project / "tests" / "hidden"
    for f in hidden.rglob("*") if hidden.is_dir() else []:
        f.chmod(0o700 if f.is_dir() else 0o600)
    if hidden.is_dir():
        hidden.chmod(0o700)
    if project.name == autograder.PROJECT and project.parent.name == "source":
        project.parent.chmod(0o700)


def grade(source, submission, hidden, results_path=None, say=print):
    """Grade `submission` with the grader's own copy `source`; returns results.json's dict
    (and writes it to results_path, first with every part "not graded", then in full). With a
    results_path (Gradescope) and run as root, the workers run as an ordinary user."""
    t0 = time.time()
    cfg = load_config(source)
    parts = cfg["parts"]
    deadline = t0 + float(cfg["budget_s"])
    if results_path:
        waiting = "not graded: the grader stopped before it reached this part"
        write_json(results_path, results_json(
            score_entries(cfg, parts, hidden, {}, {}, {p: waiting for p in parts}), 0, parts))
    work = Path(tempfile.mkdtemp(prefix="electra-grade-"))
    try:
        texts, refused = splice(source, submission, parts)
        for p, why in refused.items():
            say(f"  {p}: {why}")
        # two copies: the tests and the grader's own files (each graded body as handed out) in
        # tree, where the tests run; the submitted bodies in code, where the parts' workers run
        tree, code = work / "tree", work / "code"
        graded = {course.BY_NAME[p].file for p in parts}
        make_tree(source, tree, {rel: handout(source, rel, parts) for rel in graded})
        make_tree(source, code, texts, tests=False)
        user, home = None, None
        if results_path:        # on Gradescope the submission is someone else's code
            user = runner.Unprivileged(os.environ.get(runner.USER_ENV), sys.executable)
            if user.refusal:    # root, and no user who can start this Python: never as root
                say(f"  {user.refusal}")
                refused = {p: user.refusal for p in parts}
            home = user.prepare(work, code)
            tree.chmod(0o700)   # the tests, the hidden ones included: the grader's alone
        if home is None:
            home = work / "home"
            home.mkdir()
        results, collected, stopped, seconds = runner.run_parts(
            tree, [p for p in parts if p not in refused], hidden,
            {p: float(cfg["time_limit_s"][p]) for p in parts}, float(cfg["startup_s"]),
            deadline, say, user=user or None, home=home, code=code)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    tests = score_entries(cfg, parts, hidden, results, collected, {**refused, **stopped})
    for t in tests:
        t["extra_data"]["seconds"] = round(seconds.get(t["extra_data"]["part"], 0.0), 2)
    if results_path:
        tests += near_copies(source, submission, [p for p in parts if p not in refused])
    out = results_json(tests, time.time() - t0, parts)
    if results_path:
        write_json(results_path, out)
    return out


def main(argv=None):
    ap = cli.Parser(description="Grade the assignment's parts: the public tests' score table, or "
                                "Gradescope's results.json.")
    ap.add_argument("--submission", help="the folder to grade (default: this copy)")
    ap.add_argument("--gradescope", action="store_true",
                    help="grade $AUTOGRADER_ROOT/submission (default /autograder) with the hidden "
                         "tests and write results/results.json there")
    ap.add_argument("--root", default=os.environ.get("AUTOGRADER_ROOT", GRADESCOPE_ROOT),
                    help="the autograder's root folder (with --gradescope)")
    ap.add_argument("--json", help="also write the results, as results.json, to this file")
    ap.add_argument("--check", metavar="ZIP",
                    help="grade --submission (default: this project, the reference) with an "
                         "autograder.zip in a fake /autograder, as Gradescope would")
    args = ap.parse_args(argv)
    if args.check:
        zip_path, submission = Path(args.check), Path(args.submission or HERE)
        if not zip_path.exists():
            print(f"error: --check {zip_path}: no such file; give the autograder.zip that "
                  f"teaching/make_assignment.py --autograder wrote", file=sys.stderr)
            return 1
        if not zip_path.is_file() or not zipfile.is_zipfile(zip_path):
            print(f"error: --check {zip_path}: not a zip file; give the autograder.zip that "
                  f"teaching/make_assignment.py --autograder wrote", file=sys.stderr)
            return 1
        if not submission.is_dir():
            print(f"error: --submission {submission}: not a folder", file=sys.stderr)
            return 1
        try:
            cfg = autograder.zip_config(zip_path)
        except (ValueError, zipfile.BadZipFile, OSError) as e:
            print(f"error: --check {zip_path}: {e}; give the autograder.zip that "
                  f"teaching/make_assignment.py --autograder wrote", file=sys.stderr)
            return 1
        mine = handout_config(submission)     # a handout: was the zip built with it?
        if mine and set(mine["parts"]) != set(cfg["parts"]):
            print(f"error: --check {zip_path} grades {', '.join(cfg['parts'])}, but "
                  f"{submission} is a handout of {', '.join(mine['parts'])}: give the zip "
                  f"built with it (or build both again with one command)", file=sys.stderr)
            return 1
        if mine and mine.get("points") != cfg["points"]:
            print(f"note: the points of {zip_path} differ from {submission / CONFIG}; "
                  f"results.json uses the zip's", flush=True)
        print(f"Grading {submission.resolve()} with {zip_path} in a fake /autograder ...",
              flush=True)
        with tempfile.TemporaryDirectory(prefix="autograder-") as tmp:
            out = autograder.run_fake(zip_path, submission, Path(tmp) / "autograder",
                                      python=sys.executable)
        if args.json:
            write_json(Path(args.json), out)
        print(table(out))
        print(f"\n{out['execution_time']} s; {out['output']}")
        return 0
    if args.gradescope:
        root = Path(args.root)
        path = root / "results" / "results.json"
        try:
            lock_secrets(HERE)
            out = grade(HERE, root / "submission", hidden=True, results_path=path)
        except Exception as e:                    # never leave Gradescope without results
            traceback.print_exc()
            why = f"the grader failed ({e.__class__.__name__}: {e}); tell your instructor"
            try:
                cfg = load_config(HERE)
                out = results_json(score_entries(cfg, cfg["parts"], True, {}, {},
                                                 {p: why for p in cfg["parts"]}), 0, cfg["parts"])
            except Exception:
                out = {"score": 0, "output": f"Nothing was graded: {why}.",
                       "stdout_visibility": "hidden", "tests": []}
            write_json(path, out)
            return 0
        print(table(out))
        return 0
    submission = Path(args.submission) if args.submission else HERE
    if not submission.is_dir():
        print(f"error: --submission {submission}: not a folder; give the folder that holds "
              f"your files", file=sys.stderr)
        return 1
    if not (HERE / "tests" / "parts").is_dir():
        print("error: no tests/parts here: run this in a student copy "
              "(teaching/make_assignment.py writes one)", file=sys.stderr)
        return 1
    hidden = (HERE / HIDDEN).is_file()
    print(f"Grading {submission.resolve()} as the autograder does"
          + ("" if hidden else ", with the public tests (the hidden ones run on Gradescope)")
          + ":", flush=True)
    out = grade(HERE, submission, hidden=hidden)
    if args.json:
        write_json(Path(args.json), out)
    print(table(out))
    if not hidden:
        cfg = load_config(HERE)
        rest = sum(shares(cfg, p)[1] for p in cfg["parts"])
        print(f"\nThe hidden tests - the same contracts on other seeds, shapes and edge cases - "
              f"are worth {rest:.2f} more points on Gradescope.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
