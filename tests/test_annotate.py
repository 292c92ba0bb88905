"""The Annotated ELECTRA (teaching/annotate.py, docs/annotated.md): the pages are built from the
source and can never be out of date.

Built in a temporary folder, every reading-path file has its page, in the README's order; every
line of code of a file appears on its page exactly once and in order, and every comment and
docstring among the notes; every equation is typeset (MathML), and no raw LaTeX or ASCII
equation is left in the notes; every link and image resolves inside the folder (every anchor
included), names link to their definitions, every page to the paper, and nothing is fetched
from the network; a changed comment changes its page. The notes' claim about λ under Adam is
checked on a tiny model. (The step table: tests/test_one_step.py; the pages in a browser:
tests/test_annotate_browser.py.)

The build needs the optional Markdown renderer (`pip install markdown`): without it those tests
skip with the reason; the parser's and the math notation's tests and the one-line error without
the renderer run everywhere."""
import ast
import html
import io
import re
import shutil
import sys
import tokenize
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import HANG, ROOT, run_cli

sys.path.insert(0, str(ROOT))
from teaching import annotate, links, mathml  # noqa: E402
from teaching.annotate import READING_PATH  # noqa: E402
from teaching.figures import FIGURES  # noqa: E402

try:
    import markdown  # noqa: F401
    HAVE_MARKDOWN = True
except ImportError:
    HAVE_MARKDOWN = False
needs_markdown = pytest.mark.skipif(not HAVE_MARKDOWN, reason="the optional Markdown renderer "
                                    "is not installed (pip install markdown)")


# ----------------------------------------------------------------------------- the parser

SAMPLE = '''"""The module docstring.

Its second paragraph."""
import os

# ==================================================================== 1. first part

# A note about X,
# on two lines.
X = 1
Y = f(1,
      # a comment inside brackets stays in the code
      2)


def g(a):
    """g's docstring."""
    # BEGIN ASSIGNMENT g
    b = a + 1      # an inline comment stays
    # the note of the return
    return b
    # END ASSIGNMENT g
'''


def test_parse_splits_notes_from_code():
    intro, sections = annotate.parse(SAMPLE)
    assert intro == "The module docstring.\n\nIts second paragraph."
    assert [s.heading for s in sections] == ["", "1. first part", "", "", ""]
    imports, heading, x, g, ret = sections
    assert imports.code == ["import os"] and not imports.notes
    assert x.notes == ["A note about X,", "on two lines."]
    assert x.code[0] == "X = 1" and "# a comment inside brackets stays in the code" in x.code[2]
    assert "g's docstring." in "".join(g.notes)
    assert g.code == ["def g(a):", "    # BEGIN ASSIGNMENT g",
                      "    b = a + 1      # an inline comment stays"]
    assert ret.notes == ["the note of the return"]
    assert ret.code == ["    return b", "    # END ASSIGNMENT g"]
    assert x.first_line == 10 and ret.first_line == 21
    assert (g.first_line, g.last_line) == (16, 19)    # 3 lines of code; the docstring between


def test_a_comment_continuing_an_end_of_line_comment_stays_in_the_code():
    """A comment line lined up under the comment at the end of the line above continues it:
    it stays in the code, and the note that follows is not glued to it (config.py's fields)."""
    source = ("class C:\n"
              "    a = 1          # first | second\n"
              "                   # | third\n"
              "    # the note of b\n"
              "    b = 2\n"
              "    c = 3  # end\n"
              "    # not lined up: a note\n"
              "    d = 4\n")
    _, sections = annotate.parse(source)
    notes = [s.notes for s in sections]
    assert notes == [[], ["the note of b"], ["not lined up: a note"]], notes
    assert sections[0].code[-1].strip() == "# | third"

