"""Look inside a trained discriminator: §2 / Figure 2 traced with real tensors, the intrinsic
analyses the paper leaves out (its reviewer asks: is D calibrated? does it find grammatical
errors? can its scores rank sentences?), and zero-shot classification with D's head (Ni & Kao
2022, "ELECTRA is a Zero-Shot Learner, Too"). No fine-tuning anywhere: D as pre-trained.

    python inspect_discriminator.py --ckpt out/ckpt.pt "the chef ate the meal" --mask 2,meal
    python inspect_discriminator.py figure2 --ckpt out/ckpt.pt     # "the chef cooked the meal"
    python inspect_discriminator.py calibration|scoring --ckpt C --data data/wiki00
    python inspect_discriminator.py cola|sst2 --ckpt C --glue_dir ../shared/data/glue
    python inspect_discriminator.py all --ckpt C --data data/wiki00 --out insp/ --threads 1

The head scores "replaced": P(replaced) = sigmoid(logit_t) = 1 - D(x, t), D(x, t) being the
paper's probability that x_t is real. Measured with the Table 6 model (random weights, --threads
1 on a shared 2-core CPU): the sentence view and figure2 in 5 s, `all` in 97 s (200 held-out
sequences, 200 sentences x 4 variants, CoLA dev 1043 sentences, SST-2 dev 872 x 2 prompts).
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from atomic import atomic_write
from checkpoint import CheckpointError, load_checkpoint
from config import Config
from ablations import build_model
from data import DataError, PretrainingData, load_meta, load_split, read_documents, \
    split_sentences
from glue import GlueError, matthews_corr, rank_average, read_split
from objectives import Masked, corrupt, mask_tokens, sample
from tokenizer import Tokenizer
import matplotlib
matplotlib.use("Agg")                              # headless: never try to open a display
import matplotlib.pyplot as plt  # noqa: E402

COMMANDS = ("show", "figure2", "calibration", "cola", "scoring", "sst2", "all")
SHARED_GLUE = Path(__file__).resolve().parent.parent / "shared" / "data" / "glue"


class InspectError(Exception):
    """Bad input the user can fix; printed as one line, exit 1."""


# ----------------------------------------------------------------------------- the networks

def load(path):
    """(D and G in eval mode - no dropout, so every number is reproducible -, tokenizer, cfg)."""
    ckpt = load_checkpoint(path)
    try:
        cfg, tok = Config.from_dict(ckpt["config"]), Tokenizer.from_text(ckpt["tokenizer"])
    except (KeyError, TypeError, ValueError) as e:
        raise InspectError(f"{path}: unusable config or tokenizer ({type(e).__name__})") from None
    if cfg.model == "bert":
        raise InspectError(f"{path}: a BERT checkpoint has no discriminator to inspect")
    if cfg.objective in ("replace_mlm", "all_tokens_mlm") or cfg.generator == "unigram":
        raise InspectError(f"{path}: the {cfg.objective}/{cfg.generator} ablation lacks a "
                           "replaced-token detector D or a masked-LM G")
    if tok.vocab_size != cfg.vocab_size:
        raise InspectError(f"{path}: tokenizer has {tok.vocab_size} ids, model {cfg.vocab_size}")
    model = build_model(cfg)
    try:
        model.load_state_dict(ckpt["model"])
    except RuntimeError as e:
        raise InspectError(f"{path}: weights do not fit the config "
                           f"({str(e).splitlines()[0]})") from None
    return model.eval(), tok, cfg


def pieces(tok, ids):
    """Each id as text: special tokens by name, others as their (maybe partial-word) bytes."""
    names = {tok.pad_id: "[PAD]", tok.cls_id: "[CLS]", tok.sep_id: "[SEP]", tok.mask_id: "[MASK]"}
    return [names.get(int(i)) or tok.decode([int(i)]) for i in ids]


def shown(piece):
    """A token for display: without its leading space, or quoted if blank or unprintable."""
    return piece.strip() if piece.strip().isprintable() and piece.strip() else repr(piece)


def encode(tok, text, max_len):
    return [tok.cls_id] + tok.encode(text)[:max_len - 2] + [tok.sep_id]


def batches(seqs, pad_id, segs=None, bs=32):
    """(indices, x, pad_mask, segment_ids) of sequences sorted by length and padded to the
    longest of each batch, so almost no compute goes to padding."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    for s in range(0, len(order), bs):
        idx = order[s:s + bs]
        x = torch.full((len(idx), max(len(seqs[i]) for i in idx)), pad_id, dtype=torch.long)
        seg = None if segs is None else torch.zeros_like(x)
        for r, i in enumerate(idx):
            x[r, :len(seqs[i])] = torch.tensor(seqs[i])
            if seg is not None:
                seg[r, :len(seqs[i])] = torch.tensor(segs[i])
        yield idx, x, x != pad_id, seg


