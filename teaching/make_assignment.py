"""Course assignments from this project: a student copy with chosen functions left to write.

Eleven functions of the reference code, covering the paper's §2 (the algorithm), §3.5 (one
ablation), Appendix A (the optimizer, layer-wise decay) and Appendix E (the FLOP count), are
marked in the source between `# BEGIN ASSIGNMENT <part>` and `# END ASSIGNMENT <part>`.

    python teaching/make_assignment.py --out ../electra-student                  # all eleven parts
    python teaching/make_assignment.py --out ../hw1 --parts mask,sample,corrupt  # a first homework
    python teaching/make_assignment.py --out ../hw1 --parts mask,sample,corrupt \
        --autograder ../hw1-autograder.zip --points mask=10,sample=5,corrupt=5  # and Gradescope's
    python teaching/make_assignment.py --list                                    # the parts

writes a copy of the project in which each chosen part's body is `raise NotImplementedError`
with a short hint, an ASSIGNMENTS.md with each part's statement (the paper's equation, the
function's contract, the tests that grade it, a question to think about), and the grading tests
in tests/parts/, one file per part: `python -m pytest tests/parts/test_part_mask.py` grades one
part. In the copy, the tests of blanked parts fail and all others pass; a part is done when its
file passes. tests/test_assignments.py checks exactly that, on the reference and on copies.

The parts, their contracts, points (POINTS; for one copy --points) and the grader's time limits
are in teaching/course.py; HIDDEN_SHARE of each part's points go to its hidden tests
(teaching/hidden_tests.py, never in a copy). The copy's
tests/grading.json holds them with each part's time limit, and `python teaching/grade.py` in the
copy prints the public tests' score table. --autograder also writes Gradescope's autograder.zip
(teaching/autograder.py): the same copy's code and tests, the hidden tests, setup.sh and
run_autograder, which grades a submission with teaching/grade.py into results.json.

The copy gives no blanked answer away. The *why* of a part - the answer to its "think about"
question - is a comment inside the marked region, so it goes with the body; the instructor's
answers and the mistakes each test catches are in docs/instructor-notes.md, which the copy
leaves out. Code elsewhere that restates a part's answer is marked `# BEGIN ANSWER <part>` /
`# END ANSWER <part>` and replaced by a call to the student's function (STAND_INS); a tool that
restates one and that no part needs is left out of the copy (LEFT_OUT).
"""
import json
import re
import shutil
import sys
from pathlib import Path

if not __package__:   # run as a path (python teaching/make_assignment.py): import from the project root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machinery import cli
from teaching import autograder, similar
from teaching.course import (BUDGET_S, BY_NAME, DEFAULT_SHOWN, HIDDEN_SHARE, PARTS, POINTS,
                             SHOWN, STARTUP_S, TIME_LIMIT_S)

ROOT = Path(__file__).resolve().parents[1]                 # the project root
FOLDERS = ("machinery", "analysis", "benchmarks", "interop", "teaching")    # copied with the root
MARK = re.compile(r"^(\s*)# (BEGIN|END) ASSIGNMENT (\w+)\s*$")
ANSWER = re.compile(r"^(\s*)# (BEGIN|END) ANSWER (\w+)\b")
INSTRUCTOR_NOTES = ROOT / "docs" / "instructor-notes.md"    # per part: answers, mistakes
LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]+)\)")            # a Markdown link: [text](target)