def test_the_math_notation_becomes_mathml():
    m = mathml.mathml
    assert m("L_MLM") == "<math><mrow><msub><mi>L</mi><mi>MLM</mi></msub></mrow></math>"
    key = m("min_{θ_G, θ_D} sum_{x ∈ X} L_MLM(x, θ_G) + λ L_Disc(x, θ_D)", display=True)
    assert key.startswith('<math display="block">') and key.count("<munder>") == 2
    assert '<mo movablelimits="true">min</mo>' in key and ">∑</mo>" in key and "<mi>λ</mi>" in key
    assert "<msup><mi>x</mi><mi>masked</mi></msup>" in m("x^masked")
    assert "<msubsup><mi>x</mi><mi>t</mi><mi>corrupt</mi></msubsup>" in m("x^corrupt_t")
    assert "<mo>≠</mo>" in m("a != b") and "<mo>←</mo>" in m("m <- g")
    assert "<mo>−</mo>" in m("1 - p")
    assert '<mo stretchy="false">{</mo>' in m("unif{1, n}") and "<msqrt>" in m("√{1 − β_2^t}")
    # brackets keep their size beside a display ∑ (MathML would stretch them to its height)
    assert m("E[ sum_{t=1}^n f(x) ]").count('<mo stretchy="false">') == 4
    # a sign has no gap after it, a difference has its spaces; x′ is x with a prime beside it
    assert '<mo>=</mo><mo form="prefix">−</mo><mi>log</mi>' in m("a = −log p")
    assert "<mn>1</mn><mo>−</mo>" in m("1 − p") and m("−1").count('form="prefix"') == 1
    assert '<mtext>\u00a0first\u00a0moment\u00a0</mtext>' in m('"first moment"')  # never wraps
    assert '<mrow><mi>x</mi><mo lspace="0" rspace="0">′</mo></mrow>' in m("e(x')") \
        and "<msup>" not in m("e(x')")
    assert '<msub><mover accent="true"><mi>x</mi><mo>ˆ</mo></mover><mi>i</mi></msub>' \
        in m("x̂_i")                                   # italic x under its hat, not upright x̂
    assert m("log p") == '<math><mrow><mi>log</mi><mspace width="0.17em"/><mi>p</mi></mrow></math>'
    rows = m("a & = b\n c & = d", display=True)                  # one row per line, & columns
    assert rows.count("<mtr>") == 2 and rows.count("<mtd ") == 4
    # the indicator: 1( is 𝟙, 1 − p and x_1(y) are not; a row never ends on a ∑ and its limits
    assert '<mo form="prefix">−</mo><mi mathvariant="normal">𝟙</mi><mo stretchy="false">(' \
        in m("−1(x_t = y)") and "𝟙" not in m("1 − p") + m("x_1(y)") + m("0.1(y)")
    disc = m('L = E[ sum_{t=1}^n\n "  " −1(a) log D\n "  " − 1(b) log(1 − D) ]', display=True)
    assert disc.count("<mtr>") == 3 and "</munderover><mo form=\"prefix\">−</mo><mi" in disc \
        and "<mo>=</mo></mtd></mtr>" in disc                  # the row breaks after "="
    for bad in ["x_", "x_{t", "^2", "a \\ b"]:
        with pytest.raises(mathml.MathError, match="math `"):
            m(bad)


def test_the_equation_rule_can_fail():
    """What the pages are checked for: the rule flags raw LaTeX and ASCII equations."""
    for raw in ["L_{MLM}", "\\lambda", "$x$", "λ = 50", "k = round(0.15 n)", "x ~ p_G",
                "a != b", "m <- g", "a ≤ b", "2*m*n", "sum_{i in m}", "E[ x ]", "e(x)^T h",
                "0.9 H(r) = 0.325", "L_Disc falls", "(L_MLM, objectives.py)"]:
        assert ASCII_EQUATION.search(raw), raw
    for prose in ["x_masked and x_corrupt", "lr 5e-4, batch 128", "1.29e18 FLOPs", "(B, T)",
                  "--max_steps 3000", "85 / 0 / 15 %", "max_len tokens", "dense, GELU"]:
        assert not ASCII_EQUATION.search(prose), prose


