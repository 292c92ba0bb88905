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

Points per part are set here, in POINTS (or for one copy with --points); HIDDEN_SHARE of each
part's points go to its hidden tests (teaching/hidden_tests.py, never in a copy). The copy's
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
from dataclasses import dataclass
from pathlib import Path

if not __package__:   # run as a path (python teaching/make_assignment.py): import from the project root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machinery import cli
from teaching import autograder

ROOT = Path(__file__).resolve().parents[1]                 # the project root
FOLDERS = ("machinery", "analysis", "benchmarks", "interop", "teaching")    # copied with the root
MARK = re.compile(r"^(\s*)# (BEGIN|END) ASSIGNMENT (\w+)\s*$")
ANSWER = re.compile(r"^(\s*)# (BEGIN|END) ANSWER (\w+)\b")
INSTRUCTOR_NOTES = ROOT / "docs" / "instructor-notes.md"    # per part: answers, mistakes
LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]+)\)")            # a Markdown link: [text](target)


@dataclass
class Part:
    name: str
    title: str
    where: str          # file: function
    section: str        # the paper's section
    equation: str
    contract: str
    hint: str           # the one line left in the code
    question: str

    @property
    def file(self):
        """The file that holds the part, e.g. objectives.py."""
        return self.where.split(":")[0]


