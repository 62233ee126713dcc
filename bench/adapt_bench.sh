#!/usr/bin/env bash
# Experiments with the built-in policies (docs/adaptation.md), on the MLP
# (Fashion-MNIST) run by `ductile local`:
#
#   1. autoscale: from 1 worker with --policy=autoscale, against every fixed
#      size from 1 to MAX_WORKERS: the job's completion time, the
#      worker-seconds it took, and the size the policy settled on.
#   2. stragglers: 3 workers, worker 1 slowed about 3x (stopped 200 ms,
#      running 100 ms) from SLOW_AT seconds in: no policy (async), SSP(3)
#      alone, and --policy=stragglers: completion time, final test accuracy,
#      and, with the policy, the time from the slowdown to the replacement
#      request and to the replacement's start.
#   3. resize: BSP (mean), momentum SGD, 2 workers grown to 4 at clock
#      RESIZE_UP and shrunk to 2 at RESIZE_DOWN, for each --lr_scaling in
#      RESIZE_SETTINGS (none linear adascale): the training loss and the
#      test accuracy across the resizes (worker 0's CSV log).
#   4. noise scale: BSP, 3 workers: the gradient noise scale the servers
#      estimate, read with `ductile status` every second over the run, with
#      the servers' time spent on it per clock against the workers' step
#      time; and, in runs of their own (the readings cost CPU), the job's
#      time with --noise_scale_sample=0 (off), 8 (the default) and 1 (every
#      key).
#   5. gns-batch: BSP (mean), --lr_scaling=linear, 2 workers: no policy,
#      --policy=gns-batch (more workers, up to 4) and
#      --policy=gns-batch:by=batch (more batches a step, up to 4): the job's
#      time, its final test accuracy, the steps of worker 0 and when the
#      policy grew the global batch.
#   6. comm-batch: BSP (mean), --lr_scaling=COMM_SCALING (linear), 2
#      workers, logistic regression and the MLP: one batch a step against
#      --worker_policy=COMM_POLICY (comm-batch): the job's time, its final
#      test accuracy, worker 0's steps and its last batches a step, and the
#      time to a test accuracy of COMM_TARGET_LOGREG (0.82) or
#      COMM_TARGET_MLP (0.85) at an epoch's end.
#
# Usage: bench/adapt_bench.sh BUILD_DIR OUT_DIR [REPEATS]
# EXPERIMENTS="1 2 3 4" (the default) picks which to run; 5 and 6 run when
# named.
# Writes OUT_DIR/autoscale.csv, stragglers.csv, resize.csv, noise.csv,
# noise_cost.csv, gns.csv and comm_batch.csv (one row per run, or per
# reading), OUT_DIR/*.log (each run's output with a time stamp per line)
# and, with gnuplot,
# OUT_DIR/{autoscale,stragglers,resize,noise}.png (medians, or run 1's
# curves). Every run is bounded (timeout); the jobs' processes end with
# them.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 BUILD_DIR OUT_DIR [REPEATS]" >&2
  exit 2
fi
DUCTILE=$(realpath "$1")/ductile
OUT=$2
REPEATS=${3:-1}
MAX_WORKERS=${MAX_WORKERS:-4}
EPOCHS=${EPOCHS:-3}
SLOW_AT=${SLOW_AT:-8}
RESIZE_UP=${RESIZE_UP:-150}
RESIZE_DOWN=${RESIZE_DOWN:-600}
EXPERIMENTS=${EXPERIMENTS:-1 2 3 4}
RESIZE_SETTINGS=${RESIZE_SETTINGS:-none linear adascale}
COMM_SCALING=${COMM_SCALING:-linear}
COMM_POLICY=${COMM_POLICY:-comm-batch}
# Test accuracies whose time to reach experiment 6 reports.
COMM_TARGET_LOGREG=${COMM_TARGET_LOGREG:-0.82}
COMM_TARGET_MLP=${COMM_TARGET_MLP:-0.85}
[[ -x "$DUCTILE" ]] || { echo "no $DUCTILE: build first" >&2; exit 1; }
mkdir -p "$OUT"

# stamp: prefixes each line with the time it came (seconds since the
# epoch; bash's clock, no process per line).
stamp() {
  local line
  while IFS= read -r line; do
    printf '%s %s\n' "$EPOCHREALTIME" "$line"
  done
}

