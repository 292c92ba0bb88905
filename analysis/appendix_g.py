"""ELECTRA as a masked language model (the paper's Appendix G): D and G together give
p_data(x | c), so D can pick the masked token among G's top-k candidates. docs/appendix-g.md
derives the score and reports what it measured; `python analysis/inspect_discriminator.py mlm`
runs it: `mlm_sentence` for one sentence's candidates, `mlm` for the accuracies on held-out
text.
"""
import json
from pathlib import Path

import torch

from machinery.atomic import atomic_write
from analysis.analyses import InspectError, batches, encode, pieces, shown
from analysis.figure2 import choose_positions


def appendix_g_score(d_real, p_g, mask_prob=0.15):
    """p_data(x | c) read back from D and G (Appendix G): how likely token x is at a masked
    position, given the context c (the rest of the sequence).

    The appendix writes L_Disc for one position of context c whose token X is masked with
    probability p_mask: unmasked, X is real data; masked, X is G's sample, "real" when it happens
    to be the original. Setting the derivative with respect to D(X, c) to zero gives the
    optimal D for a fixed G, and solving it for p_data:

        p_data(x | c) = D(x, c) p_G(x | c) / (a (1 - D(x, c)) + p_G(x | c)),
        a = (1 - p_mask) / p_mask     (unmasked tokens per masked one: 5.67 at 15 %)

    d_real is D(x, c), the paper's D: the probability that x is *real* in context c, here
    1 - sigmoid(D's logit) (our head scores "replaced"); p_g is p_G(x | c). Both are tensors of
    the same shape (or broadcastable), one entry per candidate x. The limits say what D adds
    to G: D -> 1 ("certainly real") gives p_G / p_G = 1; D -> 0 ("certainly replaced") gives 0;
    and a D that says the same for every candidate leaves G's ranking as it is (the score grows
    with p_G at fixed D), so only what D tells candidates apart by can change G's answer."""
    a = (1 - mask_prob) / mask_prob
    d, p = d_real.double(), p_g.double()        # 1 - D near D = 1: more than float32's 7 digits
    den = a * (1 - d) + p                       # a (1 - D(x, c)) + p_G(x | c)
    # den = 0 only when D = 1 and p_G = 0 (a candidate G gives no mass that D calls certainly
    # real): the formula is 0/0 there, and such a candidate gets no support from G: score 0.
    return torch.where(den > 0, d * p / den.clamp(min=1e-300), torch.zeros_like(den))


