"""The Annotated ELECTRA's pictures: what a reader would rather see than read, on which page,
with captions that say which run and command made each (teaching/annotate.py places them).

Every one is generated from a real run, none drawn by hand: Figure 2 with the tensors of a real
checkpoint, one real step as a table of tokens (docs/one_step.json, written by
teaching/one_step.py; `step_table` turns it into HTML), the plateau of a real laptop run and GLUE
against compute. The images are committed, because their runs take minutes; the build copies
them.
"""
import html
import sys
from dataclasses import dataclass
from pathlib import Path

if not __package__:   # run as a path (python teaching/figures.py): import from the project root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from teaching.mathml import mathml  # noqa: E402


@dataclass
class Figure:
    """A generated picture (or table) shown across both columns of a page, after its intro."""
    src: str                # a file under the project root: a .png, or docs/one_step.json
    caption: str            # what it shows and the command that made it (Markdown)
    alt: str = ""


# What a reader would rather see than read, and on which page. Every one is generated from a
# real run; its caption says by which command.
FIGURES = {
    "index": [Figure(
        "docs/figure2.png",
        "The paper's Figure 2 with real tensors, one training step on one sentence. x̂ is a "
        "*sample* from p_G, not G's best guess (§2): at \"Return\" G's top three guesses, 'the' "
        "0.06, 'a' 0.03 and 'is' 0.01, show how flat this weak G's distribution is, and it drew "
        "\"copy\"; at \"over\" it drew \"class\". D gives those two tokens P(replaced) 0.77 and "
        "0.91 and every original token 0.40 or less; the subtitle's means, 0.84 and 0.11, are "
        "this sentence's. On a narrow screen the picture scrolls sideways: D's columns are on "
        "its right."
        "\n\nDetails: a good step, not a typical one. D is right on every token in 21 of the "
        "validation text's 103 short prose sentences (each at seed 0), and this one was picked "
        "among those for its two whole-word replacements; over all 103, replaced tokens average "
        "P(replaced) 0.43 and original ones 0.09 (docs/annotated.md). m is the seeded 15 % draw "
        "of a training step (seed 0), not chosen by hand. The model is the quick start's "
        "checkpoint after 3,000 steps on the demo corpus (the run on the train.py page), a "
        "laptop-size D of one 128-wide block on 16-token sequences (config.py "
        "`SIZES[\"laptop\"]`), not ELECTRA-Small. 2-core AMD EPYC, bf16, 2026-11-26; drawn by "
        "`python analysis/inspect_discriminator.py figure2 --ckpt out/ckpt.pt \"Return the "
        "product of array elements over a given axis.\" --mask draw --seed 0`.",
        "Figure 2 with real tensors")],
    "objectives.py": [Figure(
        "docs/one_step.json",
        "One real step as a table, the one Figure 2 on the index draws: a row for each tensor "
        "of the step, a column for each position. m holds 2 of the 11 tokens; G's samples "
        "replace both; D gives the two replaced tokens 0.77 and 0.91, every original one "
        "0.40 or less."
        "\n\nDetails: m is the seeded draw of a training step (Figure 2's caption says how the "
        "sentence was picked). From the quick start's checkpoint (the run on the train.py page; "
        "2-core AMD EPYC, bf16); written, with its command and date, by `python "
        "teaching/one_step.py --ckpt out/ckpt.pt` (sentence and seed: its defaults).",
        "one step as a table")],
    "train.py": [Figure(
        "docs/plateau_run.png",
        "The plateau in a real run: D's recall of replaced tokens (red, below) stays under 10 % "
        "through step 1,200, while $L_Disc$ (above) falls to the plateau's loss $H(r)$, the loss "
        "of answering r, the share of replaced tokens, everywhere, and below it: D ranks "
        "replaced tokens higher before it is sure enough to call them replaced. At step 1,300 "
        "it leaves the plateau by the trainer's rule (recall at least 10 % and $L_Disc$ under "
        "$0.9 H(r)$); by step 3,000 it catches 41.8 % of the replaced tokens at 75.9 % "
        "precision."
        "\n\nDetails: $L_Disc$ reaches $H(r)$ by step 100, falls below it from step 200 and "
        "under $0.9 H(r)$ from step 700; at step 1,300 recall is 13.5 % and $L_Disc = 0.293 "
        "< 0.9 H(r) = 0.325$. The run: the quick start's command, `python electra_small.py "
        "--size laptop --max_steps 3000` (one block of D, the demo corpus), with two threads "
        "throughout as `--threads 2` repeats; 2-core AMD EPYC, bf16, 2026-11-26. With the "
        "default, which picks its threads as it runs, four runs of the command left the plateau "
        "at steps 1,100-1,500, the README's at 1,400 (docs/results.md). Drawn by `python "
        "plot_results.py --plateau out/log.jsonl`, redrawn 2026-11-28 with the legend's H(r) "
        "corrected from a repeat of the run that logged the same lines; the run in "
        "docs/annotated.md, the why in docs/plateau.md.",
        "D's recall and L_Disc against steps")],
    "flops.py": [Figure(
        "docs/flops_by_part.png",
        "Where ELECTRA-Small's training compute goes, by Appendix E's count: one step (batch "
        "128 × 128, forward and backward) is 1.29e12 FLOPs, 73 % of them D's and 27 % G's. D's "
        "FFN is the largest part (32 %), then D's attention (20 %). The embeddings take 40 % "
        "(20 % in each network), because Appendix E counts a lookup as a one-hot vector times "
        "the table, $2 d V$ per token; the hardware only copies a row."
        "\n\nDetails: G, 64 wide against D's 256, costs little in its blocks (4 %); its output "
        "head (3 %) scores the whole vocabulary at the 19 mask slots, D's (0.3 %) one logit at "
        "every position. Computed, not measured: `flops_by_part` below, drawn by `python "
        "teaching/figures.py` (2026-11-28).",
        "ELECTRA-Small's training FLOPs per step by part"), Figure(
        "docs/cpu_electra_vs_bert_glue_vs_flops.png",
        "GLUE against pre-training compute: this project's ELECTRA (34.9) and BERT (41.0), "
        "bottom left, against the paper's Table 1 in grey (all 8 tasks): ELECTRA-Small 79.9 and "
        "BERT-Small 75.1 at 1.4e18 FLOPs, 74.1 after 6 hours at 8.9e16. The star, "
        "\"ELECTRA-Small-OWT\", is the official code's expected result for its ELECTRA-Small "
        "recipe trained on OpenWebText, not on Table 1's Wikipedia and BooksCorpus, on the same "
        "5 tasks (dev, 77.6): a reference point, not one of Table 1's. BERT leads here, the opposite of the paper, "
        "at about 1/2,500 of the paper's compute, so the figure does not test the paper's claim."
        "\n\nDetails: the two runs did not have equal compute: each trained 45 minutes, and "
        "BERT's step costs less, so BERT reached 3.6e14 FLOPs against ELECTRA's 5.6e14 (64 %); "
        "the paper's smallest point used 160 times ELECTRA's. The runs: the laptop recipe (one "
        "block, 16-token sequences), 45 minutes each on one CPU core (2-core AMD EPYC, AVX2, "
        "float32, 2026-11-24; 5 GLUE tasks subsampled, median of 3 seeds). One reading, not "
        "tested: ELECTRA's D spent 1,000-2,000 of its 13,822 steps on the plateau (this "
        "project's name) answering \"real\", the majority class (the paper's D, in two-stage "
        "training without G's weights, \"would sometimes fail to learn at all beyond the "
        "majority class\", §3.2), and what it learned by the end (45 % of the replaced tokens "
        "caught) helped these tasks less than BERT's masked LM (37 % accuracy). Drawn by "
        "`python plot_results.py --results docs/glue_vs_flops/electra.json "
        "docs/glue_vs_flops/bert.json` (the runs' commands in docs/results.md).",
        "GLUE dev score against pre-training FLOPs")],
}


