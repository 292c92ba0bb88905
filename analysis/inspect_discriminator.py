"""Look inside a trained discriminator: §2 / Figure 2 traced with real tensors on your own text,
and the command line for the intrinsic analyses of analysis/analyses.py (calibration, zero-shot CoLA and
SST-2, sentence scoring). No fine-tuning anywhere: D as pre-trained.

    python analysis/inspect_discriminator.py --ckpt out/ckpt.pt "the chef ate the meal" --mask 2,meal
    python analysis/inspect_discriminator.py figure2 --ckpt out/ckpt.pt --data DIR  # a held-out sentence
    python analysis/inspect_discriminator.py calibration|scoring --ckpt C --data data/wiki00
    python analysis/inspect_discriminator.py cola|sst2 --ckpt C --glue_dir glue
    python analysis/inspect_discriminator.py attention --ckpt C --data data/wiki00  # word order yet?
    python analysis/inspect_discriminator.py attention --ckpt C  # C's own data folder, if still there
    python analysis/inspect_discriminator.py mlm --ckpt C --data data/wiki00 [--bert B]  # Appendix G
    python analysis/inspect_discriminator.py mlm --ckpt C "the chef cooked the meal" --mask cooked
    python analysis/inspect_discriminator.py compare --ckpt C --bert B --data data/wiki00  # vs BERT
    python analysis/inspect_discriminator.py tokens --ckpt C --data data/wiki00  # what D distrusts
    python analysis/inspect_discriminator.py all --ckpt C --data data/wiki00 --out insp/ --threads 1

The head scores "replaced": P(replaced) = sigmoid(logit_t) = 1 - D(x, t), D(x, t) being the
paper's probability that x_t is real. Measured with the Table 6 model (random weights, --threads
1 on a shared 2-core CPU): the sentence view and figure2 in 5 s, `all` in 97 s (200 held-out
sequences, 200 sentences x 4 variants, CoLA dev 1043 sentences, SST-2 dev 872 x 2 prompts).
"""
import difflib
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

if not __package__:   # run as a path (python analysis/inspect_discriminator.py): import from the project root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machinery import cli
from machinery.atomic import atomic_write
from machinery.checkpoint import CheckpointError, load_checkpoint
from config import Config
from ablations import build_model
from batches import PretrainingData, load_split
from data import DataError, load_meta, read_documents
from glue import GlueError
from analysis.analyses import InspectError, attention, calibration, cola, d_probs, encode, \
    pieces, save_png, scoring, shown, sst2
from analysis.appendix_g import mlm, mlm_sentence
from analysis.figure2 import DRAW, choose_positions, figure2, top_text
from analysis.representations import compare
from analysis import token_groups
from machinery.tokenize_corpus import split_sentences
from machinery.tokenizer import Tokenizer
import matplotlib
matplotlib.use("Agg")                              # headless: never try to open a display
import matplotlib.pyplot as plt  # noqa: E402

COMMANDS = ("show", "figure2", "calibration", "cola", "scoring", "sst2", "attention", "mlm",
            "compare", "tokens", "all")
SHARED_GLUE = Path(__file__).resolve().parent.parent / "shared" / "data" / "glue"


# ----------------------------------------------------------------------------- the networks

def read_checkpoint(path, label):
    """(checkpoint, cfg, tokenizer) of a checkpoint file; `label` names it in the errors."""
    ckpt = load_checkpoint(path)
    try:
        cfg, tok = Config.from_dict(ckpt["config"]), Tokenizer.from_text(ckpt["tokenizer"])
    except (KeyError, TypeError, ValueError) as e:
        raise InspectError(f"{label}: unusable config or tokenizer ({type(e).__name__})") \
            from None
    return ckpt, cfg, tok


def build_loaded(cfg, ckpt, label):
    """The network of cfg with the checkpoint's weights, in eval mode (no dropout, so every
    number is reproducible)."""
    model = build_model(cfg)
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as e:
        raise InspectError(f"{label}: weights do not fit the config "
                           f"({str(e).splitlines()[0]})") from None
    return model.eval()


