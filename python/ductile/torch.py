"""ductile.torch: train a PyTorch model on a ductile cluster.

    import ductile.torch as dt

    dt.init()                                   # from the launcher's environment
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    optimizer = dt.DistributedOptimizer(optimizer,
                                        named_parameters=model.named_parameters())
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()                         # gradients pushed as they come
        optimizer.step()                        # clock, then fresh parameters
        dt.report(loss=loss, samples=len(x))    # for status, metrics, policies

Every parameter lives in a dense tensor on the servers (consecutive
parameters of a param group fused into one, up to bucket_bytes), and the
servers run the optimizer: the torch optimizer's kind and hyper-parameters
become the tensor's update rule (SUPPORTED lists them). For any other optimizer,
average_gradients=True makes the servers average each clock's gradients
(BSP) and every worker runs its own torch optimizer on the average.

Elastic: a worker that joins starts from the job's current parameters; when
the job rolls back (a server lost), step() pulls the checkpoint's parameters
and the loop goes on; ElasticSampler hands out the job's data plan, so that
every batch of an epoch is trained once across joins, drains, kills and
rollbacks, and ends the loop of a worker asked to leave.

torch is imported when this module is, never by `import ductile`.
"""

import atexit
import numbers
import sys
from typing import Any, Dict, Iterable, List, Optional, Tuple

import torch

import ductile
from ductile import _buckets, _elastic, _start
from ductile._rules import SUPPORTED
from ductile._elastic import ElasticSampler, LeftJob
from ductile._env import connect_from_env

# The coordinator's answer to a worker that registers as the job ends.
SHUTTING_DOWN = "cluster is shutting down"
# The learning-rate factor a rate of 0 is sent as (Client.set_rate_factor
# takes factors in (0, 1e6]).
MIN_RATE_FACTOR = 1e-30

_client: Optional[ductile.Client] = None


def init(**overrides: Any) -> ductile.Client:
    """Connects this process as a worker from the environment the launcher
    sets (ductile.connect_from_env; keywords override it, e.g.
    address="tcp://127.0.0.1:7000") and returns the client, which
    DistributedOptimizer and ElasticSampler then use. rank() and size()
    tell this worker's id and the job's worker count. When the script ends
    (not by an uncaught exception), the client's finish() is called for it.

    Raises LeftJob (exit status 0) when the job ended before this worker
    could join it."""
    global _client
    if _client is not None and not _client.closed:
        raise ductile.FailedPrecondition("ductile.torch.init() was called already")
    try:
        _client = connect_from_env(**overrides)
    except ductile.Unavailable as error:
        # The coordinator's answer to a worker registering as the job ends
        # (as `ductile worker` takes it): no failure, nothing to do.
        if str(error) != SHUTTING_DOWN:
            raise
        message = "the job ended before this worker joined; nothing to do"
        print(message, file=sys.stderr, flush=True)
        raise LeftJob(message) from None
    _finish_at_exit(_client)
    return _client


def _finish_at_exit(connected: ductile.Client) -> None:
    """When the script ends without an uncaught exception, tells the
    coordinator this worker is finished (client.finish(), unless the
    client was closed): a script needs no call of its own. One that raises
    exits non-zero unfinished, and the launcher reports it."""
    state = {"raised": False}
    previous_hook = sys.excepthook

    def hook(*exc_info: Any) -> None:
        state["raised"] = True
        previous_hook(*exc_info)

    def finish() -> None:
        if not state["raised"] and not connected.closed:
            connected.finish()

    sys.excepthook = hook
    atexit.register(finish)


def client() -> ductile.Client:
    """The client init() connected."""
    return _current()


def _current() -> ductile.Client:
    if _client is None or _client.closed:
        raise ductile.FailedPrecondition("call ductile.torch.init() first")
    return _client


def rank() -> int:
    """This worker's id in the job."""
    return _current().worker_id


def size() -> int:
    """The number of workers in the job."""
    return _current().num_workers


