"""The browser page's model side (analysis/serve.py is its HTTP): the checkpoint behind a lock,
and what a request's fields ask of it - the sentence view and one step of §2 - as a page
(analysis/serve_page.py renders it), or PageError with the message the page shows.
"""
import json
import re
import threading
import urllib.parse
from pathlib import Path
from types import SimpleNamespace

import torch

from machinery import cli
from analysis import figure2 as fig2
from analysis import inspect_discriminator as insp
from analysis.analyses import InspectError, d_probs, encode, pieces
from analysis.serve_page import MAX_TOPK, MODES, page

FIELDS = ("text", "mode", "mask", "seed", "k", "toggle")     # what the form sends


class PageError(Exception):
    """Bad input from a request: its message goes on the page with `status` (4xx)."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


# ----------------------------------------------------------------------------- the model's side

class Inspector:
    """A loaded checkpoint and the two views of the page. The model is shared by the request
    threads and runs one request at a time (`lock`)."""

    def __init__(self, path):
        # InspectError, CheckpointError
        self.model, self.tok, self.cfg, recorded = insp.load_with_data(path)
        self.path, self.lock = Path(path), threading.Lock()
        self.about = about(self.path, self.cfg)
        self.example, self.example_is_its_own = example(self.tok, self.cfg, recorded)
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


def example(tok, cfg, recorded):
    """(a sentence to suggest, whether it is of the checkpoint's own text): one of its validation
    split, as the inspector's figure2 picks it (the demo corpus is Python's documentation: a
    sentence about a chef means little to it), or the paper's example where the data folder it
    was trained on is gone."""
    data = insp.as_typed(recorded)
    if data and Path(data).is_dir():
        try:
            text, _, which = insp.default_sentence(SimpleNamespace(data=data, seed=0, mask=None),
                                                   tok, cfg)
            return text, "validation split" in which
        except (InspectError, OSError, ValueError, KeyError):   # another tokenizer, a broken folder
            pass
    return insp.PAPER_SENTENCE, False


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
            shown_item = item if len(item) <= 12 else item[:12] + "..."   # not a cut number
            raise PageError(400, f"Mask position {shown_item} is out of range: the text has "
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
        raise PageError(400, f"The text is empty: type a sentence, e.g. “{inspector.example}”")
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


def page_for_error(inspector, error, fields=None):
    fields = {k: v for k, v in (fields or {}).items() if isinstance(v, str)}
    return page(inspector, fields, mode=fields.get("mode", "mine"), error=str(error),
                seed=fields.get("seed", 0), k=fields.get("k", 5))
