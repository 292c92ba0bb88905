#!/usr/bin/env bash
# Measuring ELECTRA-Small on a GPU, one stage per command (docs/gpu.md has the plan).
#
#   bash benchmarks/gpu_measure.sh carry [N]        # on the machine with the data: N corpus shards + GLUE
#                                        #   into .carry/ (default: as many as fit in 64 MiB)
#   bash benchmarks/gpu_measure.sh check    [RES]   # GPU, versions, 3 tiny steps eager and --compile
#   bash benchmarks/gpu_measure.sh prepare  [RES]   # the carried shards -> out_gpu/data/corpus
#   bash benchmarks/gpu_measure.sh bench    [RES]   # benchmarks/bench.py (4 contenders), --profile, torchrun + NCCL
#   bash benchmarks/gpu_measure.sh start    [RES]   # pre-train the Table 6 model in the background
#   bash benchmarks/gpu_measure.sh status   [RES]   # its last progress lines, its GPU memory, log.jsonl
#   bash benchmarks/gpu_measure.sh wait SEC [RES]   # sleep until the run ends or SEC pass, then status
#   bash benchmarks/gpu_measure.sh finetune [RES]   # wait for the run to end, fine-tune on local GLUE
#
# Every stage fits one 10-minute command on an H100 and writes its few result files into RES
# (default $OUT, else out_gpu/results); what lasts between stages (prepared data, the run, its
# checkpoints) lives in WORK (default out_gpu/, git-ignored). A stage that fails exits non-zero
# with one "error:" line.
#
# Settings, as environment variables (defaults in brackets):
#   DEVICE [cuda]   SIZE [small]   PY [python3]   WORK [out_gpu]   WORKERS [all cores]
#   HOURS [0.15]: pre-training's wall-clock budget (the schedule is laid over it)
#   COMPILE [auto]: 1 / 0 force --compile on / off; auto uses it if `check` saw it work
#   SEEDS [3], SST2_SEEDS [1]: fine-tuning seeds (SST-2 is 8x larger than the others)
#   TASKS [cola,mrpc,stsb,rte,sst2]   FT_ARGS: extra finetune_glue.py flags
#   MODEL [electra]: bert pre-trains and fine-tunes BERT-Small, its files named *_bert
#   CORPUS [.carry/corpus, else ../shared/data/corpus]   GLUE [.carry/glue, else ../shared/...]
# SIZE=tiny shrinks every stage to a smoke run (seconds on a CPU: DEVICE=cpu SIZE=tiny), which
# is how the stages are tested without a GPU (tests/test_gpu_measure.py).
set -uo pipefail
cd "$(dirname "$0")/.."    # the project root

STAGE=${1:-}
[ "$STAGE" = wait ] && { WAIT_S=${2:-500}; shift; }
RES=${2:-${OUT:-${WORK:-out_gpu}/results}}
DEVICE=${DEVICE:-cuda}
SIZE=${SIZE:-small}
PY=${PY:-python3}
WORK=${WORK:-out_gpu}
WORKERS=${WORKERS:-$(nproc 2>/dev/null || echo 4)}
HOURS=${HOURS:-0.15}
COMPILE=${COMPILE:-auto}
SEEDS=${SEEDS:-3}
SST2_SEEDS=${SST2_SEEDS:-1}
TASKS=${TASKS:-cola,mrpc,stsb,rte,sst2}
FT_ARGS=${FT_ARGS:-}
CORPUS=${CORPUS:-$([ -d .carry/corpus ] && echo .carry/corpus || echo ../shared/data/corpus)}
GLUE=${GLUE:-$([ -d .carry/glue ] && echo .carry/glue || echo ../shared/data/glue)}
export PYTHONUNBUFFERED=1
MODEL=${MODEL:-electra}
S=$([ "$MODEL" = electra ] || echo "_$MODEL")    # BERT's files beside ELECTRA's: *_bert
RUN=$WORK/pretrain$S                     # the pre-training run's folder (ckpt.pt, log.jsonl)
LOG=$WORK/pretrain$S.log PID=$WORK/pretrain$S.pid

# The smoke-run scale (SIZE=tiny) against the real one.
if [ "$SIZE" = tiny ]; then
  BENCH_FLAGS="--steps 2 --warmup 1"; PROFILE_STEPS=3; DDP_STEPS=4; LOG_EVERY=5
  PREP_FLAGS="--max_tokens 200000 --bpe_mb 1 --vocab_size 1000"
  FT_ARGS="--max_train 64 --epochs 1 $FT_ARGS"
