"""The Annotated ELECTRA: the paper's reading path as web pages, the notes beside the code.

Each file of the reading path (README, "Where things are"; READING_PATH below, in that order)
becomes one page, built from the source itself so that the notes cannot drift from the code:

    the file's docstring                  -> the page's introduction (it names the paper section)
    a comment above a block of code       -> the note on the left, the block on the right
    a function's or class's docstring     -> the note on the left of its `def` / `class`
    a `# ===== 1. mask` banner            -> a heading across both columns
    `$...$` and `$$...$$` in a note       -> typeset math (MathML; the notation: teaching/mathml.py)
    a paragraph opening "Engineering:"    -> an aside, closed until the reader opens it
    a paragraph opening "Details:"        -> the same, for runs, machines and provenance
    a name, a file, a section             -> a link to its definition, page, or the paper

Between the notes, what a reader would rather see than read, all of it generated, none drawn
by hand (teaching/figures.py): Figure 2 with the tensors of a real checkpoint, one real step as a table of
tokens (docs/one_step.json, written by teaching/one_step.py), the plateau of a real laptop run
(docs/plateau_run.png, drawn by plot_results.py --plateau from a real log) and GLUE against
compute.

    python teaching/annotate.py                       # writes out_annotated/index.html + 13 pages
    python teaching/annotate.py --out site/annotated  # anywhere else

The folder opens from disk (file://) with no server and no network: plain HTML, one style
sheet, the figures copied beside the pages, no script; the math is MathML, which current
browsers draw themselves. Needs the optional Markdown renderer (`pip install markdown`;
Pygments, the highlighter, comes with pytest); without it the command says so in one line.
tests/test_annotate.py builds the pages and checks them; docs/annotated.md says how they are
built and tested.
"""
import ast
import html
import inspect
import io
import json
import posixpath
import re
import shutil
import sys
import tempfile
import time
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

if not __package__:   # run as a path (python teaching/annotate.py): import from the project root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machinery import cli
from teaching.figures import FIGURES, step_table
from teaching.links import OFFICIAL, PAPER, Links, RepoFiles, definitions
from teaching.mathml import MATH_DISPLAY, MATH_INLINE, PLACE, MathError, mathml
from teaching.page_style import PAGE, STYLE

ROOT = Path(__file__).resolve().parents[1]                 # the project root

# The reading path, in the README's order: one page each, numbered in this order.
READING_PATH = ["objectives.py", "generator.py", "discriminator.py", "encoder.py", "train.py",
                "config.py", "optim.py", "data.py", "batches.py", "ablations.py",
                "finetune_glue.py", "glue.py", "flops.py"]

# Pages that are mostly input and output: marked on the index and on the page itself, so that
# the core path (the others) reads in one sitting.
OPTIONAL = ("data.py", "batches.py", "glue.py")
OPTIONAL_NOTE = "optional: input and output, to skip on a first read"

TITLE = "The Annotated ELECTRA"
MARKER = ".annotated-electra"       # in a built folder: a rebuild may replace that folder


class AnnotateError(Exception):
    """Bad input or a missing optional library: one `error:` line, exit code 2."""


# ----------------------------------------------------------------------------- reading a file

BANNER = re.compile(r"^\s*#\s*(?:[=-]{8,}\s*(.*?)|-{2,}\s+(.*?)\s*-{4,})\s*$")   # `# ==== 1. mask`, `# -- x ----`
KEEP_IN_CODE = re.compile(r"^\s*#\s*(BEGIN|END) (ASSIGNMENT|ANSWER)\b|^\s*#!|^\s*#\s*noqa\b")


@dataclass
class Section:
    """One row of a page: notes (Markdown) on the left, code on the right, or a heading."""
    notes: list = field(default_factory=list)      # Markdown chunks
    code: list = field(default_factory=list)       # source lines
    first_line: int = 0                            # source line number of the first code line
    last_line: int = 0                             # and of the last (docstrings skipped between)
    heading: str = ""                              # a banner: a heading across both columns


