#!/usr/bin/env bash
# A long flood of every kind against a job with keys: starts a coordinator,
# two servers (each limited to 1024 open files, soft and hard) and two
# workers training fmnist-mlp under SSP, all with keys of their own
# (`ductile keygen`); then runs, all at once for SECONDS, the floods of
# FLOOD (build/bench/peer_memory_flood):
#
#   connections  1,100 raw TCP connections from five addresses, without a
#                key, to the coordinator's port and to server 0's, held
#                and opened again as they are closed;
#   slow_reader  pulls of a 12 KiB key of the job's first table, whose
#                replies it never reads (to server 0);
#   status       STATUS requests whose answers it never reads (to the
#                coordinator);
#   parked       SSP pulls far ahead, each naming a made-up worker id (to
#                server 1).
#
# The last three are sent by a member with a key of its own (`flood`), a
# fresh connection every minute. Every SAMPLE seconds it reads each job
# process's resident memory (VmRSS); at the end it prints, for each, whether
# it lived through the floods, its memory before them, at its peak and at
# their end, and whether the training job then finished (every worker and
# server exiting 0). Exit status 0 only if all did.
#
#   bench/flood_soak.sh [--seconds=600] [--epochs=80] [--sample_s=5]
#                       [--ductile=build/ductile]
#                       [--flood=build/bench/peer_memory_flood]
#                       [--keep=DIR]
#
# --epochs must make the training outlast the floods (the job ends when it
# is done, and with it the processes the floods aim at): on a loaded 2-core
# machine 80 epochs of fmnist-mlp under the floods take longer than the 10
# minutes. --keep
# keeps the logs and samples (rss.csv) in DIR.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=600
epochs=80
sample_s=5
ductile=$root/build/ductile
flood=$root/build/bench/peer_memory_flood
keep=""
for arg in "$@"; do
  case $arg in
    --seconds=*) seconds=${arg#*=} ;;
    --epochs=*) epochs=${arg#*=} ;;
    --sample_s=*) sample_s=${arg#*=} ;;
    --ductile=*) ductile=${arg#*=} ;;
    --flood=*) flood=${arg#*=} ;;
    --keep=*) keep=${arg#*=} ;;
    *)
      echo "unknown argument: $arg" >&2
      exit 2
      ;;
  esac
done

if [[ -n $keep ]]; then
  mkdir -p "$keep"
  work=$(cd "$keep" && pwd)
else
  work=$(mktemp -d /tmp/ductile-soak-XXXXXX)
fi
declare -A pid=()
flood_pids=()
cleanup() {
  for p in "${flood_pids[@]}" "${pid[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${flood_pids[@]}" "${pid[@]}"; do wait "$p" 2>/dev/null || true; done
  if [[ -z $keep ]]; then rm -rf "$work"; fi
}
trap cleanup EXIT

keys=$work/keys
"$ductile" keygen --out="$keys" --servers=2 --workers=2 >/dev/null
"$ductile" keygen --out="$keys" --member=flood >/dev/null

port=$((20000 + RANDOM % 20000))
coordinator=tcp://127.0.0.1:$port
# One job process, limited to 1024 open files as many hosts are.
start() {
  local name=$1
  shift
  (ulimit -n 1024 && exec "$ductile" "$@") >"$work/$name.log" 2>&1 &
  pid[$name]=$!
}
start coordinator coordinator --listen="$coordinator" --servers=2 --workers=2 \
  --keys="$keys" --state_dir="$work/coordinator" --checkpoint_every=200
for i in 0 1; do
  start "server-$i" server --coordinator="$coordinator" --server_id=$i \
    --port=$((port + 1 + i)) --keys="$keys" --state_dir="$work/servers" \
    --ipc_dir="$work"
done
for i in 0 1; do
  start "worker-$i" worker --coordinator="$coordinator" --worker_id=$i \
    --keys="$keys" --app=fmnist-mlp --consistency=ssp --staleness=2 \
    --epochs="$epochs" --log_every=1000
done
names=(coordinator server-0 server-1 worker-0 worker-1)

rss_mb() {
  awk '/^VmRSS:/ { printf "%.0f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null ||
    true
}

# The job's first table, and the floats of its key 0 (fmnist-mlp's first
# block, 784 x 256 floats in chunks of 3136).
table=""
for _ in $(seq 600); do
  table=$(sed -n "s/.*table 'mlp.w0' created, id \([0-9]*\).*/\1/p" \
    "$work/coordinator.log" | head -1)
  [[ -n $table ]] && break
  sleep 0.2
