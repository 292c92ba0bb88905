"""Teaching: the links of the Annotated ELECTRA's notes - to a definition, a page, the paper, the
official code.

teaching/annotate.py writes every note through `Links.html`, which turns, in the note's text and
never inside a link, a code block or another code span:

    a name (`mask_tokens`, `ELECTRA.generate`, `objectives.sample`)  -> its definition's anchor
    a file of the reading path (`optim.py`)                         -> its page
    a section, table, figure, appendix or footnote (`§3.2`)          -> that page of the paper
    a file of the official code (`pretrain_helpers.py`)              -> it, at a pinned commit
    another file of this repository (`docs/plateau.md`, `machinery/step.py`)
                                                                     -> its page in the folder

`definitions` finds the anchors: the classes and functions of a file and their methods. Nothing
is fetched: the links are only addresses. A repository file off the reading path gets a page of
its own in the built folder, its text as it is (`RepoFiles`), so that the link works from disk
as well as from a server."""
import ast
import html
import re
from dataclasses import dataclass, field
from pathlib import Path

PAPER = "https://arxiv.org/abs/2003.10555"
PAPER_PDF = "https://arxiv.org/pdf/2003.10555v1#page={}"     # the ICLR 2020 version's pages
# Where each part of the paper starts (page of the ICLR 2020 version, arXiv v1).
PAPER_PAGES = {"§1": 1, "§2": 2, "§3": 4, "§3.1": 4, "§3.2": 4, "§3.3": 6, "§3.4": 7,
               "§3.5": 8, "§4": 9, "§5": 10, "Appendix A": 13, "Appendix B": 13,
               "Appendix C": 15, "Appendix D": 15, "Appendix E": 16, "Appendix F": 16,
               "Appendix G": 17, "Appendix H": 18, "Table 1": 6, "Table 2": 7, "Table 3": 7,
               "Table 4": 8, "Table 5": 9, "Table 6": 14, "Table 7": 14, "Table 8": 16,
               "Figure 1": 2, "Figure 2": 3, "Figure 3": 5, "Figure 4": 9, "footnote 3": 3,
               "footnote 4": 4, "footnote 8": 13}
OFFICIAL = "https://github.com/google-research/electra"
OFFICIAL_FILE = OFFICIAL + "/blob/8a46635f32083ada044d7e9ad09604742600ee7b/{}"
OFFICIAL_FILES = {"pretrain_helpers": "pretrain/pretrain_helpers.py",
                  "pretrain_data": "pretrain/pretrain_data.py",
                  "optimization": "model/optimization.py", "modeling": "model/modeling.py",
                  "tokenization": "model/tokenization.py",
                  "flops_computation": "flops_computation.py",
                  "run_pretraining": "run_pretraining.py", "run_finetuning": "run_finetuning.py",
                  "build_pretraining_dataset": "build_pretraining_dataset.py",
                  "configure_pretraining": "configure_pretraining.py",
                  "configure_finetuning": "configure_finetuning.py",
                  "classification_tasks": "finetune/classification/classification_tasks.py"}
LINKABLE = re.compile(
    r"(?P<official>\b(?:[a-z]+/)*(?:%s)(?:\.py\b|\.[A-Za-z_]\w*))"
    r"|(?P<paper>§\s?\d(?:\.\d)?|\bAppendix [A-H]\b(?:(?:, | and )[A-H]\b)*|\bTable \d\b"
    r"|\bFigure \d\b|\bfootnote \d\b)"
    r"|(?P<repo>(?<![\w/.-])(?:[A-Za-z_][\w-]*/)+[\w.-]*\w\.(?:py|md|json|png|txt)\b"
    r"|\b[A-Za-z_][\w-]*\.md\b)"
    r"|(?P<file>\b[a-z_]+\.py\b)"
    r"|(?P<qual>\b[a-z_]+\.[A-Za-z_]\w*(?:\.[a-z_]\w*)?\b)"
    r"|(?P<name>\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b|\b[A-Z][a-z]+(?:[A-Z][a-z0-9]*)+\b)"
    % "|".join(OFFICIAL_FILES))


def definitions(source):
    """{first line (its first decorator's): name} of the file's classes and functions and of
    its classes' methods (`Class.method`): the anchors other notes link to."""
    tree, out = ast.parse(source), {}
    kinds = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for node in tree.body:
        if isinstance(node, kinds):
            out[min([node.lineno] + [d.lineno for d in node.decorator_list])] = node.name
            if isinstance(node, ast.ClassDef):
                for sub in node.body:
                    if isinstance(sub, kinds):
                        first = min([sub.lineno] + [d.lineno for d in sub.decorator_list])
                        out[first] = f"{node.name}.{sub.name}"
    return out


# A path of this repository as a note writes it: `docs/plateau.md`, `machinery/step.py`,
# `electra_small.py`, `ASSIGNMENTS.md`.
REPO_PATH = re.compile(r"(?<![\w/.-])(?:[A-Za-z_][\w-]*/)*[A-Za-z_][\w.-]*"
                       r"\.(?:py|md|json|png|txt)\b")


