#!/usr/bin/env bash
# Measuring ELECTRA-Small on a GPU, one stage per command (docs/gpu.md has the plan).
#
#   bash benchmarks/gpu_measure.sh all [MIN=9] [RES]  # check, prepare, pre-train, fine-tune in MIN minutes,
#                                        #   one command; again: BERT-Small at the same FLOPs, then a longer run
#   bash benchmarks/gpu_measure.sh carry [N]        # N corpus shards + GLUE from DATA_FROM into .carry/,
#                                        #   to travel with the code (default: as many as fit in 64 MiB)
#   bash benchmarks/gpu_measure.sh check    [RES]   # GPU, versions, the compiled step's self-check
#   bash benchmarks/gpu_measure.sh prepare  [RES]   # the carried shards -> out_gpu/data/corpus
#   bash benchmarks/gpu_measure.sh bench    [RES]   # benchmarks/bench.py (4 contenders), --profile, torchrun + NCCL
#   bash benchmarks/gpu_measure.sh start    [RES]   # pre-train the Table 6 model in the background
#   bash benchmarks/gpu_measure.sh status   [RES]   # its last progress lines, its GPU memory, log.jsonl
#   bash benchmarks/gpu_measure.sh wait [SEC=500] [RES] # sleep until the run ends or SEC pass, then status
#   bash benchmarks/gpu_measure.sh finetune [RES]   # wait for the run to end, fine-tune on local GLUE
#   bash benchmarks/gpu_measure.sh pack DEST [RES]  # RES as a few files in DEST, for a machine that
#                                        #   hands back only a few
#
# Every stage fits one 10-minute command on an H100 and writes its few result files into RES
# (default $OUT, else out_gpu/results) as soon as it has them; what lasts between stages
# (prepared data, the run, its checkpoints) lives in WORK (default out_gpu/, git-ignored) - and
# may be gone at the next command on a lent machine, so every stage makes what it needs when it
# is missing (the prepared corpus, a checkpoint to fine-tune). Every sub-run (each bench
# contender, the profile, torchrun, each fine-tuning task) has its own time limit; its outcome
# (ok, FAILED, TIMED OUT) is a line of RES/summary.txt and never stops the others. A stage that
# cannot start (bad arguments, no CUDA GPU for a stage that needs one, a missing input) exits
# non-zero with one "error:" line before it prepares, runs or writes anything.
#
# Settings, as environment variables (defaults in brackets):
#   DEVICE [cuda]   SIZE [small]   PY [python3]   WORK [out_gpu]   WORKERS [all cores]
#   HOURS [0.15]: pre-training's wall-clock budget (the schedule is laid over it)
#   COMPILE [auto]: 1 / 0 force --compile on / off; auto uses it if `check` saw it work
#   COMPILE_MODE [regional]: regional (one block compiled for all its layers: seconds) or whole
#     (the whole step one graph: minutes to compile); machinery/step.py
#   SEEDS [3; all: 1], SST2_SEEDS [1]: fine-tuning seeds (SST-2 is 8x larger than the others)
#   TASKS [cola,mrpc,stsb,rte,sst2; all: every task GLUE holds, the smallest first]; none:
#     pre-train and record the point without fine-tuning
#   PROFILE [20 on a GPU, else 0]: `all` profiles this many of its pre-training steps (profile.txt)
#   POINTS [docs/gpu-runs/points.jsonl]: the points recorded so far; `all` trains the next one
#   FT_ARGS: extra finetune_glue.py flags
#   CHECK_LAYERS [all of SIZE's; 2 with COMPILE_MODE=whole, which compiles every layer anew]
#   MODEL [electra]: bert pre-trains and fine-tunes BERT-Small, its files named *_bert
#   CORPUS [.carry/corpus, else the one corpus data.py prepared in data/, else demo]: a folder
#     of your own .txt/.txt.xz/.txt.gz files, or one data.py prepared (meta.json); demo: the
#     built-in demo corpus (a smoke point, not a result)
#   GLUE [.carry/glue, else glue/, where `python finetune_glue.py --download glue` puts it]:
#     CoLA/ SST-2/ ... with train/dev.tsv; `all` without it pre-trains and records the point
#   DATA_FROM [none: carry needs it]: where `carry` copies from (corpus/ and glue/ inside it)
#   CACHE [.carry/compile_cache]: compile caches an earlier command saved (machinery/
#     compile_cache.py); every compiled sub-run loads its file from there and saves it anew,
#     with what it compiled, in RES/compile_cache/ - copy those into CACHE for the next machine
#   WHICH [ours,ours_compiled,bert,hf; on a CPU ours,bert,hf]: the bench's contenders
#   LIMIT_BENCH [240], LIMIT_PROFILE [150], LIMIT_DDP [150], LIMIT_TASK [300], LIMIT_CHECK [240]:
#     seconds each sub-run may take (SIZE=tiny: half)
#   FT_RESERVE [150]: seconds `all` keeps for fine-tuning (its first task gets them even past
#     the minutes); PRE_MIN [60]: the least time `all` gives pre-training, likewise;
#     PRE_STEPS [200]: the steps `finetune` pre-trains first when it finds no checkpoint
# SIZE=tiny shrinks every stage to a smoke run (seconds on a CPU: DEVICE=cpu SIZE=tiny), which
# is how the stages are tested without a GPU (tests/test_gpu_measure.py).
set -uo pipefail
cd "$(dirname "$0")/.."    # the project root

