"""finetune_glue.py's command line (machinery; no paper section - read finetune_glue.finetune
first: this file only decides what it runs, on what, and where the results go).

    python finetune_glue.py --ckpt out/ckpt.pt --glue_dir glue --tasks rte,mrpc --seeds 10

In the order a run takes:

- The flags (`parse_args`). Each flag names its kind of value (machinery/cli.py), so a bad one is
  refused in one line before anything is read; so is a combination that cannot work
  (--compile_cache with --no-compile, --buckets where nothing is compiled) and a GPU that is
  not there.
- The checks (`run`), made before any training, so that a mistake costs seconds, not hours:
  the task names, the GLUE folder and which tasks it holds, the checkpoint, a results file that
  could not be written, and every task's files (read and encoded in full).
- The tasks in turn: with --compile, each task's graphs are compiled first (`compile_task`,
  machinery/static_shapes.py) and reused by all its seeds; then `--seeds` runs of
  finetune_glue.finetune, and the median over them (glue.summarize: §3.1 reports the median of
  10).
- The table, the GLUE score (the mean of the tasks' medians) and one results JSON, written so
  that a reader never sees half of it (`write_json_atomic`).

Every refusal is one `error:` line and exit status 1 (2 for a bad flag, argparse's); Ctrl-C
is one line and 130, with no results written.

On a 2-core CPU shared with other jobs use --threads 1: PyTorch's threads otherwise wait for
each other at every op (`run` says so when it finds the machine busy).

finetune_glue.main hands this file the two core files it drives, as arguments `fg`
(finetune_glue.py: Table 7's values, the checkpoint's encoder, one fine-tuning run) and `glue`
(glue.py: the tasks, their files and metrics): machinery imports nothing of the core
(tests/test_layout.py).
"""
import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

from machinery import cli, compile_cache
from machinery.atomic import atomic_write
from machinery.checkpoint import CheckpointError
from machinery.device import PRECISIONS, DeviceError, compile_refusal, pick_device, \
    pick_precision, refuse_unavailable
from machinery.static_shapes import DEFAULT_BUCKETS, bucket_lengths, bucket_list, \
    compiled_shapes


