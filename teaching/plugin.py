"""Teaching: the pytest plugin in the tests' process, which reports each test back to the
grader (teaching/runner.py starts `python -m pytest -p teaching.plugin ...`).

Silent unless the grader named a log in $ELECTRA_GRADE_LOG (runner.LOG_ENV): then it replaces
every graded function by a stub that calls the part's worker (teaching/remote.py: the submitted
code runs there, never here), and writes one JSON line per event - collected, a collection
error, started, done with a failed test's one-line message (the assertion's message or the
exception, never a traceback; an exception raised in a part's body says where) - drops what
each test printed once it is done, puts back what a test may change for the tests after it,
and after a part's last test judges, from outside the part's worker (teaching/remote.py finish),
whether the part's code left processes or threads running or files outside its home, asks the
worker whether it replaced a function its calls use (the part then gets 0 with one line), and
stops that worker.

It imports neither torch nor the project's code at its top: the tests do that."""
import ast
import json
import os
import re
import sys
import time
from pathlib import Path

from teaching.runner import LOG_ENV, MAX_OUTPUT, MESSAGE_CHARS, TESTS_ENV, part_of
from teaching.worker import body_regions

_LOG = os.environ.get(LOG_ENV)
_FAILED = {}


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


def _where(traceback):
    """Where in a part's body an exception was raised, 'encoder.py, line 2 of the attention
    body' (the innermost such frame), or "" when none of its frames is in a body."""
    for entry in reversed(list(traceback)):
        path, lineno = str(entry.path), entry.lineno + 1          # entry.lineno counts from 0
        for part, begin, end in body_regions(path):
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


def pytest_configure(config):
    """The graded functions replaced by stubs that call the part's worker, before any test
    module imports them."""
    if _LOG and os.environ.get(remote_env()):
        from teaching import remote
        remote.install(os.environ.get(remote.PARTS_ENV, "").split(","))


def remote_env():
    from teaching.worker import TREE_ENV
    return TREE_ENV


def pytest_unconfigure(config):
    if "teaching.remote" in sys.modules:
        sys.modules["teaching.remote"].stop(template=True)


def pytest_collection_modifyitems(config, items):
    """The tests the grader named ($ELECTRA_GRADE_TESTS: a test file, or a test by name), in
    its order, each part's together; the rest of their files (other parts' hidden tests)
    deselected."""
    wanted = os.environ.get(TESTS_ENV) if _LOG else None
    if not wanted:
        return
    order = {nid: i for i, nid in enumerate(json.loads(wanted))}

    def rank(item):
        nid = item.nodeid
        for key in (nid, nid.split("[")[0], nid.partition("::")[0]):
            if key in order:
                return order[key]
        return None
    keep = [i for i in items if rank(i) is not None]
    config.hook.pytest_deselected(items=[i for i in items if rank(i) is None])
    items[:] = sorted(keep, key=rank)          # (a stable sort: a file's tests in its order)


def pytest_collection_finish(session):
    if _LOG:
        _emit({"collected": [item.nodeid for item in session.items]})


def pytest_collectreport(report):
    if _LOG and report.failed:
        _emit({"collect_error": report.nodeid, "message": _message(report)})


def pytest_runtest_logstart(nodeid, location):
    if _LOG:
        if "teaching.remote" in sys.modules:
            sys.modules["teaching.remote"].use(part_of(nodeid))
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
            try:          # raised in the worker (teaching/remote.py says where), or here
                where = str(getattr(call.excinfo.value, "raised_in_body", "") or "") or \
                    _where(call.excinfo.traceback)
            except Exception:                  # never let the location cost the report
                where = ""
            if where:
                outcome.get_result().raised_in_body = where

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        """After a part's last test: a part whose code left processes or threads running or
        files outside its home (judged from outside its worker), or changed what its worker's
        calls rely on, gets 0 with one line; its worker stops either way (teaching/remote.py),
        and the next part's tests start a fresh one."""
        yield
        # pytest keeps each test's captured output with its item for the whole run: a part whose
        # every test printed MAX_OUTPUT would leave the parts after it short of memory
        sections = getattr(item, "_report_sections", None)
        if isinstance(sections, list):
            sections.clear()
        part = part_of(item.nodeid)
        if nextitem is not None and part_of(nextitem.nodeid) == part:
            return
        if "teaching.remote" in sys.modules:
            why = sys.modules["teaching.remote"].finish()
            if why:
                _emit({"left": part, "why": why, "restart": False})