def test_missing_renderer_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "markdown", None)          # import markdown fails
    with pytest.raises(annotate.AnnotateError, match="pip install markdown"):
        annotate.libraries()


# ----------------------------------------------------------------------------- reading pages

class Page(HTMLParser):
    """The parts of a built page the tests look at: the code of each block, the notes' text,
    every link and image, every id, and external resources."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.code, self.notes, self.text = [], [], []
        self.refs, self.ids, self.scripts = [], set(), 0
        self._in_code = self._in_notes = 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "pre" and "highlight" in (a.get("class") or ""):
            self._in_code = 1
            self.code.append("")
        elif tag == "div" and a.get("class") == "notes":
            self._in_notes = 1
        elif self._in_notes and tag == "div":
            self._in_notes += 1
        for key in ("href", "src"):
            if key in a:
                self.refs.append((tag, a[key]))
        if tag == "script":
            self.scripts += 1

    def handle_endtag(self, tag):
        if tag == "pre":
            self._in_code = 0
        elif tag == "div" and self._in_notes:
            self._in_notes -= 1

    def handle_data(self, data):
        if self._in_code:
            self.code[-1] += data
        if self._in_notes:
            self.notes.append(data)
        self.text.append(data)


def words(text):
    """The words of a text, equations read as their symbols ($x^masked_t$: x masked t)."""
    text = re.sub(r"\$+([^$]*)\$+", lambda m: re.sub(r"[_^{}]", " ", m.group(1)), text)
    text = re.sub("[\u0300-\u036f\u02c6\u02dc\u00af\u02d9]", " ", text)   # x̂: x and its hat
    return " ".join(re.findall(r"\w+", text))


# An equation left untypeset: raw LaTeX or math markers, a sub- or superscript group, a limit,
# an expectation, an operator between terms (=, ~, ←, ≠, ≤, ≥ and their ASCII spellings), 2*m*n,
# the paper's two losses written as names (L_MLM, L_Disc: the notes typeset them).
ASCII_EQUATION = re.compile(
    r"\bL_(?:MLM|Disc)\b"
    r"|\$|\\[A-Za-z]|\w_\{|\^\{|\^T\b|\w\^\w|\b(?:sum|min|max|argmax)_(?:\{|\w\b)|\bsum[{(]"
    r"|\bE\[|\s~\s|<-|!=|<=|>=|[≠≤≥←∼]|[\w)]\s?=\s?[\w(−-]|\d\s?\*\s?[a-z]")


class NoteText(HTMLParser):
    """The text of a page a reader reads as prose: everything but the code column, code spans,
    code blocks, figures, navigation and typeset math; `maths` counts the <math> elements."""
    SKIP = ("nav", "figure", "pre", "code", "math")

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.stack, self.text, self.maths, self.aside_words = [], [], 0, 0
        self.details = 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.maths += tag == "math"
        self.details += tag == "details"
        if self.stack:
            self.stack += [tag] if tag in self.SKIP + ("div",) else []
        elif tag in self.SKIP or (tag == "div" and a.get("class") == "code"):
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if self.stack and tag in self.SKIP + ("div",):
            self.stack.pop()
        self.details -= tag == "details"

    def handle_data(self, data):
        if not self.stack:
            self.text.append(data)
            if self.details:
                self.aside_words += len(data.split())


class ShownText(NoteText):
    """NoteText with the figures: their captions and the step table's cells and row names."""
    SKIP = ("nav", "pre", "code", "math")


def expected_code(source):
    """The file's lines of code, by a rule of this test's own: every non-blank line that is
    not a comment-only line and not part of a class's or function's docstring."""
    tree = ast.parse(source)
    in_doc = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant) \
                and isinstance(node.body[0].value.value, str):
            in_doc.update(range(node.body[0].lineno, node.body[0].end_lineno + 1))
    return [line for i, line in enumerate(source.splitlines(), 1)
            if line.strip() and not line.strip().startswith("#") and i not in in_doc]


