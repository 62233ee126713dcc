"""Elastic training for ductile.torch: rollbacks, drains and the data plan.

A rollback (a server lost: the job goes back to its latest checkpoint)
reaches a worker as ductile.Aborted from whichever call sees it first, the
DistributedOptimizer's step() or the ElasticSampler's next batch.
recover() takes it once (Client.await_recovery) and tells every optimizer
and sampler of the client, which pull the checkpoint's parameters and drop
the batches the plan took back. The user's loop sees none of it.

This module needs numpy only; ductile.torch re-exports ElasticSampler.
"""

import contextlib
import sys
import threading
import time
import weakref
from collections import deque
from typing import Any, Deque, Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np

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
# Between two requests for a batch while others hold the last ones.
WAIT_POLL_S = 0.02

# Failures a rollback may explain.
RECOVERABLE = (ductile.Aborted, ductile.Unavailable, ductile.DeadlineExceeded)

# The optimizers and samplers of this process (weak references), each with
# its `client`. Optimizers: _rolled_back(recovery), step(). Samplers:
# _rolled_back(recovery), _before_clock().
_optimizers: List["weakref.ref"] = []
_samplers: List["weakref.ref"] = []


# Pushes sent without waiting (Embedding's backward passes), by client
# (id()): waited for before the clock moves (DistributedOptimizer.step(),
# the next lookup), dropped by a rollback.
_pushes: Dict[int, List[Any]] = {}


# The clock of the step a lookup took a rollback in, by client (id()): the
# step's gradients are of two timelines and are not pushed.
_abandoned: Dict[int, int] = {}


class _Failed:
    """A push refused before it was sent: its wait() raises the error."""

    def __init__(self, error: BaseException):
        self.error = error

    def wait(self) -> None:
        raise self.error


def note_push(client: ductile.Client, handle: Any) -> None:
    """Keeps `handle`, an asynchronous push of `client`, for wait_pushes."""
    _pushes.setdefault(id(client), []).append(handle)


def note_failed_push(client: ductile.Client, error: BaseException) -> None:
    """Keeps a push's immediate failure for wait_pushes to raise."""
    note_push(client, _Failed(error))


def abandon_step(client: ductile.Client) -> None:
    """The step under way took a rollback midway (a lookup did): nothing
    of it is pushed (step_abandoned), and its clock moves on with no
    gradient."""
    _abandoned[id(client)] = client.current_clock


def step_abandoned(client: ductile.Client) -> bool:
    return _abandoned.get(id(client)) == client.current_clock


def end_step(client: ductile.Client) -> None:
    _abandoned.pop(id(client), None)


def new_batch(client: ductile.Client) -> None:
    """A batch of the rolled-back timeline begins (an ElasticSampler yields
    it): a step abandoned before it is over, and the gradients it left in
    the optimizers' parameters are dropped."""
    if _abandoned.pop(id(client), None) is None:
        return
    for optimizer in optimizers(client):
        optimizer._drop_accumulated()


def wait_all(handles: Iterable[Any]) -> None:
    """Waits for every handle (None: none), then raises the first error."""
    first: Optional[BaseException] = None
    for handle in handles:
        if handle is None:
            continue
        try:
            handle.wait()
        except Exception as error:  # raised once all are done
            if first is None:
                first = error
    if first is not None:
        raise first


def wait_pushes(client: ductile.Client) -> None:
    """Waits for every push note_push kept for `client`; then raises the
    first error, if any."""
    wait_all(_pushes.pop(id(client), []))


def drop_pushes(client: ductile.Client) -> None:
    """Waits for the pushes note_push kept for `client`, their errors
    ignored (a rollback undid them)."""
    for handle in _pushes.pop(id(client), []):
        try:
            handle.wait()
        except ductile.DuctileError:
            pass


def _alive(refs: List["weakref.ref"], client: ductile.Client) -> List[Any]:
    refs[:] = [r for r in refs if r() is not None]
    return [r() for r in refs if r() is not None and r().client is client]


def register_optimizer(optimizer: Any) -> None:
    _optimizers.append(weakref.ref(optimizer))


def optimizers(client: ductile.Client) -> List[Any]:
    return _alive(_optimizers, client)


def samplers(client: ductile.Client) -> List[Any]:
    return _alive(_samplers, client)


class LeftJob(SystemExit):
    """Raised by DistributedOptimizer.step() once this worker has left the
    job because it was asked to (`ductile drain`, a resize, a policy) and
    no ElasticSampler ends its loop instead; by init() when the job ended
    before this worker joined (started by a resize or a replacement late in
    the job: there is nothing left to train); and by step() or an
    ElasticSampler when the job is shut down under the worker (`ductile
    shutdown`). A SystemExit with status 0: uncaught, the script ends
    cleanly; catch it to go on."""

    def __init__(self, message: str):
        super().__init__(0)
        self.message = message

    def __str__(self) -> str:
        return self.message


