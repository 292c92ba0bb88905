"""The pre-training loop (paper Appendix A, Table 6), read top to bottom.

One function, `train`, in the order things happen: data, model, optimizer, then the loop: a
batch with its masks (the mask step), one step of $L_MLM + λ L_Disc$, a log line, a checkpoint.
BERT, ELECTRA and every ablation answer the same calls (`objectives.Pretraining`).

What to watch: $L_MLM$ falls from the start, but D first answers "real" almost everywhere: it
catches few replaced tokens, and $L_Disc$ soon sits at $H(r)$, the entropy of the share r of
replaced tokens (what answering r everywhere scores). This project calls that phase "the
plateau" (its name, not the paper's; docs/plateau.md). $L_Disc$ may fall well below $H(r)$ while
recall stays low: D ranks replaced tokens higher before it is sure enough to say "replaced".
One line says when D leaves the plateau: recall of 10 % or more and $L_Disc$ under $0.9 H(r)$
(machinery/progress.py).
"""
import json
import math
import sys
import time
from pathlib import Path

import torch

from ablations import build_model
from machinery.checkpoint import CheckpointError, rng_state, save_checkpoint, set_rng_state
from config import lr_at
from batches import PretrainingData, Prefetcher, repetition_warning
from data import load_tokenizer
from machinery.device import pick_precision
from machinery.distributed import Dist
from flops import hardware_flops_per_step, peak_flops, train_flops_per_step
from objectives import mask_tokens
from optim import decay_groups, make_adam
from machinery.progress import left_plateau_line, off_plateau, plateau_note, progress_line
from machinery.step import compile_step
from machinery.threads import ThreadChooser


def make_optimizer(model, cfg, device):
    """Adam with weight decay 0.01 (Table 6); the decay decoupled and none for biases and
    LayerNorm, as the official code (model/optimization.py); cfg.optimizer "official" (no bias
    correction: optim.py) or "torch" (torch.optim.AdamW)."""
    return make_adam(decay_groups(model.named_parameters(), cfg.weight_decay), cfg.optimizer,
                     cfg.lr, cfg.adam_betas, cfg.adam_eps, fused=device.type == "cuda")


def training_step(model, opt, batch, lr, cfg, device, precision="auto"):
    """One optimizer step on a CPU batch {x, masked, pad_mask, segment_ids}; returns the
    statistics, still on the device."""
    batch = {k: v.to(device, non_blocking=device.type == "cuda") for k, v in batch.items()}
    for group in opt.param_groups:
        group["lr"] = lr
    # Engineering: bf16 autocast where the hardware computes bf16 natively
    # (machinery/device.py); the weights, the optimizer and both losses stay in float32.
    stats = update(model, opt, batch, cfg.grad_clip, pick_precision(precision, device)[1])
    opt.zero_grad(set_to_none=True)
    return stats


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


def update(model, opt, batch, grad_clip, autocast):
    """Both losses, backward, clipping and Adam on a batch already on the device.

    Engineering: machinery/step.py compiles this into one graph with --compile."""
    with autocast():
        loss, stats = model(**batch)
    loss.backward()
    # Clipping at global norm 1, as the official code (model/optimization.py); the paper does
    # not mention it. With $λ = 50$, D's gradients decide when it engages.
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    # Engineering: detached, the logged losses keep no graph alive.
    return {k: v.detach() if torch.is_tensor(v) else v for k, v in stats.items()}


