"""Teaching: the processes a submission leaves behind, found and stopped.

A submission's code may start processes that outlive its tests (a fork, a daemon): they would
take CPU from the parts after it and, as root, could write results.json after the grader. On
Linux the grader becomes a "child subreaper", so that every orphan of the tests' process, a
daemon that double-forked included, becomes its child, and stops them all.

It serves twice: the grader (teaching/runner.py) sweeps for orphans while the tests run and
when they end, and the tests' process (teaching/remote.py's `finish`, from teaching/plugin.py)
judges, after each part, what its code left behind - from outside the part's worker: the
processes below the template worker (a child subreaper too, so that a daemon that
double-forked stays below it), the worker's thread count in /proc and, when the worker runs as
a user of its own, a listing of the folders that user may write - never by asking the worker,
whose code is the submission's."""
import contextlib
import os
import signal
import time

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


def threads_of(pid):
    """How many threads a process runs (from /proc), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            return next(int(l.split()[1]) for l in f if l.startswith(b"Threads:"))
    except (OSError, IndexError, ValueError, StopIteration):
        return None


def descendants(pid, table=None):
    """Every running process below pid in the process table (children, their children, ...),
    zombies (ended, not yet reaped) left out."""
    table = process_table() if table is None else table
    out, todo = [], [pid]
    while todo:
        kids = children(todo.pop(), table)
        out += [k for k in kids if table[k][1] != "Z"]
        todo += kids
    return out


def stopped_below(pid, keep=()):
    """SIGKILL every running process below pid but those in `keep`, round after round while
    new ones appear (a process that forks as fast as it is killed); returns the set of those
    killed. The processes below are reaped by pid itself (the template reaps its orphans)."""
    killed = set()
    for _ in range(100):
        found = [p for p in descendants(pid) if p not in keep]
        if not found:
            break
        for p in found:
            try:
                os.kill(p, signal.SIGKILL)
                killed.add(p)
            except OSError:
                pass
        time.sleep(0.01)                   # (a killed process turns zombie a moment later)
    return killed


def written_by(uid, home, since=0.0, roots=("/tmp", "/var/tmp", "/dev/shm"), limit=10000):
    """Files and folders owned by uid in the folders everyone may write (roots), outside its
    home, changed since `since` (their ctime, which no user can set back): what a part's code
    wrote where the grader did not give it room. Topmost entries only (a folder's content goes
    with it); at most `limit` entries looked at per root."""
    found = []
    home = os.path.realpath(home) if home else None
    for root in roots:
        todo, seen = [root], 0
        while todo and seen < limit:
            d = todo.pop()
            try:
                entries = list(os.scandir(d))
            except OSError:
                continue
            for e in entries:
                seen += 1
                path = e.path
                if home and (path == home or home.startswith(path + os.sep)):
                    if path != home:
                        todo.append(path)           # a folder on the way to home
                    continue
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if st.st_uid == uid and st.st_ctime >= since:
                    found.append(path)
                elif e.is_dir(follow_symlinks=False) and st.st_mode & 0o002:
                    todo.append(path)               # a folder it may write into
    return sorted(found)


def remove(paths):
    """Delete files and folders (never following a link out of them)."""
    import shutil
    for p in paths:
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                os.unlink(p)
        except OSError:
            pass


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

