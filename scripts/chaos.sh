#!/usr/bin/env bash
# A chaos run: jobs of real processes under random faults of every role, for
# a given time, each checked for an exact final state and for hangs
# (docs/fault_tolerance.md, "Chaos run").
#
#   scripts/chaos.sh [MINUTES] [BUILD_DIR]      (default: 10, build)
#
# Jobs alternate between two kinds:
#   - counter: a coordinator, two servers and two workers of the exact
#     counter workload (tests/recovery_worker_main.cc: every rollback and
#     the final state checked bit for bit, Adam included under BSP), under
#     BSP, SSP or async. While it trains, every 1-4 s one fault: kill -9 of
#     a server or the coordinator (restarted 0.2-1.5 s later, same id and
#     state), SIGSTOP of a server or the coordinator (1-8 s, past the 4 s
#     heartbeat timeout) or of a worker (0.3-1.5 s), a server's or the
#     coordinator's state directory made read-only (2-6 s), or the state
#     disk filled up (2-6 s). Every other job runs with --replicas=2: a
#     server's death is then taken over by the backups of its slots, with
#     no rollback, when each has a whole copy (a takeover is a rollback
#     avoided).
#   - local: `ductile local` training logistic regression with random
#     kill -9 of servers, workers and the coordinator (--kill_schedule),
#     every other one with --replicas=2.
# A job passes when it ends by itself, every worker exits 0 (counter: each
# printed "final state exact"), and every process is gone within its
# bounds. Disk faults need root (a tmpfs for the state, read-only bind
# mounts); without it they are skipped. Logs of failed jobs are kept (of
# every job with CHAOS_KEEP_LOGS=1).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
minutes=${1:-10}
build=${2:-build}
cli=$PWD/$build/ductile
worker=$PWD/$build/tests/recovery_worker
if [[ ! -x $cli || ! -x $worker ]]; then
  echo "chaos: build $build first (needs ductile and tests/recovery_worker)" >&2
  exit 2
fi
root=0
[[ $(id -u) == 0 ]] && root=1

end=$((SECONDS + minutes * 60))
runs=0 passed=0 hangs=0 inexact=0 rollbacks=0 takeovers=0 replicated_rollbacks=0
declare -A fault_count=()
kept_logs=()

rand() { echo $((RANDOM % ($2 - $1 + 1) + $1)); }  # integer in [$1, $2]
sleep_ms() { sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }

# ---- One counter job.
pids=()        # by name: coordinator, server-0, server-1
declare -A pid=()
run_dir= state= addr= replicas=1

start_coordinator() {
  "$cli" coordinator --listen="$addr" --servers=2 --workers=2 --slots=64 \
    --replicas="$replicas" \
    --state_dir="$state/coordinator" --checkpoint_every=10 \
    --heartbeat_timeout_ms=4000 --no_worker_timeout_ms=60000 \
    >>"$run_dir/coordinator.log" 2>&1 &
  pid[coordinator]=$!
}
start_server() {
  "$cli" server --coordinator="$addr" --server_id="$1" \
    --state_dir="$state/servers" --ipc_dir="$run_dir" --timeout_ms=30000 \
    --coordinator_timeout_ms=60000 >>"$run_dir/server-$1.log" 2>&1 &
  pid[server-$1]=$!
}
alive() { [[ -n ${pid[$1]:-} ]] && kill -0 "${pid[$1]}" 2>/dev/null; }
workers_running() { alive worker-0 || alive worker-1; }

# Marks a fault and says what it was.
fault() {
  fault_count[$1]=$((${fault_count[$1]:-0} + 1))
  run_faults+=" $1"
}

read_only() {  # dir, ms: the directory read-only for a while
  local dir=$1
  mkdir -p "$dir"
  mount --bind "$dir" "$dir" && mount -o remount,bind,ro "$dir" "$dir" ||
    return 0
  sleep_ms "$2"
  umount "$dir" 2>/dev/null || umount -l "$dir"
}

one_fault() {
  local choice
  choice=$(rand 0 9)
  local s=$((RANDOM % 2))
  case $choice in
    0 | 1)
      if alive "server-$s"; then
        fault kill9-server
        kill -9 "${pid[server-$s]}"
        wait "${pid[server-$s]}" 2>/dev/null
        sleep_ms "$(rand 200 1500)"
        start_server "$s"
      fi
      ;;
    2)
      fault kill9-coordinator
      kill -9 "${pid[coordinator]}"
      wait "${pid[coordinator]}" 2>/dev/null
      sleep_ms "$(rand 200 1500)"
      start_coordinator
      ;;
    3)
      if alive "server-$s"; then
        fault stop-server
        kill -STOP "${pid[server-$s]}"
        sleep_ms "$(rand 1000 8000)"
        kill -CONT "${pid[server-$s]}"
      fi
      ;;
    4)
      fault stop-coordinator
      kill -STOP "${pid[coordinator]}"
      sleep_ms "$(rand 1000 8000)"
      kill -CONT "${pid[coordinator]}"
      ;;
    5)
      local w=worker-$((RANDOM % 2))
      if alive "$w"; then
        fault stop-worker
        kill -STOP "${pid[$w]}"
        sleep_ms "$(rand 300 1500)"
        kill -CONT "${pid[$w]}"
      fi
      ;;
    6)
      if ((tmpfs)); then
        fault read-only-server
        read_only "$state/servers/server-$s" "$(rand 2000 6000)"
      fi
      ;;
    7)
      if ((tmpfs)); then
        fault read-only-coordinator
        read_only "$state/coordinator" "$(rand 2000 6000)"
      fi
      ;;
    8 | 9)
      if ((tmpfs)); then
        fault disk-full
        local free
        free=$(df --output=avail -B1 "$state" | tail -1)
        fallocate -l $((free > 65536 ? free - 65536 : 1)) "$state/filler" \
          2>/dev/null || true
        sleep_ms "$(rand 2000 6000)"
        rm -f "$state/filler"
      fi
      ;;
  esac
}