# The settings a point's record names where they were given (point_command), as given.
POINT_SETTINGS="DEVICE SIZE COMPILE COMPILE_MODE TASKS SEEDS CORPUS GLUE FT_RESERVE PRE_MIN PROFILE"
declare -A ORIG=()
for v in $POINT_SETTINGS; do
  [ -n "${!v:-}" ] && ORIG[$v]=${!v}
done
STAGE=${1:-}
[ "$STAGE" = wait ] && { WAIT_S=${2:-500}; shift; }
[ "$STAGE" = all ] && { ALL_MIN=${2:-9}; shift; }
[ "$STAGE" = pack ] && { PACK_TO=${2:-}; shift; }
RES=${2:-${OUT:-${WORK:-out_gpu}/results}}
DEVICE=${DEVICE:-cuda}
SIZE=${SIZE:-small}
PY=${PY:-python3}
WORK=${WORK:-out_gpu}
WORKERS=${WORKERS:-$(nproc 2>/dev/null || echo 4)}
HOURS=${HOURS:-0.15}
COMPILE=${COMPILE:-auto}
COMPILE_MODE=${COMPILE_MODE:-regional}
PROFILE=${PROFILE:-$([ "$DEVICE" = cuda ] && echo 20 || echo 0)}
POINTS=${POINTS:-docs/gpu-runs/points.jsonl}
SEEDS_GIVEN=${SEEDS:+1} TASKS_GIVEN=${TASKS:+1}   # (all fine-tunes more tasks in less time)
SEEDS=${SEEDS:-3}
SST2_SEEDS=${SST2_SEEDS:-1}
TASKS=${TASKS:-cola,mrpc,stsb,rte,sst2}
CHECK_LAYERS=${CHECK_LAYERS:-$([ "$COMPILE_MODE" = whole ] && echo 2 || echo all)}
WHICH=${WHICH:-$([ "$DEVICE" = cpu ] && echo ours,bert,hf || echo ours,ours_compiled,bert,hf)}
LIMIT_BENCH=${LIMIT_BENCH:-240} LIMIT_PROFILE=${LIMIT_PROFILE:-150} LIMIT_DDP=${LIMIT_DDP:-150}
LIMIT_TASK=${LIMIT_TASK:-300} LIMIT_CHECK=${LIMIT_CHECK:-240}
FT_RESERVE=${FT_RESERVE:-150} PRE_STEPS=${PRE_STEPS:-200} PRE_MIN=${PRE_MIN:-60}
FT_ARGS=${FT_ARGS:-}
# The corpus a user has: what travelled in .carry/, else the one corpus data.py prepared in
# data/ (data/demo* aside), else the demo corpus (a line says so when it is used).
default_corpus() {
  local found
  [ -d .carry/corpus ] && { echo .carry/corpus; return; }
  found=$(find data -mindepth 2 -maxdepth 2 -name meta.json 2>/dev/null | grep -v '^data/demo' | sort)
  [ "$(grep -c . <<< "$found")" = 1 ] && { dirname "$found"; return; }
  [ -n "$found" ] && { echo several; return; }
  echo demo
}
CORPUS=${CORPUS:-$(default_corpus)}
GLUE=${GLUE:-$([ -d .carry/glue ] && echo .carry/glue || echo glue)}
CACHE=${CACHE:-.carry/compile_cache}
export PYTHONUNBUFFERED=1
MODEL=${MODEL:-electra}
# A pre-training run's files: S is "" for ELECTRA, _bert for BERT-Small, _long for `all`'s
# longer ELECTRA run, so each has its own folder and results beside the others'.
run_files() {
  S=$1
  RUN=$WORK/pretrain$S                     # the pre-training run's folder (ckpt.pt, log.jsonl)
  LOG=$WORK/pretrain$S.log PID=$WORK/pretrain$S.pid
}
run_files "$([ "$MODEL" = electra ] || echo "_$MODEL")"

die() { echo "error: $*" >&2; exit 1; }

# The settings, checked before anything uses them: a bad one is one line naming it, never bash's
# 'unbound variable' or a sub-run that fails minutes later.
GLUE_TASKS="cola sst2 mrpc stsb qqp mnli qnli rte wnli"
check_settings() {
  local v t
  for v in LIMIT_BENCH LIMIT_PROFILE LIMIT_DDP LIMIT_TASK LIMIT_CHECK PRE_STEPS SEEDS SST2_SEEDS \
           WORKERS $([ "$CHECK_LAYERS" = all ] || echo CHECK_LAYERS); do
    [[ ${!v} =~ ^[0-9]+$ ]] && [ "$((10#${!v}))" -gt 0 ] \
      || die "$v=${!v}: give a positive whole number, or leave $v unset for its default"
  done
  for v in FT_RESERVE PRE_MIN PROFILE; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "$v=${!v}: give a whole number of seconds, or leave $v unset for its default"
  done
  [[ $HOURS =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] && awk "BEGIN { exit !($HOURS > 0) }" \
    || die "HOURS=$HOURS: give pre-training's hours as a positive number, e.g. HOURS=0.5"
  case $COMPILE in auto|0|1) ;; *) die "COMPILE=$COMPILE: use auto (the default), 1 or 0" ;; esac
  case $COMPILE_MODE in regional|whole) ;;
    *) die "COMPILE_MODE=$COMPILE_MODE: use regional (the default) or whole" ;; esac
  [ "$CORPUS" != several ] || die "CORPUS: data/ holds several prepared corpora: set CORPUS=data/NAME (the one to pre-train on)"
  case $MODEL in electra|bert) ;; *) die "MODEL=$MODEL: use electra (the default) or bert" ;; esac
  case $SIZE in small|mini|laptop|laptop_deep|tiny) ;;
    *) die "SIZE=$SIZE: use small (the default, Table 6), or tiny for a smoke run (also mini, laptop, laptop_deep)" ;; esac
  [ "$TASKS" = none ] && return 0
  for t in ${TASKS//,/ }; do
    [[ " $GLUE_TASKS " == *" $t "* ]] || die "TASKS: no GLUE task '$t': name some of ${GLUE_TASKS// /,}, or none"
  done
  [ -n "${TASKS//,/}" ] || die "TASKS is empty: name some of ${GLUE_TASKS// /,}, or none"
}
[ "${1:-}" = carry ] || check_settings