def load(path):
    """(D and G in eval mode - no dropout, so every number is reproducible -, tokenizer, cfg)."""
    return load_with_data(path)[:3]


def load_with_data(path):
    """load(path) and the data folder the checkpoint was trained on, as train.py recorded it
    (None in a checkpoint that predates the record)."""
    ckpt, cfg, tok = read_checkpoint(path, path)
    if cfg.model == "bert":
        raise InspectError(f"{path}: a BERT checkpoint has no discriminator to inspect; give "
                           "an ELECTRA one (electra_small.py without --model bert)")
    if cfg.objective in ("replace_mlm", "all_tokens_mlm") or cfg.generator == "unigram":
        raise InspectError(f"{path}: the {cfg.objective}/{cfg.generator} ablation lacks a "
                           "replaced-token detector D or a masked-LM G; give an ELECTRA "
                           "checkpoint")
    if tok.vocab_size != cfg.vocab_size:
        raise InspectError(f"{path}: tokenizer has {tok.vocab_size} ids, model {cfg.vocab_size}")
    return build_loaded(cfg, ckpt, path), tok, cfg, ckpt.get("data_dir")


# ----------------------------------------------------------------------------- sentence view

def show(model, tok, cfg, text, mask_items, k, out, on):
    x = encode(tok, text, cfg.seq_len)
    toks, p = pieces(tok, x), d_probs(model, tok, [x])[0]
    pos, notes = choose_positions(toks, mask_items), []       # bad --mask: fail before printing
    print(f"D on the text as typed, {len(x) - 2} tokens (index, token, P(replaced) = 1 - D(x,t))"
          + (f", cut to the {cfg.seq_len} positions D was trained on:" if
             len(tok.encode(text)) > cfg.seq_len - 2 else ":"))
    if on:      # background from white to red by P(replaced), xterm-256 colours 231 ... 196
        print(" ".join(f"\033[30;48;5;{(231, 224, 217, 210, 203, 196)[min(5, int(q * 6))]}m"
                       f"{shown(t)}\033[0m" for t, q in zip(toks, p)))
    for i, (t, q) in enumerate(zip(toks, p)):
        print(f"  {i - 1 if 0 < i < len(toks) - 1 else '':>3}  {t!r:16} {q:.3f}")
    if pos:                                         # G sees every chosen position as [MASK]
        xm = torch.tensor([x]).index_fill(1, torch.tensor(pos), tok.mask_id)
        top = torch.softmax(model.generator(xm, torch.tensor([pos])).float(), -1)[0].topk(k)
        notes = [f"{t - 1:>3} {toks[t]!r}: {top_text(tok, top.indices[j], top.values[j])}"
                 for j, t in enumerate(pos)]
        print(f"G at the [MASK]ed positions: top-{k} of p_G(x_t | x_masked)\n" + "\n".join(notes))
    fig, ax = plt.subplots(figsize=(max(5, 0.55 * len(x)), 3.2))
    ax.bar(range(len(x)), p, color=plt.cm.Reds(0.15 + 0.85 * p), edgecolor="k",
           hatch=["//" if t in pos else "" for t in range(len(x))])
    ax.axhline(0.5, ls="--", c="grey")
    ax.set_xticks(range(len(x)), [shown(t) for t in toks], rotation=60)
    ax.set(ylim=(0, 1.05), ylabel="P(replaced) = 1 - D(x, t)",
           title="D on the sentence" + (" (hatched: G's top-k below)" if pos else ""))
    fig.text(0, -0.05, "\n".join(notes), va="top", family="monospace", fontsize=8)
    save_png(fig, out / "sentence.png")


# ----------------------------------------------------------------------------- figure2's own sentence

def val_split(data, tok, cfg):
    """(tokens, sentence lengths) of a prepared folder's validation split, after checking it
    was tokenized with the checkpoint's tokenizer."""
    meta, tk = load_meta(data), Path(data) / "tokenizer.tiktoken"
    if meta["vocab_size"] != cfg.vocab_size or (tk.is_file() and tk.read_text() != tok.to_text()):
        raise InspectError(f"{data} was tokenized with another tokenizer than the "
                           "checkpoint's: give the data folder it was trained on")
    return load_split(data, "val", meta)