done
if [[ -z $table ]]; then
  echo "the job did not create its tables; coordinator log:" >&2
  tail -20 "$work/coordinator.log" >&2
  exit 1
fi
sleep 5 # training under way
declare -A before=() peak=() final=() alive=()
for n in "${names[@]}"; do
  before[$n]=$(rss_mb "${pid[$n]}")
  peak[$n]=${before[$n]}
done

echo "flooding for $seconds s (every kind at once); samples in $work/rss.csv"
member_flood=(--soak --keys="$keys" --member_key="$keys/members/flood.key"
  --seconds="$seconds" --table_id="$table" --length=3136)
"$flood" --flood=connections --target="$coordinator" --seconds="$seconds" \
  >"$work/flood-connections-coordinator.log" 2>&1 &
flood_pids+=($!)
"$flood" --flood=connections --target=tcp://127.0.0.1:$((port + 1)) \
  --seconds="$seconds" >"$work/flood-connections-server.log" 2>&1 &
flood_pids+=($!)
"$flood" "${member_flood[@]}" --flood=slow_reader \
  --server=tcp://127.0.0.1:$((port + 1)) >"$work/flood-slow_reader.log" 2>&1 &
flood_pids+=($!)
"$flood" "${member_flood[@]}" --flood=status --coordinator="$coordinator" \
  >"$work/flood-status.log" 2>&1 &
flood_pids+=($!)
"$flood" "${member_flood[@]}" --flood=parked \
  --server=tcp://127.0.0.1:$((port + 2)) >"$work/flood-parked.log" 2>&1 &
flood_pids+=($!)

echo "seconds,process,rss_mb" >"$work/rss.csv"
start_s=$SECONDS
while ((SECONDS - start_s < seconds)); do
  for n in "${names[@]}"; do
    r=$(rss_mb "${pid[$n]}")
    [[ -z $r ]] && continue
    echo "$((SECONDS - start_s)),$n,$r" >>"$work/rss.csv"
    ((r > peak[$n])) && peak[$n]=$r
    final[$n]=$r
  done
  sleep "$sample_s"
done
for n in "${names[@]}"; do
  if kill -0 "${pid[$n]}" 2>/dev/null; then alive[$n]=yes; else alive[$n]=no; fi
done
"$ductile" status --coordinator="$coordinator" --keys="$keys" \
  >"$work/status-at-end.txt" 2>&1 || true
for p in "${flood_pids[@]}"; do wait "$p" || true; done
flood_pids=()
sleep 10
declare -A after=()
for n in "${names[@]}"; do after[$n]=$(rss_mb "${pid[$n]}"); done

echo "the floods (each peer's requests sent; connections opened):"
for f in "$work"/flood-*.log; do
  echo "  $(basename "$f" .log): $(tail -1 "$f")"
  if [[ $f != *connections* ]]; then
    awk '{ n += $(NF - 1) } END { printf "    %d peers, %d requests\n", NR, n }' "$f"
  fi
done
ok=0
printf "%-12s %-20s %10s %8s %14s %16s %s\n" process "alive through floods" \
  "before MB" "peak MB" "at floods' end" "10 s after floods" "exit"
for n in "${names[@]}"; do
  # Each must end by itself once the workers are done (bounded: 1 hour).
  code=timeout
  for _ in $(seq 3600); do
    if ! kill -0 "${pid[$n]}" 2>/dev/null; then
      code=0
      wait "${pid[$n]}" || code=$?
      break
    fi
    sleep 1
  done
  [[ ${alive[$n]} == yes && $code == 0 ]] || ok=1
  printf "%-12s %-20s %10s %8s %14s %16s %s\n" "$n" "${alive[$n]}" \
    "${before[$n]}" "${peak[$n]}" "${final[$n]:-gone}" "${after[$n]:-gone}" \
    "$code"
done
unset 'pid[coordinator]' 'pid[server-0]' 'pid[server-1]' 'pid[worker-0]' \
  'pid[worker-1]'
if grep -q "final test accuracy\|test accuracy" "$work/worker-0.log"; then
  echo "worker 0: $(grep -i "accuracy" "$work/worker-0.log" | tail -1)"
fi
echo "at the floods' end, ductile status said:"
sed -n '/^refused to bound/,$p' "$work/status-at-end.txt" | sed 's/^/  /'
if ((ok == 0)); then
  echo "every process lived through the floods and the job finished"
else
  echo "FAILED: a process died or the job did not finish (logs in $work)"
  keep=$work
fi
exit $ok
