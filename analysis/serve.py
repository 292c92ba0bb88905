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
Plain HTML forms rendered here: no script, no CDN, no font or file from elsewhere.

Safe by default: it listens on 127.0.0.1 only (--host says otherwise, and the command says what
that means); no file is ever opened from what a request names (the Annotated pages are the
files listed at start-up, looked up by name); nothing from a request is evaluated, and every
piece of it on the page is escaped; at most WORKERS requests are handled at once and the model
runs one request at a time; a request body over MAX_BODY bytes is refused unread, and a client
that stalls is dropped after TIMEOUT_S seconds. Bad input gets a message on the page and a 4xx
status, and the server keeps running.
"""
import errno
import html
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
from analysis.analyses import InspectError, d_probs, encode, pieces, shown

ROOT = Path(__file__).resolve().parents[1]
ANNOTATED = ROOT / "out_annotated"          # where teaching/annotate.py writes its pages
MAX_BODY = 64 * 1024        # bytes of a POST body: a sentence needs far less
MAX_TOPK = 20
WORKERS = 8                 # requests handled at once; more wait in the listen queue
TIMEOUT_S = 20              # a client that sends nothing for this long is dropped
FIELDS = ("text", "mode", "mask", "seed", "k", "toggle")
MODES = ("mine", "draw")      # positions: chosen by hand, or drawn as training draws them
LOCAL = ("127.0.0.1", "localhost", "::1")


class PageError(Exception):
    """Bad input from a request: its message goes on the page with `status` (4xx)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class ServeError(Exception):
    """Bad input at start-up: one `error:` line, exit 1."""


def colour(p):
    """The background for P(replaced) = p: white at 0 to red, rgb(230, 25, 25), at 1."""
    p = min(1.0, max(0.0, float(p)))
    return (255 - round(25 * p), 255 - round(230 * p), 255 - round(230 * p))


def rgb(p):
    r, g, b = colour(p)
    return f"background:rgb({r},{g},{b});color:{'#fff' if p > 0.6 else '#000'}"


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
        """One step on the text, through figure2_trace as `inspect_discriminator.py figure2`. picks:
        token indices into its ids (with [CLS]) chosen by hand, each shown as [MASK] (--mask 2,5); None: m drawn
        as training draws it (--mask draw: one generator seeded with `seed` for the mask and
        the sample, as teaching/one_step.py). Returns one dict per position, [CLS] and [SEP]
        included."""
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


# ----------------------------------------------------------------------------- the page

CSS = """
body{margin:0;background:#f7f7f5;color:#1d1d1d;font:16px/1.45 system-ui,-apple-system,
"Segoe UI",Roboto,sans-serif}
main{max-width:75rem;margin:0 auto;padding:.8rem 1rem 2rem}
h1{font-size:1.35rem;margin:.3rem 0}h2{font-size:1.1rem;margin:1.2rem 0 .3rem}
p{margin:.35rem 0}.about{color:#444;font-size:.92rem}
textarea{box-sizing:border-box;width:100%;min-height:3em;font:inherit;padding:.4rem}
.controls{display:flex;flex-wrap:wrap;gap:.4rem 1.1rem;align-items:center;margin:.5rem 0}
.controls input[type=text]{width:9rem}.controls input[type=number]{width:5.5rem}
input,button{font:inherit}fieldset{border:0;padding:0;margin:0;display:flex;flex-wrap:wrap;
gap:.2rem .9rem}
.go{padding:.25rem 1.1rem}
.msg{border-left:5px solid #c62828;background:#fdecea;padding:.45rem .7rem;margin:.6rem 0}
.note{border-left:5px solid #e6a100;background:#fff6dc;padding:.45rem .7rem;margin:.6rem 0}
.tokens{display:flex;flex-wrap:wrap;gap:5px;margin:.5rem 0}
.tok{display:inline-flex;flex-direction:column;align-items:center;min-width:2.3rem;
padding:.15rem .45rem;border:1px solid #999;border-radius:5px;font:inherit;line-height:1.25}
button.tok{cursor:pointer}.tok small{font-size:.72rem;font-variant-numeric:tabular-nums}
.tok.m{outline:3px solid #1f5fbf;outline-offset:1px}.tok.special{border-style:dashed}
.tok.r{border:3px solid #111;padding:0 .35rem}
.scale{display:flex;align-items:center;gap:.5rem;font-size:.85rem;color:#444}
.scale span.bar{display:inline-block;width:12rem;height:.8rem;border:1px solid #999;
background:linear-gradient(to right,rgb(255,255,255),rgb(230,25,25))}
.wrap{overflow-x:auto;border:1px solid #ddd;background:#fff}
table{border-collapse:collapse;font-size:.88rem}
th,td{border:1px solid #e0e0e0;padding:.2rem .45rem;text-align:center;white-space:nowrap}
th{position:sticky;left:0;background:#efefec;text-align:left;font-weight:600}
td.m{background:#fff3b0}td.rep{background:#f4a6a6}td.right{background:#c9e7c9}
td.wrong{background:#f4a6a6}td.top{text-align:left;font-size:.8rem;line-height:1.3}
.small{font-size:.85rem;color:#444}code{font-size:.92em}
"""


