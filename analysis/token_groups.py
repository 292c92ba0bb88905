"""Which tokens D distrusts: a blog review's question (Mark Neumann, "Paper Review:
Electra", https://markneumann.xyz/blog/electra), "Is there any bias intrinisc in which tokens the discriminator predicts as being
disfluent (e.g by POS tag)?"; the paper does not look.

No part-of-speech tagger ships offline, so the tokens are grouped by what the tokenizer and the
text tell. Every token of x_corrupt - the token D sees, an original or G's sample - falls in
exactly one group, the first of these that fits:

  special          [CLS], [SEP]
  continuation     a piece glued to the word before it (no leading space: "ing" in "runn|ing")
  punctuation      no letter or digit in it (",", ".", "(", a line break)
  digits           a digit in it ("1990", " 3")
  sentence-initial a capitalised word after a sentence's end (".", "!", "?") or a line break
  function word    a closed list of English function words (FUNCTION_WORDS; articles, pronouns,
                   prepositions, conjunctions, auxiliaries), any case
  words d1 .. d10  the other words by frequency decile: d1 the most frequent, d10 the rarest,
                   each decile about a tenth of these tokens, by the token's count in the
                   training split (or in the held-out text without --data)

For each group, on held-out text corrupted by the checkpoint's own G exactly as in pre-training:
the share of tokens that are replaced, D's mean P(replaced) on real and on replaced tokens, its
recall (replaced tokens with P(replaced) > 0.5) and its false-alarm rate (real tokens flagged).
The command is `inspect_discriminator.py tokens --ckpt C --data DIR`; docs/reviewers-questions.md
relates the table to docs/plateau.md's story of what D learns first.
"""
import numpy as np
import torch

from analysis.analyses import InspectError, batches, g_corrupt, p_replaced, pieces, save_png
import matplotlib
matplotlib.use("Agg")                              # headless: never try to open a display
import matplotlib.pyplot as plt  # noqa: E402

FUNCTION_WORDS = frozenset("""
a an the this that these those some any no every each either neither all both few many much
more most other another such what which who whom whose where when why how whether
i me my mine myself you your yours yourself he him his himself she her hers herself it its
itself we us our ours ourselves they them their theirs themselves one
of in on at by for with about against between into through during before after above below
to from up down out off over under again further than as like upon within without along
across behind beyond near since toward towards among around via per
and or but nor so yet if because although though while unless until then also not only just
very too there here
be am is are was were been being have has had having do does did doing will would shall should
can could may might must
""".split())

GROUPS = ("special", "continuation", "punctuation", "digits", "sentence-initial",
          "function word") + tuple(f"words d{i}" for i in range(1, 11))
SPECIAL = ("[CLS]", "[SEP]", "[PAD]", "[MASK]")


def group_of(toks, i):
    """The group (a name of GROUPS, or None for a decile word) of piece i of a sequence."""
    t, prev = toks[i], toks[i - 1] if i > 0 else "[CLS]"
    body = t.strip()
    if t in SPECIAL:
        return "special"
    if t[:1].isalnum() and prev[-1:].isalnum() and prev not in SPECIAL:
        return "continuation"
    if not any(c.isalnum() for c in body):
        return "punctuation"
    if any(c.isdigit() for c in body):
        return "digits"
    after_end = prev.strip().endswith((".", "!", "?")) or prev.endswith("\n")
    if body[:1].isupper() and after_end:
        return "sentence-initial"
    if body.lower() in FUNCTION_WORDS:
        return "function word"
    return None