@needs_markdown
def test_every_reading_path_file_has_its_page_in_order(built):
    out, pages = built
    assert pages == ["index.html"] + [Path(f).stem + ".html" for f in READING_PATH]
    index = (out / "index.html").read_text(encoding="utf-8")
    in_order = re.findall(r'<a class="file" href="([^"]+)"', index)
    assert in_order == [Path(f).stem + ".html" for f in READING_PATH]
    # the index states the idea before the reading path, key equation included
    idea = index[:index.index("The reading path")]
    assert "discriminator D" in idea and "every" in idea
    assert idea.count('<math display="block">') == 1 and idea.count("<math") >= 2   # and k's
    for symbol in ("θ", "X", "λ"):                   # the display's symbols, defined after it
        assert f"<mi>{symbol}</mi>" in idea.split("</math>", 2)[-1] or symbol == "X", symbol
    assert "X the training corpus" in idea and "BEGIN ANSWER" in idea
    for k, f in enumerate(READING_PATH):
        text = (out / (Path(f).stem + ".html")).read_text(encoding="utf-8")
        assert f"<h1>{k + 1}. <code>{f}</code></h1>" in text


@needs_markdown
@pytest.mark.parametrize("file", READING_PATH)
def test_every_line_of_code_once_and_in_order_every_note_shown(built, file):
    out, _ = built
    source = (ROOT / file).read_text(encoding="utf-8")
    page = Page((out / (Path(file).stem + ".html")).read_text(encoding="utf-8"))
    shown = [line for block in page.code for line in block.split("\n")
             if line.strip() and not line.strip().startswith("#")]
    assert shown == expected_code(source)
    # Every comment-only line and every docstring is on the page, among the notes or the code.
    text = words(" ".join(page.text))
    comments = [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline)
                if t.type == tokenize.COMMENT and not t.line[:t.start[1]].strip()]
    for c in comments:
        assert words(c) in text, c
    notes = words(" ".join(page.notes))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and ast.get_docstring(node):
            first = ast.get_docstring(node).split("\n")[0]
            assert words(first) in notes, (node.name, first)


@needs_markdown
def test_every_link_and_image_resolves_offline(built):
    out, pages = built
    ids = {p: Page((out / p).read_text(encoding="utf-8")).ids for p in pages}
    n_images = 0
    for p in pages:
        page = Page((out / p).read_text(encoding="utf-8"))
        assert page.scripts == 0, p
        for tag, ref in page.refs:
            assert not re.match(r"^[a-z]+:", ref) or tag == "a" and ref.startswith("https://"), \
                f"{p}: {ref} would need the network or a server"
            if re.match(r"^[a-z]+:", ref):
                continue
            target, _, anchor = ref.partition("#")
            target = target or p
            assert (out / target).is_file(), f"{p}: {ref} does not resolve"
            if anchor:
                assert anchor in ids[target], f"{p}: {ref}: no such anchor"
            n_images += tag == "img"
    assert n_images == sum(f.src.endswith(".png") for figs in FIGURES.values() for f in figs)
    assert (out / "style.css").stat().st_size > 1000


@needs_markdown
def test_every_file_a_note_names_is_a_link_that_works(built):
    """A repository file a page names (docs/plateau.md, machinery/mlm_output.py, a script in a
    command) is a link, outside code blocks, and it leads to a page of the folder that shows
    the file: its reading-path page, or its own page with the file's text."""
    out, pages = built
    for p in pages:
        text = (out / p).read_text(encoding="utf-8")
        bare = re.sub(r"<pre.*?</pre>|<a [^>]*>.*?</a>|<title>.*?</title>", " ", text, flags=re.S)
        bare = html.unescape(re.sub(r"<[^>]+>", " ", bare))
        dead = {m for m in links.REPO_PATH.findall(bare)
                if (ROOT / m).is_file() and m != p.replace(".html", ".py")}
        assert not dead, f"{p}: names these files without a link: {sorted(dead)}"
        for href, name in re.findall(r'<a href="(repo\.[^"#]+)">([^<]+)</a>', text):
            page = (out / href).read_text(encoding="utf-8")
            first = (ROOT / name).read_text(encoding="utf-8").strip().split("\n")[0]
            assert f"file <code>{html.escape(name)}</code>," in page, (p, href)
            assert words(first) in words(html.unescape(re.sub(r"<[^>]+>", "", page))), (p, href)
            for ref in re.findall(r'<(?:a|img|link)\s[^>]*?(?:href|src)="(?![a-z]+:)([^"#]+)', page):
                assert (out / ref).is_file(), f"{href}: {ref} does not resolve"
    # the rule can fail: a file that exists is linked, one that does not is left as text
    repo = links.RepoFiles(ROOT)
    linked = links.Links({}, "x", repo=repo).html("see docs/plateau.md and docs/no_such.md")
    assert linked == ('see <a href="repo.docs.plateau.md.html">docs/plateau.md</a> and '
                      "docs/no_such.md")