else
  BENCH_FLAGS="--steps 100 --warmup 10"; PROFILE_STEPS=20; DDP_STEPS=20; LOG_EVERY=500
  PREP_FLAGS=""
fi

die() { echo "error: $*" >&2; exit 1; }
[ "$STAGE" = carry ] || mkdir -p "$RES" "$WORK" || die "cannot create $RES or $WORK"

# One `python` line per step of a stage, echoed, its output shown and kept in RES/LOG.
run() { local log=$1; shift; echo "+ $*" | tee -a "$RES/$log"; "$@" 2>&1 | tee -a "$RES/$log"; }

running() { [ -f "$PID" ] && kill -0 "$(cat "$PID")" 2>/dev/null; }

shards() { find "$CORPUS" -maxdepth 1 -name '*.txt*' 2>/dev/null | sort; }

stage_carry() {
  # N shards (wiki and books alternating, as the paper's Wikipedia + BooksCorpus) and the five
  # local GLUE tasks into .carry/, within the 64 MiB that may travel with the checkout.
  local src=../shared/data want=${1:-99} budget used f size n=0
  [ -d "$src/corpus" ] || die "$src/corpus: no corpus to carry"
  rm -rf .carry && mkdir -p .carry/corpus .carry/glue || die "cannot write .carry/"
  # what travels anyway: tracked and untracked-not-ignored files
  used=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  for t in CoLA SST-2 MRPC STS-B RTE; do
    [ -d "$src/glue/$t" ] && mkdir -p ".carry/glue/$t" && cp "$src/glue/$t"/{train,dev}.tsv ".carry/glue/$t/"
  done
  used=$((used + $(du -cb .carry/glue | tail -1 | cut -f1)))
  budget=$((64 * 1024 * 1024 - 1024 * 1024))          # 1 MiB to spare
  for f in $(paste -d'\n' <(ls "$src/corpus"/wiki2015-*.txt.xz) <(ls "$src/corpus"/books-*.txt.xz) \
             | grep . ; ls "$src/corpus"/wiki2021-*.txt.xz); do
    [ "$n" -ge "$want" ] && break
    size=$(stat -c %s "$f")
    [ $((used + size)) -le "$budget" ] || continue
    cp "$f" .carry/corpus/ && used=$((used + size)) && n=$((n + 1))
  done
  echo "carry: $n shard(s) and $(ls .carry/glue | wc -l) GLUE task(s) in .carry/;" \
       "$((used / 1024 / 1024)) MiB travel in all (limit 64)"
  ls -l .carry/corpus
}

stage_check() {
  # Versions first (seconds), then the failures that matter: a CUDA step, and a compiled one.
  {
    command -v nvidia-smi >/dev/null && nvidia-smi
    $PY -c "import sys, torch; print('python', sys.version.split()[0], '| torch', torch.__version__,
'| cuda', torch.version.cuda, '| GPU', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)"
    $PY -c "import transformers; print('transformers', transformers.__version__)" 2>&1 | tail -1
    $PY -c "import numpy, tiktoken; print('numpy', numpy.__version__, '| tiktoken', tiktoken.__version__)"
    echo "corpus: $(shards | wc -l) shard(s) in $CORPUS | GLUE: $GLUE | $WORKERS cores"
  } 2>&1 | tee "$RES/check.txt"
  local first; first=$(shards | head -1)
  [ -n "$first" ] || die "no corpus shards in $CORPUS: run 'bash benchmarks/gpu_measure.sh carry' first"
  rm -rf "$WORK/data/check"
  run check.txt $PY data.py --corpus "$first" --name check --out_root "$WORK/data" \
    --max_tokens 200000 --bpe_mb 1 --vocab_size 1000 --workers "$WORKERS" || die "data.py failed"
  local mode rc logs
  for mode in eager compile; do
    rm -rf "$WORK/check_$mode"
    # TORCH_LOGS=cudagraphs: Inductor says why it runs a step without CUDA graphs, if it does
    # (set only here: an empty TORCH_LOGS stops torch 2.11 at its import)
    logs=(); [ $mode = compile ] && logs=(env TORCH_LOGS=cudagraphs)
    run check.txt ${logs[@]+"${logs[@]}"} $PY electra_small.py --data "$WORK/data/check" \
      --size tiny --device "$DEVICE" --max_steps 3 --log_every 1 --out_dir "$WORK/check_$mode" \
      $([ $mode = compile ] && echo --compile)
    rc=$?
    [ $rc -eq 0 ] || die "the $mode run failed (exit $rc): see $RES/check.txt"
  done
  grep -i "skipping cudagraphs" "$RES/check.txt" | head -3 | sed 's/^/check: CUDA graphs SKIPPED: /'
  if grep -q "torch.compile failed" "$RES/check.txt"; then
    echo no > "$WORK/compile_ok"; echo "check: --compile FELL BACK to eager (start will run eager)"
  else
    echo yes > "$WORK/compile_ok"; echo "check: eager and --compile both ran 3 steps"
  fi | tee -a "$RES/check.txt"
}