def train(cfg, args, device, data_dir, resume=None, dist=None):
    """Pre-train for the budget in args (--hours, --max_steps or --flops); returns an exit code."""
    dist = dist or Dist()
    out, main = Path(args.out_dir), dist.main
    say = print if main else (lambda *a, **k: None)

    # -- data: a memmap of token ids, cut into two-segment examples (data.py) ----------------
    data = PretrainingData(data_dir, "train", cfg.batch_size, cfg.seq_len, args.seed,
                           dist.rank, dist.world)
    tokenizer = load_tokenizer(data_dir)                  # saved in every checkpoint

    # -- model and optimizer ---------------------------------------------------------------------
    raw_model = build_model(cfg, data.tokens).to(device)  # what checkpoints hold
    opt = make_optimizer(raw_model, cfg, device)
    # Engineering: what a resume restores (setup_s: seconds of steps that were not training
    # time).
    st = dict(step=0, flops=0.0, elapsed=0.0, setup_s=0.0, saved_fractions=[])
    if resume is not None:
        raw_model.load_state_dict(resume["model"])
        opt.load_state_dict(resume["optimizer"])
        st.update(step=resume["step"], flops=resume["flops"], elapsed=resume["elapsed_s"],
                  setup_s=resume.get("setup_s", 0.0),
                  saved_fractions=list(resume.get("saved_fractions", [])))
        data.load_state_dict(resume["data"])              # the exact next batch ...
        set_rng_state(resume["rng"])                      # ... and the exact next masks
    data_state = data.state_dict()                        # position after the last used batch
    # Appendix E's count, per step; it changes when two-stage training freezes G.
    flops_per_step = train_flops_per_step(cfg, raw_model.stage)
    # Engineering: --compile makes the whole step one graph (machinery/step.py), or compiles
    # the model only where the step cannot be one graph: under DistributedDataParallel (its
    # gradient hooks need a backward of their own) and with torch.optim.AdamW (its step breaks
    # graphs on purpose). The model is compiled inside DDP, so Dynamo does not trace DDP.
    step = None
    compile_model = args.compile and (dist.enabled or cfg.optimizer != "official")
    # Engineering: DistributedDataParallel where torchrun started several processes, else the
    # model.
    model = dist.wrap(torch.compile(raw_model) if compile_model else raw_model,
                      find_unused=raw_model.stage is not None)
    if args.compile and not compile_model:
        try:        # (a torch without what machinery/step.py sets up: eager, as a failed compile)
            step = compile_step(update, raw_model, opt, cfg.grad_clip, device, args.precision,
                                regional=args.compile == "regional")
        except Exception as e:
            compile_failed(e)

    # Engineering: the first step is setup, not training (compiling, the first batch; on a GPU
    # the second records the CUDA graph). Counted in a wall-clock budget it would eat the
    # warm-up, and the first real update would run at the peak learning rate.
    setup_steps = 2 if args.compile and device.type == "cuda" else 1

    def progress():
        """The fraction of the budget used: of wall-clock time (less the setup steps'), of
        FLOPs, or of steps. The learning-rate schedule is laid over it."""
        if args.hours:
            budget, setup = args.hours * 3600, st["setup_s"]
            return 1.0 if setup >= budget else \
                max(0.0, st["elapsed"] - setup) / (budget - setup)
        if args.flops:
            return st["flops"] / args.flops
        return st["step"] / args.max_steps

    def save(name="ckpt.pt"):
        """Engineering: a checkpoint is never of a state that has seen a NaN loss, never
        half-written (machinery/checkpoint.py)."""
        check_finite(bad_step, out)
        if not main:
            return
        state = dict(config=cfg.to_dict(), model=raw_model.state_dict(),
                     optimizer=opt.state_dict(), step=st["step"], flops=st["flops"],
                     elapsed_s=st["elapsed"], setup_s=st["setup_s"], rng=rng_state(),
                     data=data_state, data_dir=str(Path(data_dir).resolve()),
                     tokenizer=tokenizer.to_text(), saved_fractions=st["saved_fractions"],
                     budget=dict(hours=args.hours, max_steps=args.max_steps, flops=args.flops),
                     seed=args.seed, device=str(device), world=dist.world)
        try:
            save_checkpoint(out / name, state)
        except OSError as e:                 # disk full, permissions, folder removed ...
            raise CheckpointError(f"could not write {out / name} ({e.strerror or e}); the "
                                  "previous checkpoint is intact: free disk space and continue "
                                  "with --resume") from None

    def make_batch():
        return masked_batch(data, cfg, raw_model.masking)

    # -- the loop ----------------------------------------------------------------------------------
    # Engineering: MFU (model FLOPs utilisation) needs the hardware's peak: a data sheet on a
    # GPU, a measured matmul on a CPU (flops.py).
    peak, peak_note = peak_flops(device)
    peak = peak * dist.world if peak else None
    say(f"MFU is relative to {peak_note}" + (f": {peak:.3g} FLOP/s" if peak else ""))
    # Engineering: appending, a resumed run continues the same log.
    log_file = open(out / "log.jsonl", "a") if main else None
    # Engineering: on a GPU a thread prepares the next batches (on a CPU it would only take
    # cores from the step); --profile N records N steps with torch.profiler; on a CPU the run
    # picks its thread count from timed steps (machinery/threads.py: two threads are faster on
    # an idle machine, one on a busy laptop).
    fetch = Prefetcher(make_batch) if device.type == "cuda" else make_batch
    prof = start_profile(args.profile, out, device) if getattr(args, "profile", None) and main \
        else None
    threads = ThreadChooser.for_run(device, args, dist.world, say)
    sums, interval_start, interval_steps = {}, time.time(), 0
    last_ckpt, t0, elapsed0 = time.time(), time.time(), st["elapsed"]
    setup_mark, local_steps = t0, 0     # where the next setup step's time starts; steps taken here
    bad_step = None                   # the first step with a NaN/inf loss, kept on the device
    rec, left = None, False           # the last log record; whether D was ever off the plateau
    # Engineering: a budget that repeats a small corpus too often learns it by heart; one
    # line says so.
    repeats = repetition_warning(args.max_steps or args.flops / flops_per_step, data) \
        if not args.hours else None
    if repeats:
        say(repeats)
    try:
        while progress() < 1.0:
            note = raw_model.on_progress(progress())      # two-stage: start stage two at 1/2
            if note:                                      # other parameters train now: a
                model = dist.wrap(unwrapped(model), find_unused=True)     # new DDP, same model
                flops_per_step = train_flops_per_step(cfg, raw_model.stage)
                say(f"step {st['step']}: {note}")
            batch, next_state = fetch()
            # warm-up, then linear decay to 0 (config.lr_at) over the budget, or over each half
            # of it for two-stage training
            lr = lr_at(raw_model.schedule_progress(progress()), cfg)
            stats, step, model = compiled_step(step, model, raw_model, opt, batch, lr, cfg, device,
                                               args)
            if prof:
                prof.step()
            if threads:
                threads.after_step()
            st["step"] += 1
            st["flops"] += flops_per_step
            # Engineering: the data position moves once the step is done, so a resume never
            # skips or repeats a batch.
            data_state = next_state
            now = elapsed0 + time.time() - t0             # every process must agree on the time
            st["elapsed"] = dist.broadcast_float(now) if args.hours else now
            local_steps += 1
            if local_steps <= setup_steps:                # not schedule time (see progress)
                st["setup_s"] += dist.broadcast_float(time.time() - setup_mark) \
                    if args.hours else time.time() - setup_mark
                setup_mark = time.time()
                if local_steps == setup_steps and args.compile:
                    say(f"step {st['step']}: compiling, {'graph recording, ' * (setup_steps > 1)}"
                        f"the first batch took {time.time() - t0:.1f} s"
                        + (": not counted in the learning-rate schedule, which runs over "
                           "the training time left before the deadline" if args.hours else ""),
                        flush=True)
            # Engineering: the NaN check and the statistics stay on the device, summed there;
            # reading a number (.item()) would make the host wait for the GPU at every step.
            bad = ~torch.isfinite(stats["mlm_loss"].detach())
            if "disc_loss" in stats:
                bad |= ~torch.isfinite(stats["disc_loss"].detach())
            first = torch.zeros((), dtype=torch.long, device=bad.device) if bad_step is None \
                else bad_step
            bad_step = torch.where(bad & (first == 0), st["step"], first)
            interval_steps += 1
            for k, v in stats.items():
                v = torch.stack(v) if isinstance(v, tuple) else v.detach()
                sums[k] = sums[k] + v if k in sums else v
            if st["step"] % args.log_every == 0 or progress() >= 1.0:
                check_finite(bad_step, out)
                # Engineering: every process's sums added up, for the whole batch
                sums = {k: dist.sum(v.float()) for k, v in sums.items()}
                rec = log_record(sums, interval_steps, time.time() - interval_start, peak, cfg,
                                 args, st, flops_per_step, raw_model.stage, lr, dist.world)
                if rec["mfu"] and rec["mfu"] > 1:
                    peak, rec["mfu"] = peak_again(peak, rec["mfu"], device, dist.world, say)
                if main:
                    print(progress_line(rec), flush=True)
                    log_file.write(json.dumps(rec) + "\n")
                    log_file.flush()
                if not left and off_plateau(rec):         # said once, the first time
                    left = True
                    say(left_plateau_line(rec))
                if args.hours and repeats is None:      # the step rate is measured now
                    rate = interval_steps / (time.time() - interval_start)
                    repeats = repetition_warning(
                        st["step"] + rate * (args.hours * 3600 - st["elapsed"]), data) or ""
                    if repeats:
                        say(repeats)
                sums, interval_start, interval_steps = {}, time.time(), 0
            for f in args.save_at:                        # Table 1-style compute checkpoints
                if progress() >= f and f not in st["saved_fractions"]:
                    st["saved_fractions"].append(f)
                    save(f"ckpt_{f:g}.pt")
            # Engineering: a periodic checkpoint bounds what a crash can lose; rank 0's clock
            # decides for every process.
            due = time.time() - last_ckpt > args.ckpt_every_min * 60
            if (args.save_every and st["step"] % args.save_every == 0) or \
                    dist.broadcast_float(float(due)):
                save()
                last_ckpt = time.time()
    except KeyboardInterrupt:                             # Ctrl-C or kill: keep the progress
        save()
        if main:
            print(f"\ninterrupted at step {st['step']}: saved {out / 'ckpt.pt'}; continue with "
                  "--resume", file=sys.stderr)
        return 130
    finally:
        if prof:
            prof.stop()                                   # (writes the trace if still recording)
        if log_file:
            log_file.close()
        if isinstance(fetch, Prefetcher):
            fetch.close()
    save()
    say(f"done: {st['step']} steps, {st['flops']:.3g} FLOPs, {st['elapsed'] / 3600:.2f} h; "
        f"saved {out / 'ckpt.pt'}")
    closing = plateau_note(rec) if rec is not None and not left else None
    if closing:
        say(closing)
    return 0


