"""Teaching: the stubs through which the tests call a submission's functions in a worker process.

In the tests' process (teaching/plugin.py calls `install` before the tests are collected) every
graded function - objectives.mask_tokens, encoder.SelfAttention.forward, ... - is replaced by a
stub. A stub sends its arguments to the part's worker (teaching/worker.py: a fresh Python
started with -I in the copy that holds the submitted bodies, as the ordinary user when the grader
runs as root, one per part and reused by its tests) and returns what the worker answers, as
values: tensors, numbers, strings and the containers of these, read with
torch.load(weights_only=True). The tensors, generators and optimizer state the call changed in
place are changed here the same way, the global random state follows the worker's, and a result
with a gradient stays on the tests' autograd graph: its backward asks the worker for the
gradient of the call's inputs. An exception in the body is raised here with its type's name, its
message and where in the body it was raised; a worker that dies (a crash, os._exit, out of
memory) fails the call with one line and the next call starts a fresh one.

So every assert, every comparison with an expected value and every report stays in this process,
which never imports the submitted code; the worker can only choose the values it returns."""
import functools
import io
import os
import pickle
import signal
import subprocess
import sys
import time

import torch

from teaching import course, strays
from teaching.runner import signal_name
from teaching.worker import HOME_ENV, PARTS_ENV, TREE_ENV, USER_ENV, read_message, write_message

MAX_MESSAGE = 256 * 2 ** 20           # bytes: the largest answer read from a worker
NAMED = {"Masked"}                    # the named tuples a worker may return, by name


def target_of(part):
    """('objectives', 'ELECTRA.forward') for a part."""
    file, qual = course.BY_NAME[part].where.split(": ")
    return file[:-len(".py")], qual


def resolve(module, qualname):
    owner = __import__(module)
    parts = qualname.split(".")
    for p in parts[:-1]:
        owner = getattr(owner, p)
    return owner, parts[-1]


# The graded functions whose contract changes their arguments in place: the optimizer's step
# (θ, and the moments m and v). Every other part's tensors stay the test's: what a call changed
# in place is not copied back, and the call fails with InPlaceChange.
CHANGES_ARGUMENTS = {("optim", "AdamWeightDecay.step")}


class InPlaceChange(Exception):
    """A graded function changed a tensor it was given, which its contract does not allow."""


InPlaceChange.__module__ = "builtins"


def _argument(module, qualname, args, kwargs, tensor):
    """The name of the argument that holds `tensor` ("its argument x_hat", "masked.targets"),
    for the one line that says it was changed."""
    import inspect
    try:
        owner, name = resolve(module, qualname)
        fn = inspect.unwrap(owner.__dict__[name])
        bound = inspect.signature(fn).bind(*args, **kwargs).arguments
    except Exception:
        return "one of its arguments"
    for arg, value in bound.items():
        if value is tensor:
            return f"its argument {arg}"
        for field in getattr(value, "_fields", ()):
            if getattr(value, field) is tensor:
                return f"its argument {arg}.{field}"
        if isinstance(value, torch.nn.Module) and any(p is tensor for p in value.parameters()):
            return f"a parameter of {arg}"
    return "one of its arguments"


class WorkerError(Exception):
    """The worker could not answer (it died, or sent what is not an answer)."""


WorkerError.__module__ = "builtins"      # its one line names it alone, as a built-in error


def _raise_from(reply):
    name, message = reply.get("error", "Exception"), str(reply.get("message", ""))
    import builtins
    known = getattr(builtins, name, None) if name.isidentifier() else None
    e = None
    if isinstance(known, type) and issubclass(known, Exception):
        try:                                # ValueError, NotImplementedError, ... as they are
            e = known(message)
        except Exception:
            e = None
    if e is None:
        cls = type(name if name.isidentifier() else "Exception", (Exception,),
                   {"__module__": "builtins"})
        e = cls(message)
    e.raised_in_body = str(reply.get("where", ""))[:120]
    raise e


