"""One point of the compute-vs-GLUE curve as one record (machinery; paper Table 1, Figure 1:
GLUE against pre-training FLOPs).

    python benchmarks/record_point.py --run out_gpu/pretrain --glue out_gpu/results/glue_gpu.json \\
        --command "bash benchmarks/gpu_measure.sh all 9" --out out_gpu/results/points.jsonl

benchmarks/gpu_measure.sh's `all` calls it last: it reads what the window made - the
pre-training run's checkpoint and log, the prepared corpus's meta.json, the fine-tuning results
(absent where no GLUE task ran) - and appends one JSON line to --out: the machine, the command,
the steps, the FLOPs (Appendix E's count, flops.py), the passes over the corpus, the steps per
second after compiling, the GLUE score per task and their mean. The line is a results record
as finetune_glue.py writes one (plot_results.py reads a .jsonl of them), with the window's own
fields beside it. docs/gpu-runs/points.jsonl holds the records committed so far, and `all`
reads it to choose the next point (`next_point`).
"""
import argparse
import datetime
import json
import sys
from pathlib import Path

if not __package__:   # run as a path: import from the project root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from plot_results import EQUAL_COMPUTE, InputError, load_log    # (the plot's own rule and reader)


def make_record(run, glue=None, command="", gpu=None, skipped=(), profile=None):
    """The record of one window's point: `run` the pre-training folder (ckpt.pt, log.jsonl),
    `glue` its fine-tuning results file or None, `skipped` the tasks that did not fit."""
    import torch
    from machinery.checkpoint import load_checkpoint
    from machinery.progress import off_plateau
    run = Path(run)
    ck = load_checkpoint(run / "ckpt.pt")
    cfg, log = ck["config"], load_log(run / "log.jsonl")
    meta = json.loads((Path(ck["data_dir"]) / "meta.json").read_text())
    tokens = cfg["batch_size"] * cfg["seq_len"] * ck["step"]
    last = log[-1]
    # the steps per second of the last logged interval: compiling and the first batches are
    # behind it (the loop logs tokens/s per interval)
    rate = last["tokens_per_s"] / (cfg["batch_size"] * cfg["seq_len"])
    left = next((r["step"] for r in log if off_plateau(r)), None)       # the trainer's rule
    device = ck.get("device", "")
    gpu = gpu or (torch.cuda.get_device_name(0) if "cuda" in device and
                  torch.cuda.is_available() else None)
    pretrain = dict(model=cfg["model"], objective="mlm" if cfg["model"] == "bert" else
                    cfg.get("objective", "electra"), flops=ck["flops"], steps=ck["step"],
                    elapsed_s=ck["elapsed_s"], setup_s=ck.get("setup_s"), device=gpu or device,
                    params=sum(v.numel() for v in ck["model"].values()),
                    target_flops=(ck.get("budget") or {}).get("flops"), steps_per_s=rate, corpus_tokens=meta["train_tokens"],
                    passes_over_corpus=tokens / meta["train_tokens"],
                    left_plateau_at_step=left, last_log=last)
    rec = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               gpu=gpu, torch=torch.__version__, command=command, checkpoint=str(run / "ckpt.pt"),
               pretrain=pretrain, tasks={}, glue_score=None, glue_tasks=[],
               tasks_skipped=list(skipped))
    if profile and Path(profile).exists():          # where the step's time went (top 10)
        prof = json.loads(Path(profile).read_text())
        rec["profile"] = dict(prof, top=prof["top"][:10])
    if glue and Path(glue).exists():
        g = json.loads(Path(glue).read_text())
        rec.update(tasks=g["tasks"], glue_score=g["glue_score"], glue_tasks=g["glue_tasks"],
                   finetune=g.get("finetune"))
    return rec


def next_point(records):
    """What the next window trains, from the records so far: BERT-Small to the FLOPs of the
    last ELECTRA point where no BERT run has aimed at them yet (the paper's comparison at equal
    compute, Table 1), else ELECTRA again. Returns ("electra", None) or ("bert", flops)."""
    electra = [r["pretrain"]["flops"] for r in records if r["pretrain"]["model"] == "electra"]
    # a BERT run counts for the FLOPs it reached, or aimed at (one stopped at the window's end)
    bert = [max(r["pretrain"]["flops"], r["pretrain"].get("target_flops") or 0)
            for r in records if r["pretrain"]["model"] == "bert"]
    if electra and not any(b * EQUAL_COMPUTE >= electra[-1] for b in bert):
        return "bert", electra[-1]
    return "electra", None


def read_records(path):
    """The records of a .jsonl file, [] where there is none."""
    p = Path(path)
    return [json.loads(l) for l in p.read_text().splitlines() if l.strip()] if p.exists() else []


def main(argv=None):
    p = argparse.ArgumentParser(description="Append one compute-vs-GLUE point to a .jsonl.")
    p.add_argument("--run", help="the pre-training folder (ckpt.pt, log.jsonl)")
    p.add_argument("--glue", default=None, help="its fine-tuning results (glue_gpu.json)")
    p.add_argument("--command", default="", help="the command that made the point")
    p.add_argument("--skipped", default="", help="comma list of tasks that did not fit")
    p.add_argument("--out", help="the .jsonl to append the record to")
    p.add_argument("--profile", default=None, help="the run's profile_top.json, if profiled")
    p.add_argument("--next", metavar="RECORDS", default=None,
                   help="only print the next point to train after these records: "
                        "'electra' or 'bert FLOPS'")
    args = p.parse_args(argv)
    if args.next is not None:
        model, flops = next_point(read_records(args.next))
        print(model if flops is None else f"{model} {flops:.6g}")
        return 0
    if not args.run or not args.out:
        p.error("give --run and --out (or --next RECORDS)")
    from machinery.checkpoint import CheckpointError
    try:
        rec = make_record(args.run, args.glue, args.command,
                          skipped=[t for t in args.skipped.split(",") if t],
                          profile=args.profile)
    except (OSError, KeyError, CheckpointError, InputError) as e:
        print(f"error: no point to record from {args.run} ({e}): pre-training left no "
              "checkpoint and log", file=sys.stderr)
        return 1
    with open(args.out, "a") as f:
        f.write(json.dumps(rec) + "\n")
    p_ = rec["pretrain"]
    glue = ", ".join(f"{t} {100 * r['median'][r['metric']]:.1f}" for t, r in rec["tasks"].items())
    print(f"point: {p_['model']} {p_['steps']:,} steps, {p_['flops']:.3g} FLOPs, "
          f"{p_['passes_over_corpus']:.2f} passes over {p_['corpus_tokens']:,} tokens | GLUE "
          + (f"{rec['glue_score']:.1f} over {len(rec['glue_tasks'])} tasks ({glue})"
             if rec["glue_tasks"] else "not measured (no task ran)") + f" -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
