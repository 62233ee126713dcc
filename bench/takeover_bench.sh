#!/usr/bin/env bash
# What a server's death costs a training job, with replicas (--replicas=2:
# its backups take its slots over) and without (the job rolls back to its
# last checkpoint), under `ductile local`
# (docs/fault_tolerance.md, "Replication").
#
# Each run trains the MLP on Fashion-MNIST for one epoch with 2 servers and
# 2 workers under --consistency (async), plain mode (no keys), worker 0
# writing a CSV row at every clock. `ductile local` kills server 1 with
# SIGKILL at clock KILL_AT (200) and restarts it; its launcher reports the
# death at once. The settings (SETTINGS: "2 1", the --replicas values)
# alternate, RUNS (3) times each. Printed per run: the longest gap between
# two of worker 0's clocks (the stall around the kill; a step takes a few
# ms), the median gap, the run's training time, and whether the job rolled
# back; then per setting the median and the 99th percentile (nearest rank)
# of the stall and the runs that rolled back.
#
#   bench/takeover_bench.sh                  # about 1 minute
#   RUNS=5 CONSISTENCY=bsp bench/takeover_bench.sh
#   RUNS=100 SETTINGS=2 bench/takeover_bench.sh   # p99 of the takeover
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
DUCTILE=${DUCTILE:-build/ductile}
RUNS=${RUNS:-3}
KILL_AT=${KILL_AT:-200}
CONSISTENCY=${CONSISTENCY:-async}
SETTINGS=${SETTINGS:-"2 1"}
OUT=$(mktemp -d /tmp/takeover-bench-XXXXXX)
trap 'rm -rf "$OUT"' EXIT
RESULTS=$OUT/results.csv
echo "replicas,run,stall_ms,median_step_ms,train_s,rolled_back" >"$RESULTS"

source bench/csv_gaps.sh  # (from the repository root, above)

for run in $(seq 1 "$RUNS"); do
  for replicas in $SETTINGS; do
    log=$OUT/run-$replicas-$run.log
    csv=$OUT/run-$replicas-$run.csv
    timeout 300 "$DUCTILE" local --insecure --app=fmnist-mlp --servers=2 --workers=2 \
      --epochs=1 --consistency="$CONSISTENCY" --replicas="$replicas" \
      --kill_schedule="server:1@clock=$KILL_AT" --log_every=1 \
      --csv_log="$csv" >"$log" 2>&1
    train_s=$(sed -nE 's/.*steps per worker, ([0-9.]+)s.*/\1/p' "$log")
    rolled=$(grep -q "rolling back" "$log" && echo yes || echo no)
    row="$replicas,$run,$(gaps "$csv"),$train_s,$rolled"
    echo "$row" >>"$RESULTS"
    echo "replicas=$replicas run $run: stall, median step (ms), training s," \
      "rolled back: ${row#*,*,}"
  done
done
for replicas in $SETTINGS; do
  stall=$(awk -F, -v r="$replicas" '$1 == r { print $3 }' "$RESULTS" | median)
  p99=$(awk -F, -v r="$replicas" '$1 == r { print $3 }' "$RESULTS" |
    percentile 99)
  step=$(awk -F, -v r="$replicas" '$1 == r { print $4 }' "$RESULTS" | median)
  rolled=$(awk -F, -v r="$replicas" '$1 == r && $6 == "yes"' "$RESULTS" |
    wc -l)
  echo "replicas=$replicas: stall median ${stall} ms, p99 ${p99} ms" \
    "(median step ${step} ms); $rolled of $RUNS run(s) rolled back"
done
