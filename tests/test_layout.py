"""The reading path (README): imports flow one way, and every file names its paper section."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = {p.stem: p for p in ROOT.glob("*.py")}


def imports_of(path):
    """Project modules imported by a file (anywhere in it: lazy imports count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found & MODULES.keys()


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


def test_no_import_cycles():
    graph = {m: imports_of(p) - {m} for m, p in MODULES.items()}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_algorithm_does_not_import_the_machinery():
    """objectives.py (§2) needs only the networks: no data, config, trainer or ablations."""
    assert imports_of(MODULES["objectives"]) <= {"encoder", "generator", "discriminator"}
    assert "data" not in imports_of(MODULES["config"])


def test_every_file_opens_with_a_docstring_naming_its_place():
    for m, p in MODULES.items():
        doc = ast.get_docstring(ast.parse(p.read_text()))
        assert doc and len(doc) > 80, f"{p.name} has no opening docstring"