def main(argv, fg, glue):
    """The whole command: the flags, then `run`; an error any step raises is one line and an
    exit status, never a traceback. fg, glue: the modules finetune_glue and glue."""
    args = parse_args(argv, glue.TASKS)
    try:
        return run(args, fg, glue)
    except (glue.GlueError, CheckpointError, DeviceError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except NotImplementedError as e:    # a student copy with a part still blank: one line
        print(cli.blank_part_or_raise(e), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: no results written", file=sys.stderr)
        return 130


def parse_args(argv, tasks):
    """The flags, checked (tasks: glue.TASKS, named in --help); a bad one exits with one line."""
    p = cli.Parser(description="Fine-tune a pre-trained ELECTRA/BERT-Small "
                   "checkpoint on GLUE (Table 7 hyperparameters).")
    p.add_argument("--ckpt", type=cli.nonempty,
                   help="pre-training checkpoint (ckpt.pt from electra_small.py)")
    p.add_argument("--glue_dir", type=cli.nonempty,
                   help="GLUE folder in the standard layout (CoLA/, SST-2/, ...)")
    p.add_argument("--tasks", help=f"comma list of {','.join(tasks)} (default, or empty: all "
                   "present)")
    p.add_argument("--seeds", type=cli.positive_int, default=1,
                   help="fine-tuning runs per task (paper: 10)")
    p.add_argument("--out", type=cli.nonempty,
                   help="results JSON (default: next to the checkpoint)")
    p.add_argument("--device", choices=["cpu", "cuda", "mps"], help="default: best available")
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="auto: bf16 where the hardware has native bf16, fp16 with loss scaling "
                   "on GPUs of sm_70-sm_75 (V100, T4, RTX 20xx), else fp32 (machinery/device.py)")
    p.add_argument("--download", type=cli.out_folder, metavar="DIR",
                   help="download GLUE into DIR first")
    p.add_argument("--max_train", type=cli.positive_int,
                   help="use at most N training examples per task")
    p.add_argument("--epochs", type=cli.positive_int,
                   help="override Table 7's epochs (quick runs only)")
    p.add_argument("--lr", type=cli.float_range(0, 1, accepts="a learning rate in (0, 1), e.g. "
                                                "3e-4"),
                   help="override Table 7's 3e-4 (Appendix B: the paper searched 1e-4, 2e-4, "
                   "3e-4 and, as printed, 5e-3 for Small)")
    p.add_argument("--optimizer", choices=["official", "torch"], default="official",
                   help="official: Adam without bias correction, as the official code; "
                        "torch: AdamW")
    p.add_argument("--layer_decay_rule", choices=["official", "stated"], default="official",
                   help="official: the official code's exponents (top block 0.64 lr); "
                        "stated: top block 0.8 lr (layerwise_param_groups explains)")
    p.add_argument("--threads", type=cli.threads,
                   help=f"CPU threads for PyTorch (1 to {cli.MAX_THREADS})")
    p.add_argument("--compile", action=argparse.BooleanOptionalAction,
                   help="static shapes, for GPU speed: each batch padded to a length of "
                   "--buckets, the last one filled up with rows of weight 0, each length one "
                   "torch.compile'd graph (on a GPU a CUDA graph), evaluation likewise; the "
                   "padding changes no result (docs/finetuning.md). Default: on with CUDA, off "
                   "elsewhere (--no-compile: eager, each batch padded to its longest)")
    p.add_argument("--buckets", type=bucket_list,
                   help="with --compile: the sequence lengths a batch is padded up to "
                   f"(default {','.join(map(str, DEFAULT_BUCKETS))}; the model's max length "
                   "is always one)")
    p.add_argument("--compile_cache", type=cli.out_file, metavar="FILE",
                   help="with --compile: load torch.compile's artifacts from FILE before "
                   "compiling and save them there after each task's graphs, so that a fresh "
                   "machine skips most of the compiling (machinery/compile_cache.py)")
    args = p.parse_args(argv)
    refuse_unavailable(p, args.device)     # a GPU that is not there: one line now
    # Flags that each parse but cannot work together: refused now, in one line, rather than
    # silently ignored (a --buckets that changes nothing would mislead whoever reads the log).
    if args.compile_cache and args.compile is False:
        p.error("--compile_cache keeps what --compile compiles: drop --no-compile, or leave "
                "--compile_cache out")
    if args.buckets and args.compile is not True and (args.compile is False or
                                                     pick_device(args.device).type != "cuda"):
        p.error("--buckets: only with --compile (the eager path pads each batch to its own "
                "longest example)")
    return args


def run(args, fg, glue):
    """Check everything, fine-tune each task `--seeds` times, print the table and the GLUE
    score, write the results JSON; 0 when done. Raises glue.GlueError (and the checkpoint's
    and the device's errors) for what `main` prints as one line."""
    TASKS = glue.TASKS
    # The task names: "rte,MRPC, rte" is rte and mrpc, in that order, once each.
    names = list(dict.fromkeys(t.strip().lower() for t in (args.tasks or "").split(",")
                               if t.strip()))
    unknown = [t for t in names if t not in TASKS]
    if unknown:
        raise glue.GlueError(f"unknown task {unknown[0]!r}; choose from {', '.join(TASKS)}")
    # --download alone fetches the data and stops; with --ckpt it goes on to fine-tune on it.
    if args.download:
        glue.download_glue(args.download, names or list(TASKS))
        if not args.ckpt:
            return 0
        args.glue_dir = args.glue_dir or args.download
    if not args.ckpt or not args.glue_dir:
        raise glue.GlueError("give --ckpt and --glue_dir (or --download DIR)")
    glue_dir = Path(args.glue_dir)
    if not glue_dir.is_dir():
        raise glue.GlueError(f"{glue_dir}: no such GLUE folder")
    # No --tasks: every task whose folder is there, and a line naming those skipped.
    if not names:
        names = [t for t in TASKS if (glue_dir / TASKS[t].folder).is_dir()]
        skipped = [t for t in TASKS if t not in names]
        if not names:
            raise glue.GlueError(f"{glue_dir}: holds none of the GLUE task folders "
                                 f"{', '.join(t.folder for t in TASKS.values())}")
        if skipped:
            print(f"tasks: {', '.join(names)} (skipped, no folder in {glue_dir}: "
                  f"{', '.join(skipped)})")
    # Table 7's values, less what the flags override (a copy: fg.HPARAMS itself never changes).
    hp = dict(fg.HPARAMS, lr=args.lr or fg.HPARAMS["lr"], optimizer=args.optimizer,
              decay_rule=args.layer_decay_rule)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    # On a busy CPU, PyTorch's threads wait for each other: say so, and what to do about it.
    if device.type == "cpu" and not args.threads and torch.get_num_threads() > 1 and \
            hasattr(os, "getloadavg") and os.getloadavg()[0] > (os.cpu_count() or 1) - 0.5:
        print(f"note: this machine is busy (load {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
              f"cores). PyTorch's {torch.get_num_threads()} threads wait for each other at every "
              "op when cores are shared, which can be 10-100x slower: try --threads 1")
    precision, autocast = pick_precision(args.precision, device)
    pre = fg.load_pretrained(args.ckpt)
    path = Path(args.out) if args.out else \
        Path(args.ckpt).parent / f"glue_{Path(args.ckpt).stem}.json"
    # Fail now, not after hours of fine-tuning, and create nothing: the nearest existing
    # folder above the results must be writable.
    above = next(p for p in (path.parent, *path.parent.parents) if p.exists())
    if not (above.is_dir() and os.access(above, os.W_OK)):
        raise glue.GlueError(f"{path.parent}: cannot write the results there")
    if path.is_dir():                       # else it would fail only after the fine-tuning
        raise glue.GlueError(f"--out {path}: is a folder; give a file name such as "
                             f"{path / 'glue.json'}")
    state, shapes, tok, info = pre
    max_len = min(hp["max_len"], shapes["max_len"])
    # Compiled (static shapes) by default on CUDA only; a GPU torch.compile cannot compile
    # for is said in one line, and the run goes on eagerly.
    compiled = device.type == "cuda" if args.compile is None else args.compile
    refusal = compile_refusal(device, precision) if compiled else None
    if refusal:
        print(refusal)
        compiled = False
    buckets = bucket_lengths(args.buckets or DEFAULT_BUCKETS, max_len)
    print(f"{info['model']} checkpoint {args.ckpt}: step {info['steps']}, encoder "
          f"{info['params'] / 1e6:.2f}M params | device {device}, {precision}, " +
          (f"compiled, buckets {','.join(map(str, buckets))}" if compiled else "eager"))

    data = {}                    # read and check every task before training any (fail early)
    for name in names:
        train, devs = glue.read_task(glue_dir, name)
        if args.max_train and len(train) > args.max_train:     # a fixed random subset
            keep = np.random.default_rng(0).permutation(len(train))[:args.max_train]
            train = [train[i] for i in sorted(keep)]
        if TASKS[name].both_orders:
            train = glue.both_orders(train)
        data[name] = (glue.encode_examples(tok, train, max_len),
                      {k: glue.encode_examples(tok, v, max_len) for k, v in devs.items()})

    results, compile_s = {}, {}
    if compiled and args.compile_cache:         # a fresh machine compiles less
        compile_cache.load(args.compile_cache, device)
    for name in names:
        epochs = args.epochs or TASKS[name].epochs
        static = None
        if compiled:            # one compile per task, reused by every seed
            static, compile_s[name] = compile_task(fg, name, pre, device, autocast, max_len,
                                                   buckets, hp)
            if args.compile_cache:
                compile_cache.save(args.compile_cache, device)
        runs = [fg.finetune(name, data[name], pre, s, device, autocast, epochs, hp,
                            static=static, precision=precision) for s in range(args.seeds)]
        results[name] = glue.summarize(runs, TASKS[name].metric)      # the median over seeds

    # The GLUE score: the mean over the tasks run of each one's median, in percent.
    score = float(np.mean([100 * r["median"][r["metric"]] for r in results.values()]))
    out = dict(checkpoint=str(args.ckpt), pretrain=info, tasks=results,
               glue_score=round(score, 2), glue_tasks=names,
               finetune=dict(hp, seeds=args.seeds, precision=precision, device=str(device),
                             max_len=max_len, max_train=args.max_train, epochs=args.epochs,
                             compile=compiled, buckets=list(buckets) if compiled else None,
                             compile_s=compile_s))
    glue.print_table(results)
    missing = [t for t in TASKS if t not in names]
    print(f"GLUE score {score:.1f}: mean over {len(names)} of 8 tasks ({', '.join(names)})"
          + (f"; not run: {', '.join(missing)}" if missing else ""))
    try:
        write_json_atomic(path, out)
    except OSError as e:
        raise glue.GlueError(f"{path}: cannot write the results ({e.strerror or e})") from None
    print(f"wrote {path}")
    return 0


def compile_task(fg, name, pre, device, autocast, max_len, buckets, hp, backend="inductor"):
    """(StaticShapes with its graphs compiled, seconds it took) for one task, or (None, None)
    where torch.compile fails (machinery/static_shapes.py `compiled_shapes`). fg: the module
    finetune_glue, whose classifier the graphs are compiled for."""
    state, shapes, tok, _ = pre
    task = fg.TASKS[name]                     # glue.TASKS, as finetune_glue.py imports it
    n_out = 1 if task.regression else len(task.labels)
    return compiled_shapes(name, lambda: fg.build_classifier(state, shapes, n_out, hp["dropout"]),
                           buckets, max_len, hp["batch_size"], device, task.regression,
                           autocast, tok.pad_id, backend)


def write_json_atomic(path, obj):
    """A temporary file, then a rename (machinery/atomic.py), so that a reader never sees half
    a results file; the folder is made if need be. An OSError is the caller's to report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(obj, indent=1)))
