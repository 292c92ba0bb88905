"""Teaching: the worker - the one process in which a submission's code runs while it is graded.

The tests' process (teaching/plugin.py, teaching/remote.py) starts it fresh for each part, with
`python -I -B teaching/worker.py ...` in a copy of the project that holds the submitted bodies and
no test (never forked from the tests' process: it inherits none of their objects or expected
values), as the ordinary user when the grader runs as root. It reads requests from one pipe and
answers on another:

    call      run one graded function with the arguments the tests gave (tensors, generators,
              modules, optimizers), under the stand-ins the test put in place; answer with the
              result, the arguments' tensors and generators as the call left them, the global
              random state and, for an optimizer, its state
    backward  the gradient of a call's outputs with respect to its inputs, for given output
              gradients
    finish    after the part's last test: whether its code replaced a function of torch or of
              the project (what it left running or wrote is judged from outside, by the tests'
              process)

Every answer is written with torch.save and holds values only - tensors, numbers, strings,
lists, dicts - which the tests' process reads with torch.load(weights_only=True): nothing the
code returns can run in the grader. What the code prints goes to a file capped at MAX_OUTPUT,
never to the tests. It imports nothing of the project at its top: the calls do."""
import os
import pickle
import re
import struct
import sys
import time
import traceback
from collections import OrderedDict
from pathlib import Path

TREE_ENV = "ELECTRA_WORKER_TREE"      # for the tests' process: the copy with the submitted bodies
USER_ENV = "ELECTRA_WORKER_USER"      # uid:gid the worker runs as (when the grader is root)
HOME_ENV = "ELECTRA_WORKER_HOME"      # the worker's HOME, where its output goes
PARTS_ENV = "ELECTRA_WORKER_PARTS"    # the graded parts, comma-separated
KEEP_GRAPHS = 4                 # calls whose autograd graph stays for a later backward
SMALL = 2 ** 22                 # bytes: an argument this small is always sent back after a call
MODULES = ("objectives", "encoder", "optim", "ablations", "flops", "finetune_glue")


def read_message(f, limit):
    head = f.read(8)
    if len(head) < 8:
        return None
    n, = struct.unpack("<Q", head)
    if n > limit:
        raise ValueError(f"a message of {n} bytes, more than {limit}")
    data = f.read(n)
    if len(data) < n:
        return None
    return data


def write_message(f, data):
    f.write(struct.pack("<Q", len(data)))
    f.write(data)                           # (not joined to the header: no copy of a large one)
    f.flush()


# ---------------------------------------------------------------------------- where it raised

_REGIONS = {}


def body_regions(path):
    """[(part, BEGIN line, END line)] of a file of this copy (the folder it runs in), read
    once; teaching/plugin.py reads the tests' copy with it too."""
    if path not in _REGIONS:
        found, begun = [], {}
        try:
            if Path(path).resolve().is_relative_to(Path.cwd().resolve()):
                for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
                    m = re.fullmatch(r"\s*# (BEGIN|END) ASSIGNMENT (\w+)\s*", line)
                    if m and m.group(1) == "BEGIN":
                        begun[m.group(2)] = i
                    elif m and m.group(2) in begun:
                        found.append((m.group(2), begun.pop(m.group(2)), i))
        except (OSError, UnicodeDecodeError, ValueError):
            pass
        _REGIONS[path] = found
    return _REGIONS[path]


def where(tb):
    """'objectives.py, line 2 of the mask body' for the innermost frame in a body, else ""."""
    for frame in reversed(traceback.extract_tb(tb)):
        for part, begin, end in body_regions(frame.filename):
            if begin < frame.lineno < end:
                return f"{Path(frame.filename).name}, line {frame.lineno - begin} of the {part} body"
    return ""


# ---------------------------------------------------------------------------- the worker