PAGES = ["index.html"] + [Path(f).stem + ".html" for f in READING_PATH]


def source_maths(file):
    """How many equations the notes of a file write ($...$ and $$...$$), by a count of the
    test's own over what the parser hands the page (its docstrings and comment notes)."""
    intro, sections = annotate.parse((ROOT / file).read_text(encoding="utf-8"))
    notes = "\n".join([intro] + ["\n".join(s.notes) for s in sections])
    display = re.findall(r"\$\$.*?\$\$", notes, re.S)
    rest = re.sub(r"\$\$.*?\$\$", "", notes, flags=re.S)
    return len(display) + len(re.findall(r"\$[^$\n]+\$", rest))


@needs_markdown
@pytest.mark.parametrize("page", PAGES)
def test_every_equation_is_typeset(built, page):
    """No raw LaTeX or ASCII equation is left in what a reader reads as prose (ASCII_EQUATION),
    the figures' captions and the step table included, no code block among the notes holds an
    equation, and every equation the source writes is a <math> element on the page."""
    out, _ = built
    text = (out / page).read_text(encoding="utf-8")
    prose = NoteText(re.sub(r"<figure.*?</figure>", "", text, flags=re.S))    # the notes' math
    left = [" ".join(t.split())[:80] for t in ShownText(text).text if ASCII_EQUATION.search(t)]
    assert not left, f"{page}: untypeset equations in the notes: {left}"
    for block in re.findall(r"<pre><code>(.*?)</code></pre>", text, re.S):   # notes' blocks
        for line in html.unescape(block).splitlines():
            if not re.match(r"\s*(python|bash|torchrun|pip|GLUE_DIR)\b", line):
                assert not re.search(r"=|←|∼| ~ |\bsum\b|\^", line), f"{page}: {line}"
    if page != "index.html":
        file = READING_PATH[PAGES.index(page) - 1]
        assert prose.maths == source_maths(file), page
    if page == "objectives.html":        # the key equation, displayed
        key = re.search(r'<div class="math"><math display="block">(.*?)</math>', text, re.S)
        assert key and "L</mi><mi>MLM" in text and "<mi>λ</mi>" in text


@needs_markdown
def test_names_link_to_their_definitions_and_pages_to_the_paper(built):
    out, _ = built
    for file in READING_PATH:
        page = (out / (Path(file).stem + ".html")).read_text(encoding="utf-8")
        ids = Page(page).ids
        tree = ast.parse((ROOT / file).read_text(encoding="utf-8"))
        for node in tree.body:              # every definition has its anchor
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                assert node.name in ids, (file, node.name)
        # every page links to the paper's pages; a note naming an official file links to it
        assert re.search(r'href="https://arxiv\.org/pdf/2003\.10555v1#page=\d+"', page), file
        for base in links.OFFICIAL_FILES:
            if re.search(rf"\b{base}\.(py|[a-z_]+)\b", " ".join(NoteText(page).text)):
                assert links.OFFICIAL_FILE.format(links.OFFICIAL_FILES[base]) in page, \
                    (file, base)
    objectives = (out / "objectives.html").read_text(encoding="utf-8")
    assert '<a href="#mask_tokens"><code>mask_tokens</code></a>' in objectives   # a name, here
    assert 'href="pretrain/pretrain_helpers.py"' not in objectives
    assert 'href="train.html#masked_batch"' in objectives                         # elsewhere
    train = (out / "train.html").read_text(encoding="utf-8")
    assert 'href="objectives.html#Pretraining"' in train and 'href="optim.html"' in train
    # a list of appendices links each; a figure's caption links as a note does
    pdf = links.PAPER_PDF
    assert (f'<a href="{pdf.format(13)}">Appendix B</a>, <a href="{pdf.format(15)}">C</a>'
            in (out / "finetune_glue.html").read_text(encoding="utf-8"))
    caption = re.search(r"<figcaption>(.*?)</figcaption>", objectives, re.S).group(1)
    assert '<a href="train.html">' in caption, caption


