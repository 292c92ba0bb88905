"""Teaching: the pytest plugin in the tests' process, which reports each test back to the
grader (teaching/runner.py starts `python -m pytest -p teaching.plugin ...`).

Silent unless the grader named a log in $ELECTRA_GRADE_LOG (runner.LOG_ENV): then it writes one
JSON line per event - collected, a collection error, started, done with a failed test's one-line
message (the assertion's message or the exception, never a traceback; an exception raised in a
part's body says where) - drops what each test printed once it is done, puts back what one
part's code may change for the tests after it, and after a part's last test ends the process
when that code left processes or threads running or replaced a function the tests use, so
that the grader starts a fresh one for the parts after it.

It imports neither torch nor the project's code at its top: the tests do that."""
import ast
import json
import os
import re
import sys
import time
from pathlib import Path

from teaching.runner import LOG_ENV, MAX_OUTPUT, MESSAGE_CHARS, part_of
from teaching.strays import stop_strays

_LOG = os.environ.get(LOG_ENV)
_FAILED = {}
_BEFORE = {}                  # what the first test found: threads, guarded names (_left_behind)
GRADED_MODULES = ("objectives", "encoder", "optim", "ablations", "flops", "finetune_glue")


def _emit(record):
    with open(_LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def _assert_source(path, lineno):
    """The assert statement at line `lineno` of `path`, on one line ("" when not found): what a
    bare `assert torch.allclose(...)` checked, where pytest's first line says only `assert
    False`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Assert) and node.lineno == lineno:
                return " ".join((ast.get_source_segment(text, node) or "").split())
    except (OSError, SyntaxError, ValueError, TypeError):
        pass
    return ""


_REGIONS = {}                               # file -> its assignment bodies, read once


def _regions(path):
    """The assignment bodies of a file of the grading folder: [(part, BEGIN line, END line)]."""
    if path not in _REGIONS:
        found, begun = [], {}
        try:
            if Path(path).resolve().is_relative_to(Path.cwd().resolve()):
                text = Path(path).read_text(encoding="utf-8")
                for i, line in enumerate(text.splitlines(), 1):
                    marker = re.fullmatch(r"\s*# (BEGIN|END) ASSIGNMENT (\w+)\s*", line)
                    if marker and marker.group(1) == "BEGIN":
                        begun[marker.group(2)] = i
                    elif marker and marker.group(2) in begun:
                        found.append((marker.group(2), begun.pop(marker.group(2)), i))
        except (OSError, UnicodeDecodeError, ValueError):
            pass
        _REGIONS[path] = found
    return _REGIONS[path]


def _where(traceback):
    """Where in a part's body an exception was raised, 'encoder.py, line 2 of the attention
    body' (the innermost such frame), or "" when none of its frames is in a body."""
    for entry in reversed(list(traceback)):
        path, lineno = str(entry.path), entry.lineno + 1          # entry.lineno counts from 0
        for part, begin, end in _regions(path):
            if begin < lineno < end:
                return f"{Path(path).name}, line {lineno - begin} of the {part} body"
    return ""


def _message(report):
    """A failed test's one line: the assertion's message or the exception, never a traceback;
    an exception raised in a part's body says where (its line within the body)."""
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        text = crash.message
    elif isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = f"skipped: {longrepr[2]}"
    else:
        text = str(longrepr)
    if "File too large" in text or "[Errno 27]" in text:
        return f"printed more than {MAX_OUTPUT // 2 ** 20} MB (huge output): print less"
    if text.startswith("NotImplementedError"):
        return "not written yet (the body raises NotImplementedError)"
    if text.strip() == "MemoryError":
        return "MemoryError: out of memory (the grader has 768 MB in all)"
    asked = re.search(r"can't allocate memory: you tried to allocate (\d+) bytes", text)
    if asked:                               # PyTorch's allocator, in a line of C++ details
        return (f"out of memory: a tensor of {int(asked.group(1)) / 1e6:,.0f} MB more did not "
                f"fit (the grader has 768 MB in all)")
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    raised = [l[1:].strip() for l in lines if l.startswith("E ")]
    if lines and "while importing" in lines[0] and raised:
        lines = raised[-1:]               # a module that cannot import: what it raised
    line = lines[0] if lines else "failed"
    if line == "assert False" and crash is not None:
        checked = _assert_source(crash.path, crash.lineno)
        line = f"failed: {checked}" if checked else line
    where = getattr(report, "raised_in_body", "")
    where = f" ({where})" if where else ""
    room = MESSAGE_CHARS - len(where)
    return (line if len(line) <= room else line[:room - 3] + "...") + where


if _LOG:
    import pytest

    @pytest.fixture(autouse=True)
    def _grader_restores_global_state():
        """What one part's code may change for the tests after it, put back after each test."""
        import torch
        dtype, grad, threads = torch.get_default_dtype(), torch.is_grad_enabled(), \
            torch.get_num_threads()
        yield
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
        torch.set_num_threads(threads)


def _guarded():
    """{name: object} of what the tests rely on and a part's code must leave alone: the
    functions and classes of torch, torch.nn.functional, Tensor, Module, torch.testing, math,
    builtins, pytest, the graded modules and this plugin (what a part's code replaced there
    would change the tests of the parts after it, or fake their reports)."""
    import builtins
    import math
    import torch
    import torch.nn.functional
    import torch.testing
    spaces = {"torch": torch, "torch.nn.functional": torch.nn.functional,
              "torch.Tensor": torch.Tensor, "torch.nn.Module": torch.nn.Module,
              "torch.testing": torch.testing, "math": math, "builtins": builtins,
              "pytest": sys.modules.get("pytest"), "teaching.plugin": sys.modules[__name__],
              "teaching.runner": sys.modules.get("teaching.runner"),
              "teaching.strays": sys.modules.get("teaching.strays"),
              **{m: sys.modules.get(m) for m in GRADED_MODULES}}
    return {f"{where}.{name}": _unwrap(value) for where, space in spaces.items()
            if space is not None for name, value in list(vars(space).items())
            if callable(value) and not (name.startswith("__") and name.endswith("__"))}


def _unwrap(f):
    """The function under its decorators: torch wraps some of its own when a submodule is first
    imported (torch._dynamo wraps torch.manual_seed), which is no change."""
    import inspect
    try:
        return inspect.unwrap(f)
    except ValueError:
        return f


def _left_behind():
    """Why the part whose tests just ended left the process unfit for the next part's tests
    (None when it did not): processes or threads its code started that still run, or a name
    of _guarded() it replaced."""
    import threading
    threads = [t for t in threading.enumerate() if t not in _BEFORE["threads"]]
    now = _guarded()
    changed = [n for n, v in _BEFORE["guarded"].items() if now.get(n) is not v]
    if changed:
        return (f"its code changed {changed[0]}"
                + (f" and {len(changed) - 1} more" if len(changed) > 1 else "")
                + ", which the tests use: a part's code must not change torch, pytest or the "
                  "grader")
    running = stop_strays(keep=set())        # this process's children are the part's code's
    if running or threads:
        what = (f"{running} process(es)" if running else "") + \
            (" and " if running and threads else "") + \
            (f"{len(threads)} thread(s)" if threads else "")
        return (f"its code left {what} running after its tests (the grader stopped them): a "
                f"part's code must not start processes or threads that outlive it")
    return None


def pytest_collection_finish(session):
    if _LOG:
        import threading
        _BEFORE.update(threads=set(threading.enumerate()), guarded=_guarded())
        _emit({"collected": [item.nodeid for item in session.items]})


def pytest_collectreport(report):
    if _LOG and report.failed:
        _emit({"collect_error": report.nodeid, "message": _message(report)})


def pytest_runtest_logstart(nodeid, location):
    if _LOG:
        _emit({"start": nodeid, "t": time.time()})


def pytest_runtest_logreport(report):
    if _LOG and (report.failed or report.skipped) and report.nodeid not in _FAILED:
        _FAILED[report.nodeid] = _message(report)
    if _LOG:        # what a test printed (up to MAX_OUTPUT) is never shown: not kept either
        report.sections = []


def pytest_runtest_logfinish(nodeid, location):
    if _LOG:
        message = _FAILED.pop(nodeid, None)
        _emit({"done": nodeid, "passed": message is None, "message": message, "t": time.time()})


if _LOG:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):
        """A failure raised inside a part's body (not by a test's own assertion) keeps where."""
        outcome = yield
        if call.excinfo is not None:
            try:
                where = _where(call.excinfo.traceback)
            except Exception:                  # never let the location cost the report
                where = ""
            if where:
                outcome.get_result().raised_in_body = where

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        """After a part's last test: a part that left processes or threads running, or changed
        what the tests rely on, gets 0 with one line, and this process ends so that the grader
        starts a fresh one for the parts after it."""
        yield
        # pytest keeps each test's captured output with its item for the whole run: a part whose
        # every test printed MAX_OUTPUT would leave the parts after it short of memory
        sections = getattr(item, "_report_sections", None)
        if isinstance(sections, list):
            sections.clear()
        part = part_of(item.nodeid)
        if nextitem is not None and part_of(nextitem.nodeid) == part:
            return
        why = _left_behind() if _BEFORE else None
        if why:
            _emit({"left": part, "why": why, "restart": nextitem is not None})
            os._exit(0)