def shut_down(client: ductile.Client) -> LeftJob:
    """The job was shut down under this worker: says so, and returns the
    LeftJob to raise."""
    message = (
        f"worker {client.worker_id}: the job was shut down at clock "
        f"{client.current_clock}; stopping"
    )
    print(message, flush=True)
    return LeftJob(message)


@contextlib.contextmanager
def stops_at_shutdown(client: ductile.Client) -> Iterator[None]:
    """Turns a call's ductile.Unavailable into LeftJob when the job is
    shutting down (`ductile shutdown`): the loop ends there."""
    try:
        yield
    except ductile.Unavailable:
        if client.shutting_down:
            raise shut_down(client) from None
        raise


def recover(client: ductile.Client, error: BaseException) -> "ductile.Recovery":
    """Takes the rollback that explains `error` and restores every optimizer
    and sampler of `client`; raises `error` when it is not a failure a
    rollback explains or none comes in time, and LeftJob when the job is
    shutting down (nothing is left to train)."""
    for _ in range(MAX_ROLLBACKS_IN_A_ROW):
        if client.shutting_down:
            raise shut_down(client) from None
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
        except ductile.Unavailable:  # the job shut down meanwhile
            raise shut_down(client) from None
        print(
            f"worker {client.worker_id}: the job rolled back to the checkpoint at clock "
            f"{recovery.clock} ({error}); resuming",
            file=sys.stderr,
            flush=True,
        )
        drop_pushes(client)
        end_step(client)
        try:
            for member in samplers(client) + optimizers(client):
                member._rolled_back(recovery)
            return recovery
        except RECOVERABLE as again:  # rolled back again while restoring
            error = again
    raise error


def idle_step(client: ductile.Client) -> None:
    """A step with no data: the optimizers step with no gradient (pull the
    next clock's parameters), or the clock moves on, so that a worker with
    no batch holds nobody back."""
    steppers = optimizers(client)
    if not steppers:
        client.clock()
    for optimizer in steppers:
        optimizer.step()


