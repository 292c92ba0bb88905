"""Look inside D in the browser: a local page where you type a sentence and watch G and D work
on it - the inspector's sentence view and one step of §2 (Figure 2), live, for your own text.

    python analysis/serve.py --ckpt out/ckpt.pt            # then open http://127.0.0.1:8000/
    python analysis/serve.py --ckpt C --port 0 --threads 1  # any free port, one CPU thread

The page shows
  - your text's tokens coloured by D's P(replaced) = sigmoid(logit_t) = 1 - D(x, t), white for 0
    to red for 1, the value under each token: the numbers `inspect_discriminator.py --ckpt C
    "TEXT"` prints (the same functions: encode, d_probs);
  - one step on it, once positions are chosen - by clicking tokens (each shown as [MASK], as
    `inspect_discriminator.py figure2 --mask` does, through the same figure2_trace) or drawn as
    training draws them (objectives.mask_tokens with the checkpoint's 15 %, 85 % of them shown
    as [MASK], the rest kept; teaching/one_step.py's table for the same text and seed): G's
    top-k at each masked position, the sample x̂ ~ p_G, x_corrupt, is_replaced (a sample equal
    to the original is real) and D's P(replaced) and verdict on x_corrupt;
  - what the checkpoint is (size, step, D's recall at the last log line beside it) and a link to
    the Annotated ELECTRA's objectives page when it is built (teaching/annotate.py).
Plain HTML forms rendered here (analysis/serve_page.py): no script, no CDN, no font or file
from elsewhere.

Safe by default: it listens on 127.0.0.1 only (--host says otherwise, and the command says what
that means); no file is ever opened from what a request names (the Annotated pages are the
files listed at start-up, looked up by name); nothing from a request is evaluated, and every
piece of it on the page is escaped; at most WORKERS requests are handled at once and the model
runs one request at a time; a request body over MAX_BODY bytes is refused unread, and a client
that stalls is dropped after TIMEOUT_S seconds. Bad input gets a message on the page and a 4xx
status, and the server keeps running.
"""
import errno
import json
import re
import socket
import socketserver
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import torch

if not __package__:   # run as a path (python analysis/serve.py): import from the project root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machinery import cli
from machinery.checkpoint import CheckpointError
from analysis import figure2 as fig2
from analysis import inspect_discriminator as insp
from analysis.analyses import InspectError, d_probs, encode, pieces
from analysis.serve_page import MAX_TOPK, MODES, esc, page

ROOT = Path(__file__).resolve().parents[1]
ANNOTATED = ROOT / "out_annotated"          # where teaching/annotate.py writes its pages
MAX_BODY = 64 * 1024        # bytes of a POST body: a sentence needs far less
WORKERS = 8                 # requests handled at once; more wait in the listen queue
TIMEOUT_S = 20              # a client that sends nothing for this long is dropped
FIELDS = ("text", "mode", "mask", "seed", "k", "toggle")
LOCAL = ("127.0.0.1", "localhost", "::1")