# calc EXPR: floating-point arithmetic.
calc() { awk "BEGIN {printf \"%.3f\", $1}"; }

# run LOG ARGS...: `ductile local ARGS` with its output in LOG, each line
# stamped with the seconds since the start; prints the wall seconds it took.
run() {
  local log=$1
  shift
  local start=$EPOCHREALTIME
  echo "$start" >"$log.start"
  timeout 900 "$DUCTILE" local --app=fmnist-mlp --servers=1 \
    --epochs="$EPOCHS" --verbose "$@" 2>&1 | stamp >"$log.raw" || {
    echo "run failed: $* (see $log.raw)" >&2
    return 1
  }
  local end=$EPOCHREALTIME
  awk -v s="$start" '{t = $1; $1 = ""; printf "%.3f%s\n", t - s, $0}' \
    "$log.raw" >"$log"
  rm -f "$log.raw"
  calc "$end - $start"
}

# worker_seconds LOG START_WORKERS TOTAL_S: the integral of the job's size
# over its run, from the launcher's "resize: workers A -> B" lines.
worker_seconds() {
  awk -v k="$2" -v total="$3" '
    / resize: workers [0-9]+ -> [0-9]+ / {
      for (i = 1; i <= NF; i++) if ($i == "->") b = $(i + 1)
      sum += k * ($1 - last); last = $1; k = b
    }
    END { sum += k * (total - last); printf "%.1f\n", sum }' "$1"
}

accuracy() {
  grep -o "final test accuracy: [0-9.]*" "$1" | awk '{print $4}' | tail -n 1 ||
    true
}

wanted() { [[ " $EXPERIMENTS " == *" $1 "* ]]; }

# ---- 1. autoscale against fixed sizes
if wanted 1; then
echo "run,workers,policy,seconds,worker_seconds,settled,accuracy" \
  >"$OUT/autoscale.csv"
for ((r = 1; r <= REPEATS; r++)); do
  for ((k = 1; k <= MAX_WORKERS; k++)); do
    log="$OUT/fixed-$k-$r.log"
    s=$(run "$log" --workers="$k")
    echo "$r,$k,none,$s,$(calc "$k * $s"),$k,$(accuracy "$log")" \
      >>"$OUT/autoscale.csv"
    echo "fixed $k: ${s}s"
  done
  log="$OUT/autoscale-$r.log"
  s=$(run "$log" --workers=1 \
    --policy="autoscale:settle_s=4:measure_s=4:max=$MAX_WORKERS")
  settled=$(grep -o "autoscale: settled on [0-9]*" "$log" | awk '{print $4}' |
    tail -n 1 || true)
  echo "$r,1,autoscale,$s,$(worker_seconds "$log" 1 "$s"),${settled:-none},$(accuracy "$log")" \
    >>"$OUT/autoscale.csv"
  echo "autoscale: ${s}s, settled on ${settled:-none (still growing at the end)}"
done
fi

# ---- 2. a straggler
# slow_worker FILE: finds worker 1 of the job and slows it from SLOW_AT
# seconds after it started until it exits; writes when it began to FILE.
slow_worker() {
  local pid="" deadline=$((SECONDS + 120))
  while [[ -z "$pid" && $SECONDS -lt $deadline ]]; do
    sleep 0.2
    pid=$(pgrep -f "ductile worker .*--worker_id=1 .*--epochs=$EPOCHS" | head -n 1 || true)
  done
  [[ -n "$pid" ]] || return 0
  sleep "$SLOW_AT"
  echo "$EPOCHREALTIME" >"$1"
  while kill -STOP "$pid" 2>/dev/null; do
    sleep 0.2
    kill -CONT "$pid" 2>/dev/null || break
    sleep 0.1
  done
}