# The smoke-run scale (SIZE=tiny) against the real one.
if [ "$SIZE" = tiny ]; then
  BENCH_FLAGS="--steps 2 --warmup 1"; PROFILE_STEPS=3; DDP_STEPS=4; LOG_EVERY=5
  PREP_FLAGS="--max_tokens 200000 --bpe_mb 1 --vocab_size 1000"
  FT_ARGS="--max_train 64 --epochs 1 $FT_ARGS"
  for v in LIMIT_BENCH LIMIT_PROFILE LIMIT_DDP LIMIT_TASK LIMIT_CHECK; do eval "$v=\$(( $v / 2 ))"; done
  [ "$PRE_STEPS" = 200 ] && PRE_STEPS=20
else
  BENCH_FLAGS="--steps 100 --warmup 10"; PROFILE_STEPS=20; DDP_STEPS=20; LOG_EVERY=500
  PREP_FLAGS=""
fi

# One `python` line per step of a stage, echoed, its output shown and kept in RES/LOG.
run() { local log=$1; shift; echo "+ $*" | tee -a "$RES/$log"; "$@" 2>&1 | tee -a "$RES/$log"; }

# A sub-run with a time limit: `limited NAME SECONDS LOG command...`. Its output goes to RES/LOG,
# its outcome to RES/summary.txt; it returns the command's status and never exits the stage.
# (timeout sends SIGTERM first: a pre-training run saves its checkpoint on it.)
limited() {
  local name=$1 secs=$2 log=$3 t0=$SECONDS rc outcome; shift 3
  [ "$secs" -ge 1 ] 2>/dev/null || secs=1
  echo "+ [$name: limit $secs s] $*" | tee -a "$RES/$log"
  timeout -k 20 "$secs" "$@" 2>&1 | tee -a "$RES/$log"; rc=${PIPESTATUS[0]}
  case $rc in
    0) outcome=ok ;;
    124|137) outcome="TIMED OUT at its limit of $secs s" ;;
    *) outcome="FAILED (exit $rc)" ;;
  esac
  echo "$name: $outcome, $((SECONDS - t0)) s (output: $log)" | tee -a "$RES/summary.txt"
  return "$rc"
}

# The prepared corpus, prepared here if a lost machine took it (every stage that reads it).
ensure_corpus() { [ -f "$WORK/data/corpus/meta.json" ] || stage_prepare; }

# Whether pre-training uses --compile: COMPILE=1/0, else what `check` found (auto: on a GPU yes
# unless its self-check failed; on a CPU no - compiling takes minutes there and does not pay).
use_compile() {
  case $COMPILE in
    1) return 0 ;; 0) return 1 ;;
  esac
  [ "$DEVICE" = cpu ] && return 1
  [ "$(cat "$WORK/compile_ok" 2>/dev/null)" != no ]
}

# The compile cache of one kind of compiled run (`cache_file NAME`): RES/compile_cache/NAME.bin,
# started from CACHE/NAME.bin where an earlier command saved one; the sub-run loads and rewrites it.
cache_file() {
  mkdir -p "$RES/compile_cache"
  [ -f "$RES/compile_cache/$1.bin" ] || [ ! -f "$CACHE/$1.bin" ] \
    || cp "$CACHE/$1.bin" "$RES/compile_cache/$1.bin"
  echo "$RES/compile_cache/$1.bin"
}

running() { [ -f "$PID" ] && kill -0 "$(cat "$PID")" 2>/dev/null; }

shards() { find "$CORPUS" -maxdepth 1 -name '*.txt*' 2>/dev/null | sort; }
# CORPUS is the demo, a folder data.py prepared (meta.json), or text files to prepare
ready_corpus() { [ "$CORPUS" = demo ] || [ -f "$CORPUS/meta.json" ]; }
corpus_note() {
  if [ "$CORPUS" = demo ]; then echo "the demo corpus (no CORPUS given, none prepared in data/)"
  elif [ -f "$CORPUS/meta.json" ]; then echo "$CORPUS, prepared by data.py"
  else echo "$(shards | wc -l) shard(s) in $CORPUS"; fi
}

