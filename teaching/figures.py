"""The Annotated ELECTRA's pictures: what a reader would rather see than read, on which page,
with captions that say which run and command made each (teaching/annotate.py places them).

Every one is generated from a real run, none drawn by hand: Figure 2 with the tensors of a real
checkpoint, one real step as a table of tokens (docs/one_step.json, written by
teaching/one_step.py; `step_table` turns it into HTML), the plateau of a real laptop run and GLUE
against compute. The images are committed, because their runs take minutes; the build copies
them.
"""
import html
from dataclasses import dataclass

from teaching.mathml import mathml


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
        "The paper's Figure 2 drawn from the tensors of the quick start's checkpoint (3,000 steps "
        "on the demo corpus, the run on the train.py page): the README quick start's one-block, "
        "128-wide laptop-size D on 16-token sequences with an 8,192-token vocabulary (config.py "
        "`SIZES[\"laptop\"]`), not ELECTRA-Small. The sentence is from the corpus's validation "
        "text; m is the seeded 15 % draw of a training step (seed 0), not chosen by hand. G "
        "samples \"copy\" for \"Return\" and \"class\" for \"over\"; D gives them P(replaced) "
        "0.77 and 0.91 and every original token 0.40 or less, so at its 0.5 threshold it is right "
        "on every token. Such a step was picked to show D at work, and said so: of the 103 short "
        "prose sentences of the validation text, each drawn at seed 0, D is right on every token "
        "in 21 and ranks every replaced token above every original one in 46; over all 103, "
        "replaced tokens average 0.43 and original ones 0.09 (this D catches 41.8 % of the "
        "replaced tokens at 0.5). This sentence was chosen by hand among the 21 for its two "
        "whole-word replacements (docs/annotated.md). At 3,000 steps G is still weak: its top "
        "guesses are frequent tokens. Drawn by `python analysis/inspect_discriminator.py figure2 "
        "--ckpt out/ckpt.pt \"Return the product of array elements over a given axis.\" --mask "
        "draw --seed 0`.",
        "Figure 2 with real tensors")],
    "objectives.py": [Figure(
        "docs/one_step.json",
        "One real step on one short sentence: the tensors of the mask step and of sample and "
        "corrupt, and D's verdict, from the quick start's checkpoint (3,000 steps, the run drawn "
        "on the train.py page): the step Figure 2 on the index draws, where the caption says how "
        "the sentence was picked. m is the seeded draw a training step makes (seed 0: 2 of the "
        "11 tokens). D's row: 0.77 and 0.91 on the two replaced tokens, 0.40 or less on every "
        "original one. A sample equal to the original would count as real (§2). Written by "
        "`python teaching/one_step.py --ckpt out/ckpt.pt` (the sentence and seed 0 are its "
        "defaults; command, checkpoint and date in docs/one_step.json).",
        "one step as a table")],
    "train.py": [Figure(
        "docs/plateau_run.png",
        "The plateau, from the log of the quick start's own run (`python electra_small.py "
        "--size laptop --max_steps 3000` on two threads throughout, which `--threads 2` "
        "repeats: one block of D, 8k vocabulary, the demo corpus; 2-core AMD EPYC, "
        "AVX512-BF16, bf16, beside other jobs, 2026-11-26; the default, which picks its "
        "threads while it runs, left the plateau at step 1,100 there). For a thousand "
        "steps D answers almost everything \"real\": it catches under 10 % of the replaced "
        "tokens (0.5 % at step 200, 6.2 % at 1,000; the low red line below), while L_Disc "
        "already falls under the plateau's loss $H(r)$, and under $0.9 H(r)$ by step "
        "700 (above): D ranks replaced tokens higher before it is sure enough to call them "
        "replaced. At step 1,300 recall passes 10 % and D leaves the plateau by the trainer's "
        "rule (recall 13.5 %, $L_Disc = 0.293$ below $0.9 H(r) = 0.325$), and recall climbs to "
        "41.8 % at 75.9 % precision by step 3,000. Drawn by `python plot_results.py --plateau "
        "out/log.jsonl`; the run in docs/annotated.md, the why in docs/plateau.md.",
        "L_Disc and D's recall against steps")],
    "flops.py": [Figure(
        "docs/cpu_electra_vs_bert_glue_vs_flops.png",
        "GLUE against pre-training compute: this project's ELECTRA and BERT, the laptop recipe "
        "trained for 45 minutes each on one CPU core (2-core AMD EPYC, AVX2, float32, 2026-11-24; "
        "5 GLUE tasks subsampled, median of 3 seeds: ELECTRA 34.9, this project's laptop-size BERT "
        "41.0), with the paper's Table 1 drawn for scale (all 8 tasks: ELECTRA-Small 79.9 and "
        "BERT-Small 75.1 at 1.4e18 FLOPs, ELECTRA-Small after 6 hours, 6.25 % of its training, "
        "74.1 at 8.9e16). Here BERT leads, the opposite of the paper, at about 1/2,500 of the "
        "paper's compute by the paper's own count (1/3,900 for BERT). ELECTRA's D first sat for "
        "1,000-2,000 of its 13,822 steps on what this project calls the plateau, answering "
        "\"real\" everywhere, the majority class (the paper's own D \"would sometimes fail to "
        "learn at all beyond the majority class\" in two-stage training when not started from G's "
        "weights, §3.2), and what it had learned by the end (which neighbour fits; 45 % of the "
        "replaced tokens caught) helped these tasks less than BERT's masked LM at 37 % accuracy: "
        "one reading, not tested here; the paper's smallest point used 160 times this compute, so "
        "the figure does not test its claim. Table 1 prints 1.4e18 for both models; the official "
        "code's flops_computation.py gives 1.294e18 for ELECTRA-Small and 1.419e18 for BERT-Small. "
        "Drawn by `python plot_results.py --results docs/glue_vs_flops/electra.json "
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