# Code outside a part that restates its answer, between `# BEGIN ANSWER <part>` and `# END
# ANSWER <part>`: in a copy with the part blank it becomes these lines, which call the
# student's function (so the copy still trains, with the student's code).
STAND_INS = {
    ("machinery/mlm_output.py", "sample"): [
        "# x̂ from your objectives.sample (Part 2), on log p_G: the same distribution.",
        "import objectives",
        "x_hat = objectives.sample(p.log().view(B, K, -1), generator)",
        "return loss, x_hat, hits"],
    ("train.py", "joint_loss"): [
        "# G, the sample, x_corrupt and D: your ELECTRA.forward (the joint loss's part).",
        "_, stats = model(x, masked, pad_mask, segment_ids)",
        "L_MLM, L_Disc = stats[\"mlm_loss\"], stats[\"disc_loss\"]"],
}
# Tools that restate a part's answer and that no part needs: benchmarks/hf_electra.py samples with the
# Gumbel-max trick and builds x_corrupt for Hugging Face's ELECTRA; benchmarks/bench.py and benchmarks/parity.py
# import it, and benchmarks/selfcheck.py, benchmarks/loss_scale.py and benchmarks/compiled_gap.py
# import bench.py.
# teaching/one_step.py runs mask, sample and corrupt on one sentence (the joint loss's calls).
HF_TOOLS = ("benchmarks/bench.py", "benchmarks/parity.py", "benchmarks/hf_electra.py",
            "benchmarks/selfcheck.py", "benchmarks/loss_scale.py", "benchmarks/compiled_gap.py")
LEFT_OUT = {"sample": HF_TOOLS, "corrupt": HF_TOOLS, "joint_loss": ("teaching/one_step.py",)}
HIDDEN_TESTS = "teaching/hidden_tests.py"    # in the autograder only: never in a copy
NEEDS_TESTS = ("benchmarks/batch_time.py",)   # reads the project's tests/, which no copy has


class AssignmentError(Exception):
    """Bad arguments; printed as one line."""


def regions(text):
    """{part: (begin line index, end line index, indentation)} of the marked regions."""
    found, open_ = {}, {}
    for i, line in enumerate(text.splitlines()):
        m = MARK.match(line)
        if not m:
            continue
        indent, kind, name = m.groups()
        if kind == "BEGIN":
            open_[name] = (i, indent)
        elif name in open_:
            begin, begin_indent = open_.pop(name)
            found[name] = (begin, i, begin_indent)
    return found


def replace_body(text, part, body_lines):
    """The text with part's region (between its markers, markers kept) replaced by body_lines,
    each indented like the BEGIN marker."""
    lines = text.splitlines(keepends=True)
    begin, end, indent = regions(text)[part]
    new = [indent + l + "\n" if l else "\n" for l in body_lines]
    return "".join(lines[:begin + 1] + new + lines[end:])


def replace_answers(text, part, body_lines):
    """The text with every `# BEGIN ANSWER part` ... `# END ANSWER part` region, markers
    included, replaced by body_lines indented like its BEGIN marker."""
    out, indent = [], None
    for line in text.splitlines(keepends=True):
        m = ANSWER.match(line)
        if m and m.group(3) == part and m.group(2) == "BEGIN":
            indent = m.group(1)
            out += [indent + l + "\n" if l else "\n" for l in body_lines]
        elif m and m.group(3) == part and indent is not None:
            indent = None
        elif indent is None:
            out.append(line)
    return "".join(out)


def reference_body(part):
    """The reference lines of a part, without their indentation (for tests and instructors)."""
    text = (ROOT / BY_NAME[part].file).read_text()
    begin, end, indent = regions(text)[part]
    return [l[len(indent):] for l in text.splitlines()[begin + 1:end]]


def reference_tokens(parts):
    """tests/hidden/reference.json of an autograder: each part's reference body as the tokens
    teaching/similar.py compares (never in a student copy)."""
    return json.dumps({p: similar.tokens(reference_body(p)) for p in parts}).encode()


def stub(part):
    p = BY_NAME[part]
    n = PARTS.index(p) + 1
    return [f'raise NotImplementedError("Part {n} ({p.name}, paper {p.section}): {p.hint}. '
            f'See ASSIGNMENTS.md")']


def points_line(points):
    """'12 (6 for the public tests, 6 for the hidden tests)'."""
    hidden = round(points * HIDDEN_SHARE, 2)
    if not hidden:
        return f"{points:g} (the public tests)"
    return f"{points:g} ({points - hidden:g} for the public tests, {hidden:g} for the hidden tests)"


