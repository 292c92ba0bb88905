"""The Annotated ELECTRA (teaching/annotate.py, docs/annotated.md): the pages are built from the
source and can never be out of date.

Built in a temporary folder, every reading-path file has its page, in the README's order; every
line of code of a file appears on its page exactly once and in order, and every comment and
docstring among the notes; every link and image resolves inside the folder, and nothing is
fetched from the network; a changed comment changes its page. The step table (docs/one_step.json,
teaching/one_step.py) is checked against the rules of §2, and in headless Chromium the two
columns sit side by side at a desktop width and stack at a phone width.

The build needs the optional Markdown renderer (`pip install markdown`) and the browser test
Debian's `chromium`: without them those tests skip with the reason; the parser's tests and the
one-line error without the renderer run everywhere."""
import ast
import html
import io
import json
import re
import shutil
import subprocess
import sys
import tokenize
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import HANG, ROOT, run_cli, save_tiny

sys.path.insert(0, str(ROOT))
from teaching import annotate  # noqa: E402
from teaching.annotate import FIGURES, READING_PATH  # noqa: E402

try:
    import markdown  # noqa: F401
    HAVE_MARKDOWN = True
except ImportError:
    HAVE_MARKDOWN = False
needs_markdown = pytest.mark.skipif(not HAVE_MARKDOWN, reason="the optional Markdown renderer "
                                    "is not installed (pip install markdown)")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium "
                                    "(Debian: apt-get install chromium)")


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
    return " ".join(re.findall(r"\w+", text))


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


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if not HAVE_MARKDOWN:
        pytest.skip("the optional Markdown renderer is not installed (pip install markdown)")
    out = tmp_path_factory.mktemp("annotated") / "site"
    pages = annotate.build(out)
    return out, pages


@needs_markdown
def test_every_reading_path_file_has_its_page_in_order(built):
    out, pages = built
    assert pages == ["index.html"] + [Path(f).stem + ".html" for f in READING_PATH]
    index = Page((out / "index.html").read_text(encoding="utf-8"))
    in_order = [r for t, r in index.refs if t == "a" and r.endswith(".html") and r != "index.html"]
    assert in_order[1:-1] == [Path(f).stem + ".html" for f in READING_PATH]   # and 2 "start"
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


# ----------------------------------------------------------------------------- one real step

def check_step(rows, m):
    """The rules of §2 on one step's table: x_masked and x_corrupt differ from x only at m,
    x̂ is given exactly at m, and is_replaced says where x_corrupt differs from x."""
    T = len(rows["x"])
    assert all(len(r) == T for r in rows.values())
    assert rows["x"][0] == "[CLS]" and rows["x"][-1] == "[SEP]" and 0 not in m and T - 1 not in m
    for t in range(T):
        assert (rows["m"][t] == "✓") == (t in m)
        assert (rows["x_hat"][t] != "") == (t in m)
        if t not in m:
            assert rows["x_masked"][t] == rows["x"][t] == rows["x_corrupt"][t]
            assert rows["is_replaced"][t] == 0
        else:
            assert rows["x_masked"][t] in ("[MASK]", rows["x"][t])
            assert rows["x_corrupt"][t] == rows["x_hat"][t]
            assert rows["is_replaced"][t] == int(rows["x_corrupt"][t] != rows["x"][t])
        assert 0 <= float(rows["p_replaced"][t]) <= 1


def test_the_committed_step_table_follows_section_2():
    data = json.loads((ROOT / "docs" / "one_step.json").read_text(encoding="utf-8"))
    check_step(data["rows"], data["m"])
    assert data["checkpoint"]["step"] > 0                  # a trained G and D, not random ones
    assert data["command"].startswith("python teaching/one_step.py")