def groups(tok, seqs_ids, counts):
    """The group index (into GROUPS) of every token of every id sequence: a list of int arrays.
    Decile words are cut by `counts` (occurrences of each id) into ten bins of about equal
    numbers of these tokens, from the most to the least frequent."""
    named = {g: j for j, g in enumerate(GROUPS)}
    out, words = [], []
    for s, ids in enumerate(seqs_ids):
        toks = pieces(tok, ids)
        g = np.full(len(ids), -1)
        for i in range(len(ids)):
            name = group_of(toks, i)
            if name is None:
                words.append((s, i, int(counts[int(ids[i])])))
            else:
                g[i] = named[name]
        out.append(g)
    if words:
        freq = np.array([c for _, _, c in words])
        # rank by frequency (most frequent first), ties kept together by a stable sort
        order = np.argsort(-freq, kind="stable")
        decile = np.empty(len(words), dtype=int)
        decile[order] = np.minimum(9, np.arange(len(words)) * 10 // len(words))
        # a frequency shared across a cut goes to the decile where most of it fell
        for f in np.unique(freq):
            same = freq == f
            decile[same] = np.bincount(decile[same]).argmax()
        for (s, i, _), d in zip(words, decile):
            out[s][i] = named["words d1"] + d
    return out


def token_table(model, tok, cfg, seqs, counts, seed=0, rounds=1):
    """For each group: tokens, replaced share, D's mean P(replaced) on real and replaced tokens,
    recall and false-alarm rate, on held-out text corrupted by the checkpoint's G (`rounds`
    corruptions of each sequence, each a fresh draw)."""
    g = torch.Generator().manual_seed(seed)
    k = len(GROUPS)
    n, rep, p_real, p_rep, caught, alarms = (np.zeros(k) for _ in range(6))
    for _ in range(rounds):
        for idx, x, pad_mask, seg in batches([s for s, _ in seqs], tok.pad_id, bs=64):
            x_corrupt, is_replaced, _ = g_corrupt(model, tok, cfg, x, pad_mask, seg, g)
            p = p_replaced(model, x_corrupt, pad_mask, seg)
            lens = pad_mask.sum(1).tolist()
            ids = [x_corrupt[r, :lens[r]].tolist() for r in range(len(idx))]
            for r, grp in enumerate(groups(tok, ids, counts)):
                y, q = is_replaced[r, :lens[r]].numpy(), p[r, :lens[r]].numpy()
                np.add.at(n, grp, 1)
                np.add.at(rep, grp, y)
                np.add.at(p_real, grp, q * ~y)
                np.add.at(p_rep, grp, q * y)
                np.add.at(caught, grp, (q > 0.5) & y)
                np.add.at(alarms, grp, (q > 0.5) & ~y)
    if not n.sum():
        raise InspectError("no held-out tokens to group")
    div = lambda a, b: np.where(b > 0, a / np.maximum(b, 1), np.nan)   # noqa: E731
    real = n - rep
    rows = [dict(group=GROUPS[j], tokens=int(n[j]), replaced_share=float(div(rep, n)[j]),
                 p_real=float(div(p_real, real)[j]), p_replaced=float(div(p_rep, rep)[j]),
                 recall=float(div(caught, rep)[j]), false_alarms=float(div(alarms, real)[j]))
            for j in range(k)]
    total = dict(group="all", tokens=int(n.sum()), replaced_share=float(rep.sum() / n.sum()),
                 p_real=float(p_real.sum() / max(real.sum(), 1)),
                 p_replaced=float(p_rep.sum() / max(rep.sum(), 1)),
                 recall=float(caught.sum() / max(rep.sum(), 1)),
                 false_alarms=float(alarms.sum() / max(real.sum(), 1)),
                 precision=float(caught.sum() / max(caught.sum() + alarms.sum(), 1)))
    return rows, total


def tokens(model, tok, cfg, seqs, counts, seed, out, rounds=1):
    """Print the table and draw tokens.png; returns the rows and the total."""
    rows, total = token_table(model, tok, cfg, seqs, counts, seed, rounds)
    pct = lambda v: "    -" if v != v else f"{100 * v:5.1f}"   # noqa: E731 (nan: none there)
    print(f"which tokens D distrusts: {total['tokens']:,} tokens of {len(seqs)} held-out "
          f"sequences x {rounds}, corrupted by the checkpoint's G (seed {seed})")
    print(f"  {'group':<17}{'tokens':>8} {'replaced':>9} {'P(rep)|real':>12} "
          f"{'P(rep)|replaced':>16} {'recall':>7} {'false alarms':>13}")
    for r in rows + [total]:
        print(f"  {r['group']:<17}{r['tokens']:>8,} {pct(r['replaced_share']):>8}% "
              f"{pct(r['p_real']):>11}% {pct(r['p_replaced']):>15}% {pct(r['recall']):>6}% "
              f"{pct(r['false_alarms']):>12}%")
    print(f"  (all: precision {100 * total['precision']:.1f} %; recall and false alarms at "
          "P(replaced) > 0.5)")
    shown = [r for r in rows if r["tokens"]]
    fig, ax = plt.subplots(figsize=(12, 4))
    xs = np.arange(len(shown))
    for off, key, label, colour in ((-0.32, "replaced_share", "share replaced", "#bbbbbb"),
                                    (-0.16, "recall", "recall (replaced flagged)", "#d62728"),
                                    (0.0, "false_alarms", "false alarms (real flagged)",
                                     "#1f77b4"),
                                    (0.16, "p_replaced", "mean P(replaced) | replaced",
                                     "#ff9896"),
                                    (0.32, "p_real", "mean P(replaced) | real", "#aec7e8")):
        ax.bar(xs + off, [100 * (r[key] if r[key] == r[key] else 0) for r in shown], 0.16,
               label=label, color=colour)
    ax.set_xticks(xs, [f"{r['group']}\n{r['tokens']:,}" for r in shown], rotation=45,
                  ha="right", fontsize=8)
    ax.set(ylabel="%", title=f"Which tokens D distrusts (recall {100 * total['recall']:.1f} %, "
           f"false alarms {100 * total['false_alarms']:.1f} % overall)")
    ax.legend(fontsize=8)
    save_png(fig, out / "tokens.png")
    return dict(rows=rows, total=total, n_sequences=len(seqs), rounds=rounds, seed=seed)