def report(
    loss: Any = None, samples: Optional[int] = None, *, client: Optional[ductile.Client] = None
) -> None:
    """Reports this step's training loss and how many samples it trained,
    for `ductile status`, /metrics and the policies (the smoothed loss; the
    samples per second the `stragglers` and `autoscale` policies compare).
    Call it once a step, before or after step(); either may be left out.

    loss: a number or a one-element tensor (detached; a CUDA tensor is
    copied to the host); a loss that is not finite is not counted.
    samples: a count >= 0. An ElasticSampler reports its batches' samples
    itself: passing samples too counts them twice.
    client: the client to report through (default: init()'s).

        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        dt.report(loss=loss, samples=len(x))
    """
    connected = client if client is not None else _current()
    if loss is not None:
        if isinstance(loss, torch.Tensor):
            if loss.numel() != 1:
                raise ValueError(
                    f"loss must be a number or a one-element tensor, not a tensor of shape "
                    f"{tuple(loss.shape)}"
                )
            loss = loss.detach().item()
        elif isinstance(loss, bool) or not isinstance(loss, numbers.Real):
            raise TypeError(f"loss must be a number or a tensor, not {type(loss).__name__}")
    if samples is not None:
        if isinstance(samples, bool) or not isinstance(samples, numbers.Integral):
            raise TypeError(f"samples must be an int, not {type(samples).__name__}")
        if samples < 0:
            raise ValueError(f"samples must be >= 0, not {samples}")
    if loss is not None:
        connected.record_loss(float(loss))
    if samples is not None:
        connected.record_samples(int(samples))


def _accumulate_grad_hook(p: torch.Tensor, hook) -> Any:
    """Calls hook() once autograd has accumulated p's gradient: torch 2.1+'s
    post-accumulate hook, else a hook on p's AccumulateGrad node (torch
    1.13), which must be kept alive: it is returned."""
    if hasattr(p, "register_post_accumulate_grad_hook"):
        return p.register_post_accumulate_grad_hook(lambda _: hook())
    node = p.expand_as(p).grad_fn.next_functions[0][0]
    node.register_hook(lambda *_: hook())
    return node