stage_carry() {
  # N shards (wiki and books alternating, as the paper's Wikipedia + BooksCorpus) and the five
  # local GLUE tasks into .carry/, within the 64 MiB that may travel with the checkout.
  local src=${DATA_FROM:-} want=${1:-99} budget used f size n=0
  [ -n "$src" ] || die "carry: set DATA_FROM=a folder with corpus/ (text files) and glue/ (the GLUE tasks) to copy from"
  [ -d "$src/corpus" ] || die "$src/corpus: no corpus to carry: set DATA_FROM=a folder with corpus/ (text files) and glue/"
  rm -rf .carry/corpus .carry/glue && mkdir -p .carry/corpus .carry/glue || die "cannot write .carry/"
  # what travels anyway: tracked and untracked-not-ignored files, and the compile caches kept
  used=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
  used=$((used + $(du -cb .carry | tail -1 | cut -f1)))
  for t in CoLA SST-2 MRPC STS-B RTE; do
    [ -d "$src/glue/$t" ] && mkdir -p ".carry/glue/$t" && cp "$src/glue/$t"/{train,dev}.tsv ".carry/glue/$t/"
  done
  used=$((used + $(du -cb .carry/glue | tail -1 | cut -f1)))
  budget=$((64 * 1024 * 1024 - 1024 * 1024))          # 1 MiB to spare
  # the developers' shards in their order (wiki and books alternating), then every other file
  for f in $( { paste -d'\n' <(ls "$src/corpus"/wiki2015-*.txt.xz 2>/dev/null) \
                  <(ls "$src/corpus"/books-*.txt.xz 2>/dev/null) | grep . ;
                ls "$src/corpus"/*.txt* 2>/dev/null; } | awk '!seen[$0]++'); do
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
  # Versions first (seconds), then the compiled step's self-check (benchmarks/selfcheck.py):
  # Inductor's whole step against eager at the Table 6 widths and batch, CHECK_LAYERS of its
  # layers (Inductor compiles every layer anew: all 12 ran past 240 s on an H200), dropout off,
  # losses within its stated tolerance, and every step a CUDA graph. On a CPU it traces with
  # aot_eager (Inductor would compile for minutes there).
  {
    command -v nvidia-smi >/dev/null && nvidia-smi
    head -n 1 <<< "$PY_VERSIONS"                 # (need_python read them)
    $PY -c "import transformers; print('transformers', transformers.__version__)" 2>/dev/null \
      || echo "transformers not installed (the bench's hf contender will be skipped)"
    tail -n 1 <<< "$PY_VERSIONS"
    echo "corpus: $(corpus_note) | GLUE: $GLUE | $WORKERS cores"
  } 2>&1 | tee -a "$RES/check.txt"
  local backend=inductor size=small
  [ "$DEVICE" = cpu ] && backend=aot_eager
  [ "$SIZE" = tiny ] && size=tiny
  # WORK/compile_ok records a verdict only: yes (PASSED), or no where the self-check ran on the
  # device and failed (its FAILED line) or ran past its limit. A self-check that could not run
  # (bad flags, no GPU, a crash before its verdict) writes nothing: the next `all` checks again.
  local rc lines=$(wc -l < "$RES/check.txt")
  local flags=(--device "$DEVICE" --size "$size" --backend "$backend")
  [ "$CHECK_LAYERS" = all ] || flags+=(--layers "$CHECK_LAYERS")
  [ "$COMPILE_MODE" = regional ] && flags+=(--regional)
  flags+=(--compile_cache "$(cache_file "selfcheck-$size-$COMPILE_MODE-$CHECK_LAYERS")")
  limited selfcheck "$LIMIT_CHECK" check.txt $PY benchmarks/selfcheck.py "${flags[@]}"; rc=$?
  if [ "$rc" = 0 ]; then
    echo yes > "$WORK/compile_ok"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ] \
       || tail -n +"$((lines + 1))" "$RES/check.txt" | grep -q "^selfcheck: FAILED"; then
    echo no > "$WORK/compile_ok"
    echo "check: the compiled step FAILED its self-check: pre-training runs eagerly (COMPILE=1 forces it)" \
      | tee -a "$RES/check.txt"
  else
    COMPILE=0                          # for the rest of this command only
    echo "check: the self-check could not run (exit $rc, no verdict; see $RES/check.txt):" \
         "nothing recorded, this command pre-trains eagerly" | tee -a "$RES/check.txt"
    return 1
  fi
  return 0
}

# Text to prepare in CORPUS, or one error line naming the variable (prepare, and `all` before it starts).
need_shards() {
  ready_corpus || [ "$(shards | wc -l)" -gt 0 ] || die "no corpus files (*.txt, *.txt.xz, *.txt.gz) in $CORPUS: set CORPUS=a folder of your own text (docs/gpu.md says what to use)"
}

stage_prepare() {
  need_shards
  rm -rf "$WORK/data/corpus"
  mkdir -p "$WORK/data" || die "cannot write $WORK/data"
  if [ "$CORPUS" = demo ]; then       # the built-in corpus, prepared once into data/demo
    echo "prepare: no CORPUS given and none prepared in data/: the demo corpus (Python's own" \
         "documentation), a smoke point, not a result; set CORPUS=a folder of your text" \
      | tee -a "$RES/prepare.txt" "$RES/summary.txt"
    run prepare.txt $PY -c "import data; print(data.prepare_demo())" || die "preparing the demo corpus failed: see $RES/prepare.txt"
    ln -s "$(cd data/demo && pwd)" "$WORK/data/corpus"
    return 0
  fi
  if [ -f "$CORPUS/meta.json" ]; then   # prepared by data.py already: used where it is
    ln -s "$(cd "$CORPUS" && pwd)" "$WORK/data/corpus"
    echo "prepare: $CORPUS is prepared already (meta.json): used as it is" | tee -a "$RES/prepare.txt"
    return 0
  fi
  # shellcheck disable=SC2046
  run prepare.txt $PY data.py --corpus $(shards) --name corpus --out_root "$WORK/data" \
    --workers "$WORKERS" $PREP_FLAGS || die "data.py failed: see $RES/prepare.txt"
}

# One bench contender, its own limit, its own JSON (RES/bench_NAME.json).
bench_one() {
  local w=$1 secs=${2:-$LIMIT_BENCH}
  if [ "$w" = hf ] && ! $PY -c "import transformers" 2>/dev/null; then
    echo "bench hf: skipped, transformers not installed (pip install transformers)" | tee -a "$RES/summary.txt"
    return 0
  fi
  # shellcheck disable=SC2086
  limited "bench $w" "$secs" bench.txt $PY benchmarks/bench.py --device "$DEVICE" --size "$SIZE" \
    --data "$WORK/data/corpus" --which "$w" $BENCH_FLAGS --json "$RES/bench_$w.json"
}

# The contenders' JSON files as one, bench_gpu.json, with each one's tokens/s over HF's.
bench_merge() {
  $PY - "$RES" <<'EOF_PY'
import json, sys
from pathlib import Path
res = Path(sys.argv[1])
parts = [json.loads(p.read_text()) for p in sorted(res.glob("bench_*.json")) if p.name != "bench_gpu.json"]
if parts:
    runs = {r["name"]: r for p in parts for r in p["results"]}
    hf = runs.get("hf")
    ratios = {f"{n}/hf tokens_per_s": r["tokens_per_s"] / hf["tokens_per_s"]
              for n, r in runs.items() if hf and n != "hf"}
    out = dict(header=parts[0]["header"], results=list(runs.values()), ratios=ratios,
               compiled_step=next((p["compiled_step"] for p in parts if p["compiled_step"]
                                   and p["compiled_step"].get("backend") == "inductor"),
                                  parts[0]["compiled_step"]))
    (res / "bench_gpu.json").write_text(json.dumps(out, indent=1))
    for n, r in runs.items():
        print(f"bench: {n} {r['mode']}: {r['steps_per_s']:.2f} steps/s, {r['tokens_per_s']:,.0f} tok/s")
EOF_PY
}

stage_bench() {
  ensure_corpus
  # 1. each contender in its own process, with its own limit (a failing one costs only itself)
  local w try
  for w in ${WHICH//,/ }; do bench_one "$w"; done
  bench_merge | tee -a "$RES/bench.txt"
  # 2. where an eager step's time goes: torch.profiler's top operations (the trace stays in WORK)
  rm -rf "$WORK/profile"
  limited profile "$LIMIT_PROFILE" profile.txt $PY electra_small.py --data "$WORK/data/corpus" \
    --size "$SIZE" --device "$DEVICE" --max_steps $((PROFILE_STEPS + 12)) --profile "$PROFILE_STEPS" \
    --log_every 1000 --out_dir "$WORK/profile"
  # 3. the data-parallel path through torchrun, with NCCL on a GPU (gloo on a CPU)
  for try in default loopback; do      # a machine whose host name resolves nowhere: loopback
    rm -rf "$WORK/ddp"
    [ $try = loopback ] && export GLOO_SOCKET_IFNAME=lo NCCL_SOCKET_IFNAME=lo
    limited "torchrun ($try network)" "$LIMIT_DDP" ddp.txt $PY -m torch.distributed.run --standalone \
      --nproc_per_node=1 electra_small.py --data "$WORK/data/corpus" --size "$SIZE" \
      --device "$DEVICE" --max_steps "$DDP_STEPS" --log_every 10 --out_dir "$WORK/ddp" && break
  done
  return 0
}

stage_start() {
  running && die "a run is already going (pid $(cat "$PID")): see the status stage"
  ensure_corpus
  local flags=(--data "$WORK/data/corpus" --model "$MODEL" --size "$SIZE" --device "$DEVICE"
               --out_dir "$RUN"
               --log_every "$LOG_EVERY" --ckpt_every_min 3)
  if [ -f "$RUN/ckpt.pt" ]; then
    flags+=(--resume)                  # the checkpoint's own budget and position
  else
    flags+=(--hours "$HOURS" --save_at 0.5)
  fi
  use_compile && flags+=(--compile "$COMPILE_MODE"
                         --compile_cache "$(cache_file "pretrain-$MODEL-$SIZE-$COMPILE_MODE")")
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
  local end=$((SECONDS + 10#$WAIT_S))
  while running && [ $SECONDS -lt $end ]; do sleep 5; done
  stage_status
}

# Pre-training in the foreground for a number of steps (all, finetune): `pretrain STEPS SECONDS
# [flags]`, stopped at SECONDS if it runs longer (it saves its checkpoint on the way out).
pretrain() {
  local steps=$1 secs=$2; shift 2
  ensure_corpus
  rm -rf "$RUN" "$LOG"
  local flags=(--data "$WORK/data/corpus" --model "$MODEL" --size "$SIZE" --device "$DEVICE"
               --out_dir "$RUN" --log_every "$LOG_EVERY" --ckpt_every_min 1 "$@")
  [ "$steps" -gt 0 ] && flags+=(--max_steps "$steps")
  use_compile && flags+=(--compile "$COMPILE_MODE"
                         --compile_cache "$(cache_file "pretrain-$MODEL-$SIZE-$COMPILE_MODE")")
  [ "${PROFILE_RUN:-0}" -gt 0 ] && flags+=(--profile "$PROFILE_RUN")
  limited "pretrain$S" "$secs" "pretrain$S.txt" $PY electra_small.py "${flags[@]}"
  cp "$RES/pretrain$S.txt" "$LOG" 2>/dev/null
  [ -f "$RUN/log.jsonl" ] && cp "$RUN/log.jsonl" "$RES/pretrain_log$S.jsonl"
  [ -f "$RUN/ckpt.pt" ]
}

stage_finetune() {
  local end=$((SECONDS + ${FT_WAIT:-300})) budget=${1:-0}
  check_glue
  while running && [ $SECONDS -lt $end ]; do sleep 5; done
  running && die "pre-training is still running after ${FT_WAIT:-300} s: wait, or stop it"
  if [ ! -f "$RUN/ckpt.pt" ]; then     # a lost machine took it, or nothing ran yet
    echo "finetune: no checkpoint $RUN/ckpt.pt: pre-training $PRE_STEPS steps first" | tee -a "$RES/summary.txt"
    pretrain "$PRE_STEPS" 600 || die "pre-training failed: see $RES/pretrain$S.txt"
  fi
  stage_status >/dev/null
  mkdir -p "$WORK/glue$S"
  local t seeds secs first=1
  # One process per task, each writing its own JSON and with its own limit: a task stopped at
  # its limit loses only itself. `all` passes its remaining time: the tasks share it, and the
  # first gets at least FT_RESERVE seconds even past the minutes, so `all` always has a score.
  for t in ${TASKS//,/ }; do
    seeds=$SEEDS; [ "$t" = sst2 ] && seeds=$SST2_SEEDS
    secs=$LIMIT_TASK
    if [ "$budget" -gt 0 ]; then
      secs=$((budget - SECONDS))
      [ "$first" = 1 ] && [ "$secs" -lt "$FT_RESERVE" ] && secs=$FT_RESERVE
      [ "$secs" -gt "$LIMIT_TASK" ] && secs=$LIMIT_TASK
      [ "$secs" -lt 5 ] && { echo "finetune $t: skipped, no time left" | tee -a "$RES/summary.txt"; continue; }
    fi
    first=0
    # compiled where finetune_glue.py compiles: with CUDA unless --no-compile, or --compile
    local cache=()
    if [[ " $FT_ARGS " == *" --compile "* ]] \
       || { [ "$DEVICE" = cuda ] && [[ " $FT_ARGS " != *" --no-compile "* ]]; }; then
      # (one file per head: the tasks of two classes compile the same graphs)
      cache=(--compile_cache "$(cache_file "finetune-$SIZE-$(case $t in stsb) echo regression ;;
                                 mnli) echo 3-way ;; *) echo 2-way ;; esac)")")
    fi
    # shellcheck disable=SC2086
    limited "finetune $t$S" "$secs" finetune.txt $PY finetune_glue.py --ckpt "$RUN/ckpt.pt" \
      --glue_dir "$GLUE" --tasks "$t" --seeds "$seeds" --device "$DEVICE" \
      --out "$WORK/glue$S/glue_$t.json" "${cache[@]}" $FT_ARGS
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

# The GLUE folder of a task name of TASKS (glue.py's TASKS knows them all; these are the usual).
glue_folder() {
  case $1 in cola) echo CoLA ;; sst2) echo SST-2 ;; mrpc) echo MRPC ;; stsb) echo STS-B ;;
    qqp) echo QQP ;; mnli) echo MNLI ;; qnli) echo QNLI ;; rte) echo RTE ;; wnli) echo WNLI ;;
    *) echo "$1" ;; esac
}

# Every task of TASKS has its folder in GLUE (train.tsv, dev.tsv; MNLI: dev_matched.tsv), or one
# error line that says where GLUE comes from.
# Whether GLUE holds task $1 (train.tsv and dev.tsv; MNLI: dev_matched.tsv).
has_task() {
  local d; d="$GLUE/$(glue_folder "$1")"
  [ -f "$d/train.tsv" ] && { [ -f "$d/dev.tsv" ] || [ -f "$d/dev_matched.tsv" ]; }
}
check_glue() {
  local t missing=()
  [ "$TASKS" = none ] && return 0
  for t in ${TASKS//,/ }; do
    has_task "$t" || missing+=("$t")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  die "no GLUE data for ${missing[*]} in $GLUE: set GLUE=a folder with CoLA/ SST-2/ MRPC/ STS-B/ RTE/ (train.tsv, dev.tsv each; get them with 'python finetune_glue.py --download DIR' where there is internet, see docs/finetuning.md), or TASKS=the tasks you have"
}

# The tasks GLUE holds, the smallest training set first (as `all` fine-tunes them: a task that
# no longer fits is the largest left). WNLI is left out, as the paper leaves it out.
present_tasks() {
  local t
  for t in rte mrpc stsb cola sst2 qnli qqp mnli; do
    has_task "$t" && echo "$t"
  done
}

# Before a stage starts: its arguments, the python, the GPU (DEVICE=cuda) and every input it
# will need later are there, so a problem is one line at once - before anything is prepared,
# run or written, and never after minutes of pre-training.
TORCH_CUDA="" PY_VERSIONS=""            # (need_python: 1 if torch sees a CUDA GPU, 0 if not, then its version)
need_python() {
  local info
  info=$($PY -c "import sys, torch, numpy, tiktoken
gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
print('python', sys.version.split()[0], '| torch', torch.__version__, '| cuda', torch.version.cuda, '| GPU', gpu)
print('numpy', numpy.__version__, '| tiktoken', tiktoken.__version__)
print(int(torch.cuda.is_available()), torch.__version__)" 2>/dev/null) \
    || die "$PY cannot import torch, numpy and tiktoken: install the requirements (README), or set PY=the python that has them"
  # (the last three lines: anything an import printed before them is not ours)
  TORCH_CUDA=$(tail -n 1 <<< "$info") PY_VERSIONS=$(tail -n 3 <<< "$info" | head -n 2)
}
# DEVICE names a device (no python needed), then torch sees it (need_python first)
known_device() {
  case $DEVICE in cpu|cuda) ;; *) die "DEVICE=$DEVICE: use cuda (the default) or cpu" ;; esac
}
need_device() {
  [ "$DEVICE" = cpu ] || [ "${TORCH_CUDA%% *}" = 1 ] \
    || die "DEVICE=cuda, but $PY's torch sees no CUDA GPU (torch ${TORCH_CUDA#* }): install a CUDA build of PyTorch, or DEVICE=cpu SIZE=tiny for a smoke run"
}
prepared() { [ -f "$WORK/data/corpus/meta.json" ]; }
preflight() {
  case $1 in
    all) [[ $ALL_MIN =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] \
           && awk "BEGIN { exit !($ALL_MIN > 0) }" \
           || die "all $ALL_MIN: give the minutes as a positive number, e.g. all 9 (the default), all 30" ;;
    wait) [[ $WAIT_S =~ ^[0-9]+$ ]] && [ "$((10#$WAIT_S))" -gt 0 ] \
           || die "wait $WAIT_S: give the seconds as a positive whole number, e.g. wait 500 (the default)" ;;
  esac
  # what needs no python first (a setting, a folder), then the python and the GPU
  case $1 in all|check|bench|start|finetune) known_device ;; esac
  case $1 in
    all) prepared || need_shards; [ -z "$TASKS_GIVEN" ] || check_glue ;;
    prepare) need_shards ;;
    bench|start) prepared || need_shards ;;
    # a finetune with no checkpoint and no run going pre-trains first
    finetune) check_glue; running || [ -f "$RUN/ckpt.pt" ] || prepared || need_shards ;;
  esac
  case $1 in all|check|prepare|bench|start|finetune) need_python ;; esac
  case $1 in all|check|bench|start|finetune) need_device ;; esac
}

stage_all() {
  # One point of the compute-vs-GLUE curve in ALL_MIN minutes: check, prepare, a pre-training
  # run over the time left but fine-tuning's (--hours: compiling happens inside it, and the
  # schedule is laid over the training time after it), fine-tuning every task GLUE holds, then
  # the point's record (benchmarks/record_point.py) appended to RES/points.jsonl. Which point:
  # the next one after POINTS (the records kept so far) and this machine's RES/points.jsonl -
  # BERT-Small to the FLOPs of the last ELECTRA point that has no BERT point beside it, else
  # ELECTRA. The bench is a stage of its own.
  local deadline left flops="" plan skipped
  deadline=$((SECONDS + $(awk "BEGIN { print int(${ALL_MIN} * 60) }")))
  echo "all: $ALL_MIN minutes, until $(date -u -d "+$((deadline - SECONDS)) seconds" +%H:%M:%S) UTC" \
    | tee -a "$RES/summary.txt"
  [ -f "$WORK/compile_ok" ] || stage_check || true    # (no verdict: eager this time, checked again next time)
  ensure_corpus
  plan=$({ cat "$POINTS" "$RES/points.jsonl" 2>/dev/null || true; } | $PY benchmarks/record_point.py --next /dev/stdin) \
    || die "cannot read the points in $POINTS: see benchmarks/record_point.py"
  if [ "${plan%% *}" = bert ]; then
    MODEL=bert; run_files _bert; flops=${plan#* }
  else
    MODEL=electra; run_files "$([ -d "$WORK/pretrain" ] && echo _long)"
  fi
  # the tasks: those named, else every one GLUE holds; none: the point without GLUE
  if [ -z "$TASKS_GIVEN" ]; then
    TASKS=$(present_tasks | paste -sd, -)
    [ -n "$TASKS" ] || { TASKS=none; echo "all: no GLUE task in $GLUE: pre-training only, the point is recorded without a GLUE score (GLUE=a folder with CoLA/ SST-2/ ...)" | tee -a "$RES/summary.txt"; }
  fi
  # the time left but fine-tuning's (none without tasks), at least PRE_MIN s even past the minutes
  local reserve=$FT_RESERVE; [ "$TASKS" = none ] && reserve=10
  left=$((deadline - SECONDS - reserve))
  [ "$left" -lt "$PRE_MIN" ] && left=$PRE_MIN
  echo "all: pretrain$S: $left s ($(use_compile && echo "compiled, $COMPILE_MODE" || echo eager)," \
       "$([ -n "$flops" ] && echo "BERT-Small to ELECTRA's $flops FLOPs" || echo "--hours"))" \
    | tee -a "$RES/summary.txt"
  # (the limit, PRE_MIN past the run's own deadline, only guards against a hang)
  PROFILE_RUN=$PROFILE
  if [ -n "$flops" ]; then            # BERT-Small at ELECTRA's FLOPs, if they fit
    pretrain 0 "$((left + PRE_MIN))" --flops "$flops"
  else
    pretrain 0 "$((left + PRE_MIN))" --hours "$(awk "BEGIN { print $left / 3600 }")"
  fi || die "pre-training left no checkpoint: see $RES/pretrain$S.txt"
  PROFILE_RUN=0
  # the profile's table (train.py prints it), where the step's time went
  if [ "$PROFILE" -gt 0 ]; then
    sed -n '/^---*  *---/,/^profile of/p' "$RES/pretrain$S.txt" > "$RES/profile$S.txt"
    cp "$RUN/profile_top.json" "$RES/profile_top$S.json" 2>/dev/null
  fi
  # fine-tuning: one seed per task and the smallest tasks first, unless SEEDS or TASKS say.
  # On a GPU its static shapes at one length, 128: a 14M model's step of 32 x 128 is bound by
  # kernel launches, not arithmetic, so the padding costs little (an estimate), and each task
  # compiles 2 graphs instead of 6 (finetune_glue.py --buckets; FT_ARGS overrides)
  [ -n "$SEEDS_GIVEN" ] || SEEDS=1
  [ "$DEVICE" = cuda ] && [[ $FT_ARGS != *--buckets* && $FT_ARGS != *compile* ]] \
    && FT_ARGS="--buckets 128 $FT_ARGS"
  [ "$TASKS" = none ] || stage_finetune "$((deadline - 10))"
  skipped=$(sed -n "s/^finetune \([a-z0-9]*\)$S: skipped.*/\1/p" "$RES/summary.txt" | paste -sd, -)
  $PY benchmarks/record_point.py --run "$RUN" --out "$RES/points.jsonl" --skipped "$skipped" \
    --profile "$RES/profile_top$S.json" \
    --command "$(point_command)" \
    $([ "$TASKS" != none ] && [ -f "$RES/glue_gpu$S.json" ] && echo --glue "$RES/glue_gpu$S.json") \
    | tee -a "$RES/summary.txt"
}

# RES as a few files in PACK_TO: the record and the summary as they are, every other result in
# results.tar.gz, the compile caches in compile_cache.tar.gz - in parts of 15 MiB
# (compile_cache.tar.gz.00, .01, ...) where larger, for a machine that hands back files of at
# most 16 MiB; either way `cat compile_cache.tar.gz* | tar -xzf - -C .carry` unpacks them.
stage_pack() {
  [ -n "$PACK_TO" ] || die "pack: name the folder to pack into: pack DEST [RES]"
  [ -d "$RES" ] || die "pack: $RES: no results to pack"
  mkdir -p "$PACK_TO" || die "pack: cannot create $PACK_TO"
  local f part=$((15 * 1024 * 1024))
  for f in points.jsonl summary.txt; do
    [ -f "$RES/$f" ] && cp "$RES/$f" "$PACK_TO/"
  done
  tar -czf "$PACK_TO/results.tar.gz" -C "$RES" --exclude=./compile_cache . \
    || die "pack: cannot write $PACK_TO/results.tar.gz"
  rm -f "$PACK_TO"/compile_cache.tar.gz*          # (an earlier pack's parts)
  if compgen -G "$RES/compile_cache/*.bin" > /dev/null; then
    tar -czf "$PACK_TO/compile_cache.tar.gz" -C "$RES" compile_cache \
      || die "pack: cannot write $PACK_TO/compile_cache.tar.gz"
    if [ "$(stat -c %s "$PACK_TO/compile_cache.tar.gz")" -gt "$part" ]; then
      split -d -b "$part" "$PACK_TO/compile_cache.tar.gz" "$PACK_TO/compile_cache.tar.gz." \
        && rm "$PACK_TO/compile_cache.tar.gz"
    fi
  fi
  echo "pack: $(cd "$PACK_TO" && du -h --apparent-size points.jsonl summary.txt results.tar.gz \
    compile_cache.tar.gz* 2>/dev/null | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $2, $1}') in $PACK_TO"
}

# The command that made a point, with the settings that were not left at their defaults.
point_command() {
  local v out=""
  for v in $POINT_SETTINGS; do
    [ -n "${ORIG[$v]:-}" ] && out+="$v=${ORIG[$v]} "
  done
  echo "${out}bash benchmarks/gpu_measure.sh all $ALL_MIN"
}

case $STAGE in
  carry) stage_carry "${2:-}" ;;
  pack) stage_pack ;;
  all|check|prepare|bench|start|status|wait|finetune)
    preflight "$STAGE"
    mkdir -p "$RES" "$WORK" || die "cannot create $RES or $WORK"
    "stage_$STAGE" ;;
  *) echo "usage: bash benchmarks/gpu_measure.sh all [MINUTES=9] [RES] | carry [N]" \
          "| check|prepare|bench|start|status|finetune [RES] | wait [SECONDS=500] [RES]" \
          "| pack DEST [RES]" >&2; exit 2 ;;
esac
