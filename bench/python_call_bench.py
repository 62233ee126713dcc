#!/usr/bin/python3
"""What a blocking push-pull costs from Python, against the same call from C++.

Starts a coordinator and one server (processes of build/ductile), then, in
turns, --rounds times: bench/client_call_bench (C++: Client::PushPullAsync of
a dense tensor, then Wait) and this process through the ductile package
(Client.push_pull_tensor on numpy arrays, used in place), each timing
one call at a time on tensors of its own of the same sizes. Prints, per
size, the median over the rounds of each side's p50 per call in
microseconds, with the calling thread's CPU time per call (what the caller
spends itself, apart from waiting: the Python layer's cost shows there
whatever else the machine runs), and the differences; with
--csv, every round's numbers too.

Both sides run with the allocator policy the ductile programs take
(util/malloc_policy.h, KeepFreedMemory: no mapping of its own for a large
block, no trimming, one arena), set through glibc's tunables for this
process and the C++ one alike; --nokeep_freed_memory leaves glibc's
defaults, under which a call of many MB pays page faults that depend on
what the process freed before.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_call_bench.py
    ... --build=build --sizes=1024,16777216 --iters=2000,50 --rounds=5
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import ductile


def start_cluster(build: Path, workdir: Path):
    address_file = workdir / "address"
    log = open(workdir / "cluster.log", "wb")
    coordinator = subprocess.Popen(
        [str(build / "ductile"), "coordinator", "--listen=tcp://127.0.0.1:0",
         f"--address_file={address_file}", "--servers=1", "--workers=0",
         "--no_worker_timeout_ms=0"],
        stdout=log, stderr=subprocess.STDOUT)
    processes = [coordinator]
    deadline = time.monotonic() + 30
    while not address_file.exists() or not address_file.read_text().strip():
        if coordinator.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("the coordinator did not start (see cluster.log)")
        time.sleep(0.02)
    address = address_file.read_text().strip()
    processes.append(subprocess.Popen(
        [str(build / "ductile"), "server", f"--coordinator={address}",
         f"--ipc_dir={workdir}"], stdout=log, stderr=subprocess.STDOUT))
    return address, processes


def stop(processes):
    for process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def time_python(client, name, size, iters, warmup):
    tensor = client.register_tensor(name, size // 4, rule="add")
    values = np.zeros(size // 4, np.float32)
    out = np.empty(size // 4, np.float32)
    us = []
    cpu_start = 0
    for i in range(warmup + iters):
        if i == warmup:
            cpu_start = time.thread_time_ns()
        start = time.perf_counter_ns()
        client.push_pull_tensor(tensor, values, out=out)
        end = time.perf_counter_ns()
        if i >= warmup:
            us.append((end - start) / 1000)
    cpu_us = (time.thread_time_ns() - cpu_start) / 1000 / iters
    us.sort()
    return statistics.fmean(us), us[len(us) // 2], us[len(us) * 99 // 100], cpu_us


# KeepFreedMemory() (util/malloc_policy.cc) as glibc tunables.
KEEP_FREED_MEMORY = ("glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=2147483647:"
                     "glibc.malloc.arena_max=1")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=str(Path(__file__).resolve().parents[1] / "build"))
    parser.add_argument("--sizes", default="1024,16777216")
    parser.add_argument("--iters", default="2000,50")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--csv", default="")
    parser.add_argument("--nokeep_freed_memory", action="store_true")
    args = parser.parse_args()
    if not args.nokeep_freed_memory and os.environ.get("GLIBC_TUNABLES") != KEEP_FREED_MEMORY:
        # Tunables are read at start: run again with them.
        env = dict(os.environ, GLIBC_TUNABLES=KEEP_FREED_MEMORY)
        os.execve(sys.executable, [sys.executable] + sys.argv, env)
    build = Path(args.build)
    sizes = [int(s) for s in args.sizes.split(",")]
    iters = [int(s) for s in args.iters.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="ductile-call-bench-") as tmp:
        address, processes = start_cluster(build, Path(tmp))
        try:
            client = ductile.connect(address, worker=False, connect_timeout_ms=30000)
            for r in range(args.rounds):
                cpp = subprocess.run(
                    [str(build / "bench" / "client_call_bench"), f"--coordinator={address}",
                     f"--sizes={args.sizes}", f"--iters={args.iters}",
                     f"--warmup={args.warmup}", f"--prefix=cpp{r}"],
                    check=True, capture_output=True, text=True, timeout=600).stdout
                for line in cpp.split():
                    impl, size, n, mean, p50, p99, cpu = line.split(",")
                    rows.append(("cpp", r, int(size), int(n), float(mean), float(p50),
                                 float(p99), float(cpu)))
                for size, n in zip(sizes, iters):
                    mean, p50, p99, cpu = time_python(client, f"py{r}_{size}", size, n,
                                                      args.warmup)
                    rows.append(("python", r, size, n, mean, p50, p99, cpu))
            client.close()
        finally:
            stop(processes)
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("impl,round,size_bytes,iters,mean_us,p50_us,p99_us,cpu_us\n")
            for row in rows:
                f.write(",".join(str(x) for x in row) + "\n")
    policy = "glibc defaults" if args.nokeep_freed_memory else "freed memory kept"
    print(f"blocking push_pull of a dense tensor, median of {args.rounds} rounds "
          f"(us per call; {policy})")
    print("  wall: p50 of one call's time; cpu: the calling thread's CPU time per call")
    print(f"{'size':>10} {'':>6} {'C++':>9} {'Python':>9} {'diff':>9}")
    for size in sizes:
        for label, column in (("wall", 5), ("cpu", 7)):
            def median(impl):
                return statistics.median(
                    row[column] for row in rows if row[0] == impl and row[2] == size)
            cpp, python = median("cpp"), median("python")
            print(f"{size:>10} {label:>6} {cpp:>9.1f} {python:>9.1f} {python - cpp:>+9.1f}")


if __name__ == "__main__":
    sys.exit(main())
