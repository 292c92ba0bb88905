"""Teaching: the tests' process - how the grader (teaching/grade.py) runs a part's tests.

The grader starts `python -m pytest -p teaching.plugin ...` in a fresh grading folder and reads
what the plugin's hooks (teaching/plugin.py) write, one JSON line per event (collected, started,
done, with a failed test's one-line message), to a log it names in $ELECTRA_GRADE_LOG. The grader watches the log:
a part whose tests run past its time limit, or a process that crashes (a segfault, os._exit, out
of memory), is stopped and given one line saying why, and a new process starts for the parts
left. Every file the tests write is capped (MAX_OUTPUT), the workers' output too. The submitted
code never runs in the tests' process: the plugin calls it in a worker process per part
(teaching/remote.py, teaching/worker.py), in a copy of the project that holds no test, as an
ordinary user (Unprivileged) when the grader runs as root; the tests and their verdicts stay
here, run as the grader's user.

It imports neither torch nor the project's code at its top: the tests do that."""
import ast
import json
import os
import pwd
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

from teaching import autograder
from teaching import worker as remote     # the names of the worker's settings
from teaching.strays import SWEEP_S, children, stop_strays, subreaper

HIDDEN = Path(autograder.HIDDEN)            # where the autograder puts the hidden tests
PUBLIC = "tests/parts/test_part_{}.py"
LOG_ENV = "ELECTRA_GRADE_LOG"             # where the plugin writes, one JSON line per event
TESTS_ENV = "ELECTRA_GRADE_TESTS"         # the node ids to run, in order (JSON), for the plugin
MAX_OUTPUT = 16 * 2 ** 20                 # bytes: the most any file the tests write may hold
MESSAGE_CHARS = 240                       # a failure message is cut to one line of this length
EXIT_GRACE_S = 10                         # how long the tests' process may take to end
USER_ENV = "ELECTRA_GRADE_USER"           # the user the tests run as when the grader is root
USERS = (autograder.USER, "nobody")       # tried in order: setup.sh creates the first


# ---------------------------------------------------------------------------- the tests' names

def node_ids(tree, part, hidden):
    """What pytest runs for a part: its public file, and its hidden tests by name."""
    ids = [PUBLIC.format(part)]
    if hidden and (tree / HIDDEN).is_file():
        body = ast.parse((tree / HIDDEN).read_text()).body
        ids += [f"{HIDDEN.as_posix()}::{n.name}" for n in body
                if isinstance(n, ast.FunctionDef) and n.name.startswith(f"test_{part}__")]
    return ids


def part_of(nodeid):
    path, _, name = nodeid.partition("::")
    if path.startswith("tests/parts/test_part_"):
        return Path(path).stem[len("test_part_"):]
    return name[len("test_"):].split("__")[0] if name.startswith("test_") else None


def is_hidden(nodeid):
    return nodeid.startswith(HIDDEN.as_posix())


def test_name(nodeid):
    """A test's name for people: 'exactly k real positions per sequence never special'."""
    name = nodeid.partition("::")[2] or nodeid
    base, _, param = name.partition("[")
    base = base[len("test_"):] if base.startswith("test_") else base
    base = base.split("__", 1)[-1].replace("_", " ")
    return f"{base} [{param}" if param else base


# ---------------------------------------------------------------------------- running them

