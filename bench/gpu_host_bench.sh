#!/usr/bin/env bash
# The measurements of docs/benchmarks.md "Large models on a 16-core GPU
# machine", in one script, for a host with many cores and an NVIDIA GPU:
#
#   check    the host (cores, GPU), and the CUDA cases of
#            compute_backend_test and mlp_model_test where the build has them
#   backend  backend_bench: the MLP's step and its matrix products on the CPU
#            (one OpenBLAS thread) and on the GPU, against each one's peak
#   rules    update_rule_bench: the update rules at 1 and 16 threads
#   model    model_bench: 1M and 10M floats on 1-4 servers and workers, and
#            100M floats on 1x1, 2x2 and 4x4
#   io       model_bench and push_pull_bench with 1, 2 and 4 ZeroMQ I/O
#            threads per member (--io_threads)
#   mlp      ductile local --device=cuda: the default MLP for 10 epochs on
#            1x1, 1x2, 1x4, 2x2 and 4x4 (servers x workers), the wide MLP
#            (784-2048-2048-10) on 20,000 samples on 1x1, 2x2 and 4x4
#   overlap  the wide MLP, 1x1, BSP: --overlap_push off and on, alternated
#   batch    the default MLP, 1x1, batches of 64, 256 and 1024 per worker
#   plain    the cost of encryption: the default MLP (1x1, 4x4) and the wide
#            one (1x1, 4x4) with --insecure (plain mode: no keys, no CURVE),
#            and the wide one on 4x4 with keys and 4 I/O threads per member
#
# Usage: bench/gpu_host_bench.sh BUILD_DIR DATA_DIR OUT_DIR
# PHASES="check backend rules model io mlp overlap batch plain" (the
# default) picks what runs. Writes OUT_DIR/PHASE.log for each phase and, for the
# training runs, OUT_DIR/mlp_*.csv (worker 0's CSV log: samples/s, the
# step split and the test accuracy after each epoch). Every command is
# bounded by a timeout; a phase that fails is reported and the next runs.
set -uo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 BUILD_DIR DATA_DIR OUT_DIR" >&2
  exit 2
fi
BUILD=$(realpath "$1") && DATA=$(realpath "$2") || exit 2
if [[ ! -x $BUILD/ductile || ! -d $DATA ]]; then
  echo "$0: no $BUILD/ductile, or no directory $DATA" >&2
  exit 2
fi
OUT=$3
PHASES=${PHASES:-check backend rules model io mlp overlap batch plain}
DUCTILE=$BUILD/ductile
mkdir -p "$OUT"
OUT=$(realpath "$OUT")

# run SECONDS LOG COMMAND...: the command's output, time-stamped to LOG and
# to stdout; its status and wall time as a last line.
run() {
  local limit=$1 log=$2
  shift 2
  echo "### $*" | tee -a "$log"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  echo "### rc=$rc wall=$((SECONDS - start))s" | tee -a "$log"
  return 0
}

phase_check() {
  local log=$OUT/check.log
  { nproc; grep -m1 "model name" /proc/cpuinfo; free -g | head -2
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm \
      --format=csv 2>&1; } | tee -a "$log"
  for t in compute_backend_test mlp_model_test; do
    [[ -x $BUILD/tests/$t ]] && run 120 "$log" "$BUILD/tests/$t" --gtest_brief=1
  done
}

phase_backend() {
  local log=$OUT/backend.log b=$BUILD/bench/backend_bench
  run 120 "$log" "$b" --devices=cpu --square=2048 --batches=64,256,1024,4096
  run 120 "$log" "$b" --devices=cuda --square=8192 --batches=64,256,1024,4096
  run 120 "$log" "$b" --devices=cuda --square=8192 --layers=784,2048,2048,10 \
    --batches=64,256,1024,4096
}

phase_rules() {
  run 120 "$OUT/rules.log" "$BUILD/bench/update_rule_bench" \
    --floats=16777216 --threads=1,16 --repeats=5
}

phase_model() {
  local log=$OUT/model.log b=$BUILD/bench/model_bench
  run 240 "$log" "$b" --floats=1000000,10000000 \
    --configs=1x1,1x2,1x4,2x2,2x4,4x4 --repeats=3 --csv="$OUT/model.csv"
  run 150 "$log" "$b" --floats=100000000 --configs=1x1,2x2,4x4 --steps=5 \
    --repeats=1
}

phase_io() {
  local log=$OUT/io.log t
  for t in 1 2 4; do
    run 90 "$log" "$BUILD/bench/model_bench" --io_threads=$t \
      --floats=10000000 --configs=1x1,4x4 --repeats=3
  done
  for t in 1 4; do
    run 90 "$log" "$BUILD/bench/push_pull_bench" --io_threads=$t \
      --sizes=16777216 --configs=1x1,2x2,4x4 --repeats=3
  done
}

# train NAME SECONDS FLAGS...: one `ductile local` run of the MLP on the GPU.
train() {
  local name=$1 limit=$2
  shift 2
  run "$limit" "$OUT/$PHASE.log" "$DUCTILE" local --app=fmnist-mlp \
    --device=cuda --data_dir="$DATA" --csv_log="$OUT/mlp_$name.csv" "$@"
}

phase_mlp() {
  local c s w
  for c in 1x1 1x2 1x4 2x2 4x4; do
    s=${c%x*} w=${c#*x}
    train "default_$c" 150 --servers=$s --workers=$w --epochs=10 \
      --log_every=200
  done
  for c in 1x1 2x2 4x4; do
    s=${c%x*} w=${c#*x}
    train "wide_$c" 90 --servers=$s --workers=$w --epochs=1 \
      --max_samples=20000 --layers=784,2048,2048,10 --log_every=20
  done
}

phase_overlap() {
  local o
  for o in false true false true; do
    train "overlap_$o" 60 --servers=1 --workers=1 --epochs=1 \
      --max_samples=2560 --consistency=bsp --layers=784,2048,2048,10 \
      --overlap_push=$o --log_every=10
  done
}

phase_batch() {
  local b
  for b in 64 256 1024; do
    train "batch_$b" 120 --servers=1 --workers=1 --epochs=10 \
      --batch_size=$b --log_every=20
  done
}

phase_plain() {
  local c s w
  for c in 1x1 4x4; do
    s=${c%x*} w=${c#*x}
    train "plain_default_$c" 150 --insecure --servers=$s --workers=$w \
      --epochs=10 --log_every=200
    train "plain_wide_$c" 90 --insecure --servers=$s --workers=$w --epochs=1 \
      --max_samples=20000 --layers=784,2048,2048,10 --log_every=20
  done
  train "io4_wide_4x4" 90 --io_threads=4 --servers=4 --workers=4 --epochs=1 \
    --max_samples=20000 --layers=784,2048,2048,10 --log_every=20
}

for PHASE in $PHASES; do
  if ! declare -F "phase_$PHASE" > /dev/null; then
    echo "unknown phase '$PHASE'" >&2
    exit 2
  fi
  echo "=== $PHASE $(date -u +%H:%M:%S)"
  "phase_$PHASE"
done
echo "=== done $(date -u +%H:%M:%S)"
