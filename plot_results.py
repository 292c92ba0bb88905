"""Plot GLUE-vs-compute curves, training curves and a Table-1-style summary.

Reproduces, for our own (much smaller) runs, the presentation of the ELECTRA paper
(Clark et al., ICLR 2020):
  * glue_vs_flops.png  -- Figure 1 / Figure 4 (right): GLUE dev score vs pre-training FLOPs,
                          one line per (model, objective), incl. the Table 5 ablations,
                          with the paper's Table 1 small-model points drawn faintly in grey.
  * training_curves.png -- L_MLM, L_Disc, generator and discriminator accuracy vs FLOPs.
  * table1.md           -- Table 1: Model, Train FLOPs, Params, Time + hardware, GLUE, tasks.
  * plateau.png         -- (--plateau LOG) one ELECTRA run's L_Disc against the plateau's loss
                          and D's recall of replaced tokens over its steps (docs/plateau.md).

Usage (results JSONs come from finetune_glue.py, logs are the JSON Lines pre-training logs):
  python plot_results.py --results out/glue_*.json [--logs out/*/log.jsonl] [--out_dir plots/]
  python plot_results.py --results docs/gpu-runs/points.jsonl docs/glue_vs_flops/*.json
(a .jsonl of results is one results record a line: the GPU points benchmarks/gpu_measure.sh
appends, one a window)
  python plot_results.py --plateau out/log.jsonl [--out_dir plots/]
"""
import json
import os
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")  # headless: never try to open a display
import matplotlib.pyplot as plt  # noqa: E402

from machinery import cli  # noqa: E402
from machinery.atomic import atomic_write  # noqa: E402

# canonical GLUE order and display names (paper Table 8 column order; WNLI is never used)
TASKS = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte"]
TASK_NAMES = dict(cola="CoLA", sst2="SST-2", mrpc="MRPC", stsb="STS-B", qqp="QQP",
                  mnli="MNLI", qnli="QNLI", rte="RTE")
# names the paper's Table 5 uses for each pre-training objective ("mlm" is plain BERT)
SERIES_NAMES = {"electra": "ELECTRA", "electra15": "ELECTRA 15%", "replace_mlm": "Replace MLM",
                "all_tokens_mlm": "All-Tokens MLM", "mlm": "BERT"}
COLORS = {"ELECTRA": "tab:blue", "BERT": "tab:orange", "ELECTRA 15%": "tab:green",
          "Replace MLM": "tab:red", "All-Tokens MLM": "tab:purple"}
# paper Table 1 (GLUE dev, all 8 tasks): ELECTRA-Small at 6.25%..100% of training, BERT-Small
PAPER_ELECTRA = [(8.9e16, 74.1), (1.8e17, 76.0), (3.6e17, 77.7), (7.1e17, 79.0), (1.4e18, 79.9)]
PAPER_BERT = [(1.4e18, 75.1)]
# Per-task dev scores of a fully trained ELECTRA-Small: the official code's README ("Expected
# Results", google-research/electra): ELECTRA-Small-OWT, Table 6's model trained 1M steps on
# OpenWebText, dev sets, the median over many fine-tuning seeds. The paper itself gives per-task
# scores for the test sets only (Table 8); Table 1's GLUE averages all eight dev sets. Its FLOPs:
# the official flops_computation.py's count for 1M steps of ELECTRA-Small.
OFFICIAL_DEV = dict(cola=56.8, sst2=88.3, mrpc=87.4, stsb=86.8, qqp=88.3, mnli=78.9, qnli=87.9,
                    rte=68.5)
OFFICIAL_FLOPS = 1.29e18
# Two runs' FLOPs within this ratio count as equal compute.
EQUAL_COMPUTE = 1.05


class InputError(Exception):  # bad user input: one line on stderr, exit code 2
    pass


def series_name(model, objective):
    return SERIES_NAMES.get(objective, f"{model}/{objective}")


def _read_text(path):
    try:
        return pathlib.Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})")


def load_results(path):
    """Load and validate one finetune_glue.py results file."""
    hint = " — run finetune_glue.py first"
    try:
        r = json.loads(_read_text(path))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InputError(f"{path}: not valid JSON{hint}")
    return check_results(r, path)