counter_job() {
  local modes=(bsp ssp async)
  local mode=${modes[$((runs % 3))]}
  local clocks=1200
  replicas=$(((runs / 3) % 2 + 1))  # every mode with 1 and with 2
  run_dir=$(mktemp -d /tmp/ductile-chaos-XXXXXX)
  state=$run_dir/state
  mkdir -p "$state"
  tmpfs=0
  if ((root)) && mount -t tmpfs -o size=256m tmpfs "$state" 2>/dev/null; then
    tmpfs=1
  fi
  addr=ipc://$run_dir/coordinator.sock
  pid=()
  run_faults=
  local start=$SECONDS
  start_coordinator
  start_server 0
  start_server 1
  for w in 0 1; do
    "$worker" --coordinator="$addr" --clocks=$clocks --keys=48 --sleep_ms=15 \
      --mode="$mode" >"$run_dir/worker-$w.log" 2>&1 &
    pid[worker-$w]=$!
  done
  # Faults while the workers train, for at most 90 s.
  sleep 2
  while workers_running && ((SECONDS - start < 90)); do
    one_fault
    sleep_ms "$(rand 1000 4000)"
  done
  # Let it end: the workers within 240 s, then the rest within 90 s.
  local ok=1 hang=0 exact=1 deadline=$((SECONDS + 240))
  while workers_running && ((SECONDS < deadline)); do sleep 1; done
  for w in 0 1; do
    if alive "worker-$w"; then
      hang=1
      kill -9 "${pid[worker-$w]}"
    fi
    wait "${pid[worker-$w]}"
    local rc=$?
    ((rc == 0)) || ok=0
    grep -q "final state exact at clock $clocks" "$run_dir/worker-$w.log" ||
      exact=0
  done
  deadline=$((SECONDS + 90))
  while (alive coordinator || alive server-0 || alive server-1) &&
    ((SECONDS < deadline)); do
    sleep 1
  done
  for p in coordinator server-0 server-1; do
    if alive "$p"; then
      hang=1
      kill -9 "${pid[$p]}"
    fi
    wait "${pid[$p]}" 2>/dev/null
  done
  local rb tk
  rb=$(grep -ho "verified rollback to clock" "$run_dir"/worker-*.log | wc -l)
  tk=$(grep -c "taken over by their backups" "$run_dir/coordinator.log")
  rollbacks=$((rollbacks + rb))
  takeovers=$((takeovers + tk))
  ((replicas == 2)) && replicated_rollbacks=$((replicated_rollbacks + rb))
  ((tmpfs)) && umount -l "$state"
  report "counter $mode r$replicas" $((ok && exact && !hang)) "$hang" "$exact" \
    "$((SECONDS - start)) s, $rb rollback(s) verified, $tk takeover(s), faults:${run_faults:- none}"
}

local_job() {
  run_dir=$(mktemp -d /tmp/ductile-chaos-XXXXXX)
  local start=$SECONDS kills=$(rand 2 5)
  replicas=$(((runs / 4) % 2 + 1))
  timeout -s KILL 300 "$cli" local --app=fmnist-logreg --servers=2 --workers=3 \
    --epochs=2 --seed=$RANDOM --checkpoint_every=20 --replicas="$replicas" \
    --kill_schedule="random:$kills" --verbose >"$run_dir/local.log" 2>&1
  local rc=$? hang=0 tk
  ((rc == 137)) && hang=1
  tk=$(grep -c "taken over by their backups" "$run_dir/local.log")
  takeovers=$((takeovers + tk))
  fault_count[local-random-kill]=$((${fault_count[local-random-kill]:-0} + kills))
  report "local logreg r$replicas" $((rc == 0)) "$hang" 1 \
    "$((SECONDS - start)) s, exit $rc, $tk takeover(s), kill_schedule=random:$kills"
}

report() {  # name, passed, hang, exact, details
  runs=$((runs + 1))
  ((hangs += $3))
  (($4)) || inexact=$((inexact + 1))
  if (($2)); then
    passed=$((passed + 1))
    [[ -n ${CHAOS_KEEP_LOGS:-} ]] || rm -rf "$run_dir"
    printf 'run %d %-18s pass  %s\n' "$runs" "$1" "$5"
  else
    kept_logs+=("$run_dir")
    printf 'run %d %-18s FAIL  %s (hang: %d, exact: %d; logs in %s)\n' \
      "$runs" "$1" "$5" "$3" "$4" "$run_dir"
  fi
}

cleanup() {
  for p in "${pid[@]}"; do kill -9 "$p" 2>/dev/null; done
  [[ -n $state ]] && mountpoint -q "$state" 2>/dev/null && umount -l "$state"
}
trap cleanup EXIT

echo "chaos: $minutes minute(s); disk faults: $([[ $root == 1 ]] && echo on || echo "off (not root)")"
while ((SECONDS < end)); do
  if ((runs % 4 == 3)); then local_job; else counter_job; fi
done
echo "---"
echo "chaos summary: $runs job(s) in $((SECONDS / 60)) min, $passed passed," \
  "$hangs hang(s), $inexact inexact, $rollbacks rollback(s) verified bit for bit" \
  "($replicated_rollbacks in replicated jobs), $takeovers takeover(s): rollbacks avoided"
printf 'faults:'
for f in "${!fault_count[@]}"; do printf ' %s=%d' "$f" "${fault_count[$f]}"; done
echo
((passed == runs))
