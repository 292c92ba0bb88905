"""Teaching: the notes' math notation, typeset as MathML for the Annotated ELECTRA.

The notes beside the code (teaching/annotate.py) write their equations in a small notation that
reads well in an editor - `$L_MLM(x, θ_G) + λ L_Disc(x, θ_D)$` - and the pages show them as
MathML, which current browsers draw themselves: no script, no font download, no network.
`mathml(src, display)` turns one equation into one <math> element, or raises MathError with
one line saying what it cannot read; MATH_DISPLAY and MATH_INLINE find the equations in a note.
The notation is spelled out below, before the code that reads it."""
import html
import re


class MathError(Exception):
    """An equation the notation cannot read; its message is the one line a writer sees."""


# The notes write math in a small notation that reads well in an editor and is typeset on the
# page as MathML (drawn by the browser itself: no script, no network):
#
#     $L_MLM(x, θ_G) + λ L_Disc(x, θ_D)$     inline;  $$ ... $$ a display of its own
#     x_i  x^masked  x^corrupt_t  x_{t+1}     sub- and superscripts: one term, or a {group}
#     sum_{i ∈ m}  min_{θ_G, θ_D}  argmax     limits under the operator (∑ works too)
#     log exp sigmoid softmax round E H ...   functions, set upright
#     != <= >= <- -> ~ * ...                  ≠ ≤ ≥ ← → ∼ ⋅ …
#     "text"   for if and otherwise           words inside an equation
#     1(x_t = x^in_t)                         the indicator 𝟙(…), 1 where the condition holds
#     a display over several lines            one row per line, its columns split at &;
#                                             a row never ends on a ∑ and its limits
#
# Greek letters and symbols (θ λ ε β η ∈ ≠ ← √ ⌈ ⌉ ·) are written as themselves; braces that
# do not follow _, ^ or √ are shown as braces (unif{1, n}). No backslashes: docstrings would
# read them as escapes.

MATH_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<text>"[^"]*")
  | (?P<num>\d+(?:\.\d+)?)
  | (?P<word>[^\W\d_](?:[^\W_]|[\u0300-\u036f])*)
  | (?P<under>_)
  | (?P<op><-|->|!=|<=|>=|\.\.\.|[^\s\w])
