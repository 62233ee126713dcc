"""A worker command for `ductile local -- /usr/bin/python3 worker_command.py`
(tests/local_cli_test.cc): connects from the environment the launcher sets,
adds its rank + 1 to its own row, waits for every worker at a barrier, pulls
every row and prints what it read. With the argument `fail`, worker 1 writes
an error to stderr and exits with status 3 once connected."""

import os
import sys

import numpy as np

import ductile


def main() -> int:
    client = ductile.connect_from_env()
    rank = client.worker_id
    workers = int(os.environ["DUCTILE_WORKERS"])
    if rank != int(os.environ["DUCTILE_RANK"]):
        print(f"worker_command.py: worker id {rank} is not DUCTILE_RANK", file=sys.stderr)
        return 1
    if "fail" in sys.argv[1:] and rank == 1:
        print("worker_command.py: worker 1 fails on purpose", file=sys.stderr)
        return 3
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
