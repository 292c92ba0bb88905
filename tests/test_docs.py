"""The documents: every relative link in README.md and docs/*.md resolves (the file, and the
#anchor where one is given, as GitHub names headings), and the README stays short enough to
read in ten minutes."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
README_MAX_LINES = 250

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def prose(text):
    """The text outside fenced code blocks and inline code (links there are not links)."""
    out, in_fence = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            in_fence = not in_fence
            continue
        if not in_fence:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    in_fence = False
    for line in path.read_text().splitlines():
        if FENCE.match(line.strip()):
            in_fence = not in_fence
            continue
        m = None if in_fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path):
    for target in LINK.findall(prose(path.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):      # http:, https:, mailto:
            continue
        yield target


def test_slug_follows_github():
    assert slug("Two blocks of D (`laptop_deep`): time to pass half") == \
        "two-blocks-of-d-laptop_deep-time-to-pass-half"
    assert slug('What "more than half" means for a fully trained D') == \
        "what-more-than-half-means-for-a-fully-trained-d"
    assert slug("ELECTRA vs BERT-Small: GLUE against FLOPs") == \
        "electra-vs-bert-small-glue-against-flops"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc):
    broken = []
    for target in links(doc):
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            broken.append(f"{target} (no file {dest.relative_to(ROOT) if ROOT in dest.parents else dest})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.name})")
    assert not broken, f"{doc.name}: broken links: " + "; ".join(broken)


def test_a_broken_link_is_caught(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# A heading\n")
    page.write_text("[ok](there.md#a-heading) [gone](missing.md) [bad](there.md#nope)\n"
                    "`[code](not-a-link.md)`\n```\n[fenced](also-not.md)\n```\n")
    found = list(links(page))
    assert found == ["there.md#a-heading", "missing.md", "there.md#nope"]
    assert "a-heading" in anchors(tmp_path / "there.md")


def test_readme_is_short():
    n = len((ROOT / "README.md").read_text().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; at most {README_MAX_LINES}"


# Commands in the documents name scripts by their path from the project root; a file that moves
# must take its commands with it. Scratch scripts the text says are not part of the project
# (a sweep wrapper, a user's own script) are listed here.
NOT_OURS = {"out_exp/sweep.py", "use_export.py"}
COMMAND = re.compile(r"\b(?:python3?|bash)\s+([\w./-]+\.(?:py|sh))\b")


@pytest.mark.parametrize("doc", DOCS + [ROOT / "ASSIGNMENTS.md"], ids=lambda p: p.name)
def test_every_command_names_a_file_that_exists(doc):
    missing = sorted({s for s in COMMAND.findall(doc.read_text())
                      if s not in NOT_OURS and not (ROOT / s).is_file()})
    assert not missing, f"{doc.name} runs scripts that are not there: {missing}"


def test_a_moved_script_is_caught():
    assert COMMAND.findall("run `python bench.py --x` then bash benchmarks/gpu_measure.sh") == \
        ["bench.py", "benchmarks/gpu_measure.sh"]
    assert not (ROOT / "bench.py").exists()
