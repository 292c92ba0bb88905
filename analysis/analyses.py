"""The intrinsic analyses of a trained discriminator: the questions §2 and Figure 2 raise but
the paper leaves unmeasured (a blog review of it asks: is D calibrated? does it find grammatical
errors? can its scores rank sentences?), and zero-shot classification with D's head (Ni & Kao
2022, "ELECTRA is a Zero-Shot Learner, Too"). No fine-tuning anywhere: D as pre-trained.

Every analysis reads D's head as P(replaced) = sigmoid(logit_t) = 1 - D(x, t), D(x, t) being
the paper's probability that token x_t is real, and corrupts text - where it needs x_corrupt -
exactly as a pre-training step does (g_corrupt: mask_tokens, x̂ ~ p_G, corrupt).
  calibration  on held-out text corrupted by the checkpoint's own G: does P(replaced) = 0.3
               mean "replaced 30 % of the time"? (ECE, reliability plot, token ROC-AUC)
  cola         D on CoLA's uncorrupted sentences: do ungrammatical ones look "replaced"?
  scoring      is an original sentence scored below its G-corrupted, random-token and
               word-shuffled variants?
  sst2         "<sentence> It was great/terrible.": the label word D finds less replaced wins.
  attention    does D (or G) read word order yet? Each head's mean attention on the tokens at
               offsets -3..+3 against the 1/n of attention spread evenly. A replaced word is
               mostly a frequent word in the wrong place; a network that cannot yet look at
               its neighbours sees a bag of words and cannot tell (docs/plateau.md: why small runs
               sit on a plateau).
  mlm          ELECTRA as a masked language model (Appendix G): analysis/appendix_g.py.
The command line, the sentence view and Figure 2 are in analysis/inspect_discriminator.py.
"""
import math

import numpy as np
import torch

from machinery.atomic import atomic_write
from encoder import attention_mask
from glue import matthews_corr, rank_average, read_split
from objectives import corrupt, mask_tokens, sample
import matplotlib
matplotlib.use("Agg")                              # headless: never try to open a display
import matplotlib.pyplot as plt  # noqa: E402


class InspectError(Exception):
    """Bad input the user can fix; printed as one line, exit 1."""


# ----------------------------------------------------------------------------- D and G on token ids

def pieces(tok, ids):
    """Each id as text: special tokens by name, others as their (maybe partial-word) bytes."""
    names = {tok.pad_id: "[PAD]", tok.cls_id: "[CLS]", tok.sep_id: "[SEP]", tok.mask_id: "[MASK]"}
    return [names.get(int(i)) or tok.decode([int(i)]) for i in ids]


