"""The layout (README, "Where things are"): the core at the root, everything else in a folder
named for what it holds; imports flow one way; every file names its place.

    root          the paper's reading path - what a student reads (about 15 files)
    machinery/    what the core leans on: tokenizer, checkpoints, devices, the command line, ...
    analysis/     looking inside a trained D (the inspector and its analyses)
    benchmarks/   speed and learning parity against Hugging Face's Electra, the GPU plan
    interop/      export to and import from Hugging Face transformers
    teaching/     student copies for a course, the annotated pages

Imports flow downwards only: machinery imports nothing of the project outside itself; the core
(the root) imports machinery, and interop only for reading a Hugging Face folder; the tools in
analysis/, benchmarks/, interop/ and teaching/ import the core; nothing imports a benchmark or a
teaching tool."""
import ast
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("machinery", "analysis", "benchmarks", "interop", "teaching")
DESIGN_CARD = ("electra_small", "generator", "discriminator", "data", "finetune_glue")


def module_name(path):
    rel = path.relative_to(ROOT).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


MODULES = {module_name(p): p for d in ("",) + FOLDERS for p in sorted((ROOT / d).glob("*.py"))}
CORE = {m for m in MODULES if "." not in m and m not in FOLDERS}


def folder(m):
    return m.split(".")[0] if m.split(".")[0] in FOLDERS else "core"


def imports_of(path):
    """Project modules imported by a file (anywhere in it: lazy imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from machinery import cli` imports machinery.cli; `from config import X` config
            found |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
    return {m for m in found if m in MODULES and m not in FOLDERS}


GRAPH = {m: imports_of(p) - {m} for m, p in MODULES.items()}


def find_cycle(graph):
    """A list of modules forming an import cycle, or None (depth-first search)."""
    state, stack = {}, []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                return stack[stack.index(n):] + [n]
            if n not in state and (c := visit(n)):
                return c
        state[m] = "done"
        stack.pop()
        return None
    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_imports_of_reads_both_forms(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("import config\nfrom machinery import cli\ndef f():\n    from interop.hf_import import x\n")
    assert imports_of(f) == {"config", "machinery.cli", "interop.hf_import"}


def test_no_import_cycles():
    assert find_cycle(GRAPH) is None, " -> ".join(find_cycle(GRAPH))


def test_the_root_holds_the_core_and_little_else():
    """A newcomer's `ls`: the design card's files and the reading path, about 15 files."""
    assert set(DESIGN_CARD) <= CORE
    assert len(CORE) <= 16, sorted(CORE)
    assert (ROOT / "README.md").is_file() and (ROOT / "tests").is_dir()
    stray = [p.name for p in ROOT.iterdir() if p.suffix in (".sh", ".ipynb")]
    assert not stray, f"scripts belong in a folder: {stray}"


def test_imports_flow_one_way():
    allowed = {
        "machinery": {"machinery"},
        "core": {"core", "machinery", "interop"},
        "interop": {"core", "machinery", "interop"},
        "analysis": {"core", "machinery", "analysis"},
        "benchmarks": {"core", "machinery", "benchmarks"},
        "teaching": {"core", "machinery", "teaching"},
    }
    wrong = [f"{m} imports {n}" for m, ns in GRAPH.items() for n in sorted(ns)
             if folder(n) not in allowed[folder(m)]]
    assert not wrong, wrong
    # the core reaches interop only to read a Hugging Face folder as a checkpoint
    core_to_interop = {(m, n) for m, ns in GRAPH.items() if folder(m) == "core"
                       for n in ns if folder(n) == "interop"}
    assert core_to_interop <= {("finetune_glue", "interop.hf_import")}, core_to_interop


def test_the_algorithm_does_not_import_the_machinery():
    """objectives.py (§2) needs only the networks: no data, config, trainer or ablations."""
    assert GRAPH["objectives"] <= {"encoder", "generator", "discriminator"}
    assert "data" not in GRAPH["config"]


def test_every_file_opens_with_a_docstring_naming_its_place():
    for m, p in MODULES.items():
        doc = ast.get_docstring(ast.parse(p.read_text()))
        assert doc and len(doc) > 80, f"{p.relative_to(ROOT)} has no opening docstring"


def python_files(root):
    """The .py files under root, less what is not the project's: hidden folders, data/, out*/,
    caches, and a virtual environment made inside the clone (`python -m venv venv`: its
    pyvenv.cfg marks it, whatever its name)."""
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not (d.startswith((".", "out")) or d in ("data", "__pycache__")
                                           or (Path(folder) / d / "pyvenv.cfg").is_file())]
        yield from (Path(folder) / f for f in files if f.endswith(".py"))


def test_no_python_outside_the_known_folders(tmp_path):
    known = {ROOT / d for d in ("",) + FOLDERS} | {ROOT / "tests", ROOT / "tests" / "parts",
                                                    ROOT / "notebooks"}   # the Colab source
    stray = [str(p.relative_to(ROOT)) for p in python_files(ROOT) if p.parent not in known]
    assert not stray, f"a folder the layout does not know: {stray}"
    # a stray file is found, and a virtual environment's are not
    (tmp_path / "venv" / "lib").mkdir(parents=True)
    (tmp_path / "venv" / "pyvenv.cfg").touch()
    (tmp_path / "venv" / "lib" / "six.py").touch()
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "stray.py").touch()
    assert [p.name for p in python_files(tmp_path)] == ["stray.py"]