if wanted 2; then
echo "run,setting,seconds,accuracy,detect_s,replace_s" >"$OUT/stragglers.csv"
for ((r = 1; r <= REPEATS; r++)); do
  for setting in none ssp stragglers; do
    case $setting in
      none) args=(--workers=3) ;;
      ssp) args=(--workers=3 --consistency=ssp --staleness=3) ;;
      stragglers) args=(--workers=3 --policy=stragglers) ;;
    esac
    log="$OUT/straggler-$setting-$r.log"
    rm -f "$OUT/slow-at"
    slow_worker "$OUT/slow-at" &
    slower=$!
    s=$(run "$log" "${args[@]}")
    kill "$slower" 2>/dev/null || true
    wait "$slower" 2>/dev/null || true
    # Seconds from the slowdown to the policy's request and to the new
    # worker's start (the log's times count from the run's start).
    asked=$(grep -m 1 "stragglers: worker 1 made" "$log" | awk '{print $1}' || true)
    replaced=$(grep -m 1 "in place of worker 1" "$log" | awk '{print $1}' || true)
    detect="" replace=""
    if [[ -n "$asked" && -f "$OUT/slow-at" ]]; then
      slow_at=$(calc "$(cat "$OUT/slow-at") - $(cat "$log.start")")
      detect=$(calc "$asked - $slow_at")
      [[ -z "$replaced" ]] || replace=$(calc "$replaced - $slow_at")
    fi
    echo "$r,$setting,$s,$(accuracy "$log"),$detect,$replace" \
      >>"$OUT/stragglers.csv"
    echo "straggler, $setting: ${s}s detect ${detect:--} replace ${replace:--}"
  done
done
fi

# ---- 3. resizes with and without the learning-rate rule
if wanted 3; then
echo "run,setting,kind,epoch,clock,time_s,loss,accuracy" >"$OUT/resize.csv"
for ((r = 1; r <= REPEATS; r++)); do
  for setting in $RESIZE_SETTINGS; do
    log="$OUT/resize-$setting-$r.log"
    rm -f "$log.csv"
    s=$(run "$log" --workers=2 --max_workers=4 --consistency=bsp \
      --optimizer=momentum --learning_rate=0.02 --log_every=25 \
      --lr_scaling="$setting" \
      --resize_schedule="workers=4@clock=$RESIZE_UP,workers=2@clock=$RESIZE_DOWN" \
      --csv_log="$log.csv")
    # The log's columns: kind,epoch,clock,time_s,loss,samples_per_s,metric.
    awk -F, -v r="$r" -v s="$setting" \
      'NR > 1 {print r "," s "," $1 "," $2 "," $3 "," $4 "," $5 "," $7}' \
      "$log.csv" >>"$OUT/resize.csv"
    echo "resize, lr_scaling=$setting: ${s}s, accuracy $(accuracy "$log")"
  done
done
fi