def load_records(path):
    """Results files (.json, one record) or records (.jsonl, one a line: the GPU points)."""
    if not str(path).endswith(".jsonl"):
        return [load_results(path)]
    records = []
    for i, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            raise InputError(f"{path}:{i}: not valid JSON — one results record a line")
        if isinstance(r, dict) and r.get("glue_tasks") == [] and r.get("glue_score") is None:
            print(f"note: {path}:{i}: a point without GLUE (no task ran), not drawn",
                  file=sys.stderr)
            continue
        records.append(check_results(r, f"{path}:{i}"))
    if not records:
        raise InputError(f"{path}: no record with a GLUE score in it")
    return records


def hardware(r):
    """GPU or CPU: where a run pre-trained (its record's gpu, or its pretrain.device)."""
    dev = str(r.get("gpu") or r["pretrain"].get("device") or "")
    return "CPU" if not dev or "cpu" in dev.lower() else "GPU"


def check_results(r, path):
    """A results record's keys and types, or one InputError line naming `path`."""
    hint = " — run finetune_glue.py first"
    for key in ("tasks", "pretrain", "glue_score", "glue_tasks"):
        if not isinstance(r, dict) or key not in r:
            raise InputError(f'{path}: not a GLUE results file (no "{key}" key){hint}')
    p, num = r["pretrain"], (int, float)
    if not isinstance(p, dict) or any(k not in p for k in ("model", "objective", "flops")):
        raise InputError(f'{path}: "pretrain" needs "model", "objective" and "flops"{hint}')
    if not (isinstance(p["flops"], num) and isinstance(r["glue_score"], num)
            and isinstance(r["glue_tasks"], list) and isinstance(r["tasks"], dict)):
        raise InputError(f'{path}: wrong types (need numeric pretrain.flops and glue_score, '
                         'a glue_tasks list and a tasks object)')
    for name, t in r["tasks"].items():
        ok = isinstance(t, dict) and isinstance(t.get("median"), dict)
        if not ok or not isinstance(t["median"].get(t.get("metric")), num):
            raise InputError(f'{path}: task "{name}" has no median value for its main metric')
    return r


def load_log(path):
    """Load a JSON Lines pre-training log, skipping lines cut off by a run killed mid-write."""
    recs = []
    for i, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            print(f"warning: {path}:{i}: skipping line that is not valid JSON (truncated write?)",
                  file=sys.stderr)
            continue
        if isinstance(rec, dict) and isinstance(rec.get("flops"), (int, float)):
            recs.append(rec)
    if not recs:
        raise InputError(f'{path}: not a pre-training log (no JSON lines with a "flops" key)'
                         " — pass the log.jsonl written by pre-training")
    return recs


def log_labels(paths, logs):
    """Label each log by its model/objective; add the folder name when that is ambiguous."""
    base = [series_name(l[0]["model"], l[0]["objective"])
            if "model" in l[0] and "objective" in l[0] else None for l in logs]
    folders = [os.path.basename(os.path.dirname(os.path.abspath(p))) for p in paths]
    return [folder if b is None else b if base.count(b) == 1 else f"{b} ({folder})"
            for b, folder in zip(base, folders)]