@needs_markdown
def test_engineering_waits_in_closed_asides(built):
    """No page opens with engineering: a page's first aside comes after its lead and some
    notes, every aside is closed, and the notes a reader sees stay lean."""
    out, _ = built
    seen = 0
    for page in PAGES:
        text = (out / page).read_text(encoding="utf-8")
        assert "<details open" not in text and "<details class=\"aside\" open" not in text
        if "<details" in text:
            before = NoteText(text[:text.index("<details")])
            assert len(" ".join(before.text).split()) > 40, page
        prose = NoteText(text[text.index("<body>"):])
        seen += len(" ".join(prose.text).split()) - prose.aside_words
    train = (out / "train.html").read_text(encoding="utf-8")
    # train.py's engineering: in asides, the loop's machinery in machinery/ (run_state.py,
    # run_log.py, stepper.py, ...), so the page shows the step and the loop
    assert train.count('<details class="aside">') >= 5 and "machinery/stepper.py" in train
    assert "torch.compile" not in " ".join(NoteText(train[:train.index("<main>")]).text)
    assert seen <= 4500, f"{seen} words of notes outside the asides: the pages should stay lean"
    assert '<summary>Details</summary>' in train       # runs and provenance wait too


@needs_markdown
def test_a_bad_equation_stops_the_build_in_one_line(tmp_path):
    copy_project(tmp_path / "src")
    gen = tmp_path / "src" / "generator.py"
    gen.write_text(gen.read_text(encoding="utf-8").replace(
        "import torch\n", "import torch\n# $x_{t+1$ never closed\n", 1), encoding="utf-8")
    with pytest.raises(annotate.AnnotateError, match=r"^generator\.py: math `x_\{t\+1`"):
        annotate.build(tmp_path / "out", root=tmp_path / "src")
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".annotated-*"))


def copy_project(dst):
    """The files a build reads: the reading path and the generated figures."""
    for f in READING_PATH + [fig.src for figs in FIGURES.values() for fig in figs]:
        (dst / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / f, dst / f)


@needs_markdown
def test_a_changed_comment_changes_its_page(tmp_path):
    copy_project(tmp_path / "src")
    annotate.build(tmp_path / "before", root=tmp_path / "src")
    gen = tmp_path / "src" / "objectives.py"
    source = gen.read_text(encoding="utf-8")
    old = next(line for line in source.splitlines() if line.strip().startswith("# ")
               and not annotate.KEEP_IN_CODE.match(line) and not annotate.BANNER.match(line))
    new = old.split("#")[0] + "# A note the tests wrote: G samples what D must judge."
    gen.write_text(source.replace(old, new, 1), encoding="utf-8")
    annotate.build(tmp_path / "after", root=tmp_path / "src")
    for name in ["index.html"] + [Path(f).stem + ".html" for f in READING_PATH]:
        before = (tmp_path / "before" / name).read_text(encoding="utf-8")
        after = (tmp_path / "after" / name).read_text(encoding="utf-8")
        assert (before != after) == (name == "objectives.html"), name
    after = (tmp_path / "after" / "objectives.html").read_text(encoding="utf-8")
    assert "A note the tests wrote: G samples what D must judge." in after
    assert html.escape(old.split("# ", 1)[1], quote=False) not in after