class Worker:
    def __init__(self):
        import torch
        self.torch = torch
        self.graphs = OrderedDict()
        self.calls = 0
        for m in MODULES:
            try:
                __import__(m)
            except Exception:             # a module that cannot import says so in its calls
                pass
        self.before = self.guarded()

    def guarded(self):
        """{name: function} of torch, torch.nn.functional, Tensor, Module, math, builtins and the
        graded modules: what a part's code must not replace."""
        import builtins
        import math
        import torch
        import torch.nn.functional
        spaces = {"torch": torch, "torch.nn.functional": torch.nn.functional,
                  "torch.Tensor": torch.Tensor, "torch.nn.Module": torch.nn.Module,
                  "math": math, "builtins": builtins,
                  **{m: sys.modules.get(m) for m in MODULES}}
        import inspect
        out = {}
        for name, space in spaces.items():
            if space is None:
                continue
            for key, value in list(vars(space).items()):
                if callable(value) and not (key.startswith("__") and key.endswith("__")):
                    try:
                        value = inspect.unwrap(value)
                    except ValueError:
                        pass
                    out[f"{name}.{key}"] = value
        return out

    # -- call
    def call(self, msg):
        torch = self.torch
        tensors = []
        for data, requires_grad, is_param, grad in msg["tensors"]:
            if is_param:
                t = torch.nn.Parameter(data, requires_grad=requires_grad)
            else:
                t = data.requires_grad_(requires_grad) if data.is_floating_point() or \
                    data.is_complex() else data
            if grad is not None:
                t.grad = grad
            tensors.append(t)
        gens = []
        for state in msg["gens"]:
            g = torch.Generator()
            g.set_state(state)
            gens.append(g)

        class Loader(pickle.Unpickler):
            def persistent_load(self, pid):
                return tensors[pid[1]] if pid[0] == "t" else gens[pid[1]]
        import io
        args, kwargs = Loader(io.BytesIO(msg["payload"])).load()
        versions = [t._version for t in tensors]
        module = __import__(msg["module"])
        fn = module
        for name in msg["qualname"].split("."):
            fn = getattr(fn, name)
        undo = self.patch(msg["patches"])
        torch.set_rng_state(msg["rng"])
        try:
            with torch.set_grad_enabled(msg["grad"]):
                result = fn(*args, **kwargs)
        finally:
            for target, name, value in undo:
                setattr(target, name, value)
        ids = {id(t): i for i, t in enumerate(tensors)}
        outs = []

        def enc(v, depth=0):
            if depth > 20:
                return ["?", "nested too deep"]
            if isinstance(v, torch.Tensor):
                if id(v) in ids:
                    return ["r", ids[id(v)]]
                outs.append(v)
                return ["t", len(outs) - 1]
            if isinstance(v, (bool, int, float, str)) or v is None:
                return ["v", v]
            if isinstance(v, tuple) and hasattr(v, "_fields"):
                return ["nt", type(v).__name__, [enc(x, depth + 1) for x in v]]
            if isinstance(v, (tuple, list)):
                return ["tuple" if isinstance(v, tuple) else "list",
                        [enc(x, depth + 1) for x in v]]
            if isinstance(v, dict):
                return ["dict", [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]]
            if isinstance(v, torch.dtype):
                return ["dtype", str(v)]
            if hasattr(v, "item") and callable(v.item):       # a NumPy number
                try:
                    return enc(v.item(), depth + 1)
                except Exception:
                    pass
            return ["?", f"{type(v).__name__} object"]
        encoded = enc(result)
        diff = [bool(o.requires_grad) for o in outs]
        inputs = [t for t in tensors if t.requires_grad]
        if any(diff) and inputs:
            self.calls += 1
            self.graphs[self.calls] = ([o for o, d in zip(outs, diff) if d], inputs)
            while len(self.graphs) > KEEP_GRAPHS:
                self.graphs.popitem(last=False)
        opt_state = []
        for obj in list(args) + list(kwargs.values()):
            if isinstance(obj, torch.optim.Optimizer):
                for p, st in obj.state.items():
                    if id(p) in ids:
                        opt_state.append([ids[id(p)], [[k, v.detach() if isinstance(
                            v, torch.Tensor) else v] for k, v in st.items()]])
        return {"result": encoded, "outs": [o.detach() for o in outs], "diff": diff,
                "call": self.calls if any(diff) and inputs else None,
                # what the call may have changed in place: every small argument, and a large
                # one whose version counter moved (a large one left alone is not sent back)
                "after": [t.detach() if t._version != v or t.numel() * t.element_size() <= SMALL
                          else None for t, v in zip(tensors, versions)],
                "gens": [g.get_state() for g in gens],
                "rng": torch.get_rng_state(), "opt_state": opt_state}

    def patch(self, patches):
        """Put the test's stand-ins (functions of teaching.stand_ins, by name) in place; a
        stand-in the worker cannot have (a lambda of the test) raises when it is called."""
        undo = []
        import teaching.stand_ins as stand_ins
        for target, name in patches.items():
            path = target.split(".")
            owner = __import__(path[0])
            for p in path[1:-1]:
                owner = getattr(owner, p)
            if name:
                value = getattr(stand_ins, name)
            else:
                def value(*a, _t=target, **k):
                    raise RuntimeError(f"the test replaced {_t} with a stand-in that is not in "
                                       f"teaching/stand_ins.py (a grader error)")
            undo.append((owner, path[-1], owner.__dict__.get(path[-1])))
            setattr(owner, path[-1], value)
        return undo

    def backward(self, msg):
        if msg["call"] not in self.graphs:
            raise RuntimeError("the graph of that call is gone: take its gradient sooner")
        outs, inputs = self.graphs[msg["call"]]
        grads = self.torch.autograd.grad(outs, inputs, msg["grads"], retain_graph=True,
                                         allow_unused=True)
        return {"grads": [None if g is None else g.detach() for g in grads]}

    def finish(self, msg):
        """Whether the part's code replaced a function its calls use. What it left running
        (processes, threads) and wrote outside its home is not asked here: the tests' process
        judges that from outside (teaching/remote.py finish), since this code could lie."""
        now = self.guarded()
        changed = [n for n, v in self.before.items() if now.get(n) is not v]
        if changed:
            why = (f"its code changed {changed[0]}"
                   + (f" and {len(changed) - 1} more" if len(changed) > 1 else "")
                   + ", which the tests use: a part's code must not change torch, pytest or the "
                     "grader")
            return {"why": why}
        return {"why": None}