""", re.X)
MATH_BIG = {"sum": "∑", "∑": "∑", "prod": "∏", "min": "min", "max": "max", "argmax": "argmax",
            "argmin": "argmin"}
MATH_FUNC = {"log", "ln", "exp", "sigmoid", "softmax", "round", "unif", "REPLACE", "E", "H", "GELU",
             "LN", "Attn", "FFN", "onehot", "mean", "dense", "clip", "sign"}
MATH_WORDS = {"for", "if", "and", "otherwise", "with", "else", "where"}
MATH_OPS = {"<-": "←", "->": "→", "!=": "≠", "<=": "≤", ">=": "≥", "-": "−", "*": "⋅",
            "~": "∼", "...": "…"}
# Brackets keep their size (as in LaTeX without \left): MathML would stretch every one of a
# row to the row's tallest term, a display ∑ with its limits.
MATH_FENCES = set("()[]{}|⌈⌉⌊⌋")
# A letter with a combining accent (x̂) is the letter, italic, under its accent: an <mi> of two
# characters would be set upright, as a name is.
MATH_ACCENTS = {"\u0302": "ˆ", "\u0303": "˜", "\u0304": "¯", "\u0307": "˙"}
# The indicator: a 1 right before "(" (no space, no digit or name before it) is 𝟙, which the
# notes may write as themselves too; a 1 that reads as minus one or one times ... is written
# with a space.
INDICATOR = re.compile(r"(?<![\w.^])1(?=\()")
# A row that ends on a ∑ (or ∏) with its limits would show "E[∑" alone: the ∑ goes on with the
# row that follows (its leading "  " text, an indent, dropped), and the row breaks after its
# "=" instead.
BIG_AT_END = re.compile(r"(?:\bsum|∑|\bprod)(?:_(?:\{[^}]*\}|[^\s{]))?"
                        r"(?:\^(?:\{[^}]*\}|[^\s{]))?\s*$")


def mathml(src, display=False):
    """The notation above -> one <math> element; MathError on what it cannot read."""
    def fail(why):
        raise MathError(f"math `{src.strip()}`: {why}")

    if "\\" in src:
        fail("no backslashes in the notation: write symbols as themselves (λ, not \\lambda)")

    def tokens(text):
        text = INDICATOR.sub("𝟙", text)
        out, pos = [], 0
        while pos < len(text):
            m = MATH_TOKEN.match(text, pos)
            if not m:
                fail(f"cannot read {text[pos:]!r}")
            pos = m.end()
            if m.lastgroup != "space":
                out.append((m.lastgroup, m.group()))
        return out

    def cell(toks):
        pos = 0

        def peek():
            return toks[pos] if pos < len(toks) else (None, None)

        def atom(group=False):
            """One term; a {group} only where `group` (after _, ^ or √), else a brace."""
            nonlocal pos
            kind, s = peek()
            if kind is None:
                fail("ends where a term was expected")
            pos += 1
            if s == "{" and group:
                inner = row("}")
                pos += 1
                return f"<mrow>{inner}</mrow>", "group"
            if s == "√":
                return f"<msqrt>{atom(True)[0]}</msqrt>", "group"
            if s == "𝟙":
                return '<mi mathvariant="normal">𝟙</mi>', "id"
            if kind == "num":
                return f"<mn>{s}</mn>", "num"
            if kind == "text":
                words = html.escape(s[1:-1].strip()).replace(" ", "\u00a0")   # one line:
                return f"<mtext>\u00a0{words}\u00a0</mtext>", "text"   # Chromium drops a 2nd
            if kind == "under" or s in ("^", "'"):
                fail(f"a {s} with nothing before it")
            if s in MATH_BIG:
                big = ' largeop="true"' if s in ("sum", "∑", "prod") else ""
                return f'<mo{big} movablelimits="true">{MATH_BIG[s]}</mo>', "big"
            if kind == "word" and s in MATH_WORDS:
                return f"<mtext>\u00a0{s}\u00a0</mtext>", "text"
            if kind == "word" and len(s) == 2 and s[1] in MATH_ACCENTS:
                return (f'<mover accent="true"><mi>{html.escape(s[0])}</mi>'
                        f"<mo>{MATH_ACCENTS[s[1]]}</mo></mover>"), "id"
            if kind == "word":
                upright = ' mathvariant="normal"' if len(s) == 1 and s in MATH_FUNC else ""
                return f"<mi{upright}>{html.escape(s)}</mi>", "func" if s in MATH_FUNC else "id"
            fixed = ' stretchy="false"' if s in MATH_FENCES else ""
            return f"<mo{fixed}>{html.escape(MATH_OPS.get(s, s))}</mo>", \
                "open" if s in "([{⌈⌊" else "op"

        def scripted():
            """A term with its sub- and superscripts: x_i, x^corrupt_t, sum_{i ∈ m}, x'."""
            nonlocal pos
            base, kind = atom()
            sub = sup = None
            primed = False
            while True:
                k, s = peek()
                if k == "under" and sub is None:
                    pos += 1
                    sub = atom(True)[0]
                elif s == "^" and sup is None:
                    pos += 1
                    sup = atom(True)[0]
                elif s == "'" and not primed:       # x′: the prime is raised already, beside x
                    pos += 1
                    primed = True
                    base = f'<mrow>{base}<mo lspace="0" rspace="0">′</mo></mrow>'
                else:
                    break
            names = ("munder", "mover", "munderover") if kind == "big" else \
                ("msub", "msup", "msubsup")
            if sub is not None or sup is not None:
                tag = names[(sub is not None) + 2 * (sup is not None) - 1]
                base = f"<{tag}>{base}{sub or ''}{sup or ''}</{tag}>"
            return base, kind

        def row(until=None):
            out, last = [], None
            while peek()[0] is not None and not (until and peek()[1] == until):
                item, kind = scripted()
                if item == "<mo>−</mo>" and last in (None, "op", "open", "text", "big"):
                    item = '<mo form="prefix">−</mo>'           # −log p, a sign: no gap after it
                last = kind
                if kind == "func" and out and (out[-1].endswith(("</mi>", "</mn>", ")</mo>",
                                                                   "</msub>", "</msup>"))):
                    out.append('<mspace width="0.17em"/>')     # x) log D, not x)logD
                out.append(item)
                if kind == "func" and peek()[1] not in ("(", "[", None):
                    out.append('<mspace width="0.17em"/>')     # log p, not logp
            if until and peek()[0] is None:
                fail("a { without its }")
            return "".join(out)

        return row()

    lines = []
    for line in src.strip().split("\n"):
        if lines and BIG_AT_END.search(lines[-1]):
            last, rest = lines[-1], re.sub(r'^\s*"\s*"', "", line)
            depth, cut = 0, None                   # the last "=" outside brackets and groups
            for i, ch in enumerate(last):
                depth += (ch in "([{") - (ch in ")]}")
                cut = i if ch == "=" and depth == 0 else cut
            lines[-1:] = [last[:cut + 1], f'{last[cut + 1:].strip()} {rest}'] \
                if cut is not None else [f"{last} {rest}"]
        else:
            lines.append(line)
    rows = [[cell(tokens(c)) for c in line.split("&")] for line in lines]
    if len(rows) == 1 and len(rows[0]) == 1:
        body = rows[0][0]
    else:
        body = '<mtable displaystyle="true">' + "".join(
            "<mtr>" + "".join(f'<mtd displaystyle="true">{c}</mtd>' for c in r) + "</mtr>" for r in rows) + "</mtable>"
    block = ' display="block"' if display else ""
    return f"<math{block}><mrow>{body}</mrow></math>"


MATH_DISPLAY = re.compile(r"\$\$(.+?)\$\$", re.S)
MATH_INLINE = re.compile(r"(?<![\w$\\])\$(?=\S)([^$\n]+?)(?<=\S)\$(?![\w$])")
PLACE = re.compile(r"⟦(\d+)⟧")                  # where a typeset equation goes back in
