"""Figure 2 with real tensors - one pre-training step of a checkpoint's G and D on your
text, as the paper draws it.

    python analysis/inspect_discriminator.py figure2 --ckpt C "TEXT" --mask 2,cooked  # by hand
    python analysis/inspect_discriminator.py figure2 --ckpt C "TEXT" --mask draw   # as training

`figure2_trace` runs the step on one text and returns every tensor: m (chosen by hand with
`choose_positions`, or the seeded draw of a training step, `--mask draw`), x_masked, p_G's top-k,
the sample x̂, x_corrupt, is_replaced and D's P(replaced); `figure2_png` draws it as a table with
a legend, and `figure2` prints it too. The inspector's command line and its browser page
(analysis/serve.py) show the same step through these functions, and teaching/one_step.py draws
the same m with the same random numbers."""
import matplotlib
import torch

from analysis.analyses import InspectError, encode, p_replaced, pieces, save_png, shown
from batches import draw_slots
from objectives import Masked, corrupt, mask_tokens, sample

matplotlib.use("Agg")                              # headless: never try to open a display
import matplotlib.pyplot as plt  # noqa: E402


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


DRAW = "draw"     # --mask draw: m as a training step draws it, seeded (not chosen by hand)


def figure2_trace(model, tok, text, mask_items, k=3, seed=0, max_len=128, mask_prob=0.15):
    """Figure 2 with real tensors: every intermediate of one pre-training step on one text.
    mask_items: the positions to mask (choose_positions), or ["draw"]: the seeded draw of a
    training step (objectives.mask_tokens with mask_prob: k = round(mask_prob n) positions,
    85 % of them shown as [MASK], 15 % kept), with the same random numbers, in the same order,
    as teaching/one_step.py --seed, so the two show the same step."""
    x = torch.tensor([encode(tok, text, max_len)])
    g = torch.Generator().manual_seed(seed)
    if [s.strip().lower() for s in mask_items if s.strip()] == [DRAW]:
        slots = draw_slots(x, tok.special_ids, max_len, mask_prob)
        drawn = mask_tokens(x, tok.special_ids, tok.mask_id, slots, mask_prob, generator=g)
        if not drawn.weights.any():                      # no real token: k = 0, as training
            raise InspectError("--mask draw found no token to mask: the text has none besides "
                               "[CLS]/[SEP]-like special tokens; give a sentence")
        logits = model.generator(drawn.x_masked, drawn.positions)   # every slot, as training
        x_hat = sample(logits, generator=g)
        used = (drawn.weights[0] > 0).nonzero()[:, 0]
        used = used[drawn.positions[0, used].argsort()]              # m in the sentence's order
        m = drawn.positions[:, used]
        masked = Masked(drawn.x_masked, m, x.gather(1, m), torch.ones(m.shape))
        return finish_trace(model, x, masked, logits[:, used], x_hat[:, used], k)
    m = torch.tensor([choose_positions(pieces(tok, x[0]), mask_items)])
    if m.shape[1] == 0:
        raise InspectError("figure2 needs at least one --mask position")
    x_masked = x.scatter(1, m, tok.mask_id)             # every chosen token shown as [MASK]
    return step_trace(model, x, Masked(x_masked, m, x.gather(1, m), torch.ones(m.shape)), k, g)


def step_trace(model, x, masked, k=3, generator=None):
    """Sample and corrupt, and D's verdict, given the mask step (`masked`: m and x_masked) for x."""
    logits = model.generator(masked.x_masked, masked.positions)     # (1, K, V): p_G only at m
    x_hat = sample(logits, generator=generator)                      # x̂_i ~ p_G
    return finish_trace(model, x, masked, logits, x_hat, k)


def finish_trace(model, x, masked, logits, x_hat, k):
    """The trace's dict once G has spoken: p_G's top-k, x_corrupt, is_replaced, D's verdict."""
    top_p, top_ids = torch.softmax(logits.float(), -1).topk(min(k, logits.shape[-1]), -1)
    corrupted = corrupt(x, masked, x_hat)                            # (x_corrupt, is_replaced)
    return dict(x=x, m=masked.positions, x_masked=masked.x_masked, top_p=top_p, top_ids=top_ids,
                x_hat=x_hat, x_corrupt=corrupted[0], is_replaced=corrupted[1],
                p_replaced=p_replaced(model, corrupted[0]))


def top_text(tok, ids, probs, sep=" | "):
    """p_G's best tokens with their probabilities, each quoted as `shown` prints it: a line
    break or a space is visible ('\\n', '␣'), never ''."""
    return sep.join(f"'{shown(w)}' {q:.2f}" for w, q in zip(pieces(tok, ids), probs.tolist()))


# Figure 2's colours, one meaning each (the step table of the annotated pages uses the same
# yellow and red): yellow a position in m, red a replaced token, blue P(replaced), green and
# violet D's verdict right and wrong.
IN_M, REPLACED, RIGHT, WRONG = "#fff3c4", "#ffc2c2", "#c9e7c9", "#dcc6f0"
P_COLOURS = matplotlib.colors.LinearSegmentedColormap.from_list(
    "p_replaced", [plt.cm.Blues(0.02), plt.cm.Blues(0.85)])


