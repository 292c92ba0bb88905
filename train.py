"""The pre-training loop (paper Appendix A, Table 6), read top to bottom.

`electra_step` first: one step of ELECTRA in the order and the names of Figure 2 and §2. Then
`train`: data, model, optimizer, then the loop of batch, step, log line and checkpoint. BERT,
ELECTRA and every ablation answer the same calls (`objectives.Pretraining`).

Appendix A adds two choices to BERT's recipe. Masking is dynamic, "decided on-the-fly": every
step draws fresh positions m for its batch (`masked_batch`), instead of masks fixed once in
preprocessing. And there is no next-sentence prediction: an example is still
"[CLS] A [SEP] B [SEP]", B the sentences that follow A in its document (batches.py, as the
official build_pretraining_dataset.py), but no loss asks whether B follows A: the paper cites
work suggesting that it "does not improve scores".

What to watch: for a while D catches under 10 % of the replaced tokens, "the plateau" (this
project's name, not the paper's: docs/plateau.md). Meanwhile $L_Disc$ falls to about $H(r)$,
the loss of answering r, the share of replaced tokens, everywhere, and then below it while
recall stays flat: D ranks replaced tokens higher before it is sure enough to say "replaced".

Details: the step that runs is `training_step`, the same step through the model's forward, by
default with $L_MLM$ and x̂ from one pass over $p_G$ (machinery/mlm_output.py), compiled with
--compile (machinery/step.py); tests/test_train.py holds it equal to `electra_step`. In the
pictured run $L_Disc$ falls below $H(r)$ from about step 200; one line of the log says when D
leaves the plateau (machinery/progress.py).
"""
import sys
from pathlib import Path

import torch

from ablations import build_model, on_progress, schedule_progress, stage
from batches import PretrainingData, Prefetcher, repetition_warning
from config import lr_at
from data import load_tokenizer
from flops import hardware_flops_per_step, peak_flops, train_flops_per_step
from machinery.device import pick_precision
from machinery.distributed import Dist
from machinery.loss_scale import make_loss_scale
from machinery.run_log import RunLog
from machinery.run_state import Checkpoints, RunState
from machinery.stepper import Stepper
from objectives import corrupt, disc_loss, mask_tokens, mlm_loss, sample
from optim import decay_groups, make_adam


def electra_step(model, opt, batch, lr, cfg, meta, rng=None):
    """One step of ELECTRA (Figure 2, §2): mask, G, corrupt, D, $L_MLM + λ L_Disc$, Adam.
    batch: `PretrainingData.next_batch`'s; meta: its token ids; rng: the mask's random source
    (a torch.Generator; G is the generator network).
    Training runs `training_step`: the same numbers, faster."""
    x, pad_mask, segment_ids = batch["x"], batch["pad_mask"], batch["segment_ids"]
    G, D, λ = model.generator, model.discriminator, model.disc_weight
    # Mask: the positions m (15 % of the tokens) and $x^masked = REPLACE(x, m, [MASK])$.
    masked = mask_tokens(x, (meta["pad_id"], meta["cls_id"], meta["sep_id"]), meta["mask_id"],
                         cfg.n_slots, cfg.mask_prob, generator=rng)
    # G reads x_masked: $L_MLM$ at the positions m, and a sample $x̂_i ∼ p_G$ at each of them.
    # BEGIN ANSWER joint_loss
    gen_logits = G(masked.x_masked, masked.positions, pad_mask, segment_ids)
    L_MLM = mlm_loss(gen_logits, masked.targets, masked.weights)
    x_hat = sample(gen_logits)                        # detached: no gradient flows through x̂
    # Corrupt: $x^corrupt = REPLACE(x, m, x̂)$; D says of every token whether it was replaced.
    x_corrupt, is_replaced = corrupt(x, masked, x_hat)
    L_Disc = disc_loss(D(x_corrupt, pad_mask, segment_ids), is_replaced, pad_mask)
    # END ANSWER joint_loss
    # Both networks learn at once from $L_MLM + λ L_Disc$ ($λ = 50$, on the two means); the
    # gradient is clipped at norm 1, then Adam takes a step at this step's learning rate.
    (L_MLM + λ * L_Disc).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    for group in opt.param_groups:
        group["lr"] = lr
    opt.step()
    opt.zero_grad(set_to_none=True)
    return L_MLM.detach(), L_Disc.detach()