class DistributedOptimizer:
    """Wraps a torch optimizer so that its parameters live on the servers.

    optimizer: a torch.optim optimizer over the parameters of
    named_parameters (model.named_parameters()). consistency: "bsp",
    "ssp:K" or "async", of every parameter's tensor. name: a prefix of the
    tensors' names, unique per model in the job. average_gradients: the
    servers average each clock's gradients (BSP only) and each worker runs
    `optimizer` on the average (any optimizer). backward_passes_per_step:
    the backward() calls whose gradients accumulate (in p.grad) into one
    step; the sum is pushed after the last of them, and one more before
    step() raises FailedPrecondition. bucket_bytes: consecutive parameters
    of one param group (in reverse registration order, as backward produces
    their gradients) share one tensor on the servers, `<name>.bucket<i>`,
    up to this many bytes of float32 values (a larger parameter alone); 0:
    one tensor per parameter, `<name>.<parameter name>`. Every worker of a
    model must pass the same value: a worker whose parameters or buckets
    differ from the first worker's raises InvalidArgument when it wraps its
    optimizer. client: the client to use (default:
    the one init() connected).

    A bucket is pushed once each of its parameters has had the last
    backward pass of the step, or else by step(). A parameter with no
    gradient in a step contributes zeros to its bucket's push (and no
    weight decay): under SGD with momentum and Adam the servers still apply
    their state (the momentum moves it), as torch.optim does for a zeroed
    grad but not for a grad of None, which it skips; with bucket_bytes=0,
    or when no parameter of the bucket has a gradient, nothing is pushed,
    as torch skips it. With average_gradients such a
    parameter counts as zero in the step's mean either way.

    Parameters with requires_grad=False are left out: neither stored on the
    servers nor pulled. All workers start from the same parameters: the
    first worker to claim the model (an atomic count on the servers) stores
    its own, the others (and later joiners) pull them. The servers hold each
    parameter's change since then. A rollback while the workers agree on
    them, or one to a checkpoint from before they were stored, makes them
    agree again: construction takes rollbacks as step() does.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        named_parameters: Iterable[Tuple[str, torch.nn.Parameter]],
        consistency: str = "bsp",
        *,
        name: str = "model",
        average_gradients: bool = False,
        backward_passes_per_step: int = 1,
        bucket_bytes: int = _buckets.DEFAULT_BUCKET_BYTES,
        client: Optional[ductile.Client] = None,
    ):
        self.optimizer = optimizer
        self._name = name
        self.client = client if client is not None else _current()
        self.average_gradients = average_gradients
        if int(backward_passes_per_step) != backward_passes_per_step or backward_passes_per_step < 1:
            raise ductile.InvalidArgument(
                f"backward_passes_per_step must be a positive integer, not {backward_passes_per_step}"
            )
        self.backward_passes_per_step = int(backward_passes_per_step)
        self.bucket_bytes = _buckets.check_bucket_bytes(bucket_bytes)
        if average_gradients and consistency not in ("bsp", "bsp(mean)"):
            raise ductile.InvalidArgument(
                f"average_gradients=True needs consistency 'bsp', not '{consistency}'"
            )
        groups = {}
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    groups[id(p)] = group
        self._params: List[_buckets.Param] = []
        for pname, p in named_parameters:
            if not p.requires_grad:
                continue  # frozen: not the servers' to hold
            if id(p) not in groups:
                raise ductile.InvalidArgument(f"parameter '{pname}' is not the optimizer's")
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise TypeError(f"parameter '{pname}' must be a float32 CPU tensor")
            self._params.append(_buckets.Param(pname, p, groups.pop(id(p))))
        if groups:
            raise ductile.InvalidArgument(
                f"{len(groups)} of the optimizer's parameters are not in named_parameters"
            )
        self._buckets = _buckets.plan(self._params, self.bucket_bytes)
        self._start = _start.ModelStart(self, consistency)
        while True:
            try:
                self._start.register_tensors()
                self._start.share()
                self._pull(apply=not average_gradients)
                break
            except _elastic.RECOVERABLE as error:
                # A rollback while the workers agree on the initial values:
                # take it (it may have undone them) and agree again.
                _elastic.recover(self.client, error)
        self._hooks = [
            _accumulate_grad_hook(param.p, lambda param=param: self._accumulated(param))
            for param in self._params
        ]
        _elastic.register_optimizer(self)

    @property
    def param_groups(self) -> List[Dict[str, Any]]:
        return self.optimizer.param_groups

    def _accumulated(self, param: _buckets.Param) -> None:
        """A backward pass has added to p.grad: once the last one of the
        step has run on every parameter of the bucket, the bucket is pushed."""
        if _elastic.step_abandoned(self.client):
            return  # a rollback came midway: the step pushes nothing
        param.passes += 1
        if param.passes > self.backward_passes_per_step:
            raise ductile.FailedPrecondition(
                f"backward() ran {param.passes} times on '{param.name}' since the last "
                f"step(), with backward_passes_per_step={self.backward_passes_per_step}: "
                "call step() first, or raise backward_passes_per_step"
            )
        if param.passes == self.backward_passes_per_step:
            bucket = param.bucket
            bucket.finished += 1
            if bucket.finished == len(bucket.params):
                try:
                    self._push(bucket)
                except _elastic.RECOVERABLE as error:  # a rollback: step() takes it
                    bucket.error = error

    def _push(self, bucket: _buckets.Bucket) -> None:
        bucket.sent = True
        # A push still pending here (only after a failed step) borrows
        # bucket.grad: it must be done before the buffer is written.
        handle, bucket.handle = bucket.handle, None
        if handle is not None:
            handle.wait()
        decay = 0 if self.average_gradients else bucket.group.get("weight_decay", 0)
        for param in bucket.params:
            if param.passes == 0 or param.p.grad is None:
                param.grad.zero_()  # no gradient this step
                continue
            param.grad.copy_(param.p.grad)  # p may be non-contiguous (channels_last)
            if decay:
                param.grad.add_(param.p.data, alpha=decay)
        if self.average_gradients:
            bucket.grad.sub_(bucket.pulled)  # the tensor holds the last mean
        else:
            self._follow_rate(bucket)
        bucket.handle = self.client.push_tensor_async(bucket.tensor, bucket.grad)

    def _follow_rate(self, bucket: _buckets.Bucket) -> None:
        """The servers multiply the bucket's rate (the param group's when
        the tensor was made) by the current one's ratio to it, for this
        push and the next (an LR scheduler's change)."""
        lr = float(bucket.group["lr"])
        if lr == bucket.lr:
            return
        if not lr >= 0:
            raise ductile.InvalidArgument(
                f"the learning rate of {bucket.names} is {lr}: it must be 0 or positive"
            )
        # A rate of 0 still moves the optimizer's state in torch.optim (Adam's
        # moments, the momentum): a factor of 1e-30 does the same, and moves
        # no value by as much as float32 can tell.
        factor = max(lr / bucket.lr0, MIN_RATE_FACTOR)
        self.client.set_rate_factor(bucket.tensor, factor)
        bucket.lr = lr

    def _pull(self, apply: bool = True) -> None:
        """One pull per bucket, in the order the forward pass needs them
        (registration order); each bucket's values go into the model as it
        arrives, unless a pull failed. Every pull is done before the first
        error is raised."""
        first: Optional[BaseException] = None
        pending = []
        for bucket in reversed(self._buckets):
            try:
                handle = self.client.pull_tensor_async(bucket.tensor, out=bucket.pulled)
                pending.append((bucket, handle))
            except Exception as error:  # raised once the others are done
                first = error
                break
        for bucket, handle in pending:
            try:
                handle.wait()
            except Exception as error:  # raised once all are done
                if first is None:
                    first = error
            if first is None and apply:
                self._apply(bucket)
        if first is not None:
            raise first

    def _apply(self, bucket: _buckets.Bucket) -> None:
        for param in bucket.params:
            if self.average_gradients:
                if param.p.grad is None:
                    param.p.grad = torch.zeros_like(param.p)
                param.p.grad.copy_(param.pulled)
            else:
                # Written in place; p may be non-contiguous (channels_last).
                torch.add(param.start, param.pulled, out=param.p.data)

    def synchronize(self) -> None:
        """Waits until every gradient pushed since the last step has been
        sent (Embedding's rows too); raises the first error after waiting for all of them. Either
        way no push is left pending, so a later step starts afresh (after
        Client.await_recovery(), say)."""
        errors = []
        # Embedding's row pushes of the step, first: they need no buffer.
        try:
            _elastic.wait_pushes(self.client)
        except Exception as error:
            errors.append(error)
        handles = []
        for bucket in self._buckets:
            handle, bucket.handle = bucket.handle, None
            handles.append(handle)
            if bucket.error is not None:
                errors.append(bucket.error)
                bucket.error = None
        _elastic.wait_all(handles)
        if errors:
            raise errors[0]

    def step(self, closure=None):
        """Ends this worker's step: waits for its pushes, advances its clock
        and pulls the parameters (under BSP, with every worker's gradients
        of the step applied). With average_gradients, the average gradient
        replaces p.grad and the wrapped optimizer steps. An ElasticSampler's
        batch is reported trained before the clock moves.

        When this worker is asked to leave (`ductile drain`, a resize) and
        no ElasticSampler ends its loop, step() leaves the job and raises
        LeftJob, a SystemExit with status 0.

        A closure's loss (a number or a one-element tensor) is reported as
        report(loss=...) would.

        When the job rolls back (a server lost), the step's calls fail with
        ductile.Aborted: step() takes the rollback, pulls the checkpoint's
        parameters and returns; the step's gradients are not applied.
        Without an ElasticSampler the loop's data does not go back with
        it."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
            one = loss.numel() == 1 if isinstance(loss, torch.Tensor) else (
                isinstance(loss, numbers.Real) and not isinstance(loss, bool)
            )
            if one:
                report(loss=loss, client=self.client)
        try:
            self._step()
        except _elastic.RECOVERABLE as error:
            # A rollback: the parameters are pulled at the checkpoint's
            # clock (and an ElasticSampler's plan rolls back). Raises
            # `error` when no rollback explains it.
            _elastic.recover(self.client, error)
        if self.client.leave_requested and not _elastic.samplers(self.client):
            self._leave()
        return loss

    def _leave(self) -> None:
        """Asked to leave, with no ElasticSampler to end the loop: leaves
        the job at this clock and raises LeftJob."""
        while True:
            try:
                self.client.leave()
                break
            except _elastic.RECOVERABLE as error:
                _elastic.recover(self.client, error)
        message = (
            f"worker {self.client.worker_id} left the job at clock "
            f"{self.client.current_clock} (asked to)"
        )
        print(message, flush=True)
        raise LeftJob(message)

    def _step(self) -> None:
        if _elastic.step_abandoned(self.client):
            # A lookup took a rollback midway: no gradient of this step
            # counts (as a step with no data).
            for param in self._params:
                param.passes = 0
        try:
            for bucket in self._buckets:
                if bucket.sent:
                    continue
                # Fewer passes than backward_passes_per_step, or a parameter
                # with no gradient: its range is zeros. A bucket with no
                # gradient at all is not pushed, except when averaging: a
                # zero counts in the mean, else the servers would keep the
                # last clock's.
                if self.average_gradients or any(q.passes for q in bucket.params):
                    self._push(bucket)
        finally:
            for bucket in self._buckets:
                bucket.sent = False
                bucket.finished = 0
            for param in self._params:
                param.passes = 0
        self.synchronize()
        for sampler in _elastic.samplers(self.client):
            sampler._before_clock()  # the batch trained, reported before the clock
        self.client.clock()
        _elastic.end_step(self.client)
        self._pull()
        if self.average_gradients:
            self.optimizer.step()
        else:
            # What torch's LR schedulers check to see that the optimizer stepped.
            self.optimizer._step_count = getattr(self.optimizer, "_step_count", 0) + 1

    def _rolled_back(self, recovery: "ductile.Recovery") -> None:
        """The job rolled back to the checkpoint at recovery.clock: drops what
        the step left in flight and pulls the checkpoint's parameters. (With
        average_gradients the parameters are each worker's own: they are not
        rolled back.)"""
        _elastic.drop_pushes(self.client)
        for bucket in self._buckets:
            handle, bucket.handle = bucket.handle, None
            bucket.error = None
            bucket.sent = False
            bucket.finished = 0
            if handle is not None:
                try:
                    handle.wait()  # failed already, or fails soon: Aborted
                except ductile.DuctileError:
                    pass
        for param in self._params:
            param.passes = 0
        if self._start.after_rollback():
            self._pull(apply=not self.average_gradients)
        else:
            self._pull()

    def _drop_accumulated(self) -> None:
        """Forgets the backward passes since the last step (a rollback came
        midway: they mix two timelines)."""
        for param in self._params:
            param.passes = 0
            param.p.grad = None

    def zero_grad(self, set_to_none: bool = False) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> Dict[str, Any]:
        return self.optimizer.state_dict()

    def __repr__(self) -> str:
        mode = "gradient averaging" if self.average_gradients else "server optimizer"
        return (
            f"DistributedOptimizer({type(self.optimizer).__name__}, {mode}, "
            f"{len(self._params)} parameters in {len(self._buckets)} tensors)"
        )


from ductile._embedding import Embedding, EmbeddingBag, wait_pushes  # noqa: E402,F401