@needs_markdown
def test_command_line_builds_and_refuses_a_foreign_folder(tmp_path):
    out = tmp_path / "pages"
    p = run_cli("teaching/annotate.py", "--out", out, timeout=HANG)
    assert p.returncode == 0, p.stderr
    assert "wrote 14 pages" in p.stdout and (out / "index.html").is_file()
    p = run_cli("teaching/annotate.py", "--out", out, timeout=HANG)       # a rebuild replaces
    assert p.returncode == 0, p.stderr
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    p = run_cli("teaching/annotate.py", "--out", foreign, timeout=HANG)
    assert p.returncode == 2 and p.stderr.startswith("error: ") and p.stderr.count("\n") == 1
    assert sorted(x.name for x in foreign.iterdir()) == ["notes.txt"]
    assert not list(tmp_path.glob(".annotated-*"))                      # nothing half-written
    (tmp_path / "afile").write_text("x")
    p = run_cli("teaching/annotate.py", "--out", tmp_path / "afile", timeout=HANG)
    assert p.returncode == 2 and p.stderr.startswith("error: ") and p.stderr.count("\n") == 1


def test_the_lambda_note_holds(one_thread):
    """objectives.ELECTRA.forward's note: under Adam, λ cancels (but for ε) in the steps of the
    weights only one loss reaches, D's own and G's own, and changes the shared embeddings'
    step; and the clip at norm 1, which λ's gradients set off, scales G's gradient down too.
    One step of the tiny model at λ = 1 and at λ = 50."""
    from contextlib import nullcontext
    import torch
    from ablations import build_model
    from config import SIZES, Config
    from objectives import mask_tokens
    from optim import AdamWeightDecay
    from train import update

    shared = lambda k: ".embeddings." in k
    d_own = lambda k: k.startswith("discriminator.") and not shared(k)
    g_own = lambda k: k.startswith("generator.") and not shared(k)

    def step(lam, clip):
        """The update of every weight, and the norm of G's own gradient after the clip."""
        cfg = Config(**SIZES["tiny"], vocab_size=300, disc_weight=lam)
        torch.manual_seed(0)
        model = build_model(cfg)
        before = {k: v.detach().clone() for k, v in model.named_parameters()}
        opt = AdamWeightDecay(model.parameters(), lr=5e-4, eps=1e-30)   # ε out of the way
        g = torch.Generator().manual_seed(1)
        x = torch.randint(0, 296, (8, 64), generator=g)
        masked = mask_tokens(x, (), 299, cfg.n_slots, generator=g)
        torch.manual_seed(2)
        update(model, opt, dict(x=x, masked=masked), clip, nullcontext)
        grad_g = sum(p.grad.norm() ** 2 for k, p in model.named_parameters() if g_own(k)) ** .5
        return {k: v.detach() - before[k] for k, v in model.named_parameters()}, float(grad_g)

    def apart(a, b, part):
        # (qkv biases left out: the keys' bias gets no gradient but rounding noise)
        keys = [k for k in a if part(k) and "qkv.bias" not in k]
        return float(sum((a[k] - b[k]).norm() ** 2 for k in keys) ** .5 /
                     sum(a[k].norm() ** 2 for k in keys) ** .5)
    (a, grad_a), (b, grad_b) = step(1.0, 1e9), step(50.0, 1e9)        # no clip
    assert apart(a, b, d_own) < 1e-4 and apart(a, b, g_own) < 1e-6 and grad_a == grad_b
    assert apart(a, b, shared) > 0.1
    (_, grad_a), (_, grad_b) = step(1.0, 1.0), step(50.0, 1.0)        # the clip at norm 1
    assert grad_b < grad_a / 2


