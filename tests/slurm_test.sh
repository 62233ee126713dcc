#!/usr/bin/env bash
# A training job whose servers and workers are Slurm jobs, on a real
# single-node Slurm started here: munged, slurmctld and slurmd in the
# foreground, with a generated slurm.conf, private ports, and state, spool
# and munge key in a temporary directory. `ductile local --provider=slurm`
# trains logistic regression on Fashion-MNIST with 1 server and 1 worker
# under the `autoscale` policy, and a kill schedule SIGKILLs the server's
# task once (through `scancel --signal=KILL JOB.0`).
# The test passes when:
#   - the job ends with exit status 0 and "ductile local: done";
#   - the policy grew the job: a second worker was started ("started
#     worker 1");
#   - the server's task was killed through Slurm and restarted;
#   - squeue, polled while the job ran, listed the server and both workers
#     as running Slurm jobs (ductile-PID-server-0, -worker-0, -worker-1);
#   - no ductile job is left in the queue afterwards.
#
# With a worker command (PYTHON PYTHONPATH SCRIPT: tests/python/
# worker_command.py), the job instead runs `ductile local --provider=slurm
# --servers=1 --workers=2 -- /usr/bin/env PYTHONPATH=... PYTHON SCRIPT`, and
# the test passes when it ends with status 0 and both workers, Slurm jobs,
# connected from their environment and read both rows.
#
# With --lost-step, the job (1 server, 2 workers, a 1 s heartbeat
# timeout) instead loses worker 1's job step: its slurmstepd and its task
# are SIGKILLed, so that srun waits on and squeue still lists the job as
# running. The test passes when the launcher kills that srun as lost
# ("was declared dead by the coordinator"), the other worker finishes
# (status 0), and no ductile job is left in the queue.
#
# Usage: slurm_test.sh DUCTILE_CLI [PYTHON PYTHONPATH SCRIPT | --lost-step]
# Needs root and Debian's slurm-wlm and munge; exits 77 (skipped) without
# them, unless DUCTILE_REQUIRE_SLURM=1 (CI), where that is a failure. Every
# wait is bounded; on any exit the daemons and the job are stopped and the
# temporary directory is removed.
set -euo pipefail

