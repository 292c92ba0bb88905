"""Fine-tuning speed: the eager path against static shapes (finetune_glue.py --compile),
side by side on one GLUE task, in one process (machinery; no paper section).

Both fine-tune the same model on the same batches, one epoch per run, alternating eager and
static for --rounds rounds, so that a busy machine slows both alike. Reports the training
examples/s of each run (finetune_glue.py's own figure), the whole run's seconds (with the dev
evaluation) and the seconds compiling the buckets took, before any of it.

    python benchmarks/finetune_speed.py --ckpt out/ckpt.pt --glue_dir glue --task rte
    python benchmarks/finetune_speed.py --ckpt out/ckpt.pt --glue_dir glue --task rte \\
        --max_train 320 --backend aot_eager --threads 1 --json speed.json

--backend aot_eager traces the same graphs without generating code: quick to compile, eager
kernels, so it measures what the padding costs, not what compiling gains. inductor (default)
generates code: on a CPU with a C++ compiler, or CUDA graphs on a GPU.
"""
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import finetune_glue as fg  # noqa: E402
from glue import TASKS, GlueError, both_orders, encode_examples, read_task  # noqa: E402
from machinery import cli, glue_cli  # noqa: E402
from machinery.checkpoint import CheckpointError  # noqa: E402
from machinery.device import DeviceError, pick_device, pick_precision, refuse_unavailable  # noqa: E402
from machinery.static_shapes import DEFAULT_BUCKETS, bucket_list  # noqa: E402


def parse_args(argv=None):
    p = cli.Parser(description="Fine-tuning examples/s, eager against static shapes "
                   "(finetune_glue.py --compile), alternating on one GLUE task.")
    p.add_argument("--ckpt", type=cli.nonempty, required=True, help="pre-training checkpoint")
    p.add_argument("--glue_dir", type=cli.nonempty, required=True, help="GLUE folder")
    p.add_argument("--task", choices=list(TASKS), default="rte")
    p.add_argument("--max_train", type=cli.positive_int,
                   help="use at most N training examples (a fixed random subset)")
    p.add_argument("--rounds", type=cli.positive_int, default=2,
                   help="pairs of runs, eager then static, one epoch each (default 2)")
    p.add_argument("--backend", choices=["inductor", "aot_eager"], default="inductor")
    p.add_argument("--buckets", type=bucket_list,
                   help=f"default {','.join(map(str, DEFAULT_BUCKETS))}")
    p.add_argument("--device", choices=["cpu", "cuda", "mps"], help="default: best available")
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto")
    p.add_argument("--threads", type=cli.threads, help="CPU threads for PyTorch")
    p.add_argument("--json", type=cli.out_file, help="write the figures to this file too")
    args = p.parse_args(argv)
    refuse_unavailable(p, args.device)
    return args


def main(argv=None):
    args = parse_args(argv)
    try:
        return run(args)
    except (GlueError, CheckpointError, DeviceError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def run(args):
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    precision, autocast = pick_precision(args.precision, device)
    pre = fg.load_pretrained(args.ckpt)
    state, shapes, tok, info = pre
    hp = fg.HPARAMS
    max_len = min(hp["max_len"], shapes["max_len"])
    train, devs = read_task(args.glue_dir, args.task)
    if args.max_train and len(train) > args.max_train:        # as finetune_glue.py
        keep = np.random.default_rng(0).permutation(len(train))[:args.max_train]
        train = [train[i] for i in sorted(keep)]
    if TASKS[args.task].both_orders:
        train = both_orders(train)
    data = (encode_examples(tok, train, max_len),
            {k: encode_examples(tok, v, max_len) for k, v in devs.items()})
    n_dev = sum(len(v[0]) for v in data[1].values())
    head = (f"{args.task}: {len(train)} training examples (1 epoch a run), {n_dev} dev | "
            f"{info['params'] / 1e6:.2f}M-parameter encoder | {device}, {precision}, "
            f"{torch.get_num_threads()} thread(s) | backend {args.backend}")
    print(head, flush=True)
    static, compile_s = glue_cli.compile_task(fg, args.task, pre, device, autocast, max_len,
                                              args.buckets or DEFAULT_BUCKETS, hp, args.backend)
    if static is None:
        print("error: the buckets did not compile (the line above says why)", file=sys.stderr)
        return 1
    runs = {"eager": [], "static": []}
    for r in range(1, args.rounds + 1):
        for kind in runs:
            lines = []
            t0 = time.time()
            fg.finetune(args.task, data, pre, 0, device, autocast, 1, hp,
                        log=lambda s, **k: lines.append(s),
                        static=static if kind == "static" else None)
            speed = float(lines[-1].rsplit("|", 1)[1].split()[0])
            runs[kind].append(dict(train_examples_per_s=speed, run_s=round(time.time() - t0, 2)))
            print(f"round {r} {kind:6}: {speed:8.1f} training examples/s | whole run "
                  f"(build, train, dev) {time.time() - t0:6.1f} s", flush=True)
    med = {k: statistics.median(x["train_examples_per_s"] for x in v) for k, v in runs.items()}
    print(f"median training examples/s: eager {med['eager']:.1f}, static {med['static']:.1f} "
          f"(x{med['static'] / med['eager']:.2f}); compiling {2 * len(static.buckets)} graphs "
          f"(lengths {','.join(map(str, static.buckets))}) took {compile_s:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(
            task=args.task, train_examples=len(train), dev_examples=n_dev, device=str(device),
            precision=precision, threads=torch.get_num_threads(), backend=args.backend,
            buckets=static.buckets, compile_s=compile_s, runs=runs, median=med,
            command=" ".join(sys.argv)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