class ElasticSampler:
    """The job's data plan as a batch sampler: every batch of every epoch is
    trained exactly once across the workers, however they join, leave, are
    drained or killed, and across rollbacks.

        sampler = dt.ElasticSampler(len(dataset), batch_size=64, epochs=5)
        loader = DataLoader(dataset, batch_sampler=sampler)
        for epoch in range(5):
            for x, y in loader:
                ...                     # forward, backward, optimizer.step()

    An epoch is num_samples // batch_size batches (drop_last, the default;
    else the last one is short) of a permutation of range(num_samples) drawn
    from (seed, epoch), the same on every worker (shuffle=False: in order).
    The coordinator hands batches out one at a time (Client.next_batch); the
    DistributedOptimizer's step() reports the one trained before the clock
    moves, so a batch whose gradient a rollback undid is handed out again and
    one the checkpoint holds is not. Each iteration yields one epoch's batches,
    as the plan gives them: it ends where the plan moves to a later epoch, or
    at the plan's end, once every worker's last push is in (a barrier, while
    this worker keeps its clock moving). A worker that joins late starts at
    the plan's current epoch, so its last iterations may be empty. When no
    batch is free but others hold the last ones (they may die and give theirs
    back), the worker steps with no data (DistributedOptimizer.step() with no
    gradient) and asks again. A worker asked to leave (`ductile drain`, a
    policy) leaves the job at its next batch: the iteration ends, and so do
    all later ones; the script then goes on after its loop (and its
    client().finish() is a no-op).

    Use it with a DataLoader whose num_workers is 0: a loader with worker
    processes takes batches ahead of the step that trains them. len() is an
    estimate: the epoch's batches over the live workers.
    """

    def __init__(
        self,
        num_samples: int,
        batch_size: int,
        epochs: int = 1,
        *,
        shuffle: bool = True,
        drop_last: bool = True,
        seed: int = 0,
        client: Optional[ductile.Client] = None,
    ):
        if num_samples < 1 or batch_size < 1 or epochs < 1:
            raise ductile.InvalidArgument(
                f"num_samples ({num_samples}), batch_size ({batch_size}) and epochs "
                f"({epochs}) must be positive"
            )
        if drop_last and num_samples < batch_size:
            raise ductile.InvalidArgument(
                f"no full batch of {batch_size} in {num_samples} samples (drop_last)"
            )
        if client is None:
            from ductile.torch import client as current  # the one init() connected

            client = current()
        self.client = client
        self.num_samples = int(num_samples)
        self.batch_size = int(batch_size)
        self.epochs = int(epochs)
        self.shuffle = shuffle
        self.seed = int(seed)
        full, rest = divmod(self.num_samples, self.batch_size)
        self.batches_per_epoch = full if drop_last or rest == 0 else full + 1
        self._current: Optional[ductile.Batch] = None  # yielded, not yet reported
        self._held: Deque[ductile.Batch] = deque()  # taken, not yet yielded
        self._done = False  # the plan ended (and the final barrier passed)
        self._left = False
        self._rollbacks = 0
        # (clock, epoch, index) of each batch reported trained, less those a
        # rollback undid.
        self._trained: List[Tuple[int, int, int]] = []
        self._order_epoch = -1
        self._order = np.arange(self.num_samples)
        _samplers.append(weakref.ref(self))

    def __len__(self) -> int:
        live = max(1, len(self.client.live_workers))
        return -(-self.batches_per_epoch // live)

    def __iter__(self) -> Iterator[List[int]]:
        epoch = None
        while True:
            batch = self._take()
            if batch is None:
                return
            if epoch is None:
                epoch = batch.epoch
            elif batch.epoch > epoch:
                self._held.appendleft(batch)  # the next iteration's first
                return
            new_batch(self.client)
            self._current = batch
            yield self._indices(batch)

    def indices(self, epoch: int, index: int) -> List[int]:
        """The samples of batch `index` of `epoch`."""
        if epoch != self._order_epoch:
            self._order = (
                np.random.default_rng([self.seed, epoch]).permutation(self.num_samples)
                if self.shuffle
                else np.arange(self.num_samples)
            )
            self._order_epoch = epoch
        begin = index * self.batch_size
        return self._order[begin : begin + self.batch_size].tolist()

    def _indices(self, batch: ductile.Batch) -> List[int]:
        return self.indices(batch.epoch, batch.index)

    @property
    def trained(self) -> List[Tuple[int, int]]:
        """(epoch, index) of the batches this worker trained whose gradients
        the job kept: reported trained, and not undone by a rollback."""
        return [(epoch, index) for _, epoch, index in self._trained]

    @property
    def left(self) -> bool:
        """Whether this worker left the job (asked to)."""
        return self._left

    def _next(self, trained: Optional[ductile.Batch]) -> ductile.Batch:
        return self.client.next_batch(self.batches_per_epoch, self.epochs, trained=trained)

    def _before_clock(self) -> None:
        """The step of the batch last yielded pushed its gradients: report
        it, before the clock moves, and take the next."""
        batch, self._current = self._current, None
        if batch is None:
            return
        self.client.record_samples(len(self._indices(batch)))
        self._trained.append((self.client.current_clock, batch.epoch, batch.index))
        following = self._next(batch)
        if following.kind == ductile.BatchKind.TRAIN:
            self._held.append(following)

    def _rolled_back(self, recovery: "ductile.Recovery") -> None:
        """The plan rolled back: what this worker held is no longer its."""
        self._current = None
        self._held.clear()
        self._rollbacks += 1
        # The checkpoint holds the pushes of clocks before its own.
        self._trained = [t for t in self._trained if t[0] < recovery.clock]

    def _take(self) -> Optional[ductile.Batch]:
        """The next batch to train, or None at the plan's end or when this
        worker left."""
        while not (self._done or self._left):
            try:
                if self.client.leave_requested:
                    self._leave()
                    return None
                if self._held:
                    return self._held.popleft()
                # A batch yielded but never stepped is reported now.
                trained, self._current = self._current, None
                batch = self._next(trained)
                if batch.kind == ductile.BatchKind.TRAIN:
                    return batch
                if batch.kind == ductile.BatchKind.END:
                    self._finish()
                else:  # WAIT: others hold the last batches
                    time.sleep(WAIT_POLL_S)
                    idle_step(self.client)
            except RECOVERABLE as error:
                recover(self.client, error)
        return None

    def _leave(self) -> None:
        for optimizer in optimizers(self.client):
            optimizer.synchronize()
        self.client.leave()
        self._left = True
        print(
            f"worker {self.client.worker_id} left the job at clock "
            f"{self.client.current_clock} (asked to)",
            flush=True,
        )

    def _finish(self) -> None:
        """The plan ended: waits at a barrier until every worker's last push
        is in, stepping with no data meanwhile (under BSP or SSP a worker
        that stopped clocking would hold the others back). A rollback
        meanwhile puts batches back in the plan: then the caller takes them."""
        rollbacks = self._rollbacks
        failure: List[BaseException] = []

        def barrier() -> None:
            try:
                self.client.barrier()
            except BaseException as error:  # noqa: B902, re-raised below
                failure.append(error)

        waiter = threading.Thread(target=barrier, name="ductile-final-barrier", daemon=True)
        waiter.start()
        while waiter.is_alive():
            waiter.join(WAIT_POLL_S)
            if waiter.is_alive() and self._rollbacks == rollbacks:
                try:
                    idle_step(self.client)
                except RECOVERABLE as error:
                    recover(self.client, error)
        if self._rollbacks != rollbacks:
            return  # the plan rolled back: train what it gives again
        if failure:
            raise failure[0]
        self._done = True

    def __repr__(self) -> str:
        return (
            f"ElasticSampler({self.num_samples} samples, batches of {self.batch_size}, "
            f"{self.batches_per_epoch} per epoch, {self.epochs} epochs)"
        )