# ----------------------------------------------------------------------------- the loop's helpers

def compiled_step(step, model, raw_model, opt, batch, lr, cfg, device, args):
    """Engineering: one step, compiled (machinery/step.py) if there is a compiled `step`, else
    training_step; falls back to the eager model if torch.compile fails here. Returns
    (statistics, step, model), the last two changed by a fallback."""
    try:
        if step is not None:
            return step(batch, lr), step, model
        return training_step(model, opt, batch, lr, cfg, device, args.precision), step, model
    except Exception as e:
        if not args.compile or (step is None and unwrapped(model) is raw_model):
            raise
        compile_failed(e)
        opt.zero_grad(set_to_none=True)
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            # Engineering: the same DDP with the eager model inside (a second DDP would
            # all-reduce every gradient twice)
            model.module = raw_model
        else:
            model = raw_model
        return training_step(model, opt, batch, lr, cfg, device, args.precision), None, model


def unwrapped(model):
    """Engineering: the model inside DistributedDataParallel, or the model itself."""
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


def compile_failed(e):
    """Engineering: the one line a failed torch.compile gets; the run goes on eagerly."""
    print(f"torch.compile failed ({type(e).__name__}: {(str(e).splitlines() or [''])[0][:120]}); "
          "continuing eagerly", file=sys.stderr)