def how_masked(mask_items, seed):
    """How m was chosen, in words, for the figure."""
    items = [s.strip() for s in mask_items if s.strip()]
    if [s.lower() for s in items] == [DRAW]:
        return f"m: the seeded 15 % draw of a training step (--mask draw --seed {seed})"
    return f"m: chosen by hand (--mask {','.join(items)}); x̂ sampled with --seed {seed}"


def figure2_png(tok, tr, how):
    """Figure 2 as a table, one row per token as the paper draws it, with a legend: the
    figure of figure2_trace's tensors."""
    toks = [pieces(tok, tr[key][0]) for key in ("x", "x_masked", "x_corrupt")]
    m, rows, colours, weight = tr["m"][0].tolist(), [], [], []
    p_rep, p_real = [], []
    for t in range(1, tr["x"].shape[1] - 1):         # one row per token, as the paper draws it
        p, rep, j = float(tr["p_replaced"][0, t]), bool(tr["is_replaced"][0, t]), \
            m.index(t) if t in m else None
        (p_rep if rep else p_real).append(p)
        says = "replaced" if p > 0.5 else "original"
        rows.append([shown(toks[0][t]), shown(toks[1][t]), "" if j is None else top_text(
            tok, tr["top_ids"][0, j, :3], tr["top_p"][0, j, :3], ", "),
            "" if j is None else shown(pieces(tok, tr["x_hat"][0, j:j + 1])[0]),
            shown(toks[2][t]), "replaced" if rep else "original", f"{p:.2f}",
            says + (" ✓" if (p > 0.5) == rep else " ✗")])
        colours.append(["w", IN_M if j is not None else "w", "w"]
                       + [REPLACED if rep else "w"] * 3
                       + [P_COLOURS(p), RIGHT if (p > 0.5) == rep else WRONG])
        weight.append(rep)
    head = ["x", "x_masked", "top-3 of p_G", "x̂ ~ p_G", "x_corrupt", "is_replaced",
            "P(replaced)", "D says (> 0.5)"]
    chars = [max(len(r[c]) for r in rows + [head]) + 2 for c in range(8)]
    width, height = 0.085 * sum(chars), 0.3 * (len(rows) + 1)       # inches
    fig = plt.figure(figsize=(max(width, 9), height + 1.3))
    ax = fig.add_axes([0.5 - width / max(width, 9) / 2, 0.8 / (height + 1.3),
                       width / max(width, 9), height / (height + 1.3)])
    ax.axis("off")
    table = ax.table(rows, cellColours=colours, cellLoc="center", colLabels=head,
                     colWidths=[c / sum(chars) for c in chars], bbox=[0, 0, 1, 1])
    table.auto_set_font_size(False)
    table.set_fontsize(9)
    for (r, c), cell in table.get_celld().items():
        if r > 0 and c in (3, 4, 5) and weight[r - 1]:
            cell.get_text().set_fontweight("bold")
        if r > 0 and c == 6 and float(rows[r - 1][6]) > 0.6:
            cell.get_text().set_color("white")
    mean = lambda v: f"{sum(v) / len(v):.2f}" if v else "-"   # noqa: E731
    ax.set_title("Replaced token detection (Figure 2) with this checkpoint's G and D\n"
                 f"{how}; mean P(replaced): replaced tokens {mean(p_rep)}, original ones "
                 f"{mean(p_real)}", fontsize=10)
    patch = matplotlib.patches.Patch
    handles = [patch(fc=IN_M, ec="k", lw=0.5, label="x_masked: a position in m"),
               patch(fc=REPLACED, ec="k", lw=0.5, label="a replaced token (x_corrupt ≠ x)"),
               patch(fc=RIGHT, ec="k", lw=0.5, label="D right (✓)"),
               patch(fc=WRONG, ec="k", lw=0.5, label="D wrong (✗)")]
    fig.legend(handles=handles, loc="lower left", ncol=2, fontsize=9, frameon=False,
               bbox_to_anchor=(0.0, 0.0))
    bar = fig.add_axes([0.72, 0.25 / (height + 1.3), 0.25, 0.12 / (height + 1.3)])
    fig.colorbar(plt.cm.ScalarMappable(matplotlib.colors.Normalize(0, 1), P_COLOURS), cax=bar,
                 orientation="horizontal", ticks=[0, 0.5, 1])
    bar.set_title("P(replaced) = 1 - D(x, t)", fontsize=9)
    bar.tick_params(labelsize=9)
    return fig


def figure2(model, tok, cfg, text, mask_items, k, seed, out):
    tr = figure2_trace(model, tok, text, mask_items, k, seed, cfg.seq_len, cfg.mask_prob)
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
    save_png(figure2_png(tok, tr, how_masked(mask_items, seed)), out / "figure2.png")
    return tr
