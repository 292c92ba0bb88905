"""What a run reports: the progress line, and whether D has left the "everything is real"
plateau (docs/plateau.md). train.py prints these from each log record; plot_results.py draws
the same rule. A log record is the dict machinery/run_log.py's log_record writes to log.jsonl.

The plateau is defined by recall: D catches few of the replaced tokens (under 10 %). L_Disc
falls early to about H(r), the loss of answering the share r of replaced tokens everywhere,
and may fall below it while recall stays flat: D ranks replaced tokens higher before it is
sure enough to say "replaced"."""
import time


# D is on the "everything is real" plateau while it catches under PLATEAU_RECALL of the replaced
# tokens (its L_Disc may meanwhile fall below the plateau's loss H(r)). It has left it when it
# catches at least that many *and* L_Disc is below PLATEAU_LOSS x H(r): recall alone is not
# enough, as a freshly initialised D flags tokens at random, which catches some. Over the laptop
# runs of docs/results.md, D first passed both marks at step 1,000-3,200 with one block and
# 1,800-6,600 with two, however many minutes those steps took; runs stopped sooner never did.
PLATEAU_RECALL, PLATEAU_LOSS = 0.10, 0.9


def off_plateau(r):
    """Whether the log record r shows D off the plateau (False for BERT: no D)."""
    recall, loss, h = r.get("disc_acc_replaced"), r.get("disc_loss"), r.get("disc_prior_entropy")
    return None not in (recall, loss, h) and recall >= PLATEAU_RECALL and loss < PLATEAU_LOSS * h


def left_plateau_line(r):
    """The line printed once, at the first log record that shows D off the plateau."""
    return (f"step {r['step']}: D has left the plateau - it flags "
            f"{100 * r['disc_acc_replaced']:.1f}% of the replaced tokens and L_Disc "
            f"{r['disc_loss']:.4f} is below {PLATEAU_LOSS:g} x the plateau's "
            f"{r['disc_prior_entropy']:.3f} (docs/plateau.md)")


def plateau_note(r):
    """A closing line for an ELECTRA run in which D never left the plateau (r: the last log
    record), so that a recall near 0 after a short run reads as "too few steps", not as a broken
    model. None for BERT, which has no D."""
    if r.get("disc_loss") is None or r.get("disc_prior_entropy") is None:
        return None
    recall = r.get("disc_acc_replaced") or 0.0
    return (f"note: D never left the plateau in this run (step {r['step']}: L_Disc "
            f"{r['disc_loss']:.4f} against the plateau's {r['disc_prior_entropy']:.3f}, recall "
            f"{100 * recall:.1f}%): a fresh model needs a few thousand steps to learn to read its "
            "neighbours (docs/plateau.md); give it more steps with "
            "--max_steps or --hours")


def progress_line(r):
    """`step N | L_MLM … | G acc … | L_Disc … (plateau H(r)) | D acc … | replaced:
    recall … precision … | …`, H(r) being the loss of the plateau (log_record)."""
    pct = lambda v: "  -  " if v is None else f"{100 * v:4.1f}%"
    disc = "" if r["disc_loss"] is None else \
        f" | L_Disc {r['disc_loss']:.4f}" + \
        (f" (plateau {r['disc_prior_entropy']:.3f})" if r.get("disc_prior_entropy") is not None
         else "") + f" | D acc {pct(r['disc_acc'])}" + \
        ("" if r.get("replaced_share") is None else              # D an MLM (Replace MLM ...)
         f" | replaced: recall {pct(r['disc_acc_replaced'])} "
         f"precision {pct(r.get('disc_precision_replaced'))}")
    eta = time.strftime("%H:%M:%S", time.gmtime(r["eta_s"])) if r["eta_s"] < 86400 else \
        f"{r['eta_s'] / 86400:.1f}d"
    # fp16: the steps skipped since the last line, their gradients overflowed (loss_scale.py)
    scaled = "" if r.get("skipped_steps") is None else \
        f" | fp16 skipped {r['skipped_steps']} (scale {r['loss_scale']:g})"
    return (f"step {r['step']} | L_MLM {r['mlm_loss']:.4f} | G acc {pct(r['gen_acc'])}{disc} | "
            f"{r['tokens_per_s']:,.0f} tok/s | mfu {pct(r['mfu'])} | {r['flops']:.2e} FLOPs | "
            f"ETA {eta}{scaled}")
