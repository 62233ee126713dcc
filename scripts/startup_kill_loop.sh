#!/usr/bin/env bash
# Kills server 0 of a `ductile local` training job a fixed time after the
# server process started (during the workers' start-up), RUNS times, and
# counts the runs that did not end with exit status 0. The launcher
# restarts the killed server under the same id.
#
#   scripts/startup_kill_loop.sh [RUNS] [DELAY_S] [extra `ductile local` flags...]
#
# RUNS defaults to 10, DELAY_S to 1.0. DUCTILE names the binary
# (build/ductile by default). The logs of failed runs are kept and named.
set -uo pipefail

runs=${1:-10}
delay=${2:-1.0}
shift $(($# > 2 ? 2 : $#))
bin=${DUCTILE:-build/ductile}
failed=0

# The pid of server 0 among the descendants of process $1.
server0_of() {
  local pids=$1 all=$1 children
  while [[ -n $pids ]]; do
    children=$(for p in $pids; do pgrep -P "$p"; done)
    all="$all $children"
    pids=$children
  done
  for p in $all; do
    if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null |
      grep -qE ' server .*--server_id=0( |$)'; then
      echo "$p"
      return
    fi
  done
}

for i in $(seq 1 "$runs"); do
  log=$(mktemp /tmp/startup_kill.XXXXXX.log)
  "$bin" local --app=fmnist-logreg --servers=2 --workers=3 --epochs=1 \
    --max_samples=6000 "$@" >"$log" 2>&1 &
  launcher=$!
  server=""
  for _ in $(seq 1 400); do
    server=$(server0_of "$launcher")
    [[ -n $server ]] && break
    sleep 0.025
  done
  sleep "$delay"
  if [[ -n $server ]]; then
    kill -KILL "$server" 2>/dev/null
  else
    echo "run $i: server 0 never started"
  fi
  wait "$launcher"
  rc=$?
  if [[ $rc -ne 0 ]]; then
    failed=$((failed + 1))
    echo "run $i: exit status $rc (log: $log)"
    grep -m 3 -E 'DeadlineExceeded|did not confirm|failed|error' "$log"
  else
    echo "run $i: exit status 0 ($(grep -c 'rolled back while it started' \
      "$log") worker(s) started again after a rollback)"
    rm -f "$log"
  fi
done
echo "$failed of $runs runs failed (server 0 killed ${delay} s after it started)"
[[ $failed -eq 0 ]]