class Template:
    """The template worker (teaching/worker.py main): one fresh Python per run of the tests, as
    the ordinary user when the grader is root, which forks each part's worker."""

    def __init__(self):
        import socket
        tree = os.environ[TREE_ENV]
        from teaching.runner import MAX_OUTPUT
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        home = os.environ.get(HOME_ENV) or tree
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "HOME": home, "TMPDIR": home,      # a temporary file (PyTorch's) goes home too
               "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": str(2 ** 20),
               "LC_ALL": "C.UTF-8"}
        if "AUTOGRADER_ROOT" in os.environ:     # a path only: the results are not its to write
            env["AUTOGRADER_ROOT"] = os.environ["AUTOGRADER_ROOT"]
        kw = {}
        user = os.environ.get(USER_ENV)
        if user:
            uid, gid = map(int, user.split(":"))
            kw = dict(user=uid, group=gid, extra_groups=[])
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-B", os.path.join(tree, "teaching", "worker.py"),
             str(theirs.fileno()), tree, str(MAX_OUTPUT), str(MAX_MESSAGE)],
            cwd=tree, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, pass_fds=(theirs.fileno(),), start_new_session=True,
            **kw)
        theirs.close()
        self.sock = mine

    def ask(self, msg, fds=()):
        import socket
        try:
            socket.send_fds(self.sock, [pickle.dumps(msg)], list(fds))
            data = self.sock.recv(1 << 16)
            reply = torch.load(io.BytesIO(data), weights_only=True) if data else None
        except Exception:
            reply = None
        if not isinstance(reply, dict):
            raise WorkerError("the part's worker could not start: its template is gone")
        return reply

    def close(self):
        self.sock.close()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()


class Worker:
    """One part's worker, forked by the template."""

    def __init__(self, part):
        import socket
        t = _state.get("template")
        if t is None or t.proc.poll() is not None:
            t = _state["template"] = Template()
        self.template = t
        home = os.environ.get(HOME_ENV) or os.environ[TREE_ENV]
        out = os.path.join(home, f".worker-{part}-{time.time_ns()}.out")
        mine, theirs = socket.socketpair()
        try:
            self.pid = t.ask({"kind": "fork", "out": out}, [theirs.fileno()])["pid"]
        finally:
            theirs.close()
        self.sock = mine
        self.w, self.r = mine.makefile("wb"), mine.makefile("rb")
        self.rc = None

    def running(self):
        if self.rc is None:
            try:
                self.rc = self.template.ask({"kind": "wait", "pid": self.pid, "timeout": 0})["rc"]
            except WorkerError:
                self.rc = -signal.SIGKILL
        return self.rc is None

    def request(self, msg):
        data = None
        try:
            write_message(self.w, pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))
            del msg
        except (OSError, ValueError):
            pass
        else:
            try:
                data = read_message(self.r, MAX_MESSAGE)
            except ValueError as e:             # more than MAX_MESSAGE
                self.close()
                raise WorkerError(f"the part's code sent {e}: return less") from None
            except OSError:
                pass
        if not isinstance(data, bytes):
            why = self.gone()
            self.close()
            raise WorkerError(why)
        try:
            reply = torch.load(io.BytesIO(data), weights_only=True)
        except Exception as e:
            raise WorkerError(f"the worker's answer is not values only ({e.__class__.__name__})")
        if not isinstance(reply, dict):
            raise WorkerError("the worker's answer is not one")
        if "error" in reply:
            _raise_from(reply)
        return reply

    def gone(self):
        """Why the worker stopped answering, in one line."""
        try:
            rc = self.rc if self.rc is not None else \
                self.template.ask({"kind": "wait", "pid": self.pid, "timeout": 5})["rc"]
        except WorkerError:
            rc = None
        self.rc = rc
        sig = signal_name(rc)
        if sig:
            if sig == "SIGKILL":
                return "the part's code was killed (SIGKILL): out of memory?"
            return f"the part's code crashed ({sig})"
        return (f"the part's code ended its process (exit status {rc}): exit(), os._exit() or "
                f"a crash in the code")

    def close(self):
        for f in (self.w, self.r, self.sock):
            try:
                f.close()
            except OSError:
                pass
        for kill in (os.killpg, os.kill):   # its process group (it made one) and itself
            try:
                kill(self.pid, signal.SIGKILL)
            except OSError:
                pass
        if self.rc is None:
            try:
                self.template.ask({"kind": "wait", "pid": self.pid, "timeout": 5})
            except WorkerError:
                pass


_state = {"part": None, "worker": None}
_installed = {}          # "objectives.sample" -> the stub (or the function) installed there