def esc(s):
    return html.escape(str(s), quote=True)


def page(inspector, fields, mode="mine", toks=None, p=None, cols=None, notes=(), seed=0, k=5,
         error=None):
    text = fields.get("text", "")
    if not isinstance(text, str):
        text = ""
    mode = mode if mode in MODES else "mine"
    checked = lambda m: " checked" if m == mode else ""                      # noqa: E731
    out = ["<!doctype html><html lang=en><head><meta charset=utf-8>",
           "<meta name=viewport content='width=device-width,initial-scale=1'>",
           "<link rel=icon href='data:,'><title>Look inside D</title>",
           f"<style>{CSS}</style></head><body><main>",
           "<h1>Look inside D: replaced token detection on your sentence</h1>",
           f"<p class=about><strong>{esc(inspector.path.name)}</strong> - {esc(inspector.about)} ",
           annotated_link(inspector), "</p>",
           "<form id=f method=get action='/'>",
           "<label for=text class=small>Your text (D reads the first "
           f"{inspector.cfg.seq_len - 2} tokens)</label>",
           f"<textarea id=text name=text rows=2>{esc(text)}</textarea>",
           "<div class=controls><fieldset><span>Mask:</span>",
           f"<label><input type=radio name=mode value=mine{checked('mine')}> these tokens "
           f"<input type=text name=mask value='{esc(fields.get('mask', ''))}' "
           "placeholder='2,5 or cooked' aria-label='tokens to mask: numbers or words'></label>",
           f"<label><input type=radio name=mode value=draw{checked('draw')}> 15 % drawn as in "
           "training</label></fieldset>",
           f"<label>seed <input type=number name=seed min=0 value='{esc(seed)}'></label>",
           f"<label>top-k <input type=number name=k min=1 max={MAX_TOPK} value='{esc(k)}'>"
           "</label><button class=go type=submit>Show</button></div>"]
    if error:
        out.append(f"<p class=msg role=alert>{esc(error)}</p>")
    out += [f"<p class=note>{esc(n)}</p>" for n in notes]
    if toks is not None:
        out += sentence_html(toks, p, cols)
    if cols is not None:
        out += step_html(cols, mode, seed)
    if toks is None and not error:
        out.append("<p class=small>Type a sentence and press Show: D colours each token by its "
                   "P(replaced). Then click tokens to mask them, and G fills them in.</p>")
    out.append("</form></main></body></html>")
    return "".join(out)


def annotated_link(inspector):
    if "objectives.html" in inspector.annotated:
        return ("How one step works, line by line: <a href='/annotated/objectives.html'>the "
                "Annotated ELECTRA, objectives.py</a>.")
    return ("How one step works, line by line: the Annotated ELECTRA's objectives.py page "
            "(build it with <code>python teaching/annotate.py</code>, then restart this page to "
            "link it).")


def sentence_html(toks, p, cols):
    masked = {c["t"] for c in cols if c["m"]} if cols else set()
    out = ["<h2>D on your text as typed</h2>",
           "<p class=small>Each token coloured by D's P(replaced) = 1 - D(x, t), its value below "
           "it. Click a token to mask it (click again to unmask); a blue frame marks the masked "
           "ones.</p><div class=tokens>"]
    for t, (w, q) in enumerate(zip(toks, p)):
        label = esc(shown(w))
        body = f"<span>{label}</span><small>{q:.3f}</small>"
        title = f"{label}: P(replaced) {q:.3f}"
        cls = "tok m" if t in masked else "tok"
        if t == 0 or t == len(toks) - 1:
            out.append(f"<span class='tok special' data-t={t} data-p='{q:.3f}' "
                       f"style='{rgb(q)}' title='{title}'>{body}</span>")
        else:
            out.append(f"<button type=submit class='{cls}' name=toggle value={t - 1} "
                       f"data-t={t} data-p='{q:.3f}' style='{rgb(q)}' "
                       f"title='{title} (token {t - 1}: click to mask)'>{body}</button>")
    out.append("</div><p class=scale>P(replaced) <span>0</span><span class=bar></span>"
               "<span>1</span></p>")
    return out