PARTS = [
    # Each part states one contract: the same in ASSIGNMENTS.md (contract), the function's
    # docstring and its test file, which accepts every body the contract allows. The hint is the
    # one line a blank body raises: it says what to compute, never how the reference computes it.
    Part("mask", "Choose the positions to mask", "objectives.py: mask_tokens", "§2, Appendix A",
         "m = k distinct positions drawn uniformly from the n real tokens, k = round(0.15 n);  "
         "x_masked = REPLACE(x, m, [MASK])",
         "x (B, T) ids -> Masked(x_masked, positions, targets, weights): n = the real tokens of "
         "a row (never a special token); k = round(mask_prob * n) to the nearest integer (a tie "
         "at .5 either way), at least 1, at most n and K (0 for a row without real tokens); "
         "k distinct positions, uniformly at "
         "random, in the first k of K fixed slots (weight 1); the unused slots (weight 0) may "
         "hold any position, a used one again included; targets = x at every slot's position; "
         "x_masked differs from x at used positions only: of them, replace_prob show [MASK], "
         "random_prob a random id below n_random, the rest themselves. The same `generator` "
         "seed gives the same mask.",
         "return Masked: per row, k = round(mask_prob * n) of the n real tokens chosen uniformly "
         "at random without repeats, in the first k slots, and x_masked showing [MASK], a random "
         "id or the token itself at them",
         "Why does ELECTRA keep 15 % of the chosen tokens unmasked instead of BERT's 10/10 split?"),
    Part("sample", "Sample from the generator", "objectives.py: sample", "§2",
         "x̂_i ~ p_G(x_i | x_masked) = softmax(logits)  (temperature 1)",
         "logits (..., V) -> int64 ids (...), one exact sample per row of softmax(logits), no "
         "gradient, safe for logits as large as ±1000; the same `generator` seed gives the same "
         "samples. Training samples with your function.",
         "return one id per row of logits, drawn with probability softmax(logits), using the "
         "random numbers of `generator`",
         "Why sample at all - what would D learn if G's argmax filled every masked position?"),
    Part("corrupt", "Build x_corrupt and its labels", "objectives.py: corrupt", "§2",
         "x_corrupt = REPLACE(x, m, x̂);  is_replaced_t = 1(x_corrupt_t != x_t)",
         "x (B, T), masked, x_hat (B, K) -> (x_corrupt (B, T), is_replaced (B, T) bool), x left "
         "unchanged. Each used slot's position takes its sample; unused slots change nothing, "
         "whatever position they hold (one a used slot holds included: see Masked); a sample "
         "equal to the original is real.",
         "return x_corrupt, x with each used slot's position holding that slot's sample, and "
         "is_replaced, True where x_corrupt differs from x",
         "Early in training G is almost never right. Late in training it is right ~60 % of the "
         "time. What would labelling by 'was in m' teach D then?"),
    Part("mlm_loss", "L_MLM", "objectives.py: mlm_loss", "§2",
         "L_MLM = E[ sum_{i in m} -log p_G(x_i | x_masked) ]",
         "logits (B, K, V), targets (B, K), weights (B, K) -> scalar: the mean of -log softmax "
         "at the targets over the used slots (weight 1), in float32 whatever the logits' dtype, "
         "accurate for logits as large as ±100 (log of softmax is not: exp(-200) is 0 in "
         "float32). "
         "Train with `electra_small.py --plain_mlm` to use it (else machinery/mlm_output.py "
         "computes L_MLM).",
         "return the mean over the used slots of -log p_G(target), p_G = softmax(logits), as a "
         "float32 scalar",
         "Why average over used slots rather than sum - what would a sum do to λ's meaning?"),
    Part("disc_loss", "L_Disc", "objectives.py: disc_loss", "§2",
         "L_Disc = E[ sum_t -1(x_corrupt_t = x_t) log D(x_corrupt, t) "
         "- 1(x_corrupt_t != x_t) log(1 - D(x_corrupt, t)) ]",
         "logits (B, T) scoring 'replaced' (D(x, t) = 1 - sigmoid(logit)), is_replaced (B, T), "
         "mask (B, T) bool or None -> scalar in float32: the mean over the tokens in mask (all "
         "tokens when None) of the binary cross-entropy, accurate for logits as large as ±100 "
         "(in float32, sigmoid(17) is already 1); tokens outside mask get no gradient.",
         "return the mean over the tokens in `mask` of -log D (real tokens) or -log(1 - D) "
         "(replaced ones), D = 1 - sigmoid(logit), as a float32 scalar",
         "85-90 % of tokens are real. What loss does 'everything is real' already reach, and "
         "why do small runs sit there first (docs/plateau.md)?"),
    Part("joint_loss", "The joint loss L_MLM + λ L_Disc", "objectives.py: ELECTRA.forward",
         "§2, Appendix A",
         "min_{θG, θD} sum_x L_MLM(x, θG) + λ L_Disc(x, θD),  λ = 50",
         "Use self.generate(masked, ...) -> (L_MLM, x̂, stats), corrupt(...) without gradient, "
         "self.discriminate(x, x_corrupt, is_replaced, masked, scored, ...) with `scored` every "
         "real token; set `loss` = L_MLM + λ L_Disc (λ = self.disc_weight), `loss_mlm`, "
         "`loss_disc`, `stats` and `d_stats`.",
         "set loss = L_MLM + λ L_Disc, where D reads x_corrupt made from G's samples without "
         "gradient and L_Disc scores every real token",
         "The paper does not back-propagate L_Disc into G. Could it? What would G learn?"),
    Part("attention", "Multi-head self-attention", "encoder.py: SelfAttention.forward",
         "§2 (the Transformer encoder)",
         "Attention(Q, K, V) = softmax(Q K^T / sqrt(d)) V, per head, heads concatenated",
         "h (B, T, H) -> (B, T, H) with self.qkv (H -> 3H: q, k, v in that order, head j at "
         "columns j d to (j + 1) d of each), self.heads heads of d = H / heads, attn_mask "
         "(B, 1, 1, T) True where attention is allowed (or None), self.out (H -> H); in "
         "training, dropout self.dropout on the attention probabilities (none in eval).",
         "return out(the heads' softmax(q k^T / sqrt(d)) v, concatenated), with masked keys "
         "getting no attention",
         "Why divide by sqrt(d)? What happens to the softmax's gradient without it?"),
    Part("adam", "Adam without bias correction", "optim.py: AdamWeightDecay.step",
         "Appendix A (the official optimizer)",
         "m <- β1 m + (1-β1) g;  v <- β2 v + (1-β2) g²;  θ <- θ - η (m / (sqrt(v) + ε) + w θ)",
         "Update every tensor in `params` in place from `grads`, the moments `m` and `v` (lists "
         "of tensors, zero at the start, updated in place), with b1, b2, lr, eps, wd; no "
         "division by 1 - β^t.",
         "update m, v and every θ in place by the three lines of the equation, without bias "
         "correction",
         "Is the uncorrected step larger or smaller than AdamW's at step 10? (optim.py)"),
    Part("layer_decay", "Layer-wise learning-rate decay", "finetune_glue.py: layerwise_param_groups",
         "Appendix A, Table 7 (layer-wise LR decay 0.8)",
         "lr(depth) = lr · 0.8^(L + 2 - depth): head L + 2, block i at i + 1, embeddings 0",
         "Fill `groups`: one dict per distinct power, {'params', 'names', 'lr'}, keyed by the "
         "power, every parameter in exactly one; rule 'official' as above (head.* at L + 2, "
         "encoder.blocks.<i>.* at i + 1, everything else - the embeddings and encoder.proj - at "
         "0), rule 'stated' with block i at i + 2, the rest at 1.",
         "put every parameter in groups[power], power = L + 2 - its depth, with lr * decay ** "
         "power",
         "Why should the lower layers move less during fine-tuning?"),
    Part("electra15", "Ablation: ELECTRA 15%", "ablations.py: ELECTRA15.discriminate", "§3.5",
         "L_Disc summed over i in m only, instead of t = 1..n",
         "Same arguments as ELECTRA.discriminate; call the parent's discriminate with `scored` "
         "narrowed to the positions of the used mask slots (an unused slot may hold a used "
         "slot's position: it must not unmark it).",
         "call the parent's discriminate with `scored` kept only at the positions of the used "
         "slots of m",
         "Table 5: ELECTRA 15% loses most of ELECTRA's gain. Why does scoring all tokens help "
         "so much more than the extra compute would suggest?"),
    Part("flops", "FLOPs of a Transformer block", "flops.py: block_flops", "Appendix E",
         "a matmul of an m-vector by an m x n matrix costs 2mn; elementwise ops by their "
         "operations (LAYER_NORM, GELU, SOFTMAX, DROPOUT per element)",
         "(hidden, heads, ffn, seq) -> the exact FLOPs per token of one post-LN block: q, k, v "
         "with biases, scores, softmax + dropout + scale per head, weighted sum, output "
         "projection with bias, FFN (both matmuls with biases, GELU), the two dropout + "
         "residual + LayerNorm.",
         "return the FLOPs per token of one block, every matmul, bias and elementwise operation "
         "of attention and the FFN counted",
         "Which term grows with the sequence length, and at what length does it match the FFN?"),
]
BY_NAME = {p.name: p for p in PARTS}