# ---- 4. the gradient noise scale over a run, and its cost
if wanted 4; then
# watch_noise LOG CSV: once LOG names the coordinator, reads `ductile
# status` every second until the job ends; appends
# time_s,clocks,noise_scale,server_us_per_clock,step_ms (the workers' mean).
watch_noise() {
  local addr="" deadline=$((SECONDS + 120)) start out line keys step
  while [[ -z "$addr" && $SECONDS -lt $deadline ]]; do
    sleep 0.2
    addr=$(grep -o -m 1 "coordinator at [^,]*" "$1.raw" 2>/dev/null |
      awk '{print $3}' || true)
  done
  [[ -n "$addr" ]] || return 0
  # The job's keys (ductile local makes them): status needs them.
  keys=$(grep -o -m 1 "keys in [^ ]*" "$1.raw" | awk '{print $3}' || true)
  start=$(cat "$1.start")
  while out=$(timeout 10 "$DUCTILE" status --coordinator="$addr" \
    ${keys:+--keys="$keys"} --timeout_ms=3000 2>/dev/null); do
    line=$(grep -m 1 "gradient noise scale" <<<"$out" || true)
    step=$(awk '$2 == "worker" && $11 ~ /^[0-9.]+$/ {s += $11; n++}
      END {if (n) printf "%.2f", s / n}' <<<"$out")
    if [[ "$line" =~ scale:\ ([0-9.e+-]+)\ worker.*over\ ([0-9]+)\ clocks\;\ ([0-9]+)\ us ]]; then
      echo "$(calc "$EPOCHREALTIME - $start"),${BASH_REMATCH[2]},${BASH_REMATCH[1]},${BASH_REMATCH[3]},$step" >>"$2"
    fi
    sleep 1
  done
}
echo "run,time_s,clocks,noise_scale,server_us_per_clock,step_ms" \
  >"$OUT/noise.csv"
echo "run,sample,seconds,accuracy" >"$OUT/noise_cost.csv"
for ((r = 1; r <= REPEATS; r++)); do
  log="$OUT/noise-watched-$r.log"
  rm -f "$log.readings" "$log.raw"
  watch_noise "$log" "$log.readings" &
  watcher=$!
  s=$(run "$log" --workers=3 --consistency=bsp)
  wait "$watcher" 2>/dev/null || true
  [[ ! -f "$log.readings" ]] ||
    sed "s/^/$r,/" "$log.readings" >>"$OUT/noise.csv"
  echo "noise scale watched: ${s}s, last reading $(tail -n 1 "$log.readings" 2>/dev/null)"
  for sample in 0 8 1; do
    log="$OUT/noise-$sample-$r.log"
    s=$(run "$log" --workers=3 --consistency=bsp --noise_scale_sample="$sample")
    echo "$r,$sample,$s,$(accuracy "$log")" >>"$OUT/noise_cost.csv"
    echo "noise scale sample 1/$sample: ${s}s"
  done
done
fi

# ---- 5. the gns-batch policy against a fixed global batch
if wanted 5; then
echo "run,setting,seconds,accuracy,steps,growths" >"$OUT/gns.csv"
for ((r = 1; r <= REPEATS; r++)); do
  for setting in fixed workers batch; do
    log="$OUT/gns-$setting-$r.log"
    policy=()
    case $setting in
      workers) policy=(--policy=gns-batch:max=4 --max_workers=4) ;;
      batch) policy=(--policy=gns-batch:by=batch:max=4) ;;
    esac
    s=$(run "$log" --workers=2 --consistency=bsp --lr_scaling=linear \
      --policy_interval_ms=500 "${policy[@]}")
    steps=$(grep -o "after [0-9]* steps per worker" "$log" |
      awk '{print $2}' | tail -n 1 || true)
    # The clocks (as the coordinator knew them) it grew at.
    growths=$( (grep "gns-batch: the noise scale" "$log" || true) |
      grep -o "at clock [0-9]*" | awk '{print $3}' | paste -sd' ' - || true)
    echo "$r,$setting,$s,$(accuracy "$log"),$steps,$growths" >>"$OUT/gns.csv"
    echo "gns-batch $setting: ${s}s, accuracy $(accuracy "$log"), $steps steps, grown at clock(s) $growths"
  done
done
fi

# ---- 6. comm-batch (a worker policy) against one batch a step
# time_to LOG TARGET: seconds from the run's start to the end of the
# first epoch whose test accuracy reached TARGET (empty if none did).
time_to() {
  awk -v target="$2" '/epoch [0-9]+ done: test accuracy/ {
      for (i = 1; i <= NF; i++) if ($i == "accuracy") a = $(i + 1)
      if (a + 0 >= target + 0) { print $1; exit }
    }' "$1"
}

if wanted 6; then
echo "run,app,setting,seconds,accuracy,steps,batches_a_step,target,time_to_target" \
  >"$OUT/comm_batch.csv"
for ((r = 1; r <= REPEATS; r++)); do
  for app in fmnist-logreg fmnist-mlp; do
    for setting in fixed comm-batch; do
      log="$OUT/comm-$app-$setting-$r.log"
      policy=()
      [[ $setting == comm-batch ]] && policy=(--worker_policy="$COMM_POLICY")
      s=$(run "$log" --app="$app" --workers=2 --consistency=bsp \
        --lr_scaling="$COMM_SCALING" "${policy[@]}")
      steps=$(grep -o "after [0-9]* steps per worker" "$log" |
        awk '{print $2}' | tail -n 1 || true)
      # Worker 0's last size (1: it never grew).
      batches=$( (grep "worker 0: [0-9]* batches a step" "$log" || true) |
        tail -n 1 | grep -o "[0-9]* batches" | awk '{print $1}' || true)
      target=$COMM_TARGET_MLP
      [[ $app == fmnist-logreg ]] && target=$COMM_TARGET_LOGREG
      reached=$(time_to "$log" "$target")
      echo "$r,$app,$setting,$s,$(accuracy "$log"),$steps,${batches:-1},$target,$reached" \
        >>"$OUT/comm_batch.csv"
      echo "comm-batch $app $setting: ${s}s, accuracy $(accuracy "$log"), $steps steps, ${batches:-1} batches a step, $target after ${reached:-(not reached)}s"
    done
  done