def step_html(cols, mode, seed):
    m = [c for c in cols if c["m"]]
    rep = [c for c in cols if c["is_replaced"]]
    caught = sum(c["p"] > 0.5 for c in rep)
    false = sum(c["p"] > 0.5 for c in cols if not c["is_replaced"])
    how = (f"m as training draws it (objectives.mask_tokens, seed {seed}): "
           f"{len(m)} of the {len(cols) - 2} tokens, about 15 %; 85 % of them are shown to G as "
           "[MASK], the others keep their token and G predicts them too."
           if mode == "draw" else
           (f"The {len(m)} tokens you chose, each" if len(m) > 1 else "The token you chose,") +
           " shown to G as [MASK] (as <code>inspect_discriminator.py figure2 --mask</code>).")
    g_said = (f"G replaced {len(rep)} of the {len(m)} masked tokens." if len(m) > 1 else
              "G replaced the masked token." if rep else
              "G sampled the original token back, so it counts as real.")
    out = ["<h2>One step of ELECTRA on it (§2, Figure 2)</h2>",
           f"<p class=small>{how} G samples x̂ ~ p_G(x_t | x_masked) at each masked position "
           f"(seed {seed}); x_corrupt takes the samples; a sample equal to the original is real "
           "(is_replaced compares x_corrupt with x); D reads x_corrupt and says P(replaced).</p>",
           f"<p>{g_said} D flags {caught} of the {len(rep)} replaced and {false} of the "
           f"{len(cols) - len(rep)} original tokens ([CLS] and [SEP] included) at P(replaced) "
           "&gt; 0.5.</p>",
           "<p class=small>D on x_corrupt, coloured by P(replaced); a black frame marks G's "
           "replacements (is_replaced = 1):</p><div class=tokens>"]
    for c in cols:
        cls = " special" if c["t"] in (0, len(cols) - 1) else " r" if c["is_replaced"] else ""
        w = esc(shown(c["x_corrupt"]))
        out.append(f"<span class='tok{cls}' data-pc='{c['p']:.3f}' style='{rgb(c['p'])}' "
                   f"title='{w}: P(replaced) {c['p']:.3f}'><span>{w}</span>"
                   f"<small>{c['p']:.3f}</small></span>")
    out.append("</div><div class=wrap><table>")
    rows = [("t", "token", lambda c: "" if c["t"] in (0, len(cols) - 1) else c["t"] - 1, None),
            ("x", "x", lambda c: shown(c["x"]), None),
            ("m", "m (masked)", lambda c: "✓" if c["m"] else "", lambda c: "m" if c["m"] else ""),
            ("x_masked", "x_masked", lambda c: shown(c["x_masked"]),
             lambda c: "m" if c["m"] else ""),
            ("top", "top-k of p_G", None, lambda c: "top"),
            ("x_hat", "x̂ ~ p_G", lambda c: "" if c["x_hat"] is None else shown(c["x_hat"]),
             None),
            ("x_corrupt", "x_corrupt", lambda c: shown(c["x_corrupt"]),
             lambda c: "rep" if c["is_replaced"] else ""),
            ("is_replaced", "is_replaced", lambda c: int(c["is_replaced"]),
             lambda c: "rep" if c["is_replaced"] else ""),
            ("p", "P(replaced)", lambda c: f"{c['p']:.3f}", None),
            ("d_says", "D says", lambda c: "replaced" if c["p"] > 0.5 else "original",
             lambda c: "right" if (c["p"] > 0.5) == c["is_replaced"] else "wrong")]
    for key, name, value, cls in rows:
        out.append(f"<tr><th scope=row>{esc(name)}</th>")
        for c in cols:
            klass = f" class={cls(c)}" if cls and cls(c) else ""
            if key == "top":
                cell = "<br>".join(f"{esc(shown(w))} {q:.3f}" for w, q in c["top"])
            else:
                cell = esc(value(c))
            style = f" style='{rgb(c['p'])}'" if key == "p" else ""
            out.append(f"<td data-row={key}{klass}{style}>{cell}</td>")
        out.append("</tr>")
    out.append("</table></div><p class=small>Yellow: the masked positions m; red in x_corrupt "
               "and is_replaced: the tokens that differ from x; D says: green where D is right, "
               "red where it is wrong.</p>")
    return out


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