if [[ $# -ne 1 && $# -ne 4 && ! ($# -eq 2 && "${2:-}" == --lost-step) ]]; then
  echo "usage: $0 DUCTILE_CLI [PYTHON PYTHONPATH SCRIPT | --lost-step]" >&2
  exit 2
fi
DUCTILE=$(realpath "$1")
readonly DUCTILE
WORKER_COMMAND=()
if [[ $# -eq 4 ]]; then
  WORKER_COMMAND=(/usr/bin/env "PYTHONPATH=$3" "$2" "$4")
fi
LOST_STEP=0
[[ $# -eq 2 ]] && LOST_STEP=1
readonly DATA=/usr/share/datasets/fashion-mnist

skip() {
  if [[ "${DUCTILE_REQUIRE_SLURM:-0}" == 1 ]]; then
    echo "FAIL: $1 (DUCTILE_REQUIRE_SLURM=1)" >&2
    exit 1
  fi
  echo "SKIP: $1" >&2
  exit 77
}
[[ $(id -u) -eq 0 ]] || skip "needs root (slurmd runs as root)"
for tool in munged slurmctld slurmd srun squeue scancel sinfo; do
  command -v "$tool" >/dev/null 2>&1 ||
    skip "$tool not found (apt-get install slurm-wlm munge)"
done
[[ -f "$DATA/train-images-idx3-ubyte.gz" ]] ||
  skip "no Fashion-MNIST in $DATA (apt-get install dataset-fashion-mnist)"

TMP=$(mktemp -d /tmp/ductile-slurm-XXXXXX)
PIDS=()
# slurmstepd outlives slurmd by design: those started here are killed at
# the end.
STEPDS_BEFORE=" $( (pgrep -x slurmstepd || true) | tr '\n' ' ') "
cleanup() {
  local rc=$?
  if [[ -n "${JOB_PID:-}" ]]; then kill "$JOB_PID" 2>/dev/null || true; fi
  if [[ -f "$TMP/slurm.conf" ]]; then
    # This test's own slurmctld: every job in it is the test's.
    SLURM_CONF="$TMP/slurm.conf" timeout 10 scancel --user=root 2>/dev/null ||
      true
  fi
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  for pid in $(pgrep -x slurmstepd || true); do
    [[ "$STEPDS_BEFORE" == *" $pid "* ]] || kill -9 "$pid" 2>/dev/null || true
  done
  if [[ -f "$TMP/munged.pid" ]]; then
    kill "$(cat "$TMP/munged.pid")" 2>/dev/null || true
  fi
  if [[ $rc -ne 0 && $rc -ne 77 ]]; then
    for f in "$TMP"/job.out "$TMP"/job.err "$TMP"/log/*; do
      [[ -f "$f" ]] || continue
      echo "---- $f (tail)" >&2
      tail -n 40 "$f" >&2
    done
  fi
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# Two free ports for slurmctld and slurmd, and one for munged's socket
# (a file here). Below the kernel's ephemeral range: a port there that no
# one listens on may still be the local end of another test's connection,
# and the daemon's bind would fail.
ephemeral_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
(( ephemeral_low > 21000 )) || ephemeral_low=32768
free_port() {
  local port
  for _ in $(seq 100); do
    port=$((20000 + RANDOM % (ephemeral_low - 20000)))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
  fail "no free port"
}
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
[[ "$CTLD_PORT" != "$SLURMD_PORT" ]] || SLURMD_PORT=$((CTLD_PORT + 1))
HOST=$(hostname -s)
mkdir -p "$TMP/state" "$TMP/spool" "$TMP/log" "$TMP/munge"

# munged with a key, socket and state of its own (not the system's).
head -c 1024 /dev/urandom >"$TMP/munge/munge.key"
chmod 400 "$TMP/munge/munge.key"
munged --force --key-file="$TMP/munge/munge.key" \
  --socket="$TMP/munge/munge.socket" --pid-file="$TMP/munged.pid" \
  --log-file="$TMP/log/munged.log" --seed-file="$TMP/munge/seed" ||
  fail "munged did not start"

cat >"$TMP/slurm.conf" <<EOF
ClusterName=ductile-test
SlurmctldHost=${HOST}(127.0.0.1)
SlurmctldPort=${CTLD_PORT}
SlurmdPort=${SLURMD_PORT}
AuthType=auth/munge
AuthInfo=socket=${TMP}/munge/munge.socket
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
# Cores only: with memory counted too, every job asks for the node's whole
# memory and the second one waits for the first to end.
SelectTypeParameters=CR_Core
SlurmUser=root
SlurmdUser=root
StateSaveLocation=${TMP}/state
SlurmdSpoolDir=${TMP}/spool
SlurmctldPidFile=${TMP}/slurmctld.pid
SlurmdPidFile=${TMP}/slurmd.pid
SlurmctldLogFile=${TMP}/log/slurmctld.log
SlurmdLogFile=${TMP}/log/slurmd.log
ReturnToService=2
MpiDefault=none
KillWait=5
NodeName=${HOST} NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=ductile Nodes=${HOST} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
EOF
export SLURM_CONF="$TMP/slurm.conf"
slurmctld -D -f "$SLURM_CONF" >"$TMP/log/slurmctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -f "$SLURM_CONF" >"$TMP/log/slurmd.out" 2>&1 &
PIDS+=($!)
up=0
for _ in $(seq 150); do
  if [[ "$(sinfo --noheader --format=%t 2>/dev/null)" == idle ]]; then
    up=1
    break
  fi
  sleep 0.2
done
[[ $up -eq 1 ]] || fail "Slurm's node did not become idle within 30 s"
echo "slurm up on ports $CTLD_PORT/$SLURMD_PORT"

if [[ ${#WORKER_COMMAND[@]} -gt 0 ]]; then
  rc=0
  timeout 120 "$DUCTILE" local --provider=slurm --servers=1 --workers=2 \
    -- "${WORKER_COMMAND[@]}" >"$TMP/job.out" 2>"$TMP/job.err" || rc=$?
  cat "$TMP/job.out"
  [[ $rc -eq 0 ]] || fail "ductile local exited with $rc"
  for w in 0 1; do
    grep -qF "worker $w of 2 read [1.0, 2.0]" "$TMP/job.out" ||
      fail "worker $w did not connect and read both rows"
  done
  left=$(squeue --noheader --format=%j | grep -c '^ductile-' || true)
  [[ "$left" -eq 0 ]] || fail "$left ductile job(s) left in the queue"
  echo "PASS"
  exit 0
fi

if [[ $LOST_STEP -eq 1 ]]; then
  "$DUCTILE" local --provider=slurm --servers=1 --workers=2 \
    --app=fmnist-logreg --epochs=3 --batch_size=32 --log_every=100 \
    --data_dir="$DATA" --heartbeat_timeout_ms=1000 \
    >"$TMP/job.out" 2>"$TMP/job.err" &
  JOB_PID=$!
  # Worker 1's task, once it trains (bounded: 120 s).
  task=""
  deadline=$((SECONDS + 120))
  while [[ -z "$task" ]]; do
    ((SECONDS < deadline)) || fail "worker 1 did not start within 120 s"
    kill -0 "$JOB_PID" 2>/dev/null || fail "the job ended before the kill"
    sleep 0.5
    grep -q "samples/s" "$TMP/job.out" || continue
    # The task itself, not the srun that names it in its arguments.
    for pid in $(pgrep -f -- "ductile worker .*--worker_id=1 " || true); do
      [[ "$(ps -o comm= -p "$pid")" == ductile ]] && task=$pid
    done
  done
  stepd=$(ps -o ppid= -p "$task" | tr -d ' ')
  [[ "$(ps -o comm= -p "$stepd")" == slurmstepd ]] ||
    fail "worker 1's task $task is not a slurmstepd's child"
  kill -9 "$stepd" "$task"
  echo "killed worker 1's slurmstepd $stepd and task $task"
  deadline=$((SECONDS + 120))
  while kill -0 "$JOB_PID" 2>/dev/null; do
    ((SECONDS < deadline)) || fail "the job did not end within 120 s"
    sleep 0.5
  done
  rc=0
  wait "$JOB_PID" || rc=$?
  JOB_PID=""
  cat "$TMP/job.out" "$TMP/job.err"
  [[ $rc -eq 0 ]] || fail "ductile local exited with $rc"
  grep -Eq "worker 1 \(Slurm job ductile-[0-9]+-worker-1, srun pid [0-9]+\) was declared dead by the coordinator" \
    "$TMP/job.err" || fail "worker 1's srun was not killed as lost"
  grep -q "ductile local: done" "$TMP/job.err" || fail "no 'ductile local: done'"
  left=$(squeue --noheader --format=%j | grep -c '^ductile-' || true)
  [[ "$left" -eq 0 ]] || fail "$left ductile job(s) left in the queue"
  echo "PASS"
  exit 0
fi

# The job. Kill the server's task at clock 30; autoscale grows the job from
# 1 worker after 2 s of measurement.
"$DUCTILE" local --provider=slurm --servers=1 --workers=1 \
  --app=fmnist-logreg --epochs=3 --batch_size=32 --log_every=100 \
  --data_dir="$DATA" --checkpoint_every=10 \
  --kill_schedule=server:0@clock=30 \
  --policy=autoscale:settle_s=2:measure_s=2:max=2:wait_s=60 \
  --policy_interval_ms=250 \
  >"$TMP/job.out" 2>"$TMP/job.err" &
JOB_PID=$!

# Poll the queue while the job runs (bounded: 180 s, well inside ctest's
# 300 s, so that the cleanup runs).
: >"$TMP/queue"
deadline=$((SECONDS + 180))
while kill -0 "$JOB_PID" 2>/dev/null; do
  ((SECONDS < deadline)) || fail "the job did not end within 180 s"
  timeout 10 squeue --noheader --states=RUNNING --format=%j >>"$TMP/queue" \
    2>/dev/null || true
  sleep 0.5
done
rc=0
wait "$JOB_PID" || rc=$?
JOB_PID=""
cat "$TMP/job.out"
[[ $rc -eq 0 ]] || fail "ductile local exited with $rc"
grep -q "ductile local: done" "$TMP/job.err" || fail "no 'ductile local: done'"
grep -Eq "started worker 1" "$TMP/job.out" ||
  fail "the autoscale policy did not start a second worker"
grep -Eq "kill-schedule: killed server 0 \(Slurm job ductile-[0-9]+-server-0\)" \
  "$TMP/job.out" || fail "the server's task was not killed through Slurm"
grep -q "kill-schedule: restarted server 0" "$TMP/job.out" ||
  fail "the server was not restarted"
for member in server-0 worker-0 worker-1; do
  grep -Eq "^ductile-[0-9]+-${member}\$" "$TMP/queue" ||
    fail "squeue never listed ${member} as a running Slurm job"
done
left=$(squeue --noheader --format=%j | grep -c '^ductile-' || true)
[[ "$left" -eq 0 ]] || fail "$left ductile job(s) left in the queue"
echo "PASS"