stage_prepare() {
  local n; n=$(shards | wc -l)
  [ "$n" -gt 0 ] || die "no corpus shards in $CORPUS: run 'bash benchmarks/gpu_measure.sh carry' first"
  rm -rf "$WORK/data/corpus"
  # shellcheck disable=SC2046
  run prepare.txt $PY data.py --corpus $(shards) --name corpus --out_root "$WORK/data" \
    --workers "$WORKERS" $PREP_FLAGS || die "data.py failed: see $RES/prepare.txt"
}

stage_bench() {
  [ -f "$WORK/data/corpus/meta.json" ] || die "no prepared corpus: run the prepare stage first"
  # 1. the four contenders side by side, Table 6 shape (batch 128 x 128 at SIZE=small)
  # shellcheck disable=SC2086
  run bench.txt $PY benchmarks/bench.py --device "$DEVICE" --size "$SIZE" \
    --which ours,ours_compiled,bert,hf $BENCH_FLAGS --json "$RES/bench_gpu.json" \
    || die "benchmarks/bench.py failed: see $RES/bench.txt"
  # 2. where an eager step's time goes: torch.profiler's top operations (the trace stays in WORK)
  rm -rf "$WORK/profile"
  run profile.txt $PY electra_small.py --data "$WORK/data/corpus" --size "$SIZE" \
    --device "$DEVICE" --max_steps $((PROFILE_STEPS + 4)) --profile "$PROFILE_STEPS" \
    --log_every 1000 --out_dir "$WORK/profile" || echo "(the profile run failed)"
  # 3. the data-parallel path through torchrun, with NCCL on a GPU (gloo on a CPU)
  local try
  for try in default loopback; do      # a machine whose host name resolves nowhere: loopback
    rm -rf "$WORK/ddp"
    [ $try = loopback ] && export GLOO_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME=lo
    run ddp.txt $PY -m torch.distributed.run --standalone --nproc_per_node=1 electra_small.py \
      --data "$WORK/data/corpus" --size "$SIZE" --max_steps "$DDP_STEPS" --log_every 10 \
      --out_dir "$WORK/ddp" && break
    echo "(torchrun failed with the $try network settings)" | tee -a "$RES/ddp.txt"
  done
  grep -q "^done:" "$RES/ddp.txt" && echo "torchrun: done" || echo "torchrun: FAILED"
}

stage_start() {
  [ -f "$WORK/data/corpus/meta.json" ] || die "no prepared corpus: run the prepare stage first"
  running && die "a run is already going (pid $(cat "$PID")): see the status stage"
  local flags=(--data "$WORK/data/corpus" --model "$MODEL" --size "$SIZE" --device "$DEVICE"
               --out_dir "$RUN"
               --log_every "$LOG_EVERY" --ckpt_every_min 3)
  if [ -f "$RUN/ckpt.pt" ]; then
    flags+=(--resume)                  # the checkpoint's own budget and position
  else
    flags+=(--hours "$HOURS" --save_at 0.5)
  fi
  case $COMPILE in
    1) flags+=(--compile) ;;
    auto) [ "$(cat "$WORK/compile_ok" 2>/dev/null)" = no ] || flags+=(--compile) ;;
  esac
  echo "+ $PY electra_small.py ${flags[*]}" | tee "$RES/start.txt"
  # setsid: its own process session, so the run outlives this command (and its terminal)
  setsid nohup $PY electra_small.py "${flags[@]}" >> "$LOG" 2>&1 < /dev/null &
  echo $! > "$PID"
  local i
  for i in $(seq 60); do               # up to a minute for the first lines (or a failure)
    sleep 1
    running || break
    grep -q "^MFU is relative" "$LOG" && break
  done
  tail -n 20 "$LOG" | tee -a "$RES/start.txt"
  running || grep -q "^done:" "$LOG" || die "the run stopped: see $RES/start.txt"
  echo "started: pid $(cat "$PID"), log $LOG" | tee -a "$RES/start.txt"
}