def assignments_md(parts, points=None, shown=DEFAULT_SHOWN):
    points = {**POINTS, **(points or {})}
    files = sorted({BY_NAME[p].file for p in parts})
    out = ["# ELECTRA assignments", "",
           "Each part is one function of the project, marked in its file between",
           "`# BEGIN ASSIGNMENT <part>` and `# END ASSIGNMENT <part>`. Read the paper section",
           "first, then the docstring of the function, then write the body. A part is done when",
           "its test file passes: `python -m pytest -q tests/parts/test_part_<part>.py`.",
           "Every test file grades its part alone: the other parts may still be blank.", "",
           "## How it is graded", "",
           f"- {sum(points[p] for p in parts):g} points in all, each part's below. "
           + (f"{HIDDEN_SHARE:.0%} of a part's points go to hidden tests: the same contract on "
              "other seeds, shapes and edge cases (a row with one real token, a fully padded "
              f"row, batch 1, bf16 inputs, a large vocabulary), shown {SHOWN[shown]}. "
              if HIDDEN_SHARE else "")
           + "Within the public or the hidden tests of a part, every test counts the same.",
           "- Only the code between a part's markers is graded: put any helper function or "
           "import inside it, and keep the markers, the function's name and its signature as "
           "they are.",
           "- Each part runs on its own, with a time limit; a part whose code does not parse, "
           "loops, crashes or prints without end gets 0 and one line saying why, and the other "
           "parts are graded.",
           "- `python teaching/grade.py` prints the score table of the public tests, graded as "
           "the autograder grades them.",
           f"- Hand in {', '.join(f'`{f}`' for f in files)} (or the whole folder).", ""]
    for p in PARTS:
        if p.name not in parts:
            continue
        n = PARTS.index(p) + 1
        out += [f"## Part {n}: {p.title} (`{p.name}`)", "",
                f"- **Where**: `{p.where}`", f"- **Paper**: {p.section}",
                f"- **Equation**: `{p.equation}`", f"- **Contract**: {p.contract}",
                f"- **Graded by**: `tests/parts/test_part_{p.name}.py`",
                f"- **Points**: {points_line(points[p.name])}",
                f"- **Think about**: {p.question}", ""]
    return "\n".join(out)


def grading_config(parts, points=None, shown=DEFAULT_SHOWN):
    """What the grader reads (the copy's tests/grading.json): the parts, their points, when the
    hidden tests are shown and the time limits."""
    points = {**POINTS, **(points or {})}
    return {"parts": list(parts), "points": {p: points[p] for p in parts},
            "hidden_share": HIDDEN_SHARE, "hidden_visibility": shown,
            "time_limit_s": {p: TIME_LIMIT_S for p in parts},
            "startup_s": STARTUP_S, "budget_s": BUDGET_S}


def unlink_missing(text, md_file):
    """Markdown text (of md_file, in a copy) with every relative link whose target the copy
    lacks turned into its plain text, so that every link left resolves."""
    def plain(m):
        target = m.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):   # web, anchor
            return m.group(0)
        return m.group(0) if (md_file.parent / target.split("#")[0]).exists() else m.group(1)
    return LINK.sub(plain, text)


def copy_note(parts, left_out):
    """The lines put under the title of a copy's README: what the copy is, and what it lacks
    of what the README goes on to describe."""
    missing = sorted(left_out) + [INSTRUCTOR_NOTES.relative_to(ROOT).as_posix()]
    return ["", f"> **A student copy** of this project, with {len(parts)} part(s) to write "
            f"({', '.join(parts)}): [ASSIGNMENTS.md](ASSIGNMENTS.md) says what each is and how "
            f"it is graded (`python teaching/grade.py`: the score table). The text below "
            f"describes the whole project; this copy leaves out "
            f"{', '.join(f'`{m}`' for m in missing)}, and of the tests it holds the grading "
            f"files `tests/parts/`, their points `tests/grading.json` and the fixtures "
            f"`tests/conftest.py` only."]