def glue_figure(runs):
    """Figure 1 / Figure 4 (right) style: GLUE score vs pre-training FLOPs, each point labelled
    with its score, and how far below the paper's compute our largest run is. GPU and CPU runs
    are separate series where both are given; a line says whether ELECTRA and BERT were compared
    at equal compute; where every run averages the same tasks, a grey star marks what the
    official code's fully trained ELECTRA-Small scores on those tasks."""
    # 500 px wide: on a 420-px phone the page shows it whole (teaching/page_style.py scrolls a
    # picture sideways only below 80 % of its width), the paper's points on the right included
    fig, ax = plt.subplots(figsize=(5, 6))
    # paper reference first so our runs are drawn on top; faint grey, labelled "paper"
    for pts, label, marker in [(PAPER_ELECTRA, "paper: ELECTRA-Small (Table 1, 8 tasks)", "o"),
                               (PAPER_BERT, "paper: BERT-Small (Table 1, 8 tasks)", "s")]:
        ax.plot(*zip(*pts), marker=marker, color="grey", alpha=0.35, lw=1, ls="--", label=label)
    for (x, y), note in [(PAPER_ELECTRA[0], "6 h on 1 V100"), (PAPER_ELECTRA[-1], ""),
                         (PAPER_BERT[0], "")]:
        ax.annotate(f"{y:.1f}" + (f"\n{note}" if note else ""), (x, y), xytext=(0, -9 if y < 78
                    else 6), textcoords="offset points", ha="center", va="top" if y < 78
                    else "bottom", fontsize=7, color="dimgrey")
    groups = {}
    both = len({hardware(r) for r in runs}) > 1        # GPU and CPU runs: a series each
    for r in runs:
        p = r["pretrain"]
        groups.setdefault((series_name(p["model"], p["objective"]), hardware(r)), []).append(r)
    task_sets = {tuple(sorted(r["glue_tasks"], key=_task_key)) for r in runs}
    for (name, hw), rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: r["pretrain"]["flops"])
        label = f"{name}, {hw}" if both else name
        if len(task_sets) > 1:  # task sets differ between runs: say so per series
            label += " [" + " | ".join(sorted({_tasks_str(r["glue_tasks"]) for r in rs})) + "]"
        xs, ys = [r["pretrain"]["flops"] for r in rs], [r["glue_score"] for r in rs]
        ax.plot(xs, ys, marker="s" if name == "BERT" else "o", lw=2, color=COLORS.get(name),
                ls=":" if both and hw == "CPU" else "-", label=label)
        for x, y in zip(xs, ys):
            ax.annotate(f"{y:.1f}", (x, y), xytext=(7, 0), textcoords="offset points",
                        va="center", fontsize=8, color=COLORS.get(name, "black"))
    most = max(r["pretrain"]["flops"] for r in runs)
    if 0 < most < PAPER_ELECTRA[-1][0]:       # how far below the paper: say it on the figure
        ratio = float(f"{PAPER_ELECTRA[-1][0] / most:.2g}")       # two figures: "about"
        ax.annotate(f"our largest run: about 1/{ratio:,.0f} of the paper's "
                    f"{PAPER_ELECTRA[-1][0]:.1e} FLOPs", (0.02, 0.5), xycoords="axes fraction",
                    fontsize=8, color="dimgrey")
    if len(task_sets) == 1 and all(t in OFFICIAL_DEV for t in next(iter(task_sets))):
        tasks = next(iter(task_sets))
        ref = sum(OFFICIAL_DEV[t] for t in tasks) / len(tasks)
        ax.plot([OFFICIAL_FLOPS], [ref], marker="*", ms=11, color="grey", ls="none",
                label=f"official code: ELECTRA-Small-OWT, dev, these {len(tasks)} tasks")
        ax.annotate(f"{ref:.1f}", (OFFICIAL_FLOPS, ref), xytext=(-8, 0), ha="right",
                    textcoords="offset points", va="center", fontsize=7, color="dimgrey")
    for i, note in enumerate(compute_notes(groups)):  # equal compute, or say that it is not
        ax.annotate(note, (0.02, 0.42 - 0.06 * i), xycoords="axes fraction", fontsize=8,
                    color="dimgrey")
    ax.set_ylim(top=max(85, ax.get_ylim()[1]))      # room for the paper's labels
    ax.set_xscale("log")
    ax.set_xlabel("Pre-train FLOPs (the paper's count, Appendix E)")
    ax.set_ylabel("GLUE dev score")
    tasks = next(iter(task_sets))
    cover = (f"{len(tasks)} of 8 tasks: {_tasks_str(tasks)}" if len(task_sets) == 1
             else "task sets differ between runs (see legend)")
    # honesty: our score may average fewer tasks than the paper's 8, so it is not comparable 1:1
    ax.set_title(f"GLUE score vs pre-training compute\nours: {cover};\npaper: all 8 tasks",
                 fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    # below the axes: inside, it would cover the paper's points at the right edge
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=1,
              frameon=False)
    fig.tight_layout()
    return fig


def compute_notes(groups):
    """For each hardware with both ELECTRA and BERT runs: whether their largest runs had equal
    compute (within EQUAL_COMPUTE), in one line."""
    notes = []
    for hw in sorted({hw for _, hw in groups}):
        most = {name: max(r["pretrain"]["flops"] for r in rs)
                for (name, h), rs in groups.items() if h == hw and name in ("ELECTRA", "BERT")}
        if len(most) == 2:
            e, b = most["ELECTRA"], most["BERT"]
            where = f"{hw}: " if len({h for _, h in groups}) > 1 else ""
            notes.append(f"{where}ELECTRA and BERT at equal compute ({e:.2g} FLOPs)"
                         if max(e, b) / min(e, b) <= EQUAL_COMPUTE else
                         f"{where}not equal compute: ELECTRA {e:.2g} FLOPs, BERT {b:.2g}")
    return notes


