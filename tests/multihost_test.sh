#!/usr/bin/env bash
# A job spread over hosts: every member in a network namespace and with a
# host name of its own, all of them joined by veth pairs to one bridge in a
# "switch" namespace, and every message over TCP between addresses of
# 10.213.7.0/24. A coordinator,
# two servers and two workers running the exact counter workload of
# tests/recovery_worker_main.cc (BSP, Adam) start; while the workers train,
# a third server joins from a namespace created then and takes its share of
# the slots, and one worker is drained (`ductile drain worker:1`) and leaves.
# Every member proves a key of its own that `ductile keygen --servers
# --workers` made (server-N.key, worker-N.key), bound to that member: every
# connection is CURVE-authenticated and encrypted, and the cluster's shared
# key alone admits nobody.
# The test passes when:
#   - `ductile status`, run from a namespace of its own, shows 3 active
#     servers, the one that joined owning slots;
#   - both workers are connected to each of the 3 servers by TCP;
#   - the drained worker leaves while training ("left at clock L") and exits 0;
#   - the other worker finds the final state bit for bit equal to every push
#     of both workers applied once (the leaver's up to clock L, the same L)
#     and exits 0;
#   - the coordinator ends the job and exits 0;
#   - a coordinator without keys refuses to listen on the network, and
#     `ductile status` without the keys, or with only the cluster's shared
#     key, gets no answer.
#
# Usage: multihost_test.sh DUCTILE_CLI RECOVERY_WORKER
# Needs root and network namespaces; exits 77 (skipped) without them. Every
# wait is bounded; on any exit (failure, SIGINT, SIGTERM included) every
# process started here is killed and every namespace (with its veth ends and
# bridge) and the temporary directory are removed. The root namespace's
# network is never touched: each veth pair is created between two of this
# test's namespaces.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 DUCTILE_CLI RECOVERY_WORKER" >&2
  exit 2
fi
DUCTILE=$(realpath "$1")
WORKER=$(realpath "$2")
readonly DUCTILE WORKER
readonly SKIP=77

readonly CLOCKS=400     # clocks each worker trains unless drained
readonly SLEEP_MS=20    # pause after each clock
readonly JOIN_AT=40     # the third server joins once workers pass this clock
readonly SUBNET=10.213.7
readonly COORDINATOR="tcp://${SUBNET}.1:7000"
readonly SERVER_PORT=7100

# Namespaces are named after this run: ${RUN}-coord, ${RUN}-s0, ...
readonly RUN="dmh$$r${RANDOM}"
readonly SWITCH="${RUN}-sw"

NAMESPACES=()  # created here, in creation order
PIDS=()        # processes started here
SERVER_PIDS=() # the servers among them
TMP=""
# Every wait ends by then, well before CTest's timeout would kill the test
# (and leave its namespaces behind).
readonly DEADLINE=$((SECONDS + 150))

log() { echo "[multihost $(date +%T)] $*"; }
fail() {
  echo "FAILED: $*" >&2
  exit 1
}
skip() {
  echo "SKIPPED: $*"
  exit "$SKIP"
}

cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  local deadline=$((SECONDS + 5))
  for pid in "${PIDS[@]}"; do
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  # Anything else still running in one of this test's namespaces.
  local ns
  for ns in "${NAMESPACES[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do
      kill -KILL "$pid" 2>/dev/null
    done
  done
  # Deleting a namespace destroys the veth ends and the bridge in it.
  for ns in "${NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null; done
  # A server stopped by a signal leaves its ipc:// socket file behind.
  for pid in "${SERVER_PIDS[@]}"; do
    rm -f /tmp/ductile-server-"$pid"-*.sock
  done
  if [[ $rc -ne 0 && $rc -ne $SKIP && -n "$TMP" ]]; then
    local f
    for f in "$TMP"/*.log; do
      [[ -f "$f" ]] || continue
      echo "----- $(basename "$f") (last 30 lines)"
      tail -n 30 "$f"
    done
  fi
  [[ -n "$TMP" ]] && rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "INTERRUPTED (SIGINT)" >&2; exit 130' INT
trap 'echo "INTERRUPTED (SIGTERM)" >&2; exit 143' TERM

# ---- Preconditions: root and working network namespaces.
[[ $EUID -eq 0 ]] || skip "needs root to create network namespaces"
command -v ip >/dev/null || skip "no 'ip' command (iproute2)"
command -v ss >/dev/null || skip "no 'ss' command (iproute2)"
command -v unshare >/dev/null || skip "no 'unshare' command (util-linux)"
command -v timeout >/dev/null || skip "no 'timeout' command (coreutils)"
[[ -x "$DUCTILE" ]] || fail "not executable: $DUCTILE"
[[ -x "$WORKER" ]] || fail "not executable: $WORKER"

TMP=$(mktemp -d /tmp/ductile-multihost-XXXXXX)

# add_namespace NAME: a namespace with lo up.
add_namespace() {
  ip netns add "$1" || return 1
  NAMESPACES+=("$1")
  ip -n "$1" link set lo up
}

# attach NAME HOST: a namespace NAME with address ${SUBNET}.HOST on eth0,
# the other end of its veth pair on the switch's bridge.
attach() {
  local ns="${RUN}-$1" host=$2
  add_namespace "$ns" || return 1
  ip -n "$SWITCH" link add "p$host" type veth peer name eth0 netns "$ns" &&
    ip -n "$SWITCH" link set "p$host" master br0 &&
    ip -n "$SWITCH" link set "p$host" up &&
    ip -n "$ns" addr add "${SUBNET}.${host}/24" dev eth0 &&
    ip -n "$ns" link set eth0 up
}

# start NAME LOG CMD...: starts CMD in namespace ${RUN}-NAME, output to
# $TMP/LOG; its pid is in STARTED. CMD also gets a host name of its own
# (a UTS namespace): a client reaches a server on its own host by ipc://
# rather than tcp://, and a host is known by its name.
start() {
  local ns="${RUN}-$1" out="$TMP/$2"
  shift 2
  # shellcheck disable=SC2016  # $0 and $@ are sh's, not this script's
  ip netns exec "$ns" unshare --uts -- \
    sh -c 'hostname "$0" && exec "$@"' "$ns" "$@" >"$out" 2>&1 &
  STARTED=$!
  PIDS+=("$STARTED")
}

if ! {
  add_namespace "$SWITCH" &&
    ip -n "$SWITCH" link add br0 type bridge &&
    ip -n "$SWITCH" link set br0 up
} 2>"$TMP/setup.err"; then
  skip "cannot create a network namespace with a bridge: $(head -n 3 "$TMP/setup.err")"
fi
attach coord 1 2>"$TMP/setup.err" ||
  skip "cannot connect network namespaces with veth pairs: $(head -n 3 "$TMP/setup.err")"
attach s0 11 || fail "namespace s0"
attach s1 12 || fail "namespace s1"
attach w0 21 || fail "namespace w0"
attach w1 22 || fail "namespace w1"
attach admin 30 || fail "namespace admin"
log "namespaces: $(ip netns list | grep -c "^${RUN}-") under ${RUN}-*"

# status: `ductile status` from the admin namespace, also kept in
# $TMP/status.log.
status() {
  local out
  out=$(timeout 15 ip netns exec "${RUN}-admin" "$DUCTILE" status \
    --coordinator="$COORDINATOR" --keys="$KEYS" --timeout_ms=5000 2>&1) ||
    return 1
  echo "$out" >>"$TMP/status.log"
  echo "$out"
}

# wait_until SECONDS WHAT CMD...: polls CMD until it succeeds; fails the
# test after SECONDS.
wait_until() {
  local limit=$1 what=$2
  shift 2
  local deadline=$((SECONDS + limit < DEADLINE ? SECONDS + limit : DEADLINE))
  until "$@"; do
    ((SECONDS < deadline)) || fail "timed out after ${limit}s waiting for ${what}"
    sleep 0.2
  done
}

# wait_exit PID SECONDS WHAT: waits for PID to exit; sets EXIT_CODE.
wait_exit() {
  local pid=$1 limit=$2 what=$3
  local deadline=$((SECONDS + limit < DEADLINE ? SECONDS + limit : DEADLINE))
  while kill -0 "$pid" 2>/dev/null; do
    ((SECONDS < deadline)) || fail "timed out after ${limit}s waiting for ${what} to exit"
    sleep 0.2
  done
  EXIT_CODE=0
  wait "$pid" || EXIT_CODE=$?
}

# tcp_peers NAME: the addresses with a TCP connection established to the
# server port in namespace ${RUN}-NAME.
tcp_peers() {
  ip netns exec "${RUN}-$1" ss -Htn state established \
    "( sport = :${SERVER_PORT} )" | awk '{sub(/:[0-9]+$/, "", $4); print $4}' |
    sort -u
}
# workers_over_tcp NAME: both workers are connected to server NAME by TCP.
workers_over_tcp() {
  local peers
  peers=$(tcp_peers "$1")
  grep -qxF "${SUBNET}.21" <<<"$peers" && grep -qxF "${SUBNET}.22" <<<"$peers"
}

active_servers() { awk '$2 == "server" && $3 == "active"' <<<"$1" | wc -l; }
min_worker_clock() {
  awk '$2 == "worker" && $3 == "active" {print $5}' <<<"$1" | sort -n | head -n 1
}

# ---- The cluster's keys: every connection is authenticated and encrypted.
KEYS="$TMP/keys"
"$DUCTILE" keygen --out="$KEYS" --servers=3 --workers=2 >/dev/null ||
  fail "ductile keygen"
# A holder of the shared cluster key (and the public keys) alone.
SHARED="$TMP/shared-key-only"
mkdir -m 700 "$SHARED"
cp -p "$KEYS/cluster.key" "$KEYS/cluster.pub" "$KEYS/admin.pub" "$SHARED/"
# Without them, a member cannot even listen beyond loopback.
if plain_out=$(timeout 15 ip netns exec "${RUN}-coord" "$DUCTILE" coordinator \
  --listen="tcp://${SUBNET}.1:7001" 2>&1); then
  fail "a plain coordinator listened on the network: ${plain_out}"
fi
grep -q "PermissionDenied: refusing to listen" <<<"$plain_out" ||
  fail "a plain coordinator on the network: ${plain_out}"

# ---- The job: coordinator, two servers, two workers.
start_time=$SECONDS
start coord coordinator.log "$DUCTILE" coordinator --listen="$COORDINATOR" \
  --servers=2 --workers=2 --slots=64 --checkpoint_every=50 \
  --heartbeat_timeout_ms=10000 \
  --state_dir="$TMP/coordinator" --keys="$KEYS"
COORD_PID=$STARTED
for i in 0 1; do
  start "s$i" "server$i.log" "$DUCTILE" server --coordinator="$COORDINATOR" \
    --host="${SUBNET}.1$((i + 1))" --port="$SERVER_PORT" --server_id="$i" \
    --state_dir="$TMP/servers" --timeout_ms=30000 --keys="$KEYS"
  SERVER_PIDS+=("$STARTED")
done
WORKER_PIDS=()
for i in 0 1; do
  start "w$i" "worker$i.log" "$WORKER" --coordinator="$COORDINATOR" \
    --clocks="$CLOCKS" --sleep_ms="$SLEEP_MS" --mode=bsp \
    --cluster_keys="$KEYS" --member_key="$KEYS/members/worker-$i.key" \
    --worker_id="$i"
  WORKER_PIDS+=("$STARTED")
done

training_past() {
  local s clock
  s=$(status) || return 1
  clock=$(min_worker_clock "$s")
  [[ $(active_servers "$s") -eq 2 && -n "$clock" && $clock -ge $JOIN_AT ]]
}
wait_until 60 "two servers and both workers past clock ${JOIN_AT}" training_past
log "training over TCP across namespaces; workers past clock ${JOIN_AT}"

# ---- A third server joins from a namespace created now.
attach s2 13 || fail "namespace s2 (created mid-run)"
start s2 server2.log "$DUCTILE" server --coordinator="$COORDINATOR" \
  --host="${SUBNET}.13" --port="$SERVER_PORT" --server_id=2 \
  --state_dir="$TMP/servers" --timeout_ms=30000 --keys="$KEYS"
SERVER_PIDS+=("$STARTED")
JOINED_ADDRESS="tcp://${SUBNET}.13:${SERVER_PORT}"

joined_owns_slots() {
  local s slots
  s=$(status) || return 1
  slots=$(awk -v a="$JOINED_ADDRESS" \
    '$2 == "server" && $3 == "active" && $NF == a {print $5}' <<<"$s")
  [[ $(active_servers "$s") -eq 3 && -n "$slots" && $slots -gt 0 ]] ||
    return 1
  ! grep -q "moving between servers" <<<"$s" || return 1
  LAST_STATUS=$s
}
wait_until 60 "the joined server at ${JOINED_ADDRESS} to own slots" \
  joined_owns_slots
log "status with the joined server:"
echo "$LAST_STATUS"
for s in s0 s1 s2; do
  wait_until 10 "both workers connected to server ${s} over TCP" \
    workers_over_tcp "$s"
done
log "both workers talk to every server over TCP"

# ---- A peer without the cluster's keys asks for the status (in the
# background, so that the drain below comes while both workers train).
timeout 15 ip netns exec "${RUN}-admin" "$DUCTILE" status \
  --coordinator="$COORDINATOR" --timeout_ms=2000 >"$TMP/stranger.out" 2>&1 &
STRANGER_PID=$!
# And one holding only the cluster's shared key, which members no longer
# prove: it gets no answer either.
timeout 15 ip netns exec "${RUN}-admin" "$DUCTILE" status \
  --coordinator="$COORDINATOR" --keys="$SHARED" --norequire_member_keys \
  --timeout_ms=2000 >"$TMP/shared.out" 2>&1 &
SHARED_PID=$!

# ---- Worker 1 leaves.

drain_out=$(timeout 30 ip netns exec "${RUN}-admin" "$DUCTILE" drain \
  --coordinator="$COORDINATOR" --keys="$KEYS" --timeout_ms=10000 worker:1 2>&1) ||
  fail "ductile drain worker:1: ${drain_out}"
log "drain: ${drain_out}"

# The stranger got no answer from the coordinator that answered the drain.
STRANGER_CODE=0
wait "$STRANGER_PID" || STRANGER_CODE=$?
((STRANGER_CODE != 0)) ||
  fail "status without the cluster's keys answered: $(cat "$TMP/stranger.out")"
grep -q "DeadlineExceeded" "$TMP/stranger.out" ||
  fail "status without keys: $(cat "$TMP/stranger.out")"
log "status without the keys: $(cat "$TMP/stranger.out")"
SHARED_CODE=0
wait "$SHARED_PID" || SHARED_CODE=$?
((SHARED_CODE != 0)) ||
  fail "status with the shared key only answered: $(cat "$TMP/shared.out")"
grep -q "DeadlineExceeded" "$TMP/shared.out" ||
  fail "status with the shared key only: $(cat "$TMP/shared.out")"
log "status with the shared key only: $(cat "$TMP/shared.out")"

# ---- Both workers end: the drained one leaves, the other checks the state.
for i in 0 1; do
  wait_exit "${WORKER_PIDS[$i]}" 120 "worker process w$i"
  [[ $EXIT_CODE -eq 0 ]] || fail "worker process w$i exited with ${EXIT_CODE}"
done
leaver_log=$(grep -l "^left at clock " "$TMP"/worker0.log "$TMP"/worker1.log) ||
  fail "no worker left the job"
[[ $(wc -l <<<"$leaver_log") -eq 1 ]] || fail "both workers left the job"
left_clock=$(sed -n 's/^left at clock \([0-9]*\)$/\1/p' "$leaver_log")
((left_clock > JOIN_AT && left_clock < CLOCKS)) ||
  fail "worker 1 left at clock ${left_clock}, not while training"
if [[ $leaver_log == "$TMP/worker0.log" ]]; then stayer=1; else stayer=0; fi
exact="final state exact at clock ${CLOCKS} (worker 1 left at clock ${left_clock})"
grep -qxF "$exact" "$TMP/worker${stayer}.log" ||
  fail "worker process w${stayer} did not print '${exact}'"
grep -q "worker 1 left at clock ${left_clock} (drained)" \
  "$TMP/coordinator.log" || fail "the coordinator did not log the leave"
log "worker 1 left at clock ${left_clock}; the other: ${exact}"

# ---- The job is over: the coordinator shuts it down.
wait_exit "$COORD_PID" 30 "the coordinator"
[[ $EXIT_CODE -eq 0 ]] || fail "the coordinator exited with ${EXIT_CODE}"
log "PASSED in $((SECONDS - start_time))s"