PAPER_SENTENCE, PAPER_MASK = "the chef cooked the meal", "the,cooked"     # Figure 2's example


def default_sentence(args, tok, cfg):
    """figure2's text and --mask when none is given: a sentence of the checkpoint's own kind of
    text - the first in --data's validation split, counted from a place the seed picks, that
    fits the positions D was trained on (up to 40 tokens, at least 2/3 of that; else the start
    of a longer one) - with m the seeded draw of a training step (--mask draw, the same random
    numbers as teaching/one_step.py). --data defaults to the folder the checkpoint was trained
    on, where it still exists; without either, the paper's example, which a model trained on
    other text (the demo corpus is Python's documentation) may find strange. Returns (text,
    mask items, one line saying which)."""
    if not args.data:
        return PAPER_SENTENCE, args.mask or PAPER_MASK, (
            f"figure2: the paper's example sentence {PAPER_SENTENCE!r}; --data DIR takes one "
            "from the checkpoint's own validation text instead")
    tokens, lengths = val_split(args.data, tok, cfg)
    ends, rng = np.cumsum(lengths, dtype=np.int64), np.random.default_rng(args.seed)
    order = np.roll(np.arange(len(lengths)), -int(rng.integers(max(1, len(lengths)))))
    most = min(40, cfg.seq_len - 2)                    # the laptop recipe's D sees 14 tokens
    pick = next((i for i in order if 2 * most // 3 <= lengths[i] <= most), None)
    if pick is None:                                   # else the start of a longer sentence
        pick = next((i for i in order if lengths[i] >= min(5, most)), None)
    if pick is None:
        return PAPER_SENTENCE, args.mask or PAPER_MASK, (
            f"figure2: {args.data}'s validation split has no sentence of 5 tokens or more: the "
            f"paper's example {PAPER_SENTENCE!r} instead")
    ids = tokens[ends[pick] - lengths[pick]:ends[pick]][:most].astype(int).tolist()
    text = tok.decode(ids).strip()
    if args.mask:
        return text, args.mask, f"figure2: sentence {pick} of {args.data}'s validation split"
    return text, DRAW, (
        f"figure2: sentence {pick} of {args.data}'s validation split (seed {args.seed}), its "
        f"masked positions m the seeded {cfg.mask_prob:.0%} draw of a training step (--mask "
        "draw); give TEXT and --mask to choose")


# ----------------------------------------------------------------------------- held-out text

NEEDS_HELD_OUT = ("calibration", "scoring", "attention", "compare", "tokens", "all")


def as_typed(recorded):
    """The recorded data folder as a user would write it: data/demo-8192, not /home/.../."""
    if recorded:
        try:
            return str(Path(recorded).relative_to(Path.cwd()))
        except ValueError:
            pass
    return recorded


def own_data(args, recorded, cmd):
    """Without --data and --text, the held-out text is the validation split of the data folder
    the checkpoint was trained on (`recorded`), when that folder still exists: sets args.data
    and says so in one line. Else one line naming what is missing."""
    if args.data or args.text:
        return
    recorded = as_typed(recorded)
    if recorded and Path(recorded).is_dir():
        args.data = recorded
        print(f"held-out text: the validation split of {args.data}, the data folder this "
              "checkpoint was trained on (--data DIR or --text FILE for another)")
        return
    gone = f"; the checkpoint's own data folder {recorded} is gone" if recorded else ""
    if cmd == "mlm":
        raise InspectError("mlm needs held-out text (--data DIR or --text FILE) for the "
                           f"accuracies, or a sentence and --mask WORD for its candidates{gone}")
    raise InspectError(f"this analysis needs held-out text: --data DIR or --text FILE{gone}")


def held_out(args, tok, cfg):
    """(sequences [(ids, segment ids)] built as pre-training builds them, sentences [ids]),
    from --data (its val split) or --text (documents, cut into seq_len chunks)."""
    n_seq, n_sent = args.n, 5 * args.n_sentences          # scoring samples from 5x as many
    if args.data:
        tokens, lengths = val_split(args.data, tok, cfg)
        ends = np.cumsum(lengths, dtype=np.int64)
        sents = [tokens[e - n:e].astype(int).tolist() for n, e in zip(lengths, ends) if n]
        pd, seqs = PretrainingData(args.data, "val", 1, cfg.seq_len, seed=args.seed), []
        for _ in range(min(n_seq, pd.n_seqs)):
            b = pd.next_batch()
            n = int(b["pad_mask"].sum())
            seqs.append((b["x"][0, :n].tolist(), b["segment_ids"][0, :n].tolist()))
        return seqs, sents[:n_sent]
    if not args.text:
        raise InspectError("this analysis needs held-out text: --data DIR or --text FILE")
    if not Path(args.text).is_file():
        raise InspectError(f"{args.text}: no such file")
    seqs, sents, L = [], [], cfg.seq_len - 2
    for doc in read_documents(args.text):
        ids = tok.encode(doc)
        seqs += [([tok.cls_id] + ids[i:i + L] + [tok.sep_id], None)
                 for i in range(0, max(1, len(ids) - L // 2), L)]
        sents += [tok.encode(s) for line in doc.split("\n") for s in split_sentences(line)]
        if len(seqs) >= n_seq and len(sents) >= n_sent:
            break
    return seqs[:n_seq], sents[:n_sent]


# ----------------------------------------------------------------------------- ELECTRA as an MLM

def load_bert(path, tok):
    """A BERT checkpoint's masked LM (eval mode), checked to share the ELECTRA tokenizer."""
    ckpt, cfg, btok = read_checkpoint(path, f"--bert {path}")
    if cfg.model != "bert":
        raise InspectError(f"--bert {path}: an {cfg.model} checkpoint, not a BERT one "
                           "(train one with electra_small.py --model bert)")
    if btok.to_text() != tok.to_text():
        raise InspectError(f"--bert {path}: another tokenizer than --ckpt's; the two models must "
                           "be trained on the same prepared data to predict the same tokens")
    return build_loaded(cfg, ckpt, f"--bert {path}")


def token_counts(args, tok, seqs):
    """How often each token id occurs: in --data's training split (a memmap, counted in a
    fraction of a second), else in the held-out sequences themselves."""
    if args.data:
        ids, _ = load_split(args.data, "train", load_meta(args.data))
        return np.bincount(ids, minlength=tok.vocab_size)
    return np.bincount(np.concatenate([s for s, _ in seqs]), minlength=tok.vocab_size)


def write_json(path, res):
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(res, indent=1)))
    print(f"wrote {path}")
    return res


# ----------------------------------------------------------------------------- command line

def parse_args(argv):
    p = cli.Parser(description="Look inside a trained ELECTRA discriminator.")
    p.add_argument("words", nargs="*", help=f"[{'|'.join(COMMANDS)}] [TEXT] (default: show)")
    p.add_argument("--ckpt", type=cli.nonempty, required=True,
                   help="ELECTRA pre-training checkpoint (ckpt.pt)")
    p.add_argument("--mask", default="", help="show/figure2: token indices or words, e.g. 2,4; "
                   "figure2: draw - the seeded 15 %% draw of a training step (--seed)")
    p.add_argument("--topk", type=int, help="p_G's best tokens: how many to show (default 5); "
                   "mlm: the candidates Appendix G picks from (default 100, as the paper)")
    p.add_argument("--bert", type=cli.nonempty,
                   help="mlm, compare: a BERT checkpoint trained on the same data, to compare")
    p.add_argument("--color", action="store_true", help="ANSI colours even when not a tty")
    p.add_argument("--data", type=cli.nonempty,
                   help="prepared data folder: its val split is the held-out text (default: "
                   "the folder the checkpoint was trained on, while it exists)")
    p.add_argument("--text", type=cli.nonempty,
                   help="held-out text file (.txt/.txt.xz/.jsonl) instead of --data")
    p.add_argument("--glue_dir", type=cli.nonempty,
                   default=str(SHARED_GLUE) if SHARED_GLUE.is_dir() else None)
    p.add_argument("--n", type=int, default=200,
                   help="held-out sequences for calibration, mlm, compare, tokens")
    p.add_argument("--n_sentences", type=int, default=200, help="sentences for scoring")
    p.add_argument("--bins", type=cli.int_range(1, 1000), default=10,
                   help="calibration bins (1 to 1000)")
    p.add_argument("--label_words", default="terrible,great", help="SST-2 words for 0,1")
    p.add_argument("--prompt", default="It was {}.", help="SST-2 prompt, {} = the label word")
    p.add_argument("--out", type=cli.out_folder,
                   help="folder for PNGs and JSON (default: CKPT's folder/inspect)")
    p.add_argument("--seed", type=cli.seed, default=0, help=f"0 to {cli.MAX_SEED}")
    p.add_argument("--threads", type=cli.threads,
                   help=f"CPU threads for PyTorch (on a shared CPU: 1; 1 to {cli.MAX_THREADS})")
    return p.parse_intermixed_args(argv)


def not_a_command(words):
    """A first word that is no command but close to one (difflib), alone or before a quoted
    text: a mistyped command (`attentoin`), refused rather than shown as text. Several unquoted
    words are a sentence and stay text, as does any first word after `show`."""
    first = words[0] if words else ""
    if not first or first in COMMANDS or first.split() != [first] or \
            (len(words) > 1 and len(words[1].split()) < 2):
        return
    close = difflib.get_close_matches(first.lower(), COMMANDS, n=1)
    if close:
        raise InspectError(f"{first!r} is not a command; did you mean {close[0]!r}? (to inspect "
                           f"text, quote a sentence, or write show {first})")


@torch.inference_mode()
def run(args):
    not_a_command(args.words)
    cmd, words = (args.words[0], args.words[1:]) if args.words and args.words[0] in COMMANDS \
        else ("show", args.words)
    text = " ".join(words).strip()
    for flag in ("n", "n_sentences", "bins", "topk", "threads"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise InspectError(f"--{flag} must be a positive number")
    if cmd == "show" and not text:
        raise InspectError("give some text to show, a sentence like the text the checkpoint "
                           "was trained on (or run figure2 without text: it picks one of the "
                           "checkpoint's validation sentences)")
    if args.bert and cmd not in ("mlm", "compare"):
        raise InspectError("--bert is for the mlm and compare commands only")
    if cmd == "compare" and not args.bert:
        raise InspectError("compare needs --bert BERT: a BERT checkpoint trained on the same "
                           "data (electra_small.py --model bert), to compare D with")
    if args.text and not (cmd in NEEDS_HELD_OUT or (cmd == "mlm" and not text)):
        raise InspectError(f"--text FILE is held-out text, read by {', '.join(NEEDS_HELD_OUT)} "
                           f"and mlm; {cmd} " + (
                               "takes its sentence as TEXT, or picks one of --data DIR's "
                               "validation split" if cmd == "figure2" else
                               "on a sentence takes no held-out text" if cmd == "mlm" else
                               "reads GLUE (--glue_dir)" if cmd in ("cola", "sst2") else
                               "(the sentence view) takes its sentence as TEXT"))
    if cmd == "mlm" and text and not args.mask:
        raise InspectError("mlm on a sentence needs --mask: the token index or word to predict")
    args.topk = args.topk or (100 if cmd == "mlm" else 5)
    if cmd in ("figure2", "all") and text and not args.mask:
        raise InspectError("figure2 on your own text needs --mask (token indices or words)")
    label_words = [w.strip() for w in args.label_words.split(",") if w.strip()]
    if len(label_words) != 2 or args.prompt.count("{}") != 1:
        raise InspectError("--label_words needs two words (negative,positive) and --prompt "
                           "one {} for them")
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tok, cfg, recorded = load_with_data(args.ckpt)
    if cmd in NEEDS_HELD_OUT or (cmd == "mlm" and not text):
        own_data(args, recorded, cmd)
    if args.topk > cfg.vocab_size:
        raise InspectError(f"--topk {args.topk}: the vocabulary has {cfg.vocab_size} tokens")
    bert = load_bert(args.bert, tok) if args.bert else None
    if cmd == "figure2" and not text and not args.data and recorded and \
            Path(as_typed(recorded)).is_dir():      # its sentence from the checkpoint's own text
        args.data = as_typed(recorded)
    if cmd in ("figure2", "all") and not text:
        text, args.mask, which = default_sentence(args, tok, cfg)
        print(which)
    out = Path(args.out) if args.out else Path(args.ckpt).parent / "inspect"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InspectError(f"{out}: cannot create the output folder ({e.strerror})") from None
    items, t0 = args.mask.split(","), time.time()
    if cmd == "show":
        return show(model, tok, cfg, text, items, args.topk, out, args.color or sys.stdout.isatty())
    if cmd == "figure2":
        return figure2(model, tok, cfg, text, items, args.topk, args.seed, out)
    if cmd == "mlm" and text:
        return mlm_sentence(model, tok, cfg, text, items, args.topk, bert)
    if cmd == "mlm":
        return mlm(model, tok, cfg, held_out(args, tok, cfg)[0], args.topk, args.seed, bert, out)
    glue = args.glue_dir if args.glue_dir and Path(args.glue_dir).is_dir() else None
    if cmd in ("cola", "sst2") and not glue:
        raise InspectError((f"no GLUE folder {args.glue_dir}" if args.glue_dir else
                            f"{cmd} needs GLUE") + ": give --glue_dir DIR, a folder with CoLA/ "
                           "and SST-2/ (python finetune_glue.py --download DIR fetches them)")
    held = held_out(args, tok, cfg) if cmd in NEEDS_HELD_OUT else None
    if cmd == "compare":
        res = compare(model, bert, tok, [s for s, _ in held[0]], out)
        return write_json(out / "compare.json", dict(res, ckpt=str(args.ckpt), bert=str(args.bert)))
    if cmd == "tokens":
        res = token_groups.tokens(model, tok, cfg, held[0], token_counts(args, tok, held[0]),
                                  args.seed, out)
        return write_json(out / "tokens.json", dict(res, ckpt=str(args.ckpt)))
    jobs = dict(calibration=lambda: calibration(model, tok, cfg, held[0], args.seed, args.bins,
                                                out),
                scoring=lambda: scoring(model, tok, cfg, held[1], args.n_sentences, args.seed),
                cola=lambda: cola(model, tok, cfg, glue, out),
                sst2=lambda: sst2(model, tok, cfg, glue, label_words, args.prompt),
                attention=lambda: attention(model, tok, cfg, held[0]))
    if cmd != "all":
        return jobs[cmd]()
    tr = figure2(model, tok, cfg, text, items, args.topk, args.seed, out)
    res, secs = dict(ckpt=str(args.ckpt), config=cfg.to_dict(),
                     figure2={k: v.tolist() for k, v in tr.items()}), {}
    if not glue:
        print("note: no GLUE folder (--glue_dir): cola and sst2 skipped")
    for name in ("calibration", "scoring", "attention") + (("cola", "sst2") if glue else ()):
        t = time.time()
        res[name], secs[name] = jobs[name](), round(time.time() - t, 1)
    res["seconds"] = dict(secs, total=round(time.time() - t0, 1))
    path = out / "inspect.json"
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(res, indent=1)))
    took = ", ".join(f"{k} {v:.1f} s" for k, v in secs.items())
    print(f"wrote {path} in {res['seconds']['total']:.1f} s ({took})")


def main(argv=None):
    args = parse_args(argv)
    out = Path(args.out) if args.out else Path(args.ckpt).parent / "inspect"
    existed = out.exists()
    try:
        run(args)
        cli.remove_if_left_empty(out, existed)     # attention, scoring, sst2 write no file
        return 0
    except (InspectError, CheckpointError, DataError, GlueError) as e:
        print(f"error: {e}", file=sys.stderr)
        cli.remove_if_left_empty(out, existed)
        return 1
    except NotImplementedError as e:    # a student copy with a part still blank: one line
        print(cli.blank_part_or_raise(e), file=sys.stderr)
        cli.remove_if_left_empty(out, existed)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