def step_table(data):
    """docs/one_step.json -> an HTML table: one row per tensor, one column per position."""
    rows = data["rows"]
    m = set(data["m"])
    out = ['<div class="table-scroll"><table class="step">']
    out.append("<tr><th>t</th>" + "".join(f"<td>{t}</td>" for t in range(len(rows["x"]))) + "</tr>")
    # the row names typeset as the paper writes them (is_replaced: this code's name)
    for name, label in [("x", "x"), ("m", "m"), ("x_masked", "x^masked"), ("x_hat", "x̂ ∼ p_G"),
                        ("x_corrupt", "x^corrupt"), ("is_replaced", None),
                        ("p_replaced", "1 − D(x^corrupt, t)")]:
        cells = []
        for t, v in enumerate(rows[name]):
            cls = []
            if t in m and name in ("m", "x_masked", "x_hat"):
                cls.append("m")
            if name in ("x_corrupt", "is_replaced") and rows["is_replaced"][t]:
                cls.append("replaced")
            attr = f' class="{" ".join(cls)}"' if cls else ""
            cells.append(f"<td{attr}>{html.escape(str(v))}</td>")
        head = "<code>is_replaced</code>" if label is None else mathml(label)
        out.append(f"<tr><th>{head}</th>{''.join(cells)}</tr>")
    out.append("</table></div>")
    return "\n".join(out)


