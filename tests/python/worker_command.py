"""A worker command for `ductile local -- /usr/bin/python3 worker_command.py`
(tests/local_cli_test.cc): connects from the environment the launcher sets,
adds its rank + 1 to its own row, waits for every worker at a barrier, pulls
every row and prints what it read. With the argument `fail`, each worker
starts a child that sleeps (its command line ends with the test's marker),
and worker 1 writes an error to stderr and exits with status 3. With
`interrupt`, each waits for a Ctrl-C and says it got KeyboardInterrupt. With
`join`,
worker 0 ticks the job's clock until worker 1 (a joiner the launcher
started) has written its row, and each then says so and finishes."""

import os
import subprocess
import sys
import time

import numpy as np

import ductile


def main() -> int:
    client = ductile.connect_from_env()
    rank = client.worker_id
    workers = int(os.environ["DUCTILE_WORKERS"])
    if rank != int(os.environ["DUCTILE_RANK"]):
        print(f"worker_command.py: worker id {rank} is not DUCTILE_RANK", file=sys.stderr)
        return 1
    if "fail" in sys.argv[1:]:
        # A child of its own, carrying the test's marker (the last
        # argument), that the launcher must stop with the worker.
        subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(120)", sys.argv[-1]],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client.barrier()  # both started theirs before worker 1 fails
    if "fail" in sys.argv[1:] and rank == 1:
        print("worker_command.py: worker 1 fails on purpose", file=sys.stderr)
        return 3
    if "interrupt" in sys.argv[1:]:
        try:
            print(f"worker_command.py: worker {rank} waits", flush=True)
            while True:
                time.sleep(0.05)
        except KeyboardInterrupt:
            print(f"worker_command.py: worker {rank} got KeyboardInterrupt", flush=True)
            return 0
    if "join" in sys.argv[1:]:
        joined = client.create_table("joined", width=1, rule="add")
        if rank > 0:
            client.push(joined, [rank], np.ones(1, np.float32))
        deadline = time.monotonic() + 60
        while rank == 0 and client.pull(joined, [1])[0] == 0:
            if time.monotonic() > deadline:
                print("worker_command.py: no worker 1 joined", file=sys.stderr)
                return 1
            client.clock()
            time.sleep(0.02)
        print(f"worker_command.py: worker {rank} saw worker 1 join", flush=True)
        client.finish()
        client.close()
        return 0
    table = client.create_table("worker_command", width=1, rule="add")
    client.push(table, [rank], np.full(1, rank + 1, np.float32))
    client.barrier()
    rows = client.pull(table, list(range(workers)))
    print(f"worker_command.py: worker {rank} of {workers} read {rows.tolist()}", flush=True)
    client.finish()
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
