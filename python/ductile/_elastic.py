"""Elastic training for ductile.torch: rollbacks.

A rollback (a server lost: the job goes back to its latest checkpoint)
reaches a worker as ductile.Aborted from the DistributedOptimizer's step().
recover() takes it once (Client.await_recovery) and tells every optimizer
of the client, which pulls the checkpoint's parameters. The user's loop
sees none of it.
"""

import sys
import weakref
from typing import Any, List

import ductile

# How long to wait for a rollback after a call failed with Aborted (one was
# announced; restoring the servers may be slow), and after Unavailable or
# DeadlineExceeded (maybe a server died and nobody has said so yet), as the
# built-in trainer does (train/step_loop.cc).
ROLLBACK_WAIT_MS = 300000
UNANNOUNCED_WAIT_MS = 10000
# Rollbacks taken back to back (one during the restore of another) before
# recover() gives up.
MAX_ROLLBACKS_IN_A_ROW = 10

# Failures a rollback may explain.
RECOVERABLE = (ductile.Aborted, ductile.Unavailable, ductile.DeadlineExceeded)

# The optimizers of this process (weak references), each with its `client`
# and _rolled_back(recovery).
_optimizers: List["weakref.ref"] = []


def _alive(refs: List["weakref.ref"], client: ductile.Client) -> List[Any]:
    refs[:] = [r for r in refs if r() is not None]
    return [r() for r in refs if r() is not None and r().client is client]


def register_optimizer(optimizer: Any) -> None:
    _optimizers.append(weakref.ref(optimizer))


def optimizers(client: ductile.Client) -> List[Any]:
    return _alive(_optimizers, client)


def recover(client: ductile.Client, error: BaseException) -> "ductile.Recovery":
    """Takes the rollback that explains `error` and restores every optimizer
    of `client`; raises `error` when it is not a failure a
    rollback explains or none comes in time."""
    for _ in range(MAX_ROLLBACKS_IN_A_ROW):
        if isinstance(error, ductile.Aborted):
            wait_ms = ROLLBACK_WAIT_MS
        elif isinstance(error, (ductile.Unavailable, ductile.DeadlineExceeded)):
            wait_ms = UNANNOUNCED_WAIT_MS
        else:
            raise error
        try:
            recovery = client.await_recovery(timeout_ms=wait_ms)
        except ductile.DeadlineExceeded:
            raise error from None
        print(
            f"worker {client.worker_id}: the job rolled back to the checkpoint at clock "
            f"{recovery.clock} ({error}); resuming",
            file=sys.stderr,
            flush=True,
        )
        try:
            for member in optimizers(client):
                member._rolled_back(recovery)
            return recovery
        except RECOVERABLE as again:  # rolled back again while restoring
            error = again
    raise error