def p_replaced(model, x, pad_mask=None, seg=None):
    """P(replaced) = sigmoid(D's logit) of every token, float32."""
    kw = {} if seg is None else dict(segment_ids=seg)
    return torch.sigmoid(model.discriminator(x, pad_mask, **kw).float())


def d_probs(model, tok, seqs, bs=64):
    """P(replaced) of every token of every id list (one numpy array each)."""
    out = [None] * len(seqs)
    for idx, x, m, _ in batches(seqs, tok.pad_id, bs=bs):
        p = p_replaced(model, x, m)
        for r, i in enumerate(idx):
            out[i] = p[r, :len(seqs[i])].numpy()
    return out


def g_corrupt(model, tok, cfg, x, pad_mask, seg, g):
    """x_corrupt exactly as a pre-training step builds it: 15 % of the real tokens chosen (85 %
    shown as [MASK]), x̂ ~ p_G at them, and a sample equal to x_i labelled real."""
    m = mask_tokens(x, (tok.pad_id, tok.cls_id, tok.sep_id), tok.mask_id,
                    min(cfg.n_slots, x.shape[1]), cfg.mask_prob, generator=g)
    kw = {} if seg is None else dict(segment_ids=seg)
    x_hat = sample(model.generator(m.x_masked, m.positions, pad_mask, **kw), generator=g)
    return (*corrupt(x, m, x_hat), m)


# ----------------------------------------------------------------------------- metrics

def ece(probs, labels, n_bins=10):
    """Expected calibration error over equal-width bins of P(replaced):
    ECE = sum_b (n_b/N) |share replaced in b - mean P in b| = sum_b |sum y - sum p|_b / N.
    A calibrated D that says 0.3 is right 30 % of the time. Returns (ece, per-bin numbers)."""
    p, y = np.asarray(probs, np.float64), np.asarray(labels, np.float64)
    b = np.minimum((p * n_bins).astype(int), n_bins - 1)       # P = 1.0 joins the top bin
    n, sp, sy = (np.bincount(b, w, n_bins) for w in (None, p, y))
    k = np.maximum(n, 1)
    return float(np.abs(sy - sp).sum() / len(p)), dict(
        count=n.astype(int).tolist(), mean_p=(sp / k).tolist(), share_replaced=(sy / k).tolist())


