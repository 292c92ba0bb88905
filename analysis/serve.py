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
This file is the HTTP side; the model's side and a request's fields are in
analysis/serve_view.py, the HTML in analysis/serve_page.py: plain forms, no script, no CDN, no
font or file from elsewhere.

Safe by default: it listens on 127.0.0.1 only (--host says otherwise, and the command says what
that means); no file is ever opened from what a request names (the Annotated pages are the
files listed at start-up, looked up by name); nothing from a request is evaluated, and every
piece of it on the page is escaped; at most WORKERS requests are handled at once and the model
runs one request at a time; a request body over MAX_BODY bytes is refused unread, and a client
that stalls is dropped after TIMEOUT_S seconds. Bad input gets a message on the page and a 4xx
status, and the server keeps running.
"""
import errno
import re
import socket
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import torch

if not __package__:   # run as a path (python analysis/serve.py): import from the project root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machinery import cli
from machinery.checkpoint import CheckpointError
from analysis.analyses import InspectError
from analysis.serve_page import esc
from analysis.serve_view import Inspector, PageError, page_for_error, parse_fields, view

ROOT = Path(__file__).resolve().parents[1]
ANNOTATED = ROOT / "out_annotated"          # where teaching/annotate.py writes its pages
MAX_BODY = 64 * 1024        # bytes of a POST body: a sentence needs far less
WORKERS = 8                 # requests handled at once; more wait in the listen queue
TIMEOUT_S = 20              # a client that sends nothing for this long is dropped
LOCAL = ("127.0.0.1", "localhost", "::1")


class ServeError(Exception):
    """Bad input at start-up: one `error:` line, exit 1."""


# ----------------------------------------------------------------------------- the Annotated pages

SUFFIX_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
                ".png": "image/png", ".svg": "image/svg+xml", ".json": "application/json"}


def list_annotated(folder=ANNOTATED):
    """{name: path} of the Annotated pages' files and of their pictures (`figures/NAME`),
    listed once at start-up: a request names one of these keys, never a path."""
    folder = Path(folder)
    if not folder.is_dir():
        return {}
    files = sorted(folder.iterdir())
    if (folder / "figures").is_dir():
        files += sorted((folder / "figures").iterdir())
    return {f.relative_to(folder).as_posix(): f for f in files if f.is_file() and
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
            status, location = 500, None
            blank = cli.blank_part(e)       # a student copy with a part still blank: 501
            if blank:
                status, message = 501, blank.removeprefix("error: ")
            else:
                self.log_error("%s", f"internal error: {type(e).__name__}: {e}")
                message = (f"Something went wrong inside ({type(e).__name__}); the server "
                           "keeps running - try another text.")
            body = page_for_error(insp_, message, fields)
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

    def send_error(self, code, message=None, explain=None):
        # http.server's own refusals, before a request is parsed. A request line over 64 KiB is
        # most often a long text pasted into the form, which sends it in the address: the page
        # says so, as it says everything else
        if code == 414 and self.server.inspector is not None:
            self.linger = True                      # the rest of the line is never read
            return self.respond(414, page_for_error(self.server.inspector, (
                f"The address is over 65,536 bytes - a long text pasted into the form? D "
                f"reads only its first {self.server.inspector.cfg.seq_len - 2} tokens: paste "
                "a shorter text.")))
        super().send_error(code, message, explain)

    def log_request(self, code="-", size="-"):     # no query: it holds the typed text
        if not self.server.quiet:                  # no path when the request line was refused
            path = getattr(self, "path", None) or "(unreadable request line)"
            print(f"{getattr(self, 'command', None) or '-'} {path.partition('?')[0][:80]} "
                  f"{code}", file=sys.stderr, flush=True)

    def log_message(self, format, *args):
        if not self.server.quiet:
            print(format % args, file=sys.stderr, flush=True)


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
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.server_name, self.server_name)
        host = host if ":" not in host else f"[{host}]"     # every address: open it here
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