@dataclass
class RepoFiles:
    """The repository files the notes name, off the reading path: each gets a page in the
    built folder (`page`), written by teaching/annotate.py; a picture links to its copy in
    figures/. `used` collects {path: href} as the notes are written."""
    root: Path
    used: dict = field(default_factory=dict)

    @staticmethod
    def page(path):
        return "repo." + path.replace("/", ".") + ".html"

    def href(self, path):
        """The href of repository file `path` ("docs/plateau.md"), or None if there is none."""
        if ".." in path or path.startswith("/") or not (Path(self.root) / path).is_file():
            return None
        href = f"figures/{Path(path).name}" if path.endswith(".png") else self.page(path)
        self.used[path] = href
        return href


@dataclass
class Links:
    """What the notes of one page may link to: every definition on the reading path, by file
    stem ({stem: {name}}), the page it is on, and the anchors of the note being written."""
    defs: dict
    stem: str = ""
    here: tuple = ()
    repo: RepoFiles = None

    def target(self, name):
        """The href of a definition `name` (`mask_tokens`, `ELECTRA.generate`,
        `objectives.sample`, with or without `()`), or None."""
        name = name.strip().removesuffix("()")
        stem, _, rest = name.partition(".")
        if rest and stem in self.defs and rest in self.defs[stem]:
            found = [(stem, rest)]
        elif name in self.defs.get(self.stem, ()):
            found = [(self.stem, name)]
        else:
            found = [(s, name) for s, names in self.defs.items() if name in names]
        if len(found) != 1:
            return None
        stem, anchor = found[0]
        if stem == self.stem and anchor in self.here:
            return None                           # a note does not link to itself
        return (f"{stem}.html" if stem != self.stem else "") + f"#{anchor}"

    @staticmethod
    def paper(name, shown=None):
        """A link to the paper's page of `name` ("§3.2", "Appendix B"), shown as `shown`."""
        page = PAPER_PAGES.get(re.sub(r"§\s", "§", name))
        shown = shown or name
        return f'<a href="{PAPER_PDF.format(page)}">{shown}</a>' if page else shown

    def text(self, m):
        """A linkable piece of a note's text -> the piece as a link, or unchanged."""
        s = m.group()
        if m.lastgroup == "official":
            base = re.sub(r"^(?:[a-z]+/)*", "", s).split(".")[0]
            return f'<a href="{OFFICIAL_FILE.format(OFFICIAL_FILES[base])}">{s}</a>'
        if m.lastgroup == "paper":
            if s.startswith("Appendix ") and len(s) > len("Appendix B"):  # "Appendix B, C"
                first, rest = s[:len("Appendix B")], s[len("Appendix B"):]
                return self.paper(first) + re.sub(
                    r"\b[A-H]\b", lambda a: self.paper(f"Appendix {a.group()}", a.group()), rest)
            return self.paper(s)
        if m.lastgroup in ("file", "repo"):
            stem = s[:-3]
            if "/" not in s and stem in self.defs:
                return s if stem == self.stem else f'<a href="{stem}.html">{s}</a>'
            href = self.repo.href(s) if self.repo else None
            return f'<a href="{href}">{s}</a>' if href else s
        href = self.target(s)
        return f'<a href="{href}">{s}</a>' if href else s

    def path(self, m):
        """A repository path inside a code span -> a link to its page, or unchanged."""
        s = m.group()
        stem = s[:-3]
        if "/" not in s and stem in self.defs:
            href = f"{stem}.html" if stem != self.stem else None
        else:
            href = self.repo.href(s) if self.repo else None
        return f'<a href="{href}">{s}</a>' if href else s

    def html(self, text):
        """Links in the HTML of a note: in its text, and on a `code` span that names a
        definition; never inside a link, a code block or another code span."""
        out, depth, parts = [], {"a": 0, "pre": 0, "code": 0}, re.split(r"(<[^>]+>)", text)
        i = 0
        while i < len(parts):
            part = parts[i]
            tag = re.match(r"<(/?)(a|pre|code)\b", part)
            if tag:
                if tag.group(2) == "code" and not tag.group(1) and not depth["a"] \
                        and not depth["pre"] and i + 2 < len(parts) and parts[i + 2] == "</code>":
                    href = self.target(html.unescape(parts[i + 1]))
                    if href:
                        out.append(f'<a href="{href}">{part}{parts[i + 1]}</code></a>')
                        i += 3
                        continue
                depth[tag.group(2)] += -1 if tag.group(1) else 1
                out.append(part)
            elif depth["code"] and not depth["a"] and not depth["pre"] and not part.startswith("<"):
                out.append(REPO_PATH.sub(self.path, part))      # `python plot_results.py …`
            elif part.startswith("<") or any(depth.values()):
                out.append(part)
            else:
                out.append(LINKABLE.sub(self.text, part))
            i += 1
        return "".join(out)