@needs_markdown
def test_lambda_weighs_the_means_the_page_shows(built):
    """λ = 50 belongs to the losses' means, and the objectives page says so where it introduces
    λ: its display divides L_MLM by N_M (the batch's used mask slots) and L_Disc by N_R (its
    real tokens), which is what `mlm_loss` and `disc_loss` compute (checked numerically: the
    mean, not the sum), and its n / k and 50 k / n are Small's 128 tokens and 19 slots."""
    import torch
    from config import Config
    from objectives import disc_loss, mlm_loss
    out, _ = built
    page = (out / "objectives.html").read_text(encoding="utf-8")
    intro = page[:page.index('id="mask_tokens"')]
    prose = " ".join(" ".join(NoteText(intro).text).split())
    assert "λ weighs means, not these sums" in prose and "configure_pretraining.py" in intro
    means = re.findall(r'<math display="block">(.*?)</math>', intro, re.S)[-1]
    for n in ("M", "R"):            # 1 / N_M and 1 / N_R before a ∑, once each
        assert re.search(rf"<mn>1</mn><mo>/</mo><msub><mi>N</mi><mi>{n}</mi></msub>"
                         r"<munder><mo[^>]*>∑</mo>", means), n
    g = torch.Generator().manual_seed(5)
    logits, replaced = torch.randn(4, 12, generator=g), torch.rand(4, 12, generator=g) < 0.2
    real = torch.rand(4, 12, generator=g) < 0.8
    bce = torch.nn.functional.binary_cross_entropy_with_logits(
        logits, replaced.float(), reduction="none")
    assert torch.allclose(disc_loss(logits, replaced, real), bce[real].sum() / real.sum())
    assert not torch.allclose(disc_loss(logits, replaced, real), bce[real].sum())
    gen, targets = torch.randn(4, 5, 30, generator=g), torch.randint(0, 30, (4, 5), generator=g)
    used = (torch.arange(5)[None] < torch.tensor([[5], [3], [4], [1]])).float()
    nll = torch.nn.functional.cross_entropy(gen.flatten(0, 1), targets.flatten(),
                                            reduction="none").view(4, 5)
    assert torch.allclose(mlm_loss(gen, targets, used), (nll * used).sum() / used.sum())
    cfg = Config()
    n, k = cfg.seq_len, cfg.n_slots
    assert cfg.disc_weight == 50                   # the λ the page names
    assert f"{n / k:.1f}" in intro and f"{cfg.disc_weight * k / n:.1f}" in intro


class SiteLinks(HTMLParser):
    """Every id of a built page, its links and images, and its <a> elements without an href."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.ids, self.refs, self.bare = set(), [], 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.ids.update([a["id"]] if "id" in a else [])
        self.bare += tag == "a" and "href" not in a
        self.refs += [a[k] for k in ("href", "src") if k in a and tag in ("a", "img", "link")]


@needs_markdown
def test_no_link_without_a_target_on_the_whole_site(built):
    """Every page of the folder, the rendered documents and file pages included: each link and
    image leads to a file of the folder and its anchor, no <a> lacks an href, and no link of a
    rendered document was left as text (`data-file`: a target that is no file of the
    repository). No page names a path outside the repository."""
    out, _ = built
    site = {p.name: p.read_text(encoding="utf-8") for p in out.glob("*.html")}
    parsed = {name: SiteLinks(text) for name, text in site.items()}
    bad, n = [], 0
    for name, page in parsed.items():
        bad += [f"{name}: <a> without href"] * page.bare
        bad += [f"{name}: a link left as text"] * site[name].count("data-file=")
        bad += [f"{name}: names ../shared"] * ("../shared" in site[name])
        for ref in page.refs:
            if re.match(r"[a-z]+:", ref):
                continue
            n += 1
            target, _, anchor = ref.partition("#")
            target = target or name
            if not (out / target).is_file():
                bad.append(f"{name}: {ref}")
            elif anchor and target in parsed and anchor not in parsed[target].ids:
                bad.append(f"{name}: {ref}: no such anchor")
    assert not bad, bad[:20]
    assert n > 600 and "repo.docs.appendix-g.md.html" in site      # plateau.md's link, followed
