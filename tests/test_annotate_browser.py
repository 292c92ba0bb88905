"""The Annotated ELECTRA in a real browser (headless Chromium; the tests skip without it or
without the optional Markdown renderer): the two columns sit side by side at a desktop width and
stack at a phone width, screenshots are not blank, and at 420 px no page is wider than its
window, every equation fits, a table among the notes fits and a picture keeps 4/5 of its width."""
import html
import json
import re
import shutil
import subprocess

import pytest

from conftest import HANG

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium "
                                    "(Debian: apt-get install chromium)")


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


# Measured from the page that frames them all, once everything has loaded (file:// pages may
# read each other with --allow-file-access-from-files): each page's width against its frame's,
# whether every box wider than itself scrolls, and whether the key equation fits whole.
FRAME_PROBE = """<script>
addEventListener('load', () => document.body.setAttribute('data-probe', JSON.stringify(
  [...document.querySelectorAll('iframe')].map(f => {
    const w = f.contentWindow, d = w.document.documentElement;
    const key = [...d.querySelectorAll('.math')].find(
      b => b.textContent.includes('min') && b.textContent.includes('λ'));
    return {page: f.getAttribute('src'), width: w.innerWidth, page_width: d.scrollWidth,
            client: d.clientWidth,
            boxes: [...d.querySelectorAll('.math, .table-scroll, .figure-scroll, pre')].map(b =>
              [b.className, b.scrollWidth <= b.clientWidth + 1, w.getComputedStyle(b).overflowX]),
            key: key ? key.scrollWidth <= key.clientWidth + 1 : null,
            // a table among the notes fits whole; a picture keeps 4/5 of its width or more
            tables: [...d.querySelectorAll('header.intro table, .notes table')].map(
              t => t.scrollWidth <= t.clientWidth + 1),
            pictures: [...d.querySelectorAll('figure img')].map(
              i => [i.getBoundingClientRect().width, i.naturalWidth]),
            // the room between ∑ (min) and its limits, counting a limit's padding
            limits: [...d.querySelectorAll('.math munder, .math munderover')].map(e => {
              const r = x => x.getBoundingClientRect(), s = x => w.getComputedStyle(x);
              const [base, under, over] = e.children;
              const gaps = [r(under).top + parseFloat(s(under).paddingTop) - r(base).bottom];
              if (over) gaps.push(r(base).top - r(over).bottom + parseFloat(s(over).paddingBottom));
              return [e.textContent, Math.min(...gaps)]; })};
  }))));
</script>"""


@needs_chromium
def test_at_420_px_nothing_overflows_the_page(built, tmp_path):
    """Every page in a 420 px frame (headless Chromium's own window is never under 500 px):
    the page is never wider than the frame, every equation fits whole with room between a ∑
    and its limits, a table among the notes fits, and what is wider (the step table, a long
    line of code, a picture kept legible) scrolls in its own box."""
    out, pages = built
    site = tmp_path / "site"
    shutil.copytree(out, site)
    frames = "".join(f'<iframe src="{p}" style="width:420px;height:600px"></iframe>'
                     for p in pages)
    (site / "frames.html").write_text(f"<!DOCTYPE html><html><body>{frames}{FRAME_PROBE}"
                                      "</body></html>", encoding="utf-8")
    dom = chromium(tmp_path, 1000, "--allow-file-access-from-files", "--dump-dom",
                   (site / "frames.html").as_uri())
    m = re.search(r'data-probe="([^"]*)"', dom)
    assert m, "the frames did not report"
    results = {r["page"]: r for r in json.loads(html.unescape(m.group(1)))}
    assert sorted(results) == sorted(pages)
    for page, r in results.items():
        assert r["width"] == 420 and r["page_width"] <= r["client"], (page, r["page_width"])
        for kind, fits, overflow in r["boxes"]:
            assert fits if kind == "math" else fits or overflow in ("auto", "scroll"), (page, kind)
    assert results["objectives.html"]["key"] is True          # min ... L_MLM + λ L_Disc
    assert all(all(r["tables"]) for r in results.values())        # ablations.py's flags
    pictures = [p for r in results.values() for p in r["pictures"]]
    assert len(pictures) == 4 and all(w >= .8 * n - 1 > 0 for w, n in pictures), pictures
    # a display ∑'s limits clear of it, with or without a math font (L_Disc's n touched it)
    limits = [l for r in results.values() for l in r["limits"]]
    assert len(limits) >= 5 and all(gap >= 1 for _, gap in limits), limits