def roc_auc(scores, labels):
    """P(a random positive scores above a random negative), ties counting one half: the
    Mann-Whitney U from tie-averaged ranks. None when a class is missing."""
    y = np.asarray(labels) == 1
    n1, n0 = int(y.sum()), int((~y).sum())
    if not n1 or not n0:
        return None
    return float((rank_average(scores)[y].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def best_mcc(scores, labels):
    """MCC of "positive when score >= t" at the best t among the scores. t is chosen on the
    data it is scored on (an oracle threshold): an upper bound. Returns (mcc, t)."""
    s = np.asarray(scores, np.float64)
    return max(((matthews_corr((s >= t).astype(int), labels), float(t)) for t in np.unique(s)),
               key=lambda m: m[0])


# ----------------------------------------------------------------------------- sentence view

def choose_positions(toks, items):
    """--mask items -> indices into x ([CLS] = 0). A number is a token index as `show` prints
    it (0 = the first token after [CLS]); a word masks all the tokens of its first unused
    occurrence (a word: a token starting with a space plus the word pieces glued to it)."""
    body, spans, chosen = toks[1:-1], [], []
    for i, t in enumerate(body):
        new = i == 0 or t[:1].isspace() or not t[:1].isalnum() or not body[i - 1][-1:].isalnum()
        spans.append([i]) if new else spans[-1].append(i)
    for item in filter(None, (s.strip() for s in items)):
        if item.lstrip("-").isdigit():
            if not 0 <= int(item) < len(body):
                raise InspectError(f"--mask {item}: the text has tokens 0..{len(body) - 1}")
            hit = [int(item)]
        else:
            hit = next((sp for sp in spans if sp[0] + 1 not in chosen and
                        "".join(body[j] for j in sp).strip().lower() == item.lower()), None)
            if hit is None:
                raise InspectError(f"--mask {item!r}: no such (unused) word in the text")
        chosen += [j + 1 for j in hit if j + 1 not in chosen]
    return sorted(chosen)


def figure2_trace(model, tok, text, mask_items, k=3, seed=0, max_len=128):
    """Figure 2 with real tensors: every intermediate of one pre-training step on one text."""
    x = torch.tensor([encode(tok, text, max_len)])
    m = torch.tensor([choose_positions(pieces(tok, x[0]), mask_items)])
    if m.shape[1] == 0:
        raise InspectError("figure2 needs at least one --mask position")
    x_masked = x.scatter(1, m, tok.mask_id)             # every chosen token shown as [MASK]
    logits = model.generator(x_masked, m)               # (1, K, V): p_G only at m
    top_p, top_ids = torch.softmax(logits.float(), -1).topk(min(k, logits.shape[-1]), -1)
    x_hat = sample(logits, generator=torch.Generator().manual_seed(seed))     # x̂_i ~ p_G
    x_corrupt, is_replaced = corrupt(x, Masked(x_masked, m, x.gather(1, m), torch.ones(m.shape)),
                                     x_hat)
    return dict(x=x, m=m, x_masked=x_masked, top_p=top_p, top_ids=top_ids, x_hat=x_hat,
                x_corrupt=x_corrupt, is_replaced=is_replaced,
                p_replaced=p_replaced(model, x_corrupt))


def top_text(tok, ids, probs, sep=" | "):
    return sep.join(f"{w.strip()!r} {q:.2f}" for w, q in zip(pieces(tok, ids), probs.tolist()))


def save_png(fig, path):
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight"))
    plt.close(fig)
    print(f"wrote {path}")


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


def figure2(model, tok, cfg, text, mask_items, k, seed, out):
    tr = figure2_trace(model, tok, text, mask_items, k, seed, cfg.seq_len)
    torch.set_printoptions(precision=3, sci_mode=False, linewidth=100)
    words = lambda key: " ".join(map(shown, pieces(tok, tr[key][0])))  # noqa: E731
    print(f"x              {words('x')}\n{'':14} {tr['x']}\nm              {tr['m']} (masked "
          f"positions; [CLS] is 0)\nx_masked       {words('x_masked')}\n{'':14} {tr['x_masked']}")
    for j, t in enumerate(tr["m"][0].tolist()):
        print(f"p_G top-{tr['top_p'].shape[-1]} at {t:<3} "
              f"{top_text(tok, tr['top_ids'][0, j], tr['top_p'][0, j])}")
    print(f"x̂ ~ p_G        {tr['x_hat']} = {words('x_hat')}\nx_corrupt      "
          f"{words('x_corrupt')}\n{'':14} {tr['x_corrupt']}\nis_replaced    "
          f"{tr['is_replaced'].int()} (x_corrupt != x: a sample equal to the original is real)"
          f"\nP(replaced)    {tr['p_replaced']}\nD(x_corrupt,t) {1 - tr['p_replaced']} (P(real))")
    toks = [pieces(tok, tr[key][0]) for key in ("x", "x_masked", "x_corrupt")]
    m, rows, colours = tr["m"][0].tolist(), [], []
    for t in range(1, tr["x"].shape[1] - 1):         # one row per token, as the paper draws it
        p, rep, j = float(tr["p_replaced"][0, t]), bool(tr["is_replaced"][0, t]), \
            m.index(t) if t in m else None
        rows.append([shown(toks[0][t]), shown(toks[1][t]), "" if j is None else top_text(
            tok, tr["top_ids"][0, j, :3], tr["top_p"][0, j, :3], ", "),
            "" if j is None else shown(pieces(tok, tr["x_hat"][0, j:j + 1])[0]),
            shown(toks[2][t]), "replaced" if rep else "original", f"{p:.3f}",
            "replaced" if p > 0.5 else "original"])
        colours.append(["w"] * 5 + ["#f4a6a6" if rep else "#c9e7c9", plt.cm.Reds(0.1 + 0.8 * p),
                                     "#c9e7c9" if (p > 0.5) == rep else "#f4a6a6"])
    fig, ax = plt.subplots(figsize=(12, 0.4 * len(rows) + 1))
    ax.axis("off")
    table = ax.table(rows, cellColours=colours, loc="center", cellLoc="center", colLabels=[
        "x", "x_masked", "top-3 of p_G", "x̂ ~ p_G", "x_corrupt", "is_replaced", "P(replaced)",
        "D says"])
    table.auto_set_font_size(False)
    table.set_fontsize(9)
    table.auto_set_column_width(range(8))
    table.scale(1, 1.5)
    ax.set_title("Replaced token detection (Figure 2) with this checkpoint's G and D "
                 "(D says: green = right, red = wrong)", fontsize=10)
    save_png(fig, out / "figure2.png")
    return tr


# ----------------------------------------------------------------------------- the analyses

def held_out(args, tok, cfg):
    """(sequences [(ids, segment ids)] built as pre-training builds them, sentences [ids]),
    from --data (its val split) or --text (documents, cut into seq_len chunks)."""
    n_seq, n_sent = args.n, 5 * args.n_sentences          # scoring samples from 5x as many
    if args.data:
        meta, tk = load_meta(args.data), Path(args.data) / "tokenizer.tiktoken"
        if meta["vocab_size"] != cfg.vocab_size or (tk.is_file() and
                                                      tk.read_text() != tok.to_text()):
            raise InspectError(f"{args.data} was tokenized with another tokenizer than the "
                               "checkpoint's: give the data folder it was trained on")
        tokens, lengths = load_split(args.data, "val", meta)
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


def calibration(model, tok, cfg, seqs, seed, n_bins, out):
    """Reliability of P(replaced) on held-out text corrupted by the checkpoint's own G. Only
    tokens that could have been masked count ([CLS]/[SEP] are never replaced: trivially real)."""
    if not seqs:
        raise InspectError("no held-out text to corrupt")
    g, P, Y = torch.Generator().manual_seed(seed), [], []
    segs = [s for _, s in seqs] if all(s is not None for _, s in seqs) else None
    for idx, x, pad_mask, seg in batches([s for s, _ in seqs], tok.pad_id, segs):
        x_corrupt, is_replaced, _ = g_corrupt(model, tok, cfg, x, pad_mask, seg, g)
        real = pad_mask & (x != tok.cls_id) & (x != tok.sep_id)
        P.append(p_replaced(model, x_corrupt, pad_mask, seg)[real])
        Y.append(is_replaced[real])
    P, Y = torch.cat(P).numpy(), torch.cat(Y).numpy().astype(int)
    e, bins = ece(P, Y, n_bins)
    res = dict(ece=e, n_sequences=len(seqs), n_tokens=len(P), share_replaced=float(Y.mean()),
               mean_p_replaced=float(P.mean()), token_auc=roc_auc(P, Y),
               recall_at_0_5=float((P[Y == 1] > 0.5).mean()) if Y.any() else None, bins=bins)
    print(f"calibration: ECE {e:.4f} ({n_bins} bins) over {len(P):,} tokens of {len(seqs)} "
          f"sequences | replaced {Y.mean():.1%}, mean P(replaced) {P.mean():.3f} | token "
          f"ROC-AUC {res['token_auc']} | recall of replaced at 0.5 {res['recall_at_0_5']}")
    c, used = (np.arange(n_bins) + 0.5) / n_bins, np.array(bins["count"]) > 0
    fig, (a, b) = plt.subplots(2, 1, figsize=(5, 6), sharex=True,
                               gridspec_kw=dict(height_ratios=[3, 1]))
    a.bar(c, bins["share_replaced"], 1 / n_bins, edgecolor="k", label="share really replaced")
    a.plot(np.array(bins["mean_p"])[used], np.array(bins["share_replaced"])[used], "ko",
           label="bin's mean P(replaced)")
    a.plot([0, 1], [0, 1], "--", c="grey", label="perfectly calibrated")
    a.set(ylabel="share replaced", xlim=(0, 1), ylim=(0, 1), title=f"Reliability: ECE {e:.3f}")
    a.legend(loc="upper left")
    b.bar(c, bins["count"], 1 / n_bins, edgecolor="k", log=True)
    b.set(xlabel="P(replaced) = 1 - D(x_corrupt, t)", ylabel="tokens")
    save_png(fig, out / "calibration.png")
    return res


def cola(model, tok, cfg, glue_dir, out):
    """Zero-shot grammatical-error detection: D on the uncorrupted sentence, no fine-tuning."""
    ex = read_split(glue_dir, "cola", "dev.tsv")
    probs = d_probs(model, tok, [encode(tok, e.a, cfg.seq_len) for e in ex])
    y = np.array([1 - int(e.label) for e in ex])             # positive = unacceptable
    res, fig = dict(n=len(ex), share_unacceptable=float(y.mean())), plt.figure(figsize=(4.5, 4.5))
    for name, f in (("max", np.max), ("mean", np.mean)):
        s = np.array([f(p[1:-1]) for p in probs])            # over the tokens, not [CLS]/[SEP]
        (mcc, t), auc = best_mcc(s, y), roc_auc(s, y)
        res[name] = dict(auc=auc, best_mcc=mcc, threshold=t)
        print(f"cola: score = {name} P(replaced): ROC-AUC {auc:.3f}, MCC {mcc:.3f} at the best "
              f"threshold {t:.4f} (chosen on dev itself: an upper bound)")
        o = np.argsort(-s, kind="stable")                     # ROC curve: sweep the threshold
        plt.plot(np.r_[0, np.cumsum(1 - y[o])] / (1 - y).sum(), np.r_[0, np.cumsum(y[o])] / y.sum(),
                 label=f"{name} P(replaced): AUC {auc:.3f}")
    plt.plot([0, 1], [0, 1], "--", c="grey")
    plt.gca().set(xlabel="false positive rate", ylabel="true positive rate",
                  title=f"CoLA dev zero-shot, unacceptable = positive (n={len(ex)})")
    plt.legend()
    save_png(fig, out / "cola_roc.png")
    return res


def scoring(model, tok, cfg, sents, n, seed):
    """Does D give an original sentence a lower mean P(replaced) than its variants?"""
    rng, g = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
    pool = [s[:cfg.seq_len - 2] for s in sents if len(s) >= 8]    # long ones are cut
    orig = [[tok.cls_id] + pool[i] + [tok.sep_id] for i in sorted(rng.permutation(len(pool))[:n])]
    if not orig:
        raise InspectError("no held-out sentence of 8 tokens or more to score")
    gen, rnd = [None] * len(orig), [None] * len(orig)
    for idx, x, pad_mask, _ in batches(orig, tok.pad_id):
        xc, _, m = g_corrupt(model, tok, cfg, x, pad_mask, None, g)
        # the random variant puts uniform non-special tokens at G's positions: same edits
        r = torch.randint(0, cfg.vocab_size - 4, m.positions.shape, generator=g)
        xr = x.scatter(1, m.positions, torch.where(m.weights > 0, r, m.targets))
        for row, i in enumerate(idx):
            gen[i], rnd[i] = xc[row, :len(orig[i])].tolist(), xr[row, :len(orig[i])].tolist()
    shuf = [encode(tok, " " + " ".join(rng.permutation(tok.decode(s[1:-1]).split())),
                   cfg.seq_len) for s in orig]                # word order shuffled
    score = lambda seqs: np.array([p[1:-1].mean() for p in d_probs(model, tok, seqs)])  # noqa
    base, res = score(orig), dict(n=len(orig))
    for name, var in (("generator", gen), ("random", rnd), ("shuffled", shuf)):
        keep = np.array([v != o for v, o in zip(var, orig)])  # an unchanged variant tests nothing
        s = score(var)
        win = ((base < s) + 0.5 * (base == s))[keep]
        res[name] = dict(accuracy=float(win.mean()) if keep.any() else None, n=int(keep.sum()),
                         mean_score=float(s[keep].mean()) if keep.any() else None)
        print(f"scoring: original below its {name:9} variant in {win.mean():.1%} of "
              f"{keep.sum()} pairs (mean P(replaced) {base[keep].mean():.3f} vs "
              f"{s[keep].mean():.3f})" if keep.any() else f"scoring: no {name} variant differs")
    return res


def zero_shot(model, tok, sentences, words, prompt="It was {}.", max_len=128):
    """"<sentence> It was w." for each label word w; a sentence's score for w is the mean
    P(replaced) over w's tokens. Returns (argmin over the words, scores (n, n_words))."""
    a, b = prompt.split("{}")                       # "It was {}." -> " It was" + " w" + "."
    pre, post = tok.encode(" " + a.strip()) if a.strip() else [], tok.encode(b.rstrip())
    seqs, spans = [], []
    for s in sentences:
        for w in words:
            wi = tok.encode(" " + w.strip())
            si = tok.encode(s.strip())[:max(1, max_len - 2 - len(pre) - len(wi) - len(post))]
            seqs.append([tok.cls_id] + si + pre + wi + post + [tok.sep_id])
            spans.append(slice(1 + len(si) + len(pre), 1 + len(si) + len(pre) + len(wi)))
    p = d_probs(model, tok, seqs)
    scores = np.array([p[i][sp].mean() for i, sp in enumerate(spans)]).reshape(-1, len(words))
    return scores.argmin(1), scores


def sst2(model, tok, cfg, glue_dir, words, prompt):
    ex = read_split(glue_dir, "sst2", "dev.tsv")
    y = np.array([int(e.label) for e in ex])
    pred, s = zero_shot(model, tok, [e.a for e in ex], words, prompt, cfg.seq_len)
    # A word may look "replaced" in any sentence; centring each word's scores on their dev
    # mean (no labels used) keeps only the part that depends on the sentence.
    centred = (s - s.mean(0)).argmin(1)
    res = dict(n=len(ex), words=list(words), prompt=prompt, accuracy=float((pred == y).mean()),
               accuracy_centred=float((centred == y).mean()),
               majority=float(max(y.mean(), 1 - y.mean())),
               predicted_share=[float((pred == c).mean()) for c in range(len(words))])
    print(f"sst2: zero-shot accuracy {res['accuracy']:.1%} (words {words}; centred "
          f"{res['accuracy_centred']:.1%}) vs majority class {res['majority']:.1%} | predicted "
          f"{'/'.join(f'{q:.0%}' for q in res['predicted_share'])}")
    return res


# ----------------------------------------------------------------------------- command line

class Parser(argparse.ArgumentParser):
    def error(self, message):                              # one line, not usage + line
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def parse_args(argv):
    p = Parser(description="Look inside a trained ELECTRA discriminator.")
    p.add_argument("words", nargs="*", help=f"[{'|'.join(COMMANDS)}] [TEXT] (default: show)")
    p.add_argument("--ckpt", required=True, help="ELECTRA pre-training checkpoint (ckpt.pt)")
    p.add_argument("--mask", default="", help="show/figure2: token indices or words, e.g. 2,4")
    p.add_argument("--topk", type=int, default=5, help="how many of p_G's best tokens to show")
    p.add_argument("--color", action="store_true", help="ANSI colours even when not a tty")
    p.add_argument("--data", help="prepared data folder: its val split is the held-out text")
    p.add_argument("--text", help="held-out text file (.txt/.txt.xz/.jsonl) instead of --data")
    p.add_argument("--glue_dir", default=str(SHARED_GLUE) if SHARED_GLUE.is_dir() else None)
    p.add_argument("--n", type=int, default=200, help="held-out sequences for calibration")
    p.add_argument("--n_sentences", type=int, default=200, help="sentences for scoring")
    p.add_argument("--bins", type=int, default=10, help="calibration bins")
    p.add_argument("--label_words", default="terrible,great", help="SST-2 words for 0,1")
    p.add_argument("--prompt", default="It was {}.", help="SST-2 prompt, {} = the label word")
    p.add_argument("--out", help="folder for PNGs and JSON (default: CKPT's folder/inspect)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, help="CPU threads for PyTorch (on a shared CPU: 1)")
    return p.parse_intermixed_args(argv)


@torch.inference_mode()
def run(args):
    cmd, words = (args.words[0], args.words[1:]) if args.words and args.words[0] in COMMANDS \
        else ("show", args.words)
    text = " ".join(words).strip()
    for flag in ("n", "n_sentences", "bins", "topk", "threads"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise InspectError(f"--{flag} must be a positive number")
    if cmd == "show" and not text:
        raise InspectError("give some text to show, e.g. \"the chef ate the meal\"")
    if cmd in ("figure2", "all") and not text:              # the paper's example
        text, args.mask = "the chef cooked the meal", args.mask or "the,cooked"
    if cmd in ("figure2", "all") and not args.mask:
        raise InspectError("figure2 on your own text needs --mask (token indices or words)")
    label_words = [w.strip() for w in args.label_words.split(",") if w.strip()]
    if len(label_words) != 2 or args.prompt.count("{}") != 1:
        raise InspectError("--label_words needs two words (negative,positive) and --prompt "
                           "one {} for them")
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tok, cfg = load(args.ckpt)
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
    glue = args.glue_dir if args.glue_dir and Path(args.glue_dir).is_dir() else None
    if cmd in ("cola", "sst2") and not glue:
        raise InspectError(f"no GLUE folder {args.glue_dir or ''}: give --glue_dir (CoLA/, SST-2/)")
    held = held_out(args, tok, cfg) if cmd in ("calibration", "scoring", "all") else None
    jobs = dict(calibration=lambda: calibration(model, tok, cfg, held[0], args.seed, args.bins,
                                                out),
                scoring=lambda: scoring(model, tok, cfg, held[1], args.n_sentences, args.seed),
                cola=lambda: cola(model, tok, cfg, glue, out),
                sst2=lambda: sst2(model, tok, cfg, glue, label_words, args.prompt))
    if cmd != "all":
        return jobs[cmd]()
    tr = figure2(model, tok, cfg, text, items, args.topk, args.seed, out)
    res, secs = dict(ckpt=str(args.ckpt), config=cfg.to_dict(),
                     figure2={k: v.tolist() for k, v in tr.items()}), {}
    if not glue:
        print("note: no GLUE folder (--glue_dir): cola and sst2 skipped")
    for name in ("calibration", "scoring") + (("cola", "sst2") if glue else ()):
        t = time.time()
        res[name], secs[name] = jobs[name](), round(time.time() - t, 1)
    res["seconds"] = dict(secs, total=round(time.time() - t0, 1))
    path = out / "inspect.json"
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(res, indent=1)))
    print(f"wrote {path} | seconds: {res['seconds']}")


def main(argv=None):
    args = parse_args(argv)
    try:
        run(args)
        return 0
    except (InspectError, CheckpointError, DataError, GlueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