class PageError(Exception):
    """Bad input from a request: its message goes on the page with `status` (4xx)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class ServeError(Exception):
    """Bad input at start-up: one `error:` line, exit 1."""


# ----------------------------------------------------------------------------- the model's side

class Inspector:
    """A loaded checkpoint and the two views of the page. The model is shared by the request
    threads and runs one request at a time (`lock`)."""

    def __init__(self, path):
        self.model, self.tok, self.cfg = insp.load(path)      # InspectError, CheckpointError
        self.path, self.lock = Path(path), threading.Lock()
        self.about = about(self.path, self.cfg)
        self.annotated = {}         # the Annotated pages' files by name (list_annotated)

    def tokens(self, text):
        """(x as ids with [CLS] and [SEP], x as pieces, how many tokens the text has)."""
        x = encode(self.tok, text, self.cfg.seq_len)
        return x, pieces(self.tok, x), len(self.tok.encode(text))

    def p_replaced(self, x):
        """D's P(replaced) of every token of x: the inspector's sentence view (d_probs)."""
        with self.lock, torch.inference_mode():
            return [float(p) for p in d_probs(self.model, self.tok, [x])[0]]

    def step(self, text, picks, seed, k):
        """One step on the text, through figure2_trace as `inspect_discriminator.py figure2`.
        picks: token indices into its ids (with [CLS]) chosen by hand, each shown as [MASK]
        (--mask 2,5); None: m drawn as training draws it (--mask draw: one generator seeded
        with `seed` for the mask and the sample, as teaching/one_step.py). Returns one dict per
        position, [CLS] and [SEP] included."""
        items = [str(t - 1) for t in picks] if picks is not None else [fig2.DRAW]
        with self.lock, torch.inference_mode():
            try:
                tr = fig2.figure2_trace(self.model, self.tok, text, items, k, seed,
                                        self.cfg.seq_len, self.cfg.mask_prob)
            except InspectError as e:                    # a text with no token to mask
                raise PageError(400, str(e)) from None
        slot = {int(t): j for j, t in enumerate(tr["m"][0].tolist())}
        row = lambda key: pieces(self.tok, tr[key][0])                           # noqa: E731
        xs, xm, xc = row("x"), row("x_masked"), row("x_corrupt")
        cols = []
        for t in range(len(xs)):
            j = slot.get(t)
            cols.append(dict(
                t=t, x=xs[t], m=j is not None, x_masked=xm[t], x_corrupt=xc[t],
                top=[] if j is None else list(zip(pieces(self.tok, tr["top_ids"][0, j]),
                                                  tr["top_p"][0, j].tolist())),
                x_hat=None if j is None else pieces(self.tok, tr["x_hat"][0, j:j + 1])[0],
                is_replaced=bool(tr["is_replaced"][0, t]), p=float(tr["p_replaced"][0, t])))
        return cols


def about(path, cfg):
    """One line on the checkpoint: its size, its step, D's recall at the last log line."""
    try:                    # only the step: a memory map reads no weights
        step = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("step")
    except Exception:       # noqa: BLE001 - insp.load has read it already; the step is a nicety
        step = None
    d, s = cfg.disc, cfg.gen_size
    share = f"1/{round(1 / s)}" if s < 1 and abs(1 / s - round(1 / s)) < 1e-9 else f"{s:g} x"
    line = (f"{cfg.model.upper()}{'' if cfg.objective == 'electra' else ' ' + cfg.objective}"
            f"{'' if step is None else f' after {step:,} steps'}: D {d.layers} "
            f"block{'s' if d.layers > 1 else ''} of {d.hidden} ({d.heads} heads), G {share} of "
            f"its width, vocabulary {cfg.vocab_size:,}, trained on {cfg.seq_len}-token sequences.")
    rec = last_log(path.parent / "log.jsonl", step)
    if rec is None:
        return line + " No log.jsonl beside it, so no recall to quote."
    recall, prec = rec.get("disc_acc_replaced"), rec.get("disc_precision_replaced")
    if recall is None:
        return line
    return line + (f" At its last log line (step {rec['step']:,}) D caught {100 * recall:.1f} % "
                   "of the replaced tokens" + ("" if prec is None else
                                               f" at {100 * prec:.1f} % precision") + ".")


def last_log(log, step):
    """The last record of a training log at or before `step` (all of them when None)."""
    best = None
    try:
        with open(log, encoding="utf-8") as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if isinstance(r, dict) and isinstance(r.get("step"), int) and \
                        (step is None or r["step"] <= step):
                    best = r
    except (OSError, UnicodeDecodeError):
        return None
    return best


# ----------------------------------------------------------------------------- a request's fields

def parse_fields(raw):
    """The form's fields from a query string or a form body (bytes), or PageError (400)."""
    try:
        pairs = urllib.parse.parse_qsl(raw.decode("utf-8"), keep_blank_values=True,
                                       strict_parsing=True, encoding="utf-8", errors="strict",
                                       max_num_fields=len(FIELDS)) if raw else []
    except UnicodeDecodeError as e:                 # raw, or %-encoded: a ValueError too
        raise PageError(400, f"The request is not valid UTF-8 (a byte 0x{e.object[e.start]:02x})"
                        ": send text as UTF-8, as a browser does.") from None
    except ValueError:
        raise PageError(400, "Malformed query: expected name=value pairs joined by &, each "
                        "field once, as the form sends them (e.g. "
                        "?text=the+chef+cooked+the+meal).") from None
    fields = {}
    for name, value in pairs:
        if name not in FIELDS:
            raise PageError(400, f"Unknown field {name[:40]!r}: the form sends "
                            f"{', '.join(FIELDS)}.")
        if name in fields:
            raise PageError(400, f"The field {name!r} is given twice: give it once.")
        fields[name] = value
    return fields