done
fi

# ---- plots (medians over the repeats)
if command -v gnuplot >/dev/null && wanted 1 && wanted 2; then
  median() {  # median of column $2 for rows whose key columns match
    awk -F, -v col="$2" -v key="$3" -v keycol="$4" \
      'NR > 1 && $keycol == key {print $col}' "$1" | sort -n |
      awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
  }
  {
    for ((k = 1; k <= MAX_WORKERS; k++)); do
      awk -F, -v k="$k" 'NR > 1 && $2 == k && $3 == "none" {print $4, $5}' \
        "$OUT/autoscale.csv" | sort -n | awk -v k="$k" \
        '{t[NR] = $1; w[NR] = $2} END {m = int((NR + 1) / 2); print "\"fixed " k "\"", t[m], w[m]}'
    done
    awk -F, 'NR > 1 && $3 == "autoscale" {print $4, $5}' "$OUT/autoscale.csv" |
      sort -n | awk '{t[NR] = $1; w[NR] = $2} END {m = int((NR + 1) / 2); print "autoscale", t[m], w[m]}'
  } >"$OUT/autoscale.dat"
  for setting in none ssp stragglers; do
    echo "$setting $(median "$OUT/stragglers.csv" 3 "$setting" 2)"
  done >"$OUT/stragglers.dat"
  (
    cd "$OUT"
    gnuplot <<'EOF'
set terminal png size 900,500
set style data histograms
set style fill solid 0.6 border -1
set boxwidth 0.8
set grid ytics
set output 'autoscale.png'
set title 'MLP, 1 server: job time and worker-seconds (median)'
set ylabel 'seconds'
plot 'autoscale.dat' using 2:xtic(1) title 'job seconds', \
     '' using 3 title 'worker-seconds'
set output 'stragglers.png'
set title 'MLP, 3 workers, worker 1 slowed 3x: job time (median)'
plot 'stragglers.dat' using 2:xtic(1) title 'job seconds'
EOF
  )
fi
if command -v gnuplot >/dev/null && wanted 3; then
  loss_plot="" acc_plot=""
  for setting in $RESIZE_SETTINGS; do
    loss_plot+="${loss_plot:+, }'resize-$setting-loss.dat' with lines title '$setting'"
    acc_plot+="${acc_plot:+, }'resize-$setting-acc.dat' with linespoints title '$setting'"
    awk -F, -v s="$setting" '$1 == 1 && $2 == s && $3 == "step" {print $5, $7}' \
      "$OUT/resize.csv" >"$OUT/resize-$setting-loss.dat"
    awk -F, -v s="$setting" '$1 == 1 && $2 == s && $3 == "epoch" {print $5, $8}' \
      "$OUT/resize.csv" >"$OUT/resize-$setting-acc.dat"
  done
  (
    cd "$OUT"
    gnuplot <<EOF
set terminal png size 900,700 noenhanced
set output 'resize.png'
set multiplot layout 2,1 title 'MLP, BSP (mean), momentum: workers 2 -> 4 at clock $RESIZE_UP, -> 2 at $RESIZE_DOWN'
set grid
set arrow from $RESIZE_UP, graph 0 to $RESIZE_UP, graph 1 nohead dt 2
set arrow from $RESIZE_DOWN, graph 0 to $RESIZE_DOWN, graph 1 nohead dt 2
set ylabel 'training loss'
plot $loss_plot
set xlabel 'clock'
set ylabel 'test accuracy'
plot $acc_plot
unset multiplot
EOF
  )
fi
if command -v gnuplot >/dev/null && wanted 4 &&
  [[ $(wc -l <"$OUT/noise.csv") -gt 1 ]]; then
  awk -F, '$1 == 1 {print $3, $4}' "$OUT/noise.csv" >"$OUT/noise.dat"
  (
    cd "$OUT"
    gnuplot <<'EOF'
set terminal png size 900,450 noenhanced
set output 'noise.png'
set title 'MLP, BSP, 3 workers: gradient noise scale estimated on the servers'
set grid
set xlabel 'clock'
set ylabel 'worker batches'
plot 'noise.dat' with linespoints title 'B_simple (moving average)'
EOF
  )
fi
echo "results in $OUT"