def use(part):
    """The part whose tests run now: its worker answers the stubs' calls."""
    if _state["part"] != part:
        stop()
        _state["part"], _state["since"] = part, time.time()


def worker():
    w = _state["worker"]
    if w is None or not w.running():
        if w is not None:
            w.close()
        w = _state["worker"] = Worker(_state["part"] or "none")
    return w


def stop(template=False):
    if _state["worker"] is not None:
        _state["worker"].close()
        _state["worker"] = None
    if template and _state.get("template") is not None:
        _state.pop("template").close()


def finish():
    """After a part's last test: why its code left the worker unfit (None when it did not, or
    when no worker ran); the worker is stopped either way.

    Judged here, from outside the worker, whose code is the submission's: the worker's threads
    beyond its one (from /proc), the processes below the template worker once the worker is
    stopped (the template is their child subreaper, so a daemon that double-forked is among
    them) and, when the worker runs as a user of its own, what that user wrote outside its
    home in the folders everyone may write. All of it is stopped or removed. Only whether the
    code replaced a function of torch or of the project is the worker's answer: a worker that
    lies about it fools only its own calls."""
    w = _state["worker"]
    if w is None:
        stop()
        return None
    reasons, changed = [], None
    if w.running():
        threads = strays.threads_of(w.pid)
        if threads and threads > 1:
            reasons.append(f"{threads - 1} thread(s)")
        try:
            changed = w.request({"kind": "finish"}).get("why")
            changed = str(changed)[:300] if changed else None
        except Exception:
            changed = None
    template = w.template.proc.pid
    left = set(strays.descendants(template)) - {w.pid}     # what runs beside the worker now
    stop()                                  # the worker and its process group
    running = len(left | strays.stopped_below(template))  # then everything else below
    if running:
        reasons.insert(0, f"{running} process(es)")
    written = []
    user = os.environ.get(USER_ENV)
    if user:                                # a user of its own: what it wrote is its code's
        written = strays.written_by(int(user.split(":")[0]), os.environ.get(HOME_ENV),
                                    since=_state.get("since", 0.0) - 1)
        strays.remove(written)
    if changed:
        return changed
    if reasons:
        return (f"its code left {' and '.join(reasons)} running after its tests (the grader "
                f"stopped them): a part's code must not start processes or threads that "
                f"outlive it")
    if written:
        return (f"its code wrote {written[0]}" + (f" and {len(written) - 1} more"
                                                   if len(written) > 1 else "")
                + " outside its home (the grader removed them): a part's code must not leave "
                  "files behind")
    return None


def _patches():
    """{target: stand-in name or None} for every graded function a test replaced."""
    out = {}
    for target, installed in _installed.items():
        owner, name = resolve(*target.split(".", 1))
        now = owner.__dict__.get(name)
        if now is not installed:
            ok = getattr(now, "__module__", None) == "teaching.stand_ins"
            out[target] = now.__name__ if ok else None
    return out


class _Remote(torch.autograd.Function):
    @staticmethod
    def forward(ctx, handle, outs, diff, *inputs):
        ctx.handle = handle
        ctx.diff = diff
        ctx.mark_non_differentiable(*[o for o, d in zip(outs, diff) if not d])
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        w, call = ctx.handle
        if _state["worker"] is not w:
            raise WorkerError("the gradient of a call of a part whose tests are over")
        g = [x.detach() for x, d in zip(grads, ctx.diff) if d]
        got = w.request({"kind": "backward", "call": call, "grads": g})["grads"]
        return (None, None, None, *got)