def number(fields, name, lo, hi, default, label):
    text = fields.get(name, "").strip()
    if not text:
        return default
    if not re.fullmatch(r"-?\d{1,12}", text) or not lo <= int(text) <= hi:
        raise PageError(400, f"{label} must be a whole number from {lo} to {hi}, got "
                        f"{text[:40]!r}.")
    return int(text)


def positions(toks, mask, toggle):
    """The masked positions (indices into x, [CLS] = 0) that the mask field names - token
    numbers as the page shows them (0 = the first token) or words, as the inspector's --mask -
    with `toggle` added or taken away; PageError for a position outside the text."""
    n, items = len(toks) - 2, [s.strip() for s in mask.split(",") if s.strip()]
    if len(items) > n:
        raise PageError(400, f"The mask names {len(items)} positions; the text has {n} tokens.")
    for item in items + ([] if toggle is None else [str(toggle)]):
        if re.fullmatch(r"-?\d+", item) and not 0 <= int(item) < n:
            raise PageError(400, f"Mask position {item[:12]} is out of range: the text has "
                            f"tokens 0 to {n - 1}.")
    try:
        chosen = fig2.choose_positions(toks, items)
    except InspectError as e:
        raise PageError(400, str(e).replace("--mask ", "Mask ") + ".") from None
    if toggle is not None:
        chosen = sorted(set(chosen) ^ {toggle + 1})
    return chosen


def view(inspector, fields):
    """(status, page, where to redirect or None) for the form's fields."""
    if "text" not in fields:                                  # the empty page
        return 200, page(inspector, fields), None
    text = fields["text"].replace("\r\n", "\n").strip()        # as the inspector's " ".join
    if not text:
        raise PageError(400, "The text is empty: type a sentence, e.g. “the chef cooked the "
                        "meal”.")
    mode = fields.get("mode") or "mine"
    if mode not in MODES:
        raise PageError(400, f"mode must be one of {', '.join(MODES)}, got {mode[:20]!r}.")
    seed = number(fields, "seed", 0, cli.MAX_SEED, 0, "The seed")
    k = number(fields, "k", 1, min(MAX_TOPK, inspector.cfg.vocab_size), 5, "top-k")
    x, toks, n_typed = inspector.tokens(text)
    toggle = number(fields, "toggle", -10 ** 9, 10 ** 9, None, "The token to mask")
    if toggle is not None and not 0 <= toggle < len(toks) - 2:
        raise PageError(400, f"Mask position {toggle} is out of range: the text has tokens 0 "
                        f"to {len(toks) - 3}.")
    notes = []
    if n_typed > len(x) - 2:
        notes.append(f"Your text has {n_typed:,} tokens; D was trained on "
                     f"{inspector.cfg.seq_len}-token sequences, so it reads the first "
                     f"{len(x) - 2} ([CLS] and [SEP] take two places) and the rest is cut.")
    if toggle is not None:
        start = fields.get("mask", "") if mode != "draw" else ",".join(
            str(c["t"] - 1) for c in inspector.step(text, None, seed, k) if c["m"])
        picks = positions(toks, start, toggle)
        canonical = dict(text=fields["text"], mode="mine", mask=",".join(str(t - 1) for t in picks),
                         seed=str(seed), k=str(k))
        return 303, None, "/?" + urllib.parse.urlencode(canonical)
    picks = positions(toks, fields.get("mask", ""), None) if mode == "mine" else None
    p = inspector.p_replaced(x)
    cols = None
    if mode == "draw":
        cols = inspector.step(text, None, seed, k)
    elif picks:
        cols = inspector.step(text, picks, seed, k)
    return 200, page(inspector, fields, mode=mode, toks=toks, p=p, cols=cols, notes=notes,
                     seed=seed, k=k), None


# ----------------------------------------------------------------------------- the Annotated pages

SUFFIX_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
                ".png": "image/png", ".svg": "image/svg+xml", ".json": "application/json"}


def list_annotated(folder=ANNOTATED):
    """{name: path} of the Annotated pages' files, listed once at start-up: a request names one
    of these keys, never a path."""
    if not Path(folder).is_dir():
        return {}
    return {f.name: f for f in sorted(Path(folder).iterdir()) if f.is_file() and
            f.suffix in SUFFIX_TYPES and re.fullmatch(r"[\w.-]+", f.name)}


# ----------------------------------------------------------------------------- HTTP