def make_optimizer(model, cfg, device):
    """Adam with weight decay 0.01 (Table 6), none for biases and LayerNorm.

    Details: the decay decoupled, as the official code (model/optimization.py); cfg.optimizer
    "official" (no bias correction: optim.py) or "torch" (torch.optim.AdamW)."""
    return make_adam(decay_groups(model.named_parameters(), cfg.weight_decay), cfg.optimizer,
                     cfg.lr, cfg.adam_betas, cfg.adam_eps, fused=device.type == "cuda")


def masked_batch(data, cfg, masking):
    """The mask step (§2, `objectives.mask_tokens`): the next batch of `data` with its masks,
    by the model's `masking` rule, and the data position after it.

    Engineering: on a GPU a background thread (`batches.Prefetcher`) runs this while the GPU
    computes the previous step; benchmarks/bench.py makes its batches with it too."""
    batch = data.next_batch()                             # x, segment_ids, pad_mask
    special = (data.meta["pad_id"], data.meta["cls_id"], data.meta["sep_id"])
    batch["masked"] = mask_tokens(batch["x"], special, data.meta["mask_id"], cfg.n_slots,
                                  cfg.mask_prob, n_random=data.meta["vocab_size"] - 4,
                                  generator=data.mask_generator(), **masking)
    return batch, data.state_dict()


def training_step(model, opt, batch, lr, cfg, device, precision="auto", loss_scale=None):
    """The step `train` runs: `electra_step` after the mask, through the model's forward, on
    a masked CPU batch; returns the statistics, still on the device."""
    batch = {k: v.to(device, non_blocking=device.type == "cuda") for k, v in batch.items()}
    for group in opt.param_groups:
        group["lr"] = lr
    # Engineering: bf16 autocast where the hardware computes bf16 natively, fp16 on GPUs
    # whose tensor cores have only fp16 (machinery/device.py), with `loss_scale`
    # (machinery/loss_scale.py); the weights, the optimizer and both losses stay in float32.
    stats = update(model, opt, batch, cfg.grad_clip, pick_precision(precision, device)[1],
                   loss_scale)
    opt.zero_grad(set_to_none=True)
    return stats


def update(model, opt, batch, grad_clip, autocast, loss_scale=None):
    """Both losses, backward, clipping and Adam on a batch already on the device.

    Engineering: machinery/step.py compiles this into one graph with --compile, or each of
    its Transformer blocks with --compile regional; in fp16 `loss_scale` does the last three,
    skipping overflowed steps (machinery/loss_scale.py)."""
    with autocast():
        loss, stats = model(**batch)
    if loss_scale is not None:
        skipped = loss_scale.backward_clip_step(model, opt, loss, grad_clip)
        stats = dict(stats, skipped=skipped.float(), loss_scale=loss_scale.scale.clone())
        return {k: v.detach() if torch.is_tensor(v) else v for k, v in stats.items()}
    loss.backward()
    # Clipping at global norm 1: with $λ = 50$, D's gradients decide when it engages.
    #
    # Details: as the official code (model/optimization.py); the paper does not mention it.
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    # Engineering: detached, the logged losses keep no graph alive.
    return {k: v.detach() if torch.is_tensor(v) else v for k, v in stats.items()}


