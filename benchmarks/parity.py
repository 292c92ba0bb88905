"""Learning parity with Hugging Face's ELECTRA: same batches, same masks, same schedule.

Paper §2 (the objective) trained twice, side by side: our ELECTRA (objectives.py) and Hugging
Face's ElectraForMaskedLM + ElectraForPreTraining wired as hf_electra.HFElectra wires them (shared
embeddings, L_MLM + λ L_Disc). Both get the *same* batches from a prepared corpus, masked with
the same random positions (objectives.mask_tokens), the same config, optimizer and learning-rate
schedule, and their losses are printed side by side. Two independent implementations that
learn alike are evidence that neither has a bug that slows learning; a gap points at one.

    python benchmarks/parity.py --data data/wiki00_8k --size laptop --steps 300        # ~4 min, 2 cores
    python benchmarks/parity.py --data data/learnable --size tiny --steps 50 --log_every 10

What cannot be equal: the initial weights (each library draws its own; both BERT-style), the
generator's samples (each model samples from its own p_G), dropout masks, and HF's generator
projects all positions onto the vocabulary while ours projects the masked slots only (same
loss, more work). So curves match in trend and level, not digit for digit. Needs
`pip install transformers` (optional extra).
"""
import os
import sys
from pathlib import Path
import time
from dataclasses import replace

os.environ.setdefault("HF_HUB_OFFLINE", "1")           # HF builds from a config; never download
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch

if not __package__:   # run as a path (python benchmarks/parity.py): import from the project root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machinery import cli
from config import SIZES, Config, lr_at
from ablations import build_model
from batches import PretrainingData
from data import DataError
from objectives import mask_tokens
from train import make_optimizer, training_step


def run(args):
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        from benchmarks.hf_electra import HFElectra
        import transformers  # noqa: F401  (hf_electra imports it lazily; fail here, clearly)
    except ImportError:
        raise DataError("benchmarks/parity.py compares with Hugging Face: pip install transformers") from None
    data = PretrainingData(args.data, "train", 1, 8)      # just for meta.json's checks
    cfg = replace(Config(), **SIZES[args.size], vocab_size=data.meta["vocab_size"])
    data = PretrainingData(args.data, "train", cfg.batch_size, cfg.seq_len, args.seed)
    meta = data.meta
    special = (meta["pad_id"], meta["cls_id"], meta["sep_id"])
    device = torch.device("cpu")
    models = {"ours": build_model(cfg), "hf": HFElectra(cfg, attn="sdpa")}
    opts = {k: make_optimizer(m, cfg, device) for k, m in models.items()}
    print(f"parity: {args.size} ({cfg.disc.layers} x {cfg.disc.hidden}, batch "
          f"{cfg.batch_size}, seq {cfg.seq_len}, lr {cfg.lr:g}, {cfg.optimizer} Adam), "
          f"{args.steps} steps on {args.data}")
    print(f"{'step':>6} | {'L_MLM ours':>10} {'hf':>7} | {'L_Disc ours':>11} {'hf':>7} | "
          f"{'recall ours':>11} {'hf':>6}")
    sums, t0, rows = {}, time.time(), []
    for step in range(1, args.steps + 1):
        batch = data.next_batch()
        masked = mask_tokens(batch["x"], special, meta["mask_id"], cfg.n_slots, cfg.mask_prob,
                             generator=data.mask_generator())
        lr = lr_at((step - 1) / args.steps, cfg)
        for name, model in models.items():
            s = training_step(model, opts[name], dict(**batch, masked=masked), lr, cfg, device,
                              args.precision)
            acc = sums.setdefault(name, {"mlm": 0.0, "disc": 0.0, "caught": 0.0, "rep": 0.0})
            acc["mlm"] += float(s["mlm_loss"].detach())
            acc["disc"] += float(s["disc_loss"].detach())
            acc["caught"] += float(s["replaced_correct"][0])
            acc["rep"] += float(s["replaced_correct"][1])
        if step % args.log_every == 0 or step == args.steps:
            n = args.log_every if step % args.log_every == 0 else step % args.log_every
            r = {k: dict(mlm=v["mlm"] / n, disc=v["disc"] / n,
                         recall=v["caught"] / max(v["rep"], 1)) for k, v in sums.items()}
            rows.append((step, r))
            print(f"{step:6d} | {r['ours']['mlm']:10.4f} {r['hf']['mlm']:7.4f} | "
                  f"{r['ours']['disc']:11.4f} {r['hf']['disc']:7.4f} | "
                  f"{100 * r['ours']['recall']:10.1f}% {100 * r['hf']['recall']:5.1f}%",
                  flush=True)
            sums = {}
    print(f"done in {time.time() - t0:.0f} s")
    return rows


def main(argv=None):
    p = cli.Parser(description="Train ours and HF's ELECTRA on the same batches.")
    p.add_argument("--data", type=cli.nonempty, required=True,
                   help="prepared data folder (data.py)")
    p.add_argument("--size", choices=sorted(SIZES), default="laptop")
    p.add_argument("--steps", type=cli.positive_int, default=300)
    p.add_argument("--log_every", type=cli.positive_int, default=25)
    p.add_argument("--seed", type=cli.seed, default=0, help=f"0 to {cli.MAX_SEED}")
    p.add_argument("--threads", type=cli.threads, help=f"1 to {cli.MAX_THREADS}")
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto")
    args = p.parse_args(argv)
    try:
        run(args)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