def start_profile(n, out, device):
    """Engineering: a started torch.profiler for --profile N (.step() after every step). After
    2 + N steps it writes out/profile_trace.json (chrome://tracing, ui.perfetto.dev) and prints
    the operations that took the most time."""
    gpu = device.type == "cuda"

    def report(prof):
        path = out / "profile_trace.json"
        prof.export_chrome_trace(str(path))
        key = "self_device_time_total" if gpu else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=key, row_limit=20))
        print(f"profile of {n} steps written to {path}", flush=True)
    activities = [torch.profiler.ProfilerActivity.CPU] + \
        ([torch.profiler.ProfilerActivity.CUDA] if gpu else [])
    prof = torch.profiler.profile(activities=activities, on_trace_ready=report,
                                  schedule=torch.profiler.schedule(wait=1, warmup=1, active=n,
                                                                   repeat=1))
    prof.start()
    return prof


class TrainingDiverged(Exception):
    """Engineering: the loss became NaN or infinite; the command line prints it as one
    line."""


def check_finite(bad_step, out):
    """Engineering: raise if any step so far had a NaN or infinite loss."""
    if bad_step is not None and int(bad_step) > 0:
        raise TrainingDiverged(
            f"the loss became NaN or infinite at step {int(bad_step)}; stopped without saving, "
            f"so {out / 'ckpt.pt'} still holds the last good state: lower --lr (or check the "
            "data) and continue with --resume")


