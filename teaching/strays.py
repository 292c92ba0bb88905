"""Teaching: the processes a submission leaves behind, found and stopped.

A submission's code may start processes that outlive its tests (a fork, a daemon): they would
take CPU from the parts after it and, as root, could write results.json after the grader. On
Linux the grader becomes a "child subreaper", so that every orphan of the tests' process, a
daemon that double-forked included, becomes its child, and stops them all.

It serves twice: the grader (teaching/runner.py) sweeps for orphans while the tests run and
when they end, and the pytest plugin (teaching/plugin.py) stops, after each part, the processes
its code left running."""
import contextlib
import os
import signal

PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37
SWEEP_S = 1.0                             # how often the grader looks for orphans while it waits


def _prctl(option, arg):
    """prctl(2), or None where there is none (not Linux)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if option == PR_GET_CHILD_SUBREAPER:
            value = ctypes.c_int(0)
            return value.value if libc.prctl(option, ctypes.byref(value), 0, 0, 0) == 0 else None
        return libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError, TypeError):
        return None


def process_table():
    """{pid: (parent pid, state)} of every process (from /proc; {} where there is none)."""
    table = {}
    try:
        pids = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return table
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            table[pid] = (int(fields[1]), fields[0].decode())
        except (OSError, IndexError, ValueError):
            pass
    return table


def children(pid, table=None):
    """The processes whose parent is pid, zombies (ended, not yet reaped) included."""
    table = process_table() if table is None else table
    return [p for p, (parent, _) in table.items() if parent == pid]


def stop_strays(keep):
    """SIGKILL every child of this process not in `keep` (the grader keeps its own children and
    the running tests' process; the tests' process keeps none), with all their descendants, and
    reap them; returns how many were running."""
    me, stopped = os.getpid(), set()
    for _ in range(100):                      # a process that forks as fast as it is killed
        table = process_table()
        roots = [p for p in children(me, table) if p not in keep]
        if not roots:
            break
        tree, todo = [], list(roots)
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo += children(pid, table)
        for pid in tree:
            if table[pid][1] != "Z":
                stopped.add(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        for pid in roots:                     # killed children of the grader: reap them
            try:
                os.waitpid(pid, 0 if pid in stopped else os.WNOHANG)
            except ChildProcessError:
                pass
    return len(stopped)


@contextlib.contextmanager
def subreaper():
    """The grader as the child subreaper of what it starts, while inside (where it was not one
    already and the system has prctl)."""
    was = _prctl(PR_GET_CHILD_SUBREAPER, 0)
    if was == 0:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    try:
        yield
    finally:
        if was == 0:
            _prctl(PR_SET_CHILD_SUBREAPER, 0)

