#!/usr/bin/env bash
# How long a worker killed by SIGKILL holds up the other workers of a BSP
# job under `ductile local` (docs/fault_tolerance.md, "Members that die").
#
# Each run trains logistic regression on Fashion-MNIST with --workers
# workers (3) and 2 servers under --consistency=bsp, worker 0 writing a CSV
# row at every clock (--log_every=1 --csv_log). Once worker 0 is past clock
# KILL_AT (50), the script kills worker 1 with SIGKILL (its pid from
# `ductile status`), and then, by MODE:
#   silence   nothing from the script: the coordinator learns of the
#             death when the worker's heartbeat times out
#             (--heartbeat_timeout_ms, 5 s) where nothing reports it; a
#             `ductile local` that reports its children's deaths itself
#             makes this the same as `launcher`;
#   report    it tells the coordinator at once, as a launcher that saw its
#             child die does (`ductile exited worker:1 --pid=PID`);
#   launcher  nothing, leaving the report to `ductile local` itself.
# The stall is the longest gap between two of worker 0's clocks over the
# run (a step takes a few ms; the gap around the kill dominates), taken
# from its CSV log's time_s column; the median step gap is printed beside
# it.
#
# Usage: bench/bsp_death_bench.sh BUILD_DIR OUT_DIR [RUNS] [MODE...]
# (RUNS 5, MODES "silence report"). Writes OUT_DIR/bsp_death.csv (one row
# per run: mode, run, stall_ms, median_step_ms) and OUT_DIR/MODE-RUN.log,
# .csv and (report) .exited; prints each mode's median stall. Every run is bounded
# (timeout); the job's processes end with it.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 BUILD_DIR OUT_DIR [RUNS] [MODE...]" >&2
  exit 2
fi
DUCTILE=$(realpath "$1")/ductile
OUT=$2
RUNS=${3:-5}
shift $(($# < 3 ? $# : 3))
MODES=${*:-silence report}
KILL_AT=${KILL_AT:-50}
WORKERS=${WORKERS:-3}
mkdir -p "$OUT"
OUT=$(realpath "$OUT")
RESULTS=$OUT/bsp_death.csv
echo "mode,run,stall_ms,median_step_ms" >"$RESULTS"

source "$(dirname "${BASH_SOURCE[0]}")/csv_gaps.sh"

run_once() {
  local mode=$1 run=$2
  local log=$OUT/$mode-$run.log csv=$OUT/$mode-$run.csv
  rm -f "$csv"
  timeout 300 "$DUCTILE" local --servers=2 --workers="$WORKERS" \
    --app=fmnist-logreg --consistency=bsp --epochs=1 --log_every=1 \
    --csv_log="$csv" >"$log" 2>&1 &
  local job=$!
  # The coordinator's address and the keys, from the launcher's first line.
  local address="" keys=""
  for _ in $(seq 600); do
    local line
    line=$(grep -m1 "ductile local: coordinator at" "$log" || true)
    if [[ -n $line ]]; then
      address=$(sed -E 's/.*coordinator at ([^,]*),.*/\1/' <<<"$line")
      keys=$(sed -nE 's/.*keys in (.*)$/\1/p' <<<"$line")
      break
    fi
    sleep 0.1
  done
  if [[ -z $address ]]; then
    echo "run $mode-$run: no coordinator address in $log" >&2
    kill "$job" 2>/dev/null || true
    wait "$job" || true
    return 1
  fi
  local admin=(--coordinator="$address" --keys="$keys")
  # Worker 0 past KILL_AT.
  for _ in $(seq 3000); do
    local clock
    clock=$(awk -F, '$1 == "step" { c = $3 } END { print c + 0 }' \
      "$csv" 2>/dev/null || echo 0)
    ((clock >= KILL_AT)) && break
    sleep 0.05
  done
  local pid
  pid=$("$DUCTILE" status "${admin[@]}" |
    awk '$2 == "worker" && $1 == "1" { print $(NF - 1) }')
  if [[ -z $pid || $pid == 0 ]]; then
    echo "run $mode-$run: no pid for worker 1" >&2
    kill "$job" 2>/dev/null || true
    wait "$job" || true
    return 1
  fi
  kill -9 "$pid"
  if [[ $mode == report ]]; then
    while kill -0 "$pid" 2>/dev/null; do sleep 0.005; done
    "$DUCTILE" exited "${admin[@]}" --pid="$pid" worker:1 \
      >"$OUT/$mode-$run.exited" 2>&1 ||
      echo "run $mode-$run: the report failed (see $OUT/$mode-$run.exited)" >&2
  fi
  wait "$job" || true
  local g
  g=$(gaps "$csv")
  echo "$mode,$run,$g" >>"$RESULTS"
  echo "$mode run $run: longest gap between worker 0's clocks ${g%%,*} ms" \
    "(median step ${g##*,} ms)"
}

for mode in $MODES; do
  for run in $(seq "$RUNS"); do
    run_once "$mode" "$run" || true
  done
done
for mode in $MODES; do
  stalls=$(awk -F, -v m="$mode" '$1 == m && $3 != "nan" { print $3 }' \
    "$RESULTS")
  [[ -z $stalls ]] && continue
  echo "$mode: median stall $(median <<<"$stalls") ms over" \
    "$(wc -l <<<"$stalls") run(s): $(tr '\n' ' ' <<<"$stalls")"
done