def write_md():
    """Regenerate the repository's ASSIGNMENTS.md (all parts) after editing PARTS."""
    (ROOT / "ASSIGNMENTS.md").write_text(assignments_md([p.name for p in PARTS]))


def parse_parts(spec):
    if not spec:
        return [p.name for p in PARTS]
    names = [s.strip() for s in spec.split(",") if s.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        raise AssignmentError(f"--parts: unknown part {', '.join(unknown)}; the parts are "
                              f"{', '.join(BY_NAME)}")
    if not names:
        raise AssignmentError(f"--parts {spec!r}: no part named; e.g. --parts mask,sample "
                              f"(--list shows them)")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise AssignmentError(f"--parts: {', '.join(twice)} named twice; name each part once")
    return [p.name for p in PARTS if p.name in names]      # in the order of --list


def parse_points(spec, parts):
    """--points mask=10,sample=5: {part: points} for chosen parts (the others keep POINTS)."""
    points = {}
    for item in (s.strip() for s in (spec or "").split(",")):
        if not item:
            continue
        name, _, value = item.partition("=")
        name = name.strip()
        if name in points:
            raise AssignmentError(f"--points: {name} given twice; give each part's points once")
        if name not in parts:
            raise AssignmentError(f"--points: {name!r} is not one of the chosen parts "
                                  f"({', '.join(parts)}); write part=points, e.g. mask=10")
        try:
            points[name] = float(value)
        except ValueError:
            points[name] = -1.0
        if not (0 <= points[name] < 1e6):
            raise AssignmentError(f"--points: {item!r}: the points must be a number >= 0, "
                                  f"e.g. {name}=10")
        if round(points[name], 2) != points[name]:     # so that public + hidden = the part's
            raise AssignmentError(f"--points: {item!r}: at most 2 decimals, e.g. {name}=5.25")
    if not any({**POINTS, **points}[p] for p in parts):
        raise AssignmentError("--points: every chosen part is worth 0 points; give at least "
                              "one part some, e.g. mask=10")
    return {k: int(v) if v == int(v) else v for k, v in points.items()}


def make_copy(out, parts, points=None, shown=DEFAULT_SHOWN):
    """Write the student copy into `out` (a new or empty folder)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise AssignmentError(f"--out {out}: exists and is not an empty folder; pick a new one")
    if out.resolve() == ROOT or ROOT in out.resolve().parents:
        raise AssignmentError(f"--out {out}: inside the project; pick a folder outside it")
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        left_out = {f for part in parts for f in LEFT_OUT.get(part, ())} | {HIDDEN_TESTS,
                                                                          *NEEDS_TESTS}
        sources = [f for d in ("",) + FOLDERS for ext in ("*.py", "*.sh")
                   for f in sorted((ROOT / d).glob(ext))]
        for f in sources + [ROOT / "requirements.txt", ROOT / "README.md", ROOT / "LICENSE"]:
            rel = f.relative_to(ROOT).as_posix()
            if rel in left_out:
                continue
            text = f.read_text()
            for part in parts:
                if BY_NAME[part].file == rel:
                    text = replace_body(text, part, stub(part))
                if f"# BEGIN ANSWER {part}" in text:
                    text = replace_answers(text, part, STAND_INS[(rel, part)])
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(text)
        shutil.copytree(ROOT / "notebooks", tmp / "notebooks",    # (scripts, run not imported)
                        ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
        shutil.copytree(ROOT / "tests" / "parts", tmp / "tests" / "parts",
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(ROOT / "tests" / "conftest.py", tmp / "tests" / "conftest.py")   # fixtures
        (tmp / "tests" / "grading.json").write_text(       # the points, for teaching/grade.py
            json.dumps(grading_config(parts, points, shown), indent=2) + "\n")
        shutil.copytree(ROOT / "docs", tmp / "docs",          # the README's links resolve
                        ignore=shutil.ignore_patterns(INSTRUCTOR_NOTES.name))   # not the answers
        (tmp / "ASSIGNMENTS.md").write_text(assignments_md(parts, points, shown))
        readme = (tmp / "README.md").read_text().split("\n")
        (tmp / "README.md").write_text("\n".join(readme[:1] + copy_note(parts, left_out)
                                                 + readme[1:]))
        for md in tmp.rglob("*.md"):             # links to what the copy lacks: plain text
            md.write_text(unlink_missing(md.read_text(), md))
        if out.exists():
            out.rmdir()
        tmp.rename(out)                          # all or nothing
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise AssignmentError(f"--out {out}: cannot write the copy ({e.strerror or e})") from None


def zip_path(spec, out):
    """--autograder: a .zip file in an existing folder, outside the student copy."""
    path = Path(spec)
    if path.suffix != ".zip":
        raise AssignmentError(f"--autograder {spec}: name a .zip file, e.g. ../hw1-autograder.zip")
    if Path(out).resolve() in path.resolve().parents:
        raise AssignmentError(f"--autograder {spec}: inside the student copy {out}, which "
                              f"students get; put it elsewhere")
    if not path.resolve().parent.is_dir():
        raise AssignmentError(f"--autograder {spec}: no folder {path.parent}; create it first")
    if path.exists() and not path.is_file():
        raise AssignmentError(f"--autograder {spec}: exists and is not a file; pick another name")
    return path


def main(argv=None):
    ap = cli.Parser(description="Write a student copy with parts left to write (and Gradescope's "
                                "autograder for it).")
    ap.add_argument("--out", help="a new folder for the student copy")
    ap.add_argument("--parts", default="", help="comma-separated parts (default: all)")
    ap.add_argument("--points", default="", help="points of chosen parts, e.g. mask=10,sample=5 "
                    "(default: the POINTS table of this file)")
    ap.add_argument("--autograder", metavar="ZIP",
                    help="also write Gradescope's autograder.zip for the copy to this file")
    ap.add_argument("--shown", choices=list(SHOWN), default=DEFAULT_SHOWN,
                    help="when students see the hidden tests' results on Gradescope (default: "
                         "after_due_date; after_published: when you publish the grades)")
    ap.add_argument("--list", action="store_true", help="list the parts and exit")
    args = ap.parse_args(argv)
    try:
        if args.list:
            for i, p in enumerate(PARTS, 1):
                print(f"{i:2d}. {p.name:12s} {POINTS[p.name]:>3g} pt  {p.where:42s} {p.section}")
            return 0
        if not args.out:
            raise AssignmentError("--out is required: the folder to write the student copy to")
        parts = parse_parts(args.parts)
        points = parse_points(args.points, parts)
        target = zip_path(args.autograder, args.out) if args.autograder else None
        replaced = target is not None and target.exists()
        make_copy(args.out, parts, points, args.shown)
        if target:
            try:
                autograder.write_zip(Path(args.out), target, ROOT / HIDDEN_TESTS, FOLDERS,
                                     {similar.FILE: reference_tokens(parts)})
            except OSError as e:
                shutil.rmtree(args.out, ignore_errors=True)      # all or nothing
                raise AssignmentError(f"--autograder {args.autograder}: cannot write it "
                                      f"({e.strerror or e})") from None
    except AssignmentError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    total = sum({**POINTS, **points}[p] for p in parts)
    print(f"wrote {args.out}: {len(parts)} part(s) to write ({', '.join(parts)}), {total:g} "
          f"points; see {Path(args.out) / 'ASSIGNMENTS.md'}")
    if target:
        if replaced:
            print(f"note: {target} existed and is replaced: upload the new one to Gradescope "
                  "(Update Autograder) before students submit against it")
        print(f"wrote {target}: Gradescope's autograder (docs/instructor-notes.md, "
              f"\"Gradescope\"); check it with: python teaching/grade.py --check {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