stage_status() {
  {
    date -u
    running && echo "running: pid $(cat "$PID")" || echo "not running"
    command -v nvidia-smi >/dev/null && \
      nvidia-smi --query-compute-apps=pid,used_memory --format=csv 2>/dev/null
    grep -E "^(step |done:|resuming|budget|electra:|bert:|MFU|error:|torch.compile|note:|warning)" \
      "$LOG" 2>/dev/null | tail -n 12
    echo "-- the log's last line:"; tail -n 1 "$LOG" 2>/dev/null
    tail -n 1 "$RUN/log.jsonl" 2>/dev/null | grep -o '"gpu_peak_bytes": [0-9]*' \
      | awk '{printf "peak GPU memory of the run (max_memory_allocated): %.2f GiB\n", $2 / 2^30}'
  } | tee "$RES/status.txt"
  [ -f "$RUN/log.jsonl" ] && cp "$RUN/log.jsonl" "$RES/pretrain_log$S.jsonl"
  return 0
}

stage_wait() {
  local end=$((SECONDS + WAIT_S))
  while running && [ $SECONDS -lt $end ]; do sleep 5; done
  stage_status
}

stage_finetune() {
  local end=$((SECONDS + ${FT_WAIT:-300}))
  while running && [ $SECONDS -lt $end ]; do sleep 5; done
  running && die "pre-training is still running after ${FT_WAIT:-300} s: wait, or stop it"
  [ -f "$RUN/ckpt.pt" ] || die "no checkpoint $RUN/ckpt.pt: run the start stage first"
  stage_status >/dev/null
  mkdir -p "$WORK/glue$S"
  local t seeds
  # One command per task, each writing its own JSON: a command stopped at its time limit
  # loses the task in progress only.
  for t in ${TASKS//,/ }; do
    seeds=$SEEDS; [ "$t" = sst2 ] && seeds=$SST2_SEEDS
    # shellcheck disable=SC2086
    run finetune.txt $PY finetune_glue.py --ckpt "$RUN/ckpt.pt" --glue_dir "$GLUE" --tasks "$t" \
      --seeds "$seeds" --device "$DEVICE" --out "$WORK/glue$S/glue_$t.json" $FT_ARGS \
      || echo "($t failed)"
  done
  # The tasks' files as one, in finetune_glue.py's layout; the score is the mean over tasks.
  $PY - "$WORK/glue$S" "$RES/glue_gpu$S.json" <<'EOF' 2>&1 | tee -a "$RES/finetune.txt"
import json, sys
from pathlib import Path
order = "cola sst2 mrpc stsb qqp mnli qnli rte".split()        # the paper's tables' order
files = sorted(Path(sys.argv[1]).glob("glue_*.json"),
               key=lambda p: order.index(p.stem[5:]) if p.stem[5:] in order else len(order))
parts = [json.loads(p.read_text()) for p in files]
if not parts:
    sys.exit("error: no task was fine-tuned")
out = dict(parts[0], tasks={}, finetune=dict(parts[0]["finetune"], seeds_per_task={}))
for p in parts:
    for name, r in p["tasks"].items():
        out["tasks"][name] = r
        out["finetune"]["seeds_per_task"][name] = len(r["seeds"])
out["finetune"].pop("seeds", None)
scores = {n: 100 * r["median"][r["metric"]] for n, r in out["tasks"].items()}
out["glue_tasks"] = list(scores)
out["glue_score"] = round(sum(scores.values()) / len(scores), 2)
Path(sys.argv[2]).write_text(json.dumps(out, indent=1))
print("GLUE (median over seeds):", ", ".join(f"{n} {s:.1f}" for n, s in scores.items()),
      f"| mean {out['glue_score']:.2f} over {len(scores)} tasks -> {sys.argv[2]}")
EOF
}

case $STAGE in
  carry) stage_carry "${2:-}" ;;
  check|prepare|bench|start|status|wait|finetune) "stage_$STAGE" ;;
  *) echo "usage: bash benchmarks/gpu_measure.sh carry [N] | check|prepare|bench|start|status|finetune [RES]" \
          "| wait SECONDS [RES]" >&2; exit 2 ;;
esac