class Handler(BaseHTTPRequestHandler):
    server_version = "electra-inspector"
    sys_version = ""
    timeout = TIMEOUT_S
    linger = False
    error_content_type = "text/html; charset=utf-8"
    error_message_format = ("<!doctype html><meta charset=utf-8><title>%(code)d</title>"
                            "<p>%(code)d: %(message)s. The page is at <a href='/'>/</a>.</p>")

    def do_GET(self):
        self.answer(head=False)

    def do_HEAD(self):
        self.answer(head=True)

    def do_POST(self):
        self.answer(head=False, post=True)

    def refuse_method(self):
        self.linger = True                          # a body it may have sent is never read
        self.respond(405, page_for_error(self.server.inspector, "Only GET and POST are "
                                         "answered here: open the page in a browser."),
                     extra={"Allow": "GET, HEAD, POST"})

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = refuse_method

    def answer(self, head, post=False):
        insp_ = self.server.inspector
        fields = {}
        try:
            self.check_host()
            path, _, query = self.path.partition("?")
            if path.startswith("/annotated/"):
                return self.annotated(path[len("/annotated/"):], head)
            if path != "/":
                raise PageError(404, f"No page at {path[:80]}: the inspector is at /.")
            raw = self.body() if post else query.encode("latin-1")
            fields = parse_fields(raw)
            status, body, location = view(insp_, fields)
        except PageError as e:
            status, body, location = e.status, page_for_error(insp_, e, fields), None
        except Exception as e:          # noqa: BLE001 - one request fails, the server goes on
            self.log_error("%s", f"internal error: {type(e).__name__}: {e}")
            status, location = 500, None
            body = page_for_error(insp_, f"Something went wrong inside ({type(e).__name__}); "
                                  "the server keeps running - try another text.", fields)
        if location:
            return self.respond(303, f"<a href='{esc(location)}'>see here</a>",
                                extra={"Location": location}, head=head)
        self.respond(status, body, head=head)

    def check_host(self):
        if self.server.local_only:
            host = (self.headers.get("Host") or "").strip().lower()
            name = host[1:host.find("]")] if host.startswith("[") else host.split(":")[0]
            if name not in LOCAL:
                raise PageError(403, f"This page answers requests to 127.0.0.1 or localhost "
                                f"only, not to {host[:60]!r}.")

    def body(self):
        length = self.headers.get("Content-Length")
        if length is None:
            self.linger = True
            raise PageError(411, "A POST needs a Content-Length header.")
        if not length.strip().isdigit():
            self.linger = True
            raise PageError(400, f"Content-Length {length[:20]!r} is not a number of bytes.")
        n = int(length)
        if n > MAX_BODY:
            self.linger = True                      # its body is never read
            raise PageError(413, f"The request body is {n:,} bytes; this page takes at most "
                            f"{MAX_BODY:,} (a sentence needs far less: D reads "
                            f"{self.server.inspector.cfg.seq_len - 2} tokens).")
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            self.linger = True
            raise PageError(415, f"Send the form as application/x-www-form-urlencoded, not "
                            f"{kind[:60] or 'without a Content-Type'}.")
        return self.rfile.read(n)

    def annotated(self, name, head):
        f = self.server.inspector.annotated.get(name)   # a key of the start-up listing
        try:
            data = f.read_bytes() if f else None
        except OSError:
            data = None
        if data is None:
            raise PageError(404, f"No Annotated page {name[:60]!r}: build the pages with "
                            "python teaching/annotate.py and restart.")
        self.respond(200, data, content_type=SUFFIX_TYPES[f.suffix], head=head,
                     csp="default-src 'self'; style-src 'self' 'unsafe-inline'; "
                         "img-src 'self' data:")

    def respond(self, status, body, content_type="text/html; charset=utf-8", extra=None,
                head=False, csp=None):
        data = body.encode("utf-8") if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Security-Policy", csp or (
            "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; "
            "base-uri 'none'; frame-ancestors 'none'"))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Connection", "close")
        self.end_headers()
        if not head:
            self.wfile.write(data)
        if self.linger:
            self.drain()

    def drain(self, seconds=2.0, most=1 << 20):
        """Read and drop what a refused request still sends (its unread body), for a moment:
        closing a socket with unread data resets the connection, and the client may lose the
        answer before it reads it."""
        try:
            self.connection.shutdown(socket.SHUT_WR)
            self.connection.settimeout(0.5)
            end, got = time.time() + seconds, 0
            while time.time() < end and got < most:
                chunk = self.connection.recv(65536)
                if not chunk:
                    break
                got += len(chunk)
        except OSError:
            pass

    def log_request(self, code="-", size="-"):     # no query: it holds the typed text
        if not self.server.quiet:
            print(f"{self.command} {self.path.partition('?')[0][:80]} {code}", file=sys.stderr,
                  flush=True)

    def log_message(self, format, *args):
        if not self.server.quiet:
            print(format % args, file=sys.stderr, flush=True)