def log_record(sums, steps, dt, peak, cfg, args, st, flops_per_step, stage, lr, world):
    """Engineering: one line of log.jsonl from the statistics summed on the device (the only
    host sync)."""
    s = {k: v.float().cpu() for k, v in sums.items()}
    # Engineering: None where the denominator is 0 (e.g. precision while D flags nothing):
    # undefined
    ratio = lambda k: (s[k][0] / s[k][1]).item() if k in s and s[k][1] > 0 else None
    tok_s = steps * cfg.batch_size * cfg.seq_len / dt
    mfu = hardware_flops_per_step(cfg, stage) * steps / dt / peak if peak else None
    if args.hours:
        left = args.hours * 3600 - st["elapsed"]
    elif args.flops:
        left = (args.flops - st["flops"]) / flops_per_step * dt / steps
    else:
        left = (args.max_steps - st["step"]) * dt / steps
    # The plateau's loss $H(r) = −r ln r − (1 − r) ln(1 − r)$: what "everything is real" with
    # the right bias scores; below it, D knows more than how many tokens are replaced. (None
    # where D is an MLM: Replace MLM, All-Tokens MLM.)
    share = prior = None
    if "replaced_correct" in s and "disc_correct" in s and s["disc_correct"][1] > 0:
        share = (s["replaced_correct"][1] / s["disc_correct"][1]).item()
        prior = sum(-p * math.log(p) for p in (share, 1 - share) if p > 0)
    return dict(step=st["step"], mlm_loss=(s["mlm_loss"] / steps / world).item(),
                disc_loss=(s["disc_loss"] / steps / world).item() if "disc_loss" in s else None,
                replaced_share=share, disc_prior_entropy=prior,
                gen_acc=ratio("gen_correct"), disc_acc=ratio("disc_correct"),
                disc_acc_replaced=ratio("replaced_correct"),
                disc_precision_replaced=ratio("replaced_flagged"), tokens_per_s=tok_s, mfu=mfu,
                flops=st["flops"], elapsed_s=st["elapsed"], eta_s=max(0.0, left), lr=lr,
                model=cfg.model, objective="mlm" if cfg.model == "bert" else cfg.objective,
                gpu_peak_bytes=gpu_peak_bytes(next(iter(sums.values())).device))


def peak_again(peak, mfu, device, world, say, measure=peak_flops):
    """Engineering: an MFU above 100 % means the CPU's peak was measured while the machine was
    busier than now (a matmul beside other jobs runs several times slower). Measure it again
    and keep the larger: (peak, the interval's MFU against it)."""
    again = measure(device)[0]
    if again and again * world > peak:
        say(f"MFU: the peak measured again, {again * world:.3g} FLOP/s (the first measure "
            f"ran while the machine was busier)")
        mfu, peak = mfu * peak / (again * world), again * world
    return peak, mfu


def gpu_peak_bytes(device):
    """Engineering: the most GPU memory the run's tensors have held so far, None off a GPU."""
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