WHITESPACE = {" ": "␣", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def shown(piece):
    """A token for display: without its leading space; a token of blanks with each one visible
    (' ' as '␣', a line break as '\\n'), never as an empty string; others quoted if
    unprintable."""
    body = piece.strip()
    if body and body.isprintable():
        return body
    if piece and not body:                      # blanks only: a line break, spaces, a tab
        return "".join(WHITESPACE.get(c, repr(c)[1:-1]) for c in piece)
    return repr(piece)


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


def save_png(fig, path):
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight"))
    plt.close(fig)
    print(f"wrote {path}")


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


# ----------------------------------------------------------------------------- the analyses

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
    flagged = P > 0.5
    res = dict(ece=e, n_sequences=len(seqs), n_tokens=len(P), share_replaced=float(Y.mean()),
               mean_p_replaced=float(P.mean()), token_auc=roc_auc(P, Y),
               recall_at_0_5=float(flagged[Y == 1].mean()) if Y.any() else None,
               precision_at_0_5=float(Y[flagged].mean()) if flagged.any() else None, bins=bins)
    print(calibration_summary(res, n_bins))
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


def _pct(x):
    return "-" if x is None else f"{100 * x:.1f} %"


def calibration_summary(res, n_bins):
    """calibration's figures for people: rounded, each beside what chance (or a D that answers
    "real" everywhere, the plateau) would score, so a reader can tell learning from noise."""
    auc = "-" if res["token_auc"] is None else f"{res['token_auc']:.3f}"
    share = _pct(res["share_replaced"])
    return "\n".join([
        f"calibration: D on {res['n_tokens']:,} tokens of {res['n_sequences']} held-out sequences "
        f"that this checkpoint's G corrupted ({share} of them replaced)",
        f"  token ROC-AUC      {auc:>7}   chance 0.500, perfect 1.000",
        f"  recall of replaced {_pct(res['recall_at_0_5']):>7}   share of replaced tokens with "
        "P(replaced) > 0.5; a D that answers \"real\" everywhere: 0 %",
        f"  precision          {_pct(res['precision_at_0_5']):>7}   share of flagged tokens really "
        f"replaced; flagging at random: {share}",
        f"  ECE                {res['ece']:>7.4f}   {n_bins} bins; 0 = P(replaced) is the true share",
        f"  mean P(replaced)   {res['mean_p_replaced']:>7.3f}   the share replaced is "
        f"{res['share_replaced']:.3f}"])


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
        print(f"cola: score = {name} P(replaced): ROC-AUC {auc:.3f} (chance 0.500), MCC "
              f"{mcc:.3f} (chance 0) at the best threshold {t:.3f} (chosen on dev itself: an "
              "upper bound)")
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
        xr, _ = corrupt(x, m, r)
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
        print(f"scoring: original below its {name:9} variant in {100 * win.mean():5.1f} % of "
              f"{keep.sum()} pairs (chance 50 %; mean P(replaced) {base[keep].mean():.3f} vs "
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


# ----------------------------------------------------------------------------- attention by offset

def attention_maps(net, x, pad_mask=None, seg=None):
    """The attention weights of every block of `net` (G or D) on x: a list of (B, heads, T, T),
    recomputed from each block's q and k as SelfAttention computes them (the fused kernel there
    never materialises the weights). Padded keys get weight 0, as under the block's mask."""
    h, mask, maps = net.encoder.proj(net.embeddings(x, seg)), attention_mask(pad_mask), []
    for block in net.encoder.blocks:
        B, T, H = h.shape
        nh = block.attn.heads
        q, k, _ = block.attn.qkv(h).view(B, T, 3, nh, H // nh).permute(2, 0, 3, 1, 4)
        s = q @ k.transpose(-1, -2) / math.sqrt(H // nh)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        maps.append(torch.softmax(s.float(), dim=-1))
        h = block(h, mask)
    return maps


def offset_sums(a, pad_mask, offsets=(-3, -2, -1, 0, 1, 2, 3)):
    """The sums behind by_offset, so that batches of different sizes pool exactly: per head and
    offset o, the summed weight from a real token t to the real token t + o, (heads, offsets);
    the number of such pairs per offset; the sum of 1/n over real queries; their number."""
    B, nh, T, _ = a.shape
    real = torch.ones(B, T, dtype=torch.bool) if pad_mask is None else pad_mask
    sums, pairs = torch.zeros(nh, len(offsets)), torch.zeros(len(offsets))
    for j, o in enumerate(offsets):
        q = torch.arange(max(0, -o), min(T, T - o))          # queries whose t + o exists
        both = real[:, q] & real[:, q + o]                   # (B, len(q))
        w = a[:, :, q, q + o]                                # (B, heads, len(q))
        sums[:, j], pairs[j] = (w * both[:, None]).sum((0, 2)), both.sum()
    n = real.sum(1, keepdim=True).float().expand(B, T)[real]
    return sums, pairs, (1.0 / n).sum().item(), n.numel()


def by_offset(a, pad_mask, offsets=(-3, -2, -1, 0, 1, 2, 3)):
    """From attention weights a (B, heads, T, T): each head's mean weight from a real token t
    to the real token t + o, for each offset o -> (heads, len(offsets)); and the mean of 1/n
    over those queries (n real tokens in the sequence), the weight of attention spread evenly."""
    sums, pairs, inv_n, queries = offset_sums(a, pad_mask, offsets)
    return sums / pairs.clamp(min=1), inv_n / max(queries, 1)


def attention(model, tok, cfg, seqs, offsets=(-3, -2, -1, 0, 1, 2, 3)):
    """Does D (and G) attend to its neighbours yet? For every head, the mean attention on the
    tokens at each offset, on held-out sequences, next to the even spread 1/n. A head that
    reads word order puts several times 1/n on offset -1 or +1."""
    res = dict(offsets=list(offsets))
    for name in ("discriminator", "generator"):
        net = getattr(model, name, None)
        if net is None:
            continue
        # summed over every batch first and divided once: a short last batch counts per pair,
        # not as much as a full one
        sums, pairs, inv_n, queries = 0, 0, 0.0, 0
        for _, x, pad_mask, _ in batches([s for s, _ in seqs], tok.pad_id):
            rows = [offset_sums(a, pad_mask, offsets) for a in attention_maps(net, x, pad_mask)]
            sums = sums + torch.stack([r[0] for r in rows])   # (layers, heads, offsets)
            pairs, inv_n, queries = pairs + rows[0][1], inv_n + rows[0][2], queries + rows[0][3]
        if not queries:
            raise InspectError("no held-out sequence to measure attention on")
        mean, uni = sums / pairs.clamp(min=1), inv_n / queries
        # each head's heavier neighbour, then the heaviest head
        best = float(mean[:, :, [offsets.index(-1), offsets.index(1)]].max())
        res[name] = dict(by_offset=mean.tolist(), uniform=uni, neighbour_max=best,
                         neighbour_max_ratio=best / uni)
        for li in range(mean.shape[0]):
            for hd in range(mean.shape[1]):
                cells = " ".join(f"{o:+d}:{v:.3f}" for o, v in zip(offsets, mean[li, hd].tolist()))
                print(f"attention {name[0].upper()} layer {li} head {hd}: {cells}")
        print(f"attention: {name}'s most neighbour-bound head puts {best:.3f} of its weight "
              f"on one neighbour ({best / uni:.1f}x the even spread 1/n = {uni:.3f})")
    return res