def page_for_error(inspector, error, fields=None):
    fields = {k: v for k, v in (fields or {}).items() if isinstance(v, str)}
    return page(inspector, fields, mode=fields.get("mode", "mine"), error=str(error),
                seed=fields.get("seed", 0), k=fields.get("k", 5))


class Server(ThreadingHTTPServer):
    """http.server with at most `workers` requests handled at once: the accept loop waits for
    a free worker, and the connections behind it wait in the listen queue."""
    daemon_threads = True
    request_queue_size = 64

    def __init__(self, host, port, inspector, workers=WORKERS, quiet=False):
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.inspector, self.quiet = inspector, quiet
        self.local_only = host in LOCAL
        self.slots = threading.BoundedSemaphore(workers)
        super().__init__((host, port), Handler)

    def server_bind(self):
        # HTTPServer's would look the host's name up (socket.getfqdn): on a machine without
        # DNS that waits for a time-out before the first page.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def process_request(self, request, client_address):
        self.slots.acquire()
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request, client_address):
        # socketserver prints a traceback; a client gone mid-answer is worth one line at most
        if not self.quiet:
            e = sys.exc_info()[1]
            print(f"a request from {client_address[0]} failed: {type(e).__name__}: {e}",
                  file=sys.stderr, flush=True)

    def url(self):
        host = self.server_name if ":" not in self.server_name else f"[{self.server_name}]"
        return f"http://{host}:{self.server_port}/"


def bind(host, port, inspector, quiet=False):
    """The server listening on host:port, or ServeError in one line."""
    try:
        return Server(host, port, inspector, quiet=quiet)
    except socket.gaierror:
        raise ServeError(f"--host {host}: not an address or a name this machine knows; leave "
                         "--host out for 127.0.0.1") from None
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise ServeError(f"port {port} on {host} is in use (another server?): stop it or "
                             "give another --port (--port 0 takes any free one)") from None
        if e.errno == errno.EACCES:
            raise ServeError(f"no permission to listen on port {port}: ports below 1024 need "
                             "administrator rights; give --port 8000") from None
        if e.errno == errno.EADDRNOTAVAIL:
            raise ServeError(f"--host {host} is not an address of this machine; leave --host "
                             "out for 127.0.0.1") from None
        raise ServeError(f"cannot listen on {host}:{port} ({e.strerror or e})") from None


def parse_args(argv):
    p = cli.Parser(description="Look inside D in the browser: type a sentence, watch G and D "
                   "work on it.")
    p.add_argument("--ckpt", type=cli.nonempty, required=True,
                   help="ELECTRA pre-training checkpoint (ckpt.pt)")
    p.add_argument("--host", default="127.0.0.1", type=cli.nonempty,
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=cli.int_range(0, 65535), default=8000,
                   help="port (default 8000; 0: any free port, printed at start)")
    p.add_argument("--threads", type=cli.threads,
                   help=f"CPU threads for PyTorch (on a shared CPU: 1; 1 to {cli.MAX_THREADS})")
    p.add_argument("--quiet", action="store_true", help="no line per request")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    t0 = time.time()
    server = None
    try:
        server = bind(args.host, args.port, None, quiet=args.quiet)   # port in use: say so first
        server.inspector = Inspector(args.ckpt)
        server.inspector.annotated = list_annotated()
    except (ServeError, InspectError, CheckpointError) as e:
        if server:
            server.server_close()
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not server.local_only:
        print(f"note: --host {args.host}: anyone who can reach this machine on port "
              f"{server.server_port} can use the page (it runs the model on their text and opens "
              "no files); leave --host out to keep it to this machine", flush=True)
    print(f"Look inside D ({args.ckpt}, loaded in {time.time() - t0:.1f} s): open {server.url()} "
          "in a browser; Ctrl-C stops", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("\nstopped", file=sys.stderr)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