def curves_figure(logs, labels):
    """L_MLM, L_Disc, generator / discriminator accuracy vs FLOPs, one line per log."""
    panels = [("mlm_loss", "L_MLM (generator)"), ("disc_loss", "L_Disc (discriminator)"),
              ("gen_acc", "generator MLM accuracy"), ("disc_acc", "discriminator accuracy")]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    for ax, (key, title) in zip(axes.flat, panels):
        for recs, label in zip(logs, labels):
            # BERT logs carry null discriminator values: drop them; flops<=0 cannot go on log-x
            pts = [(r["flops"], r[key]) for r in recs
                   if isinstance(r.get(key), (int, float)) and r["flops"] > 0]
            if pts:
                ax.plot(*zip(*pts), lw=1.5, label=label, color=COLORS.get(label))
        ax.set_xscale("log")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("Pre-train FLOPs")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_lines():
            ax.legend(fontsize=8)
        else:  # e.g. only BERT logs were given: they have no discriminator
            ax.text(0.5, 0.5, "no data in these logs", ha="center", transform=ax.transAxes)
    fig.tight_layout()
    return fig


def plateau_figure(recs, label):
    """The plateau over one ELECTRA run's steps (docs/plateau.md): D's recall and precision of
    replaced tokens, and L_Disc against H(r), the loss of answering r (the share of replaced
    tokens) everywhere. On the
    plateau D catches few replaced tokens (recall under 10 %); L_Disc meanwhile falls to about
    H(r) and may sink below it while recall stays flat, as D ranks replaced tokens higher before
    it is sure enough to flag them. D has left it when recall rises past 10 % with L_Disc under
    0.9 H(r) (machinery/progress.py)."""
    pts = [r for r in recs if isinstance(r.get("step"), int)
           and isinstance(r.get("disc_loss"), (int, float))
           and isinstance(r.get("disc_prior_entropy"), (int, float))]
    if not pts:
        raise InputError(f"{label}: no L_Disc or plateau loss in this log (a BERT run, or a "
                         "log older than the plateau's loss) - pass an ELECTRA run's log.jsonl")
    from machinery.progress import PLATEAU_LOSS, PLATEAU_RECALL, off_plateau   # the trainer's rule
    steps = [r["step"] for r in pts]
    left = next((r["step"] for r in pts if off_plateau(r)), None)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 5.2), sharex=True)
    top.plot(steps, [r["disc_loss"] for r in pts], lw=1.8, color="tab:blue", label="L_Disc")
    top.plot(steps, [r["disc_prior_entropy"] for r in pts], lw=1.5, ls="--", color="grey",
             label="the plateau's loss H(r): answering r everywhere")
    top.plot(steps, [PLATEAU_LOSS * r["disc_prior_entropy"] for r in pts], lw=1, ls=":",
             color="grey", label=f"{PLATEAU_LOSS:g} H(r): off the plateau below this ...")
    top.set_ylabel("loss")
    top.set_title(f"D on and off the plateau: {label}", fontsize=10)
    for key, name, color in [("disc_acc_replaced", "recall: replaced tokens D catches", "tab:red"),
                             ("disc_precision_replaced", "precision: flagged tokens really "
                              "replaced", "tab:orange")]:
        xy = [(r["step"], 100 * r[key]) for r in pts if isinstance(r.get(key), (int, float))]
        if xy:
            bottom.plot(*zip(*xy), lw=1.8 if key == "disc_acc_replaced" else 1.2, color=color,
                        label=name)
    bottom.axhline(100 * PLATEAU_RECALL, lw=1, ls=":", color="grey",
                   label=f"... and above {100 * PLATEAU_RECALL:g} % recall")
    if left is not None:                # the first logged step off the plateau, on both panels
        for ax in (top, bottom):
            ax.axvline(left, lw=1, color="tab:green")
        bottom.annotate(f"off the plateau: step {left:,}", (left, 92), xytext=(6, 0),
                        textcoords="offset points", fontsize=8, color="tab:green", va="top")
    bottom.set_ylabel("%")
    bottom.set_ylim(0, 100)
    bottom.set_xlabel("step")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _task_key(t):
    return TASKS.index(t) if t in TASKS else len(TASKS)