def mlm_candidates(model, x, t, pad_mask=None, seg=None, topk=100, mask_id=None,
                   mask_prob=0.15):
    """For each row of x (B, T), masked at position t (B,): G's top-k candidates there, and
    each candidate's Appendix G score. Returns (cand ids, p_G, D(x, c), score), each (B, k).

    D sees x with the candidate in place and every other token as in x, the appendix's
    D(x, c): all B x k sequences go through D in a few large batches, not k passes."""
    rows = torch.arange(x.shape[0])
    x_masked = x.clone()
    x_masked[rows, t] = mask_id
    kw = {} if seg is None else dict(segment_ids=seg)
    logits = model.generator(x_masked, t[:, None], pad_mask, **kw)[:, 0]        # (B, V)
    p_g, cand = torch.softmax(logits.float(), -1).topk(topk, -1)              # (B, k) each
    B, k = cand.shape
    # Row b * k + j of xs is x_b with candidate j at t_b.
    xs = x.repeat_interleave(k, 0)
    xs[torch.arange(B * k), t.repeat_interleave(k)] = cand.flatten()
    rep = lambda z: None if z is None else z.repeat_interleave(k, 0)  # noqa: E731
    pm, sg, tt = rep(pad_mask), rep(seg), t.repeat_interleave(k)
    step = max(1, 2 ** 16 // x.shape[1])                # ~64k tokens per pass through D
    logit_t = torch.cat([
        model.discriminator(xs[s:s + step], None if pm is None else pm[s:s + step],
                            **({} if sg is None else dict(segment_ids=sg[s:s + step])))
        [torch.arange(len(xs[s:s + step])), tt[s:s + step]].float()
        for s in range(0, B * k, step)])
    d_real = torch.sigmoid(-logit_t).view(B, k)          # D(x, c) = 1 - P(replaced)
    return cand, p_g, d_real, appendix_g_score(d_real, p_g, mask_prob)


def mlm_accuracy(model, tok, seqs, topk=100, seed=0, bert=None, mask_prob=0.15, bs=32):
    """ELECTRA as a masked language model on held-out sequences [(ids, segment ids or None)]:
    one real token per sequence masked at random (never [CLS], [SEP] or padding), and the
    share of them predicted right by G alone (argmax p_G), by ELECTRA (Appendix G's argmax over
    G's top-k), by the best pick from G's top-k (the upper bound of the Appendix G pick), and
    by `bert` (a BERT checkpoint's MLM, argmax over the whole vocabulary), all at the same
    positions."""
    g = torch.Generator().manual_seed(seed)
    special = torch.tensor([tok.pad_id, tok.cls_id, tok.sep_id])
    segs = None if any(s is None for _, s in seqs) else [s for _, s in seqs]
    hits = dict(g=0, electra=0, upper=0, bert=0, fixed=0, broken=0)
    n = 0
    for _, x, pm, sg in batches([s for s, _ in seqs], tok.pad_id, segs, bs):
        real = ~torch.isin(x, special)
        keep = real.any(1)
        if not keep.any():
            continue
        x, pm, real = x[keep], pm[keep], real[keep]
        sg = None if sg is None else sg[keep]
        # a uniform real position per row: a random score on each real token, take the best
        t = torch.rand(x.shape, generator=g).masked_fill(~real, -1.0).argmax(1)
        y = x[torch.arange(len(x)), t]
        cand, _, _, score = mlm_candidates(model, x, t, pm, sg, topk, tok.mask_id, mask_prob)
        g_right = cand[:, 0] == y
        e_right = cand[torch.arange(len(x)), score.argmax(1)] == y
        hits["g"] += int(g_right.sum())
        hits["electra"] += int(e_right.sum())
        hits["upper"] += int((cand == y[:, None]).any(1).sum())
        hits["fixed"] += int((e_right & ~g_right).sum())
        hits["broken"] += int((g_right & ~e_right).sum())
        if bert is not None:
            xm = x.clone()
            xm[torch.arange(len(x)), t] = tok.mask_id
            kw = {} if sg is None else dict(segment_ids=sg)
            hits["bert"] += int((bert.mlm(xm, t[:, None], pm, **kw)[:, 0].argmax(-1) == y).sum())
        n += len(x)
    if not n:
        raise InspectError("no held-out sequence with a token to mask")
    res = dict(n=n, topk=topk, seed=seed, **{f"{k}_acc": v / n for k, v in hits.items()
                                               if k not in ("fixed", "broken")},
               fixed=hits["fixed"], broken=hits["broken"])
    if bert is None:
        res.pop("bert_acc")
    return res


# ----------------------------------------------------------------------------- the commands

def mlm_sentence(model, tok, cfg, text, mask_items, k, bert=None, rows=10):
    """Each chosen token masked alone: G's best candidates and Appendix G's, side by side."""
    x = encode(tok, text, cfg.seq_len)
    toks = pieces(tok, x)
    pos = choose_positions(toks, mask_items)
    if not pos:
        raise InspectError("mlm on a sentence needs --mask: the token index or word to predict")
    res = []
    for t in pos:
        xt, tt = torch.tensor([x]), torch.tensor([t])
        cand, p_g, d_real, score = mlm_candidates(model, xt, tt, topk=k, mask_id=tok.mask_id,
                                                  mask_prob=cfg.mask_prob)
        order = score[0].argsort(descending=True)
        n = min(rows, k)
        g_col = [f"{shown(w)!s:>12} {p:.3f}" for w, p in
                 zip(pieces(tok, cand[0, :n]), p_g[0, :n].tolist())]
        e_col = [f"{shown(w)!s:>12} {s:.3f} (D {d:.2f})" for w, s, d in
                 zip(pieces(tok, cand[0, order[:n]]), score[0, order[:n]].tolist(),
                     d_real[0, order[:n]].tolist())]
        head = f"{'G: p_G(x | c)':>18}   {'ELECTRA: Appendix G p_data(x | c)':<34}"
        b_col = None
        if bert is not None:
            xm = xt.clone()
            xm[0, t] = tok.mask_id
            pb, ib = torch.softmax(bert.mlm(xm, tt[:, None])[0, 0].float(), -1).topk(n)
            b_col = [f"{shown(w)!s:>12} {p:.3f}" for w, p in zip(pieces(tok, ib), pb.tolist())]
            head += f" {'BERT: p(x | c)':>18}"
        print(f"{t - 1:>3} {toks[t]!r} masked in: " + " ".join(
            shown(w) if j != t else "[MASK]" for j, w in enumerate(toks)) + "\n" + head)
        for r in range(n):
            print(f"{r + 1:>3} {g_col[r]}   {e_col[r]:<34}" + (f" {b_col[r]}" if b_col else ""))
        hit = (cand[0] == x[t]).nonzero().flatten().tolist()
        print(f"    the masked token {shown(toks[t])!r}: " + (
            f"rank {hit[0] + 1} of p_G, rank {int((order == hit[0]).nonzero()[0]) + 1} by "
            f"Appendix G (D {float(d_real[0, hit[0]]):.2f})" if hit else
            f"not in G's top-{k}, so Appendix G cannot pick it"))
        res.append(dict(position=t - 1, token=toks[t], g=pieces(tok, cand[0, :n]),
                        electra=pieces(tok, cand[0, order[:n]])))
    return res


def mlm(model, tok, cfg, seqs, k, seed, bert, out):
    """The accuracies of G, ELECTRA (Appendix G) and BERT at one masked token per sequence."""
    r = mlm_accuracy(model, tok, seqs, k, seed, bert, cfg.mask_prob)
    rows = [("(a) G alone, argmax p_G", r["g_acc"], ""),
            (f"(b) ELECTRA, Appendix G over G's top-{k}", r["electra_acc"],
             f"  (G's answer fixed {r['fixed']} times, broken {r['broken']})"),
            (f"(c) true token in G's top-{k} (bound for b)", r["upper_acc"], "")]
    if bert is not None:
        rows.append(("(d) BERT, argmax p(x | c)", r["bert_acc"], ""))
    w = max(len(row[0]) for row in rows)
    print(f"masked LM on {r['n']} held-out sequences, one real token masked in each (seed "
          f"{seed}): top-1 accuracy\n" + "\n".join(f"  {name:<{w}} {100 * acc:5.1f} %{note}"
                                                 for name, acc, note in rows))
    path = out / "mlm.json"
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(r, indent=1)))
    print(f"wrote {path}")
    return r