# Points per part, the one table an instructor edits (or --points mask=10,... for one copy): they
# feed ASSIGNMENTS.md and the autograder's results.json. Of each part's points, HIDDEN_SHARE go
# to its hidden tests, the rest to its public tests; inside each, every test counts the same.
POINTS = {"mask": 12, "sample": 8, "corrupt": 8, "mlm_loss": 6, "disc_loss": 6, "joint_loss": 12,
          "attention": 14, "adam": 10, "layer_decay": 8, "electra15": 8, "flops": 8}
HIDDEN_SHARE = 0.5
# When students see the hidden tests' results (Gradescope's visibility of a test; --shown):
# after the due date (the default), when the instructor publishes the grades, or never.
SHOWN = {"after_due_date": "after the due date",
         "after_published": "when the grades are published",
         "hidden": "never: only the instructor sees them"}
# The grader's time limits, in seconds (teaching/grade.py): each part's tests (public and hidden
# together) may take TIME_LIMIT_S, the start of PyTorch and the tests STARTUP_S, the whole run
# BUDGET_S - under Gradescope's default of 10 minutes, so that results.json is always written.
# A correct part takes at most a few seconds at one core (docs/instructor-notes.md, "Gradescope").
TIME_LIMIT_S = 40
STARTUP_S = 120
BUDGET_S = 540

# Code outside a part that restates its answer, between `# BEGIN ANSWER <part>` and `# END
# ANSWER <part>`: in a copy with the part blank it becomes these lines, which call the
# student's function (so the copy still trains, with the student's code).
STAND_INS = {
    ("machinery/mlm_output.py", "sample"): [
        "# x̂ from your objectives.sample (Part 2), on log p_G: the same distribution.",
        "import objectives",
        "x_hat = objectives.sample(p.log().view(B, K, -1), generator)",
        "return loss, x_hat, hits"],
}
# Tools that restate a part's answer and that no part needs: benchmarks/hf_electra.py samples with the
# Gumbel-max trick and builds x_corrupt for Hugging Face's ELECTRA; benchmarks/bench.py and benchmarks/parity.py
# import it, and benchmarks/selfcheck.py imports bench.py. teaching/one_step.py runs mask, sample
# and corrupt on one sentence (the joint loss's calls).
HF_TOOLS = ("benchmarks/bench.py", "benchmarks/parity.py", "benchmarks/hf_electra.py",
            "benchmarks/selfcheck.py")
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


def assignments_md(parts, points=None, shown="after_due_date"):
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


def grading_config(parts, points=None, shown="after_due_date"):
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


def make_copy(out, parts, points=None, shown="after_due_date"):
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
        for f in sources + [ROOT / "requirements.txt", ROOT / "README.md"]:
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
    ap.add_argument("--shown", choices=list(SHOWN), default="after_due_date",
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
                autograder.write_zip(Path(args.out), target, ROOT / HIDDEN_TESTS, FOLDERS)
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