def error_reply(e):
    name = type(e).__name__
    text = str(e)
    return {"error": name if name.isidentifier() else "Exception", "message": text[:4000],
            "where": where(e.__traceback__)}


def serve(worker, reader, writer, limit):
    """Answer requests until the tests' process closes the channel."""
    import io
    import torch
    while True:
        data = read_message(reader, limit)
        if data is None:
            return
        try:
            msg = pickle.loads(data)
            del data                        # (not held while the call runs)
            if msg["kind"] not in ("call", "backward", "finish"):
                raise ValueError(f"no request {msg['kind']!r}")
            # looked up at each request: the part's code may replace any of them (the tests
            # check that a worker lying about gradients gains nothing)
            reply = getattr(worker, msg["kind"])(msg)
        except BaseException as e:          # SystemExit and KeyboardInterrupt too: a reply
            reply = error_reply(e)
        buf = io.BytesIO()
        try:
            torch.save(reply, buf)
        except Exception as e:
            buf = io.BytesIO()
            torch.save(error_reply(e), buf)
        del reply
        write_message(writer, buf.getbuffer())
        del buf


def main(argv):
    """The template worker: started fresh (python -I) by the tests' process, it imports torch
    and the project once, then forks one worker per part on request (so a part's worker starts
    in milliseconds, from a process that never held a test). Requests come on a Unix socket:
    fork (with the part's own socket and output file), wait (a worker's exit status)."""
    import resource
    import socket
    ctrl_fd, root, max_output, limit = argv[1:5]
    max_output, limit = int(max_output), int(limit)
    resource.setrlimit(resource.RLIMIT_FSIZE, (max_output, max_output))
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.chdir(root)
    sys.path[0] = root                    # not teaching/, the folder of this file
    ctrl = socket.socket(fileno=int(ctrl_fd))
    # the child subreaper of its workers: what a worker's code starts, a daemon that
    # double-forked included, stays below this process when the worker ends, where the tests'
    # process finds it (teaching/strays.py)
    from teaching import strays
    strays._prctl(strays.PR_SET_CHILD_SUBREAPER, 1)
    workers = set()
    import torch
    torch.set_num_threads(1)
    worker = Worker()
    import gc
    gc.freeze()             # the template's objects: out of the workers' collections (fewer
    while True:             # of its pages copied into each worker)
        data, fds, _, _ = socket.recv_fds(ctrl, 1 << 16, 1)
        if not data:
            return 0
        msg = pickle.loads(data)
        for pid in strays.children(os.getpid()):     # reap the orphans the tests' process
            if pid not in workers:                    # stopped (never a worker: its status
                try:                                  # is asked for)
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
        if msg["kind"] == "fork":
            pid = os.fork()
            if pid == 0:
                ctrl.close()
                os.setsid()
                fd = os.open(msg["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
                os.dup2(fd, 1)
                os.dup2(fd, 2)
                os.close(fd)
                sock = socket.socket(fileno=fds[0])
                try:
                    serve(worker, sock.makefile("rb"), sock.makefile("wb"), limit)
                finally:
                    os._exit(0)
            for fd in fds:
                os.close(fd)
            workers.add(pid)
            reply = {"pid": pid}
        else:                               # wait: the exit status, or None while it runs
            rc, t0 = None, time.time()
            while True:
                try:
                    done, status = os.waitpid(msg["pid"], os.WNOHANG)
                except ChildProcessError:
                    rc = -9                 # reaped already, or never ours: gone
                    break
                if done:
                    rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else \
                        os.WEXITSTATUS(status)
                    break
                if time.time() - t0 >= msg.get("timeout", 5):
                    break
                time.sleep(0.01)
            reply = {"rc": rc}
        import io
        buf = io.BytesIO()
        torch.save(reply, buf)
        ctrl.sendall(buf.getvalue())


if __name__ == "__main__":
    sys.exit(main(sys.argv))