def call(module, qualname, args, kwargs):
    tensors, gens, ids = [], [], {}

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, torch.Tensor):
                if id(obj) not in ids:
                    ids[id(obj)] = len(tensors)
                    tensors.append(obj)
                return ("t", ids[id(obj)])
            if isinstance(obj, torch.Generator):
                if id(obj) not in ids:
                    ids[id(obj)] = len(gens)
                    gens.append(obj)
                return ("g", ids[id(obj)])
            return None
    buf = io.BytesIO()
    Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump((args, kwargs))
    msg = {"kind": "call", "module": module, "qualname": qualname, "payload": buf.getvalue(),
           "tensors": [(t.detach(), t.requires_grad,
                        isinstance(t, torch.nn.Parameter),
                        None if t.grad is None else t.grad.detach().clone()) for t in tensors],
           "gens": [g.get_state() for g in gens], "rng": torch.get_rng_state(),
           "grad": torch.is_grad_enabled(), "patches": _patches()}
    w = worker()
    reply = w.request(msg)
    try:
        after, outs, diff = reply["after"], list(reply["outs"]), list(reply["diff"])
        if len(after) != len(tensors) or len(outs) != len(diff):
            raise ValueError
        changed = []
        for i, (t, new) in enumerate(zip(tensors, after)):
            if new is None:                     # a large argument the call left alone
                continue
            if not isinstance(new, torch.Tensor) or new.shape != t.shape:
                raise ValueError
            if new.dtype != t.dtype or not torch.equal(t.detach(), new):
                changed.append(i)
        if changed and (module, qualname) not in CHANGES_ARGUMENTS:
            # the test keeps its own copies: a change in place reaches none of them, and the
            # part's contract leaves its inputs as they were given
            raise InPlaceChange(
                f"{qualname.split('.')[-1] if qualname != 'ELECTRA.forward' else qualname} "
                f"changed {_argument(module, qualname, args, kwargs, tensors[changed[0]])} in "
                f"place: a graded function must leave its arguments as they were given (the "
                f"tests keep their own copies)")
        with torch.no_grad():                   # an optimizer's step: θ, m and v in place
            for i in changed:
                tensors[i].detach().copy_(after[i])
        for g, state in zip(gens, reply["gens"]):
            g.set_state(state)
        torch.set_rng_state(reply["rng"])
        for index, entries in reply["opt_state"]:
            opt = args[0] if args and isinstance(args[0], torch.optim.Optimizer) else None
            if opt is not None and 0 <= index < len(tensors):
                opt.state[tensors[index]] = {k: v for k, v in entries}
    except (KeyError, TypeError, ValueError, RuntimeError):
        raise WorkerError("the worker's answer does not fit the call's arguments") from None
    inputs = [t for t in tensors if t.requires_grad]
    if reply.get("call") is not None and torch.is_grad_enabled() and inputs and any(diff):
        outs = list(_Remote.apply((w, reply["call"]), outs, diff, *inputs))

    def dec(v, depth=0):
        if not isinstance(v, list) or not v or depth > 40:
            raise ValueError
        kind = v[0]
        if kind == "t":
            return outs[v[1]]
        if kind == "r":
            return tensors[v[1]]
        if kind == "v":
            return v[1]
        if kind in ("tuple", "list"):
            items = [dec(x, depth + 1) for x in v[1]]
            return tuple(items) if kind == "tuple" else items
        if kind == "nt":
            items = [dec(x, depth + 1) for x in v[2]]
            if v[1] in NAMED:
                import objectives
                return getattr(objectives, v[1])(*items)
            return tuple(items)
        if kind == "dict":
            return {dec(k, depth + 1): dec(x, depth + 1) for k, x in v[1]}
        if kind == "dtype":
            return getattr(torch, str(v[1]).replace("torch.", ""))
        return _Opaque(str(v[1]))
    try:
        return dec(reply["result"])
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        raise WorkerError("the worker's answer is not a result") from None


class _Opaque:
    """What a body returned that is not a value (a function, an object): it equals nothing."""

    def __init__(self, what):
        self.what = what

    def __repr__(self):
        return f"<{self.what}>"


def stub_for(module, qualname, original):
    @functools.wraps(original)
    def stub(*args, **kwargs):
        return call(module, qualname, args, kwargs)
    stub.__remote__ = (module, qualname)
    return stub


def install(parts):
    """Replace the graded functions of `parts` by stubs (and note every part's function, so
    that a stand-in a test puts in place is put in place in the worker too)."""
    for p in course.PARTS:
        module, qualname = target_of(p.name)
        try:
            owner, name = resolve(module, qualname)
        except Exception:
            continue
        if p.name in parts:
            setattr(owner, name, stub_for(module, qualname, owner.__dict__[name]))
        _installed[f"{module}.{qualname}"] = owner.__dict__.get(name)
    if os.environ.get(TREE_ENV) and _state.get("template") is None:
        # started now, so that its import of PyTorch runs while pytest collects the tests
        _state["template"] = Template()
