"""DistributedOptimizer's buckets: parameters fused into server tensors.

Consecutive parameters of one param group (so one update rule and one set
of options), taken in reverse registration order (the order in which
backward produces their gradients), share one dense tensor on the servers,
up to bucket_bytes of float32 values, as DistributedDataParallel's and
Horovod's fusion buffers do: a step pushes and pulls one request per bucket
instead of one per parameter. A parameter larger than the cap has a bucket
of its own; bucket_bytes=0 gives every parameter its own.

Each parameter's gradient, pulled and start buffers are views, shaped as the
parameter, of its bucket's flat buffers, in the parameter's logical
(row-major) order whatever its memory format.
"""

import numbers
from typing import Any, Dict, List, Optional

import torch

import ductile
from ductile import _rules

# The default cap on a bucket's values (float32): 4 MiB.
DEFAULT_BUCKET_BYTES = 4 << 20
_FLOAT_BYTES = 4


def check_bucket_bytes(bucket_bytes: Any) -> int:
    """bucket_bytes as an int >= 0, or ductile.InvalidArgument."""
    if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, numbers.Integral):
        raise ductile.InvalidArgument(
            f"bucket_bytes must be an integer >= 0 (0: a tensor per parameter), "
            f"not {bucket_bytes!r}"
        )
    if bucket_bytes < 0:
        raise ductile.InvalidArgument(
            f"bucket_bytes must be >= 0 (0: a tensor per parameter), not {bucket_bytes}"
        )
    return int(bucket_bytes)


class Param:
    """One parameter, a range of its bucket."""

    def __init__(self, name: str, p: torch.Tensor, group: Dict[str, Any]):
        self.name = name
        self.p = p
        self.group = group
        self.numel = p.numel()
        self.bucket: Optional["Bucket"] = None
        # Views of the bucket's buffers, shaped as p.
        self.grad: Optional[torch.Tensor] = None
        self.pulled: Optional[torch.Tensor] = None
        self.start: Optional[torch.Tensor] = None
        self.passes = 0  # backward passes accumulated since the last step()


class Bucket:
    """Parameters of one param group and their one tensor on the servers.

    Invariants: params are in reverse registration order and tile the flat
    buffers (grad: what is pushed; pulled: the tensor's value, the change
    since start, or with average_gradients the last mean gradient; start:
    the first worker's initial values). `finished` counts the parameters
    whose last backward pass of the step has run; the bucket is pushed once
    all have (`sent`), or by step(). A pending push (`handle`) borrows grad.
    """

    def __init__(self, params: List[Param]):
        self.params = params
        self.group = params[0].group
        self.numel = sum(q.numel for q in params)
        self.grad = torch.zeros(self.numel, dtype=torch.float32)
        self.pulled = torch.zeros(self.numel, dtype=torch.float32)
        self.start = torch.zeros(self.numel, dtype=torch.float32)
        offset = 0
        for q in params:
            q.bucket = self
            span = slice(offset, offset + q.numel)
            q.grad = self.grad[span].view(q.p.shape)
            q.pulled = self.pulled[span].view(q.p.shape)
            q.start = self.start[span].view(q.p.shape)
            offset += q.numel
        self.tensor: Any = None  # the update table (server mode) or the mean gradient
        self.init: Any = None  # the first worker's initial values
        self.lr0 = _rules.base_rate(self.group)  # the servers' rate
        self.lr = self.lr0  # the rate the servers were last told of
        self.finished = 0
        self.sent = False  # pushed (or its push tried) this step
        self.handle: Any = None  # the push of this step, once sent
        self.error: Optional[BaseException] = None  # its push's, raised by step()

    @property
    def names(self) -> str:
        return ", ".join(f"'{q.name}'" for q in self.params)


def plan(params: List[Param], bucket_bytes: int) -> List[Bucket]:
    """Buckets of consecutive parameters of one param group, in reverse
    registration order, each up to bucket_bytes (a larger parameter alone);
    bucket_bytes=0: one per parameter."""
    buckets: List[Bucket] = []
    members: List[Param] = []
    size = 0
    for q in reversed(params):
        nbytes = q.numel * _FLOAT_BYTES
        if members and (
            bucket_bytes == 0 or q.group is not members[0].group or size + nbytes > bucket_bytes
        ):
            buckets.append(Bucket(members))
            members, size = [], 0
        members.append(q)
        size += nbytes
    if members:
        buckets.append(Bucket(members))
    return buckets