class Log:
    """The plugin's records, read as the file grows."""

    def __init__(self, path):
        self.path, self.offset, self.rest = path, 0, b""

    def new(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        lines = (self.rest + data).split(b"\n")
        self.rest = lines.pop()
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out


def limit_output():
    """In the test process: no file may grow past MAX_OUTPUT (captured printing included)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_OUTPUT, MAX_OUTPUT))


class Unprivileged:
    """Who runs the submitted code's workers when the grader runs as root (Gradescope runs
    everything as root).

    As root a worker could read the tests (the hidden ones included), rewrite the grader's files,
    signal the grader, or leave a process behind that writes results.json after the grader has
    finished. So the grader runs the workers as an ordinary user - $ELECTRA_GRADE_USER, else
    `electra-student` (setup.sh creates it), else `nobody` - which can read the workers' copy of
    the project but write only its home and /tmp; the tests' folder is then the grader's alone.
    Not root (a student's own machine): the workers run as the grader's user. Run as root, it
    never falls back to root: given `python`, a user who cannot start it (a Python under a
    private /root) is not taken, and then, as without any such user, `refusal` says in one line
    why no submitted code may run and what to fix in the image (the grader scores every part 0
    with it)."""

    def __init__(self, user=None, python=None):
        self.uid = self.gid = None
        self.refusal = None
        if os.geteuid() != 0:
            return
        for name in ([user] if user else []) + list(USERS):
            try:
                entry = pwd.getpwnam(name)
            except KeyError:
                continue
            self.uid, self.gid, self.name = entry.pw_uid, entry.pw_gid, name
            if python and not self.can_run(python):
                self.uid = None
                self.refusal = (f"not graded: the submitted code must not run as root, and user "
                                f"{name} cannot start the grader's Python {python}; build the "
                                f"image with setup.sh (its {autograder.VENV}) - tell your "
                                f"instructor")
            return
        self.refusal = ("not graded: the submitted code must not run as root, and there is no "
                        "user " + " or ".join(USERS) + " to run it as; build the image with "
                        "setup.sh (it creates one) - tell your instructor")

    def __bool__(self):
        return self.uid is not None

    def become(self):
        """In the child, before it runs anything: this user and group only, for good."""
        os.setgroups([])
        os.setgid(self.gid)
        os.setuid(self.uid)

    def can_run(self, python):
        """Whether this user can start `python` (a Python under a private home cannot)."""
        try:
            return subprocess.run([python, "-c", "pass"], preexec_fn=self.become,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=60).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False

    def prepare(self, work, tree):
        """The workers' copy readable, never writable, by the user; a home it owns."""
        if not self:
            return None
        for d in [work, *[p for p in tree.rglob("*") if p.is_dir()], tree]:
            d.chmod(0o755)
        for f in tree.rglob("*"):
            if f.is_file():
                f.chmod(0o644)
        home = work / "home"
        home.mkdir(exist_ok=True)
        os.chown(home, self.uid, self.gid)
        return home


def child_setup(user):
    """What a child of the grader does before it starts: the output cap, then the user (the
    tests' process: none)."""
    def setup():
        limit_output()
        if user:
            user.become()
    return setup


def last_line(path):
    try:
        lines = [l.strip() for l in Path(path).read_text(errors="replace")[-4000:].splitlines()]
    except OSError:
        return "no output"
    lines = [l for l in lines if l and not set(l) <= set("=-_ ")]
    return lines[-1][:MESSAGE_CHARS] if lines else "no output"


def signal_name(rc):
    """The signal that ended a process of exit status rc ("SIGKILL"), or None if none did."""
    if rc is None or rc >= 0:
        return None
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def stopped_because(rc, test, out, reason=None):
    where = f" in {test_name(test)}" if test else ""
    sig = signal_name(rc)
    if sig:
        if sig == "SIGKILL":
            return f"the tests were killed{where} (SIGKILL): out of memory?"
        return f"the tests crashed{where} ({sig})"
    if test:
        return (f"the tests stopped{where} (exit status {rc}): exit(), os._exit() or a crash "
                f"in the code")
    return f"the tests could not run: {reason or last_line(out)}"


def run_parts(tree, parts, hidden, limits, startup_s, deadline, say=print, user=None,
              home=None, code=None):
    """Run the parts' tests in as few pytest processes as possible. Returns {nodeid: (passed,
    message)} for every test that finished, {part: [nodeids]} as collected, {part: reason} for
    the parts stopped (time limit, crash, time budget) and {part: seconds its tests took}.
    `code` is the copy with the submitted bodies, in which the parts' workers run (as `user`, an
    Unprivileged, when set, with `home` their HOME); the tests run in `tree`, as the grader."""
    results, collected, stopped, seconds = {}, {}, {}, {}
    pending, attempt = list(parts), 0
    own = set(children(os.getpid()))          # the grader's own children: never stopped
    with subreaper():
        while pending:
            attempt += 1
            pending = _run_once(tree, pending, hidden, limits, startup_s, deadline, say, user,
                                home, code, own, attempt, results, collected, stopped, seconds)
    return results, collected, stopped, seconds


def _run_once(tree, pending, hidden, limits, startup_s, deadline, say, user, home, code, own,
              attempt, results, collected, stopped, seconds):
    """One pytest process for the parts `pending` (filling in the dicts of run_parts); returns
    the parts left for the next one."""
    log, out = tree / f".grade-{attempt}.jsonl", tree / f".grade-{attempt}.out"
    ids = [i for p in pending for i in node_ids(tree, p, hidden)]
    # the test files on the command line, the tests to run (the hidden ones by name) in the
    # environment: a process's command line is everyone's to read (/proc/<pid>/cmdline), its
    # environment its owner's alone, and the hidden tests' names say what they test
    files = list(dict.fromkeys(i.partition("::")[0] for i in ids))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "-p", "teaching.plugin", "--tb=no", "--show-capture=no", "-W", "ignore", *files]
    # glibc's malloc returns a freed block of 1 MiB or more to the system at once (by default
    # its threshold grows with the blocks freed, and the memory of one part's large tensors
    # stays with the process): one part's tests do not leave the next short of memory
    env = dict(os.environ, **{LOG_ENV: str(log)}, PYTHONDONTWRITEBYTECODE="1",
               OMP_NUM_THREADS="1", PYTHONHASHSEED="0", MALLOC_MMAP_THRESHOLD_=str(2 ** 20))
    env[TESTS_ENV] = json.dumps(ids)
    env[remote.TREE_ENV] = str(code or tree)
    env[remote.PARTS_ENV] = ",".join(pending)
    env[remote.HOME_ENV] = str(home or code or tree)
    if user:
        env[remote.USER_ENV] = f"{user.uid}:{user.gid}"
    with open(out, "wb") as f:
        proc = subprocess.Popen(cmd, cwd=tree, env=env, stdin=subprocess.DEVNULL, stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=child_setup(None))
    reader, started = Log(log), time.time()
    current, current_t, used = None, None, {p: 0.0 for p in pending}
    ran_any, killed, rc, this_run, done_t = False, None, None, [], None
    shared = []                         # why a file of no one part could not be collected
    restart, swept = False, time.time()   # the plugin ended the process for a fresh one

    def sweep(keep):
        n = stop_strays(keep)
        if n:
            say(f"  stopped {n} process(es) that the tests' code left running")

    def handle(rec):
        nonlocal current, current_t, ran_any, restart
        if "collected" in rec:
            fresh = {}
            this_run[:] = rec["collected"]
            for nid in rec["collected"]:
                fresh.setdefault(part_of(nid), []).append(nid)
            collected.update(fresh)
        elif "collect_error" in rec:
            p = part_of(rec["collect_error"])
            if p in pending:
                stopped.setdefault(p, f"its tests could not be collected: {rec['message']}")
            else:                       # the hidden tests' file: every part's
                shared.append(rec["message"])
        elif "start" in rec:
            current, current_t, ran_any = rec["start"], rec["t"], True
        elif "done" in rec:
            results[rec["done"]] = (rec["passed"], rec["message"])
            p = part_of(rec["done"])
            if p in used and current_t is not None:
                used[p] += rec["t"] - current_t
            current, current_t = None, None
        elif "left" in rec:                 # the part's tests ended; what it left did not
            stopped[rec["left"]] = rec["why"]
            restart = rec["restart"]
            say(f"  {rec['left']}: {rec['why']}")
    while True:
        for rec in reader.new():
            handle(rec)
        rc = proc.poll()
        if rc is not None:
            for rec in reader.new():
                handle(rec)
            break
        now = time.time()
        part = part_of(current) if current else None
        if this_run and all(n in results for n in this_run):
            # every test finished: a process that does not end (a thread the code started
            # that never stops) is stopped after a grace period, with nothing lost
            done_t = done_t or now
            if now - done_t > EXIT_GRACE_S:
                killed = (None, None)
        elif part in used and used[part] + now - current_t > limits[part]:
            killed = (part, f"stopped after {limits[part]:g} s, the time limit of this part, "
                            f"in {test_name(current)}: an endless loop, or far too slow")
        elif not ran_any and now - started > startup_s:
            killed = (None, f"the tests did not start within {startup_s:g} s")
        elif now > deadline:
            killed = (None, "not graded: the autograder's time ran out before this part "
                            "finished (an earlier part ran to its time limit?)")
        if killed:
            break
        if now - swept > SWEEP_S:       # orphans of the tests' process (a daemon) now
            swept = now
            sweep(own | {proc.pid})
        time.sleep(0.05)
    try:                                # the tests' process (when killed) and its process group,
        os.killpg(proc.pid, signal.SIGKILL)     # then every orphan (the grader reaps them)
    except OSError:
        pass
    proc.wait()
    sweep(own)
    complete = [p for p in pending if collected.get(p)
                and all(n in results for n in collected[p])]
    if killed and killed[0]:
        stopped[killed[0]] = killed[1]
    elif killed and killed[1]:
        for p in pending:
            if p not in complete:
                stopped.setdefault(p, killed[1])
    elif not killed and restart:        # a fresh process for the parts after it
        pass
    elif not killed and any(p not in complete and p not in stopped for p in pending):
        if current:
            stopped[part_of(current)] = stopped_because(rc, current, out)
        elif not ran_any:
            for p in pending:
                stopped.setdefault(p, stopped_because(rc, None, out, shared and shared[0]))
        else:
            first = next(p for p in pending if p not in complete and p not in stopped)
            stopped[first] = stopped_because(rc, None, out)
    left = [p for p in pending if p not in complete and p not in stopped]
    if left == pending:                     # no progress: never start the same run again
        stopped[left[0]] = stopped_because(rc, current, out)
        left = left[1:]
    for p in pending:
        seconds[p] = used[p]
        if p in stopped and p not in complete:
            say(f"  {p}: {stopped[p]}")
    return left