def train(cfg, args, device, data_dir, resume=None, dist=None):
    """Pre-train for the budget in args (--hours, --max_steps or --flops); returns an exit code."""
    dist = dist or Dist()
    out, say = Path(args.out_dir), print if dist.main else (lambda *a, **k: None)

    # -- data: a memmap of token ids, cut into two-segment examples (data.py) ----------------
    data = PretrainingData(data_dir, "train", cfg.batch_size, cfg.seq_len, args.seed,
                           dist.rank, dist.world)
    tokenizer = load_tokenizer(data_dir)                  # saved in every checkpoint

    # -- model and optimizer -----------------------------------------------------------------
    model = build_model(cfg, data.tokens).to(device)
    opt = make_optimizer(model, cfg, device)
    # Engineering: fp16's dynamic loss scaling (machinery/loss_scale.py), None otherwise;
    # args.precision is the run's, "bf16", "fp16" or "fp32" (electra_small.py decides it).
    loss_scale = make_loss_scale(args.precision, opt, device, getattr(args, "loss_scale", None))
    # Engineering: the run's counters and budget (machinery/run_state.py): step, FLOPs
    # (Appendix E's count, which changes when two-stage training freezes G), time, the data
    # position. A resume restores them with the weights and the random state: the next batch
    # and its masks are those of a run that never stopped.
    run = RunState(args, dist, device, data, model, opt, train_flops_per_step(cfg, stage(model)),
                   resume, loss_scale)
    # Engineering: the log line, MFU and the NaN check (machinery/run_log.py); how a step
    # runs: eager or compiled, DDP, the profiler, the thread count (machinery/stepper.py);
    # checkpoints, never of a NaN and never half-written (machinery/run_state.py).
    log = RunLog(cfg, args, device, dist, out, say, lambda d: peak_flops(d, args.precision),
                 lambda: hardware_flops_per_step(cfg, stage(model)),
                 lambda steps: repetition_warning(steps, data), run)
    step = Stepper(training_step, update, model, opt, cfg, device, args, dist, out, say,
                   loss_scale)
    ckpt = Checkpoints(run, model, opt, log.nan, out, dist, loss_scale, config=cfg.to_dict(),
                       data_dir=str(Path(data_dir).resolve()), tokenizer=tokenizer.to_text(),
                       budget=dict(hours=args.hours, max_steps=args.max_steps, flops=args.flops),
                       seed=args.seed, device=str(device), world=dist.world,
                       precision=args.precision)
    # Engineering: on a GPU a thread prepares the next batches; on a CPU it would only take
    # cores from the step.
    make_batch = lambda: masked_batch(data, cfg, model.masking)
    fetch = Prefetcher(make_batch) if device.type == "cuda" else make_batch

    # -- the loop: batch, step, log, checkpoint ----------------------------------------------
    run.start_clock()
    try:
        while run.progress() < 1.0:
            note = on_progress(model, run.progress())     # two-stage: stage two at 1/2
            if note:                                      # other parameters train now
                step.new_stage()
                run.flops_per_step = train_flops_per_step(cfg, stage(model))
                say(f"step {run.step}: {note}")
            batch, data_after = fetch()                   # x, its masks, the data position
            # warm-up, then linear decay to 0 (config.lr_at) over the budget, or over each half
            # of it for two-stage training
            lr = lr_at(schedule_progress(model, run.progress()), cfg)
            stats = step(batch, lr)
            run.count_step(data_after, say)
            log.add(stats)
            if log.due():
                log.write(lr)
            ckpt.after_step()
    except KeyboardInterrupt:                             # Ctrl-C or kill: keep the progress
        ckpt.save()
        if dist.main:
            print(f"\ninterrupted at step {run.step}: saved {out / 'ckpt.pt'}; continue with "
                  "--resume", file=sys.stderr)
        return 130
    finally:
        step.close()
        log.close()
        if isinstance(fetch, Prefetcher):
            fetch.close()
    ckpt.save()
    say(f"done: {run.step} steps, {run.flops:.3g} FLOPs, {run.elapsed / 3600:.2f} h; "
        f"saved {out / 'ckpt.pt'}")
    closing = log.closing_note()
    if closing:
        say(closing)
    return 0