def test_one_step_of_a_tiny_model(tmp_path, learnable_data_dir, one_thread):
    from data import load_tokenizer
    from teaching import one_step
    ckpt = save_tiny(tmp_path / "tiny.pt", load_tokenizer(learnable_data_dir))
    model, tok, cfg, step = one_step.load(ckpt)
    data = one_step.one_step(model, tok, cfg, "the cat sees the ball in the morning.", seed=1)
    check_step(data["rows"], data["m"])
    assert len(data["m"]) == max(1, round(0.15 * (len(data["rows"]["x"]) - 2)))
    assert data == one_step.one_step(model, tok, cfg, "the cat sees the ball in the morning.",
                                     seed=1)                                    # reproducible
    p = run_cli("teaching/one_step.py", "--ckpt", ckpt, "--text", "the cat " * 40, "--out",
                tmp_path / "s.json")              # past the checkpoint's 64 trained positions
    assert p.returncode == 2 and p.stderr.startswith("error: ") and p.stderr.count("\n") == 1
    assert "at most 62" in p.stderr and not (tmp_path / "s.json").exists()
    p = run_cli("teaching/one_step.py", "--ckpt", tmp_path / "none.pt", "--out",
                tmp_path / "s.json")
    assert p.returncode == 2 and p.stderr.startswith("error: ") and p.stderr.count("\n") == 1
    assert not (tmp_path / "s.json").exists()
    bert = save_tiny(tmp_path / "bert.pt", load_tokenizer(learnable_data_dir), model="bert")
    p = run_cli("teaching/one_step.py", "--ckpt", bert, "--out", tmp_path / "s.json")
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert "not an ELECTRA checkpoint" in p.stderr and not (tmp_path / "s.json").exists()


# ----------------------------------------------------------------------------- a real browser

PROBE = """<script>
const s = [...document.querySelectorAll('.section')].find(
  e => e.querySelector('.notes').textContent.trim() && e.querySelector('.code pre'));
const n = s.querySelector('.notes').getBoundingClientRect();
const c = s.querySelector('.code').getBoundingClientRect();
document.body.setAttribute('data-probe', JSON.stringify({
  notes: [n.left, n.top, n.right, n.bottom], code: [c.left, c.top, c.right, c.bottom],
  width: window.innerWidth, page_width: document.documentElement.scrollWidth,
  text: document.body.innerText.length, sections: document.querySelectorAll('.section').length}));
</script></body>"""


def chromium(tmp_path, width, *args):
    """Run headless Chromium on a page at a window `width` px wide; returns its stdout."""
    p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}",
                        f"--window-size={width},1000", *map(str, args)],
                       capture_output=True, text=True, timeout=HANG)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout


def probe(tmp_path, out, page, width):
    """Where the first note and its code sit on the page, as the browser laid them out."""
    probed = out / f"probe-{page}"
    probed.write_text((out / page).read_text(encoding="utf-8").replace("</body>", PROBE, 1),
                      encoding="utf-8")
    dom = chromium(tmp_path, width, "--dump-dom", probed.as_uri())
    probed.unlink()
    m = re.search(r'data-probe="([^"]*)"', dom)
    assert m, "the page did not run its probe"
    return json.loads(html.unescape(m.group(1)))


@needs_markdown
@needs_chromium
def test_in_chromium_columns_side_by_side_on_a_desktop_stacked_on_a_phone(built, tmp_path):
    out, _ = built
    desk = probe(tmp_path, out, "objectives.html", 1400)
    assert desk["text"] > 5000 and desk["sections"] > 20             # not blank
    (nl, nt, nr, nb), (cl, ct, cr, cb) = desk["notes"], desk["code"]
    assert cl >= nr - 1 and abs(ct - nt) < 2 and cr - cl > 700          # side by side
    phone = probe(tmp_path, out, "objectives.html", 390)
    (nl, nt, nr, nb), (cl, ct, cr, cb) = phone["notes"], phone["code"]
    assert ct >= nb - 1 and abs(cl - nl) < 2 and cr - cl > 300          # stacked
    assert phone["page_width"] <= phone["width"]     # no sideways scrolling of the whole page
    # Screenshots are not blank: many distinct colours (text, highlighted code, a figure).
    from PIL import Image
    for page, width in [("index.html", 1400), ("objectives.html", 390)]:
        shot = tmp_path / f"{page}-{width}.png"
        chromium(tmp_path, width, f"--screenshot={shot}", (out / page).as_uri())
        colours = Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 20)
        assert len(colours) > 50, f"{page} at {width}px looks blank"