def docstring_spans(tree, lines):
    """{first line: (last line, text)} of every class and function docstring that stands on
    lines of its own (1-based), and the module docstring's span, or None."""
    spans, module = {}, None
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        if not (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            continue
        d = body[0]
        alone = (not lines[d.lineno - 1][:d.col_offset].strip()
                 and not lines[d.end_lineno - 1][d.end_col_offset:].strip())
        if isinstance(node, ast.Module):
            module = (d.lineno, d.end_lineno, d.value.value)
        elif alone and d.lineno > node.lineno:     # not on the `def` line itself
            spans[d.lineno] = (d.end_lineno, d.value.value)
    return spans, module


def comment_lines(source):
    """{line number: comment text} of the lines that hold only a comment, outside brackets
    (a comment inside an open bracket belongs to its expression and stays in the code), and
    not lined up under the comment at the end of the line above (it continues that comment,
    which stays in the code)."""
    out, depth, trailing = {}, 0, None      # trailing: (row, column) of an end-of-line comment
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        elif tok.type == tokenize.COMMENT:
            (row, col), alone = tok.start, not tok.line[:tok.start[1]].strip()
            if not alone or trailing == (row - 1, col):
                trailing = (row, col)           # `x = 1   # a comment` and its next lines
            elif depth == 0:
                out[row] = tok.string
    return out


def comment_text(comment):
    """`#   text` -> `  text`: the comment marker and one space go, further indentation stays."""
    text = comment[1:]
    return text[1:] if text.startswith(" ") else text


def parse(source):
    """(module docstring, [Section]) of a Python file: the page's content, in source order."""
    lines = source.splitlines()
    tree = ast.parse(source)
    docs, module = docstring_spans(tree, lines)
    comments = comment_lines(source)
    # Where a documented def/class starts (its first decorator): a new section begins there.
    starts = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and \
                node.body and node.body[0].lineno in docs:
            starts.add(min([node.lineno] + [d.lineno for d in node.decorator_list]))
    sections = [Section()]

    def new_section():
        if sections[-1].notes or any(l.strip() for l in sections[-1].code) or sections[-1].heading:
            sections.append(Section())
        sections[-1].code = []                     # blank lines before a new start are dropped
        return sections[-1]

    i = module[1] + 1 if module else 1             # 1-based line number
    while i <= len(lines):
        line = lines[i - 1]
        cur = sections[-1]
        if i in comments and not KEEP_IN_CODE.match(line):
            banner = BANNER.match(line)
            if banner:                             # `# ===== 1. mask`: a heading row
                sec = new_section()
                sec.heading = banner.group(1) or banner.group(2) or " "
                sections.append(Section())
            else:
                if any(l.strip() for l in cur.code):
                    cur = new_section()
                cur.notes.append(comment_text(comments[i]))
            i += 1
        elif i in docs:                             # a docstring: the note of its def/class
            last, text = docs[i]
            cur.notes.append("\n\n" + inspect.cleandoc(text) + "\n\n")
            i = last + 1
        else:
            if i in starts and any(l.strip() for l in cur.code):
                cur = new_section()
            if not cur.code and not line.strip():   # no blank lines at a block's top
                i += 1
                continue
            if not cur.code:
                cur.first_line = i
            cur.code.append(line)
            cur.last_line = i
            i += 1
    for s in sections:                              # no blank lines at a block's end
        while s.code and not s.code[-1].strip():
            s.code.pop()
    sections = [s for s in sections if s.heading or s.notes or s.code]
    return (inspect.cleandoc(module[2]) if module else ""), sections


# ----------------------------------------------------------------------------- notes

CODE_SPAN = re.compile(r"(`+).*?\1")
LIST_ITEM = re.compile(r"^ {0,3}[*-] ")
INNER_STAR = re.compile(r"(?<=\w)\*(?=\w)")                          # 2*m*n, not emphasis
EDGE_UNDERSCORE = re.compile(r"(?<![\w`*)\]])(_\w*|\w+_)(?![\w`])")   # not h_G(x)_t
# A note's paragraph that opens with one of these is a closed aside, under that summary:
# engineering (what serves speed or scale) and details (runs, machines, dates, versions and
# the official code's bookkeeping), so that the notes a reader sees state the idea.
ASIDES = {"Engineering:": "Engineering", "Details:": "Details"}
# Under a picture wider than this (px), or the step table: on a phone it scrolls in its own box,
# and a line (shown on narrow screens only) says so.
WIDE_PICTURE = 520
SCROLL_CUE = "↔ wider than the screen: swipe it sideways for the rest"
# x̂ in the code and code spans: wrapped so that a text font sets the hat on the x (`.acc`).
X_HAT = re.compile(r"<(pre|code)\b.*?</\1>", re.S)


def libraries():
    """(markdown, pygments pieces), or AnnotateError naming the install command."""
    try:
        import markdown
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer
    except ImportError as e:
        raise AnnotateError(f"the Annotated ELECTRA needs the optional {e.name} library: "
                            "pip install markdown pygments") from None
    return markdown, highlight, HtmlFormatter, PythonLexer


def notes_markdown(text, maths):
    """The notes' Markdown: comment lines joined as written, docstrings as paragraphs. Every
    equation is set aside as ⟦n⟧ (its MathML appended to `maths`), a display one as a
    paragraph of its own. A name that starts or ends with an underscore (`_foreach_`,
    `__init__`) is set as code, or Markdown would read its underscores as emphasis; `x_masked`
    is safe as it is."""
    def put(src, display):
        try:
            maths.append(mathml(src, display))
        except MathError as e:
            raise AnnotateError(str(e)) from None
        return f"⟦{len(maths) - 1}⟧"
    text = MATH_DISPLAY.sub(lambda m: "\n\n" + put(inspect.cleandoc(m.group(1)), True) + "\n\n",
                            text)
    lines, prev = [], ""
    for line in text.strip("\n").split("\n"):
        if line.startswith(("    ", "\t")):      # an indented block is shown as written
            lines.append(line)
            prev = line
            continue
        # "rules:\n  * a ...": Markdown needs a blank line before a list that follows text
        if LIST_ITEM.match(line) and prev.rstrip().endswith(":") and not LIST_ITEM.match(prev):
            lines.append("")
        out, pos = [], 0
        for span in CODE_SPAN.finditer(line):   # leave what is already code alone
            out.append(plain(line[pos:span.start()], put) + span.group(0))
            pos = span.end()
        lines.append("".join(out) + plain(line[pos:], put))
        prev = line
    return "\n".join(lines).strip()


def plain(text, put=None):
    """Markdown that shows `text` as the source writes it: `_x_` as code, 2*m*n as is, and
    each `$...$` set aside by `put` (see notes_markdown)."""
    pieces = MATH_INLINE.split(text) if put else [text]       # text, math, text, ...
    return "".join(put(p, False) if k % 2 else
                   INNER_STAR.sub(r"\*", EDGE_UNDERSCORE.sub(r"`\1`", p))
                   for k, p in enumerate(pieces))


def notes_html(markdown, text, links):
    """A note (Markdown with math) -> HTML: typeset, linked, and each paragraph that opens
    with "Engineering:" or "Details:" in a closed aside (`ASIDES`)."""
    maths = []
    blocks, html_parts, run = notes_markdown(text, maths).split("\n\n"), [], []

    def flush():
        if run:
            html_parts.append(markdown_html(markdown, "\n\n".join(run)))
            run.clear()
    for block in blocks:
        opener = next((a for a in ASIDES if block.startswith(a)), None)
        if opener:
            flush()
            body = markdown_html(markdown, block[len(opener):].strip())
            html_parts.append(f'<details class="aside"><summary>{ASIDES[opener]}</summary>'
                              f"{body}</details>")
        else:
            run.append(block)
    flush()
    out = links.html("\n".join(html_parts))
    out = re.sub(r"<p>⟦(\d+)⟧</p>", lambda m: f'<div class="math">{maths[int(m.group(1))]}</div>',
                 out)
    return PLACE.sub(lambda m: maths[int(m.group(1))], out)


# ----------------------------------------------------------------------------- pages

def markdown_html(markdown, text):
    """Markdown -> HTML with Python-Markdown (fenced and indented blocks as written)."""
    return markdown.markdown(text, extensions=["fenced_code", "tables"], output_format="html")


def page_name(file):
    return Path(file).stem + ".html"


def nav(k):
    """The bar above and below page k (0-based; -1 for the index): home, position, prev/next,
    the paper and the official code."""
    parts = [f'<a class="home" href="index.html">{TITLE}</a>']
    if k >= 0:
        parts.append(f"<span>{k + 1} / {len(READING_PATH)}</span>")
        if k > 0:
            prev = READING_PATH[k - 1]
            parts.append(f'<a rel="prev" href="{page_name(prev)}">&larr; {prev}</a>')
        if k + 1 < len(READING_PATH):
            nxt = READING_PATH[k + 1]
            parts.append(f'<a rel="next" href="{page_name(nxt)}">{nxt} &rarr;</a>')
    else:
        parts.append(f'<a rel="next" href="{page_name(READING_PATH[0])}">'
                     f"start: {READING_PATH[0]} &rarr;</a>")
    parts.append(f'<a href="{PAPER}">the paper</a> <a href="{OFFICIAL}">official code</a>')
    return " ".join(parts)


def png_width(path):
    """The width in pixels of a PNG file (its IHDR header), or None for anything else."""
    with open(path, "rb") as f:
        head = f.read(24)
    return int.from_bytes(head[16:20], "big") if head[:8] == b"\x89PNG\r\n\x1a\n" else None


def figure_html(fig, markdown, root, out, links):
    """A figure block, its caption linked as the notes are; copies its image into out/figures/.
    AnnotateError if it is missing."""
    src = root / fig.src
    if not src.is_file():
        raise AnnotateError(f"{fig.src}: missing; it is generated (see FIGURES in "
                            "teaching/figures.py for its command)")
    caption, width = notes_html(markdown, fig.caption, links), None
    if src.suffix == ".json":
        data = json.loads(src.read_text(encoding="utf-8"))
        body, kind = step_table(data), "table"
        caption = notes_html(markdown, fig.caption + " " + data.get("note", ""), links)
    else:
        (out / "figures").mkdir(exist_ok=True)
        shutil.copyfile(src, out / "figures" / src.name)
        # a click: full size; on a phone the picture keeps most of its own width (its
        # natural width, --w) and scrolls sideways in its box, so that its text stays legible
        width = png_width(src)
        size = f' style="--w: {width}px"' if width else ""
        body, kind = (f'<a class="figure-scroll" href="figures/{src.name}"><img '
                      f'src="figures/{src.name}" alt="{html.escape(fig.alt)}"{size}></a>',
                      "image")
    if kind == "table" or (width or 0) > WIDE_PICTURE:
        body += f'\n<p class="scroll-cue">{SCROLL_CUE}</p>'
    return f'<figure class="{kind}">\n{body}\n<figcaption>{caption}</figcaption>\n</figure>'


def render_page(k, file, root, out, libs, defs, repo=None):
    """The HTML of page k (file); figures are copied into out."""
    markdown, highlight, HtmlFormatter, PythonLexer = libs
    source = (root / file).read_text(encoding="utf-8")
    intro, sections = parse(source)
    names, stem = definitions(source), Path(file).stem
    lexer, fmt = PythonLexer(), HtmlFormatter(nowrap=True)
    body = [f'<header class="intro"><h1>{k + 1}. <code>{file}</code></h1>']
    if file in OPTIONAL:
        body.append(f'<p class="optional">{OPTIONAL_NOTE.capitalize()}.</p>')
    first, _, rest = intro.partition("\n\n")                # the first paragraph leads
    links = Links(defs, stem, repo=repo)
    body.append(f'<div class="lead">{notes_html(markdown, first, links)}</div>')
    body.append(notes_html(markdown, rest, links) + "</header>")
    body += [figure_html(f, markdown, root, out, links) for f in FIGURES.get(file, [])]
    body.append("<main>")
    n_heading = 0
    for s in sections:
        if s.heading:
            n_heading += 1
            heading = Links(defs, stem, repo=repo).html(html.escape(s.heading))
            body.append(f'<h2 class="banner" id="s{n_heading}">{heading}</h2>')
            continue
        # the definitions that start in this block: anchors for the notes that name them
        here = tuple(names[i] for i in range(s.first_line, s.last_line + 1)
                     if i in names) if s.code else ()
        notes = notes_html(markdown, "\n".join(s.notes), Links(defs, stem, here, repo)) \
            if s.notes else ""
        code, anchor = "", ""
        if s.code:                  # each block can be linked to: page.html#L42, its first line
            lines = "\n".join(s.code)
            anchor = f' id="L{s.first_line}"'
            targets = "".join(f'<span id="{html.escape(n)}"></span>' for n in here)
            code = (f'{targets}<a class="line" href="#L{s.first_line}">line {s.first_line}</a>'
                    f'<pre class="highlight"><code>{highlight(lines, lexer, fmt)}</code></pre>')
        body.append(f'<div class="section"{anchor}><div class="notes">{notes}</div>'
                    f'<div class="code">{code}</div></div>')
    body.append("</main>")
    return PAGE.format(title=html.escape(f"{file} - {TITLE}"), nav=nav(k), body="\n".join(body))


def repo_page(path, root, out, libs, repo):
    """The page of a repository file a note names, off the reading path, so that the note's
    link works from disk: a Markdown document rendered (its links to the reading path kept, to
    another file of the repository made a link to that file's page, which `repo` records, so
    that the build renders it too; its pictures copied into out/figures/; a link to what is no
    file of the repository left as its text alone), any other file as it is, highlighted."""
    markdown, highlight, HtmlFormatter, _ = libs
    text = (root / path).read_text(encoding="utf-8", errors="replace")
    intro = (f"<p>The repository's file <code>{html.escape(path)}</code>, as it is in the copy "
             "the pages were built from, shown for the notes that name it.</p>")
    if path.endswith(".md"):
        doc = markdown.markdown(text, extensions=["fenced_code", "tables", "toc"],
                                output_format="html")
        folder = posixpath.dirname(path)

        def relink(m):
            """One <a href> or <img src> of the document -> its address in the folder."""
            tag, before, attr, ref, after = m.groups()
            if re.match(r"[a-z]+:|#", ref):
                return m.group(0)
            target, _, anchor = ref.partition("#")
            target = posixpath.normpath(posixpath.join(folder, html.unescape(target)))
            if tag == "img" and target.endswith(".png") and (root / target).is_file():
                (out / "figures").mkdir(exist_ok=True)
                shutil.copyfile(root / target, out / "figures" / posixpath.basename(target))
                href = f"figures/{posixpath.basename(target)}"
            elif target in READING_PATH:
                href = page_name(target)
            elif tag == "a" and repo.href(target):
                href = repo.href(target) + (f"#{anchor}" if anchor else "")
            else:                                    # no file of the repository: text alone
                return f'<span data-file="{html.escape(target)}">' if tag == "a" else ""
            return f'<{tag}{before} {attr}="{href}"{after}>'

        def unlink(m):           # a link left as its text: its closing tag with it
            return m.group(0).replace("</a>", "</span>")
        doc = re.sub(r'<(a|img)\b([^>]*?)\s(href|src)="([^"]*)"([^>]*)>', relink, doc)
        doc = re.sub(r'<span data-file="[^"]*">.*?</a>', unlink, doc, flags=re.S)
        body = f'<div class="wide repo">{intro}{doc}</div>'
    else:
        from pygments.lexers import get_lexer_for_filename
        from pygments.util import ClassNotFound
        try:
            lexer = get_lexer_for_filename(path)
        except ClassNotFound:
            from pygments.lexers import TextLexer
            lexer = TextLexer()
        body = (f'<div class="wide repo"><h1>{html.escape(posixpath.basename(path))}</h1>{intro}'
                f'<pre class="highlight repo-code"><code>'
                f"{highlight(text, lexer, HtmlFormatter(nowrap=True))}</code></pre></div>")
    return PAGE.format(title=html.escape(f"{path} - {TITLE}"), nav=nav(-1), body=body)


# The idea, before the reading path: what a reader should hold in mind on every page.
IDEA = """ELECTRA (Clark, Luong, Le and Manning, ICLR 2020) trains a text encoder on a
different question. BERT hides 15 % of the words and learns from guessing those alone.
ELECTRA lets a small masked language model, the generator G, fill the hidden places with
plausible words, and trains the discriminator D to say for *every* word whether it is the
original or a replacement. D, the model we keep, learns from every word, and at equal compute
fine-tunes to better GLUE scores than BERT (Table 1; §3.5 traces the gain mostly to the loss
over all tokens). One step (§2) on a text x of n tokens, of which $k = ⌈0.15 n⌉$ are masked
(footnote 3): mask, sample and corrupt, the losses:

$$ m = k "random positions of" x
   x^masked = REPLACE(x, m, [MASK])
   x̂_i ∼ p_G(x_i | x^masked) for i ∈ m
   x^corrupt = REPLACE(x, m, x̂)
   min_{θ_G, θ_D} sum_{x ∈ X} L_MLM(x, θ_G) + λ L_Disc(x, θ_D) $$

Here $θ_G$ and $θ_D$ are the weights of G and D, X the training corpus, and $λ = 50$ weighs D's
loss against G's (on the losses' means, objectives.py says).

Details: the notes say whose word they give: *the paper says* (linked to its page), *the
official code does* (google-research/electra, linked to its file), or *this code does*; this
code rounds 0.15 n where footnote 3 rounds up. Engineering and run details wait in closed
asides. In the code, `# BEGIN ASSIGNMENT x` and `# END ASSIGNMENT x` mark what a student copy
blanks (ASSIGNMENTS.md); `# BEGIN ANSWER x` and `# END ANSWER x` mark code elsewhere that
restates part x's answer, which the student copy replaces by a call to the student's own
function."""


def render_index(root, out, libs, defs, repo=None):
    markdown = libs[0]
    items = []
    for k, file in enumerate(READING_PATH):
        intro, _ = parse((root / file).read_text(encoding="utf-8"))
        first = notes_html(markdown, intro.partition("\n\n")[0], Links(defs, "index", repo=repo))
        first = re.sub(r"^<p>|</p>$", "", first)
        optional = f' <em class="optional">({OPTIONAL_NOTE})</em>' if file in OPTIONAL else ""
        items.append(f'<li><a class="file" href="{page_name(file)}">{file}</a>{optional} - '
                     f"{first}</li>")
    idea = notes_html(markdown, IDEA, Links(defs, "index", repo=repo))
    body = [f'<div class="index"><h1>{TITLE}</h1>', f'<div class="lead">{idea}</div>']
    body += [figure_html(f, markdown, root, out, Links(defs, "index", repo=repo))
             for f in FIGURES.get("index", [])]
    body.append("<h2>The reading path</h2>")
    numbers = [str(READING_PATH.index(f) + 1) for f in OPTIONAL]
    body.append(f"<p>Files {', '.join(numbers[:-1])} and {numbers[-1]} are {OPTIONAL_NOTE}; "
                f"the other {len(READING_PATH) - len(OPTIONAL)} are the core path, to read in "
                "one sitting.</p>")
    body.append('<ol class="path">' + "\n".join(items) + "</ol>")
    body.append(Links(defs, "index", repo=repo).html(
        "<p>Then the rest of the project (the command line <code>electra_small.py</code>, "
        "<code>machinery/</code>, <code>analysis/</code>) in the source itself; the "
        "README lists it.</p></div>"))
    return PAGE.format(title=TITLE, nav=nav(-1), body="\n".join(body))


def build(out, root=ROOT):
    """Write the pages into the folder `out` (replaced whole, never half-written); returns the
    list of pages written. AnnotateError on a missing library, figure or source file, or an
    equation the notation cannot read."""
    libs = libraries()
    root, out = Path(root), Path(out)
    missing = [f for f in READING_PATH if not (root / f).is_file()]
    if missing:
        raise AnnotateError(f"{root}: no {', '.join(missing)}: run from a copy of the project")
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise AnnotateError(f"{out}: a folder with other files in it; give --out a new or "
                            "empty folder (a folder of earlier pages is replaced)")
    defs = {Path(f).stem: set(definitions((root / f).read_text(encoding="utf-8")).values())
            for f in READING_PATH}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".annotated-", dir=out.parent))
    tmp.chmod(0o755)                               # mkdtemp's folder is private; pages are not
    try:
        repo = RepoFiles(root)                    # the files the notes name, off the path
        pages = {"index.html": render_index(root, tmp, libs, defs, repo)}
        for k, file in enumerate(READING_PATH):
            try:
                pages[page_name(file)] = render_page(k, file, root, tmp, libs, defs, repo)
            except AnnotateError as e:
                raise AnnotateError(f"{file}: {e}") from None
        for name, text in pages.items():
            text = X_HAT.sub(lambda m: m.group(0).replace("x̂", '<span class="acc">x̂</span>'),
                             text)
            (tmp / name).write_text(text, encoding="utf-8")
        done = set()
        while set(repo.used) - done:         # a rendered document's links add files: theirs too
            for path in sorted(set(repo.used) - done):
                done.add(path)
                href = repo.used[path]
                if href.startswith("figures/"):
                    (tmp / "figures").mkdir(exist_ok=True)
                    shutil.copyfile(root / path, tmp / href)
                else:
                    text = repo_page(path, root, tmp, libs, repo)
                    (tmp / href).write_text(X_HAT.sub(lambda m: m.group(0).replace(
                        "x̂", '<span class="acc">x̂</span>'), text), encoding="utf-8")
        # Pygments' colours, then one rule of ours: the code column's own background shows
        # through (Pygments' would paint only the lines, not the column's full height).
        (tmp / "style.css").write_text(STYLE + libs[2](style="friendly").get_style_defs(
            ".highlight") + "\n.code .highlight { background: transparent; }\n",
            encoding="utf-8")
        (tmp / MARKER).write_text("built by teaching/annotate.py; a rebuild replaces this folder\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return list(pages)


def main(argv=None):
    p = cli.Parser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=cli.out_folder, default="out_annotated",
                   help="folder for the pages (default out_annotated; replaced if it holds "
                        "earlier pages)")
    args = p.parse_args(argv)
    t0 = time.time()
    try:
        pages = build(args.out)
    except AnnotateError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(pages)} pages ({len(READING_PATH)} files and the index) to "
          f"{Path(args.out) / 'index.html'} in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