def _tasks_str(tasks):
    return ", ".join(TASK_NAMES.get(t, t) for t in sorted(tasks, key=_task_key))


def _fmt_time(r):
    s, dev = r["pretrain"].get("elapsed_s"), r["pretrain"].get("device")
    t = ("?" if not isinstance(s, (int, float)) else f"{s / 60:.0f}m" if s < 3600
         else f"{s / 3600:.1f}h" if s < 172800 else f"{s / 86400:.1f}d")
    return f"{t} on 1 {dev}" if dev else t


def table1(runs):
    """Markdown table in the form of the paper's Table 1, one row per results file."""
    runs = sorted(runs, key=lambda r: (r["pretrain"]["model"], r["pretrain"]["objective"],
                                       r["pretrain"]["flops"]))
    tasks = sorted({t for r in runs for t in r["tasks"]}, key=_task_key)
    head = ["Model", "Train FLOPs", "Params", "Time + hardware", "GLUE"]
    metric = lambda t: "/".join(sorted({r["tasks"][t]["metric"] for r in runs if t in r["tasks"]}))
    head += [f"{TASK_NAMES.get(t, t)} ({metric(t)})" for t in tasks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        p = r["pretrain"]
        name = series_name(p["model"], p["objective"])
        if isinstance(p.get("steps"), int):
            steps = p["steps"]
            name += (f" ({steps // 1000}k steps)" if steps >= 10_000 and steps % 1000 == 0
                     else f" ({steps:,} steps)")
        params = f"{p['params'] / 1e6:.1f}M" if isinstance(p.get("params"), (int, float)) else "?"
        row = [name, f"{p['flops']:.1e}", params, _fmt_time(r), f"{r['glue_score']:.1f}"]
        for t in tasks:
            tr = r["tasks"].get(t)
            row.append(f"{100 * tr['median'][tr['metric']]:.1f}" if tr else "–")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + ("\n\nGLUE = mean over each run's glue_tasks of the median (over "
                               "seeds) main metric x100, on the dev sets.\n")


def main(argv=None):
    ap = cli.Parser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", nargs="*", type=cli.nonempty, default=[],
                    help="JSON(s) from finetune_glue.py, or .jsonl files of such records")
    ap.add_argument("--logs", nargs="*", type=cli.nonempty, default=[], help="pre-training JSON Lines log(s)")
    ap.add_argument("--plateau", type=cli.nonempty, default=None, metavar="LOG",
                    help="also (or only) draw plateau.png from one ELECTRA run's log.jsonl")
    ap.add_argument("--out_dir", type=cli.out_folder, default="plots",
                    help="folder for the figures and table1.md (created if needed)")
    args = ap.parse_args(argv)
    try:  # validate every input before writing anything: no partial outputs on bad input
        if not args.results and not args.plateau:
            raise InputError("no results files given — pass --results R.json [R.json ...]"
                             " (or --plateau LOG)")
        runs = [r for p in args.results for r in load_records(p)]
        logs = [load_log(p) for p in args.logs]
        figs = {}
        if args.plateau:
            plog = load_log(args.plateau)
            figs["plateau.png"] = plateau_figure(plog, log_labels([args.plateau], [plog])[0])
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        plt.close("all")
        return 2
    os.makedirs(args.out_dir, exist_ok=True)
    if runs:
        figs["glue_vs_flops.png"] = glue_figure(runs)
    if logs:
        figs["training_curves.png"] = curves_figure(logs, log_labels(args.logs, logs))
    elif runs:
        print("note: no --logs given, skipping training_curves.png", file=sys.stderr)
    for name, fig in figs.items():
        atomic_write(os.path.join(args.out_dir, name), lambda p: fig.savefig(p, format="png"))
        plt.close(fig)
    if not runs:                        # --plateau alone: the picture, no table
        print(f"wrote {os.path.join(args.out_dir, 'plateau.png')}")
        return 0
    table = table1(runs)
    atomic_write(os.path.join(args.out_dir, "table1.md"),
                  lambda p: pathlib.Path(p).write_text(table, encoding="utf-8"))
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
