#!/usr/bin/env bash
# Memory one peer with no key can make a process hold: for each flood
# (slow_reader, status, parked) starts a coordinator and a server of
# DUCTILE (a `ductile` binary) on loopback, runs FLOOD
# (build/bench/peer_memory_flood) against them for SECONDS, prints the
# target's resident memory before, during and after, and stops both.
#
#   bench/peer_memory_flood.sh [DUCTILE] [FLOOD] [SECONDS]
#
# DUCTILE defaults to build/ductile, FLOOD to build/bench/peer_memory_flood,
# SECONDS to 30. Give another DUCTILE (built from another checkout) to
# compare; the flood speaks the wire format, which both must share.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ductile=${1:-$root/build/ductile}
flood=${2:-$root/build/bench/peer_memory_flood}
seconds=${3:-30}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

port=$((20000 + RANDOM % 20000))
for kind in slow_reader status parked; do
  port=$((port + 2))
  coordinator=tcp://127.0.0.1:$port
  server=tcp://127.0.0.1:$((port + 1))
  "$ductile" coordinator --listen="$coordinator" --servers=1 \
    >"$work/coordinator-$kind.log" 2>&1 &
  cpid=$!
  "$ductile" server --coordinator="$coordinator" --port=$((port + 1)) \
    --ipc_dir="$work" >"$work/server-$kind.log" 2>&1 &
  spid=$!
  pids=("$cpid" "$spid")
  "$flood" --coordinator="$coordinator" --server="$server" \
    --server_pid="$spid" --coordinator_pid="$cpid" --flood="$kind" \
    --seconds="$seconds" || echo "$kind: the flood tool failed ($?)"
  kill "$cpid" "$spid" 2>/dev/null || true
  wait "$cpid" "$spid" 2>/dev/null || true
  pids=()
done