# ----------------------------------------------------------------------------- the FLOPs picture

PARTS = ("embeddings", "attention", "FFN", "output head")
PART_COLOURS = {"embeddings": "#8c8c8c", "attention": "#4c78a8", "FFN": "#f58518",
                "output head": "#54a24b"}


def draw_flops_by_part(path):
    """docs/flops_by_part.png: ELECTRA-Small's training FLOPs per step by network and part
    (flops.flops_by_part, Appendix E's count), one bar per part, G's above D's."""
    import matplotlib
    matplotlib.use("Agg")                       # headless: never try to open a display
    import matplotlib.pyplot as plt
    from config import Config
    from flops import flops_by_part, train_flops_per_step

    cfg = Config()                              # the defaults are ELECTRA-Small (Table 6)
    parts, total = flops_by_part(cfg), train_flops_per_step(cfg)
    rows = [(net, part) for net in ("G", "D") for part in PARTS]
    fig, ax = plt.subplots(figsize=(5, 3.9), dpi=100)     # 500 px: legible on a phone
    y = list(range(len(rows)))[::-1]
    ax.barh(y, [parts[r] / 1e9 for r in rows], color=[PART_COLOURS[p] for _, p in rows])
    for yi, r in zip(y, rows):
        ax.text(parts[r] / 1e9 + 6, yi, f"{parts[r] / 1e9:,.0f} ({100 * parts[r] / total:.1f} %)",
                va="center", fontsize=8.5)
    ax.set_yticks(y, [f"{net}: {part}" for net, part in rows], fontsize=9)
    g = sum(v for (net, _), v in parts.items() if net == "G")
    ax.set_xlim(0, max(parts.values()) / 1e9 * 1.5)
    ax.set_xlabel("GFLOPs per step (forward + backward, batch 128 × 128)", fontsize=9)
    ax.tick_params(axis="x", labelsize=8.5)
    ax.set_title(f"ELECTRA-Small's training step by Appendix E:\n{total / 1e12:.2f}e12 FLOPs, "
                 f"G {100 * g / total:.0f} %, D {100 * (total - g) / total:.0f} % "
                 "(lookups counted dense)", fontsize=9.5)
    ax.axhline(3.5, color="#cccccc", lw=1)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":      # python teaching/figures.py: redraw docs/flops_by_part.png
    root = Path(__file__).resolve().parents[1]
    draw_flops_by_part(root / "docs" / "flops_by_part.png")
    print(f"wrote {root / 'docs' / 'flops_by_part.png'}")
