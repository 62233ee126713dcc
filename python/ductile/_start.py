"""DistributedOptimizer's tensors on the servers and the initial values the
workers agree on.

Every worker starts from the same parameters: the first worker to claim the
model (an atomic count on the servers, `<name>.claims`) stores its own in
each bucket's `.init` tensor and then a fingerprint of the layout in
`<name>.ready`; the others wait for it, check it against their own and take
the stored values. The bucket tensors hold each parameter's change since
then (the parameter is its start value plus the pulled tensor).

A rollback can undo the initial values only when its checkpoint is from
before the first worker stored them, so before any worker's step: the
claim count, the ready flag and the values go back to nothing together.
After every rollback each worker checks: if nothing is stored the workers
agree again (the first to claim stores the start values it holds), and
otherwise a worker takes the stored values, which a worker that claimed
them after the rollback may have stored.
"""

import time
import zlib
from typing import Any

import torch

import ductile
from ductile._rules import server_rule

# How long a worker waits for the first worker's initial parameters.
INIT_TIMEOUT_S = 60.0


class ModelStart:
    """The tensors and initial values of one DistributedOptimizer."""

    def __init__(self, optimizer: Any, consistency: str):
        self.owner = optimizer
        self.consistency = consistency
        self.ready = None
        self.claims = None

    def register_tensors(self) -> None:
        """The model's tensors on the servers (registering one again is
        harmless: every worker registering a name shares it)."""
        owner, client = self.owner, self.owner.client
        name = owner._name
        for i, bucket in enumerate(owner._buckets):
            if owner.bucket_bytes == 0:
                full = f"{name}.{bucket.params[0].name}"
            else:
                full = f"{name}.bucket{i}"
            if owner.average_gradients:
                # Each worker pushes its gradient minus the tensor's value
                # (the last mean): BSP's mean of those, added, is the mean.
                options = {"rule": "add"}
            else:
                options = server_rule(owner.optimizer, bucket.group)
            bucket.tensor = client.register_tensor(
                full, bucket.numel, consistency=self.consistency, **options
            )
            bucket.init = client.register_tensor(
                full + ".init", bucket.numel, rule="assign", consistency="async"
            )
        self.ready = client.register_tensor(f"{name}.ready", 1, rule="assign", consistency="async")
        # Each worker adds 1: the one that reads back 1 was first.
        self.claims = client.register_tensor(f"{name}.claims", 1, rule="add", consistency="async")

    def share(self, keep_start: bool = False) -> None:
        """The workers agree on the initial values: the first to claim the
        model stores its parameters (or, with keep_start, the start values
        it holds already), the others take them into their start values and
        parameters."""
        owner, client = self.owner, self.owner.client
        claims = client.push_pull_tensor(self.claims, torch.ones(1))
        if claims[0] == 1:
            for bucket in owner._buckets:
                if not keep_start:
                    for param in bucket.params:
                        param.start.copy_(param.p.data)
                client.push_tensor(bucket.init, bucket.start)
            client.push_tensor(self.ready, torch.full((1,), self.layout()))
            return
        flag = torch.zeros(1)
        deadline = time.monotonic() + INIT_TIMEOUT_S
        while client.pull_tensor(self.ready, out=flag)[0] == 0:
            if time.monotonic() > deadline:
                raise ductile.DeadlineExceeded(
                    "the first worker did not store the initial parameters "
                    f"within {INIT_TIMEOUT_S} s"
                )
            time.sleep(0.01)
        if flag[0] != self.layout():
            raise ductile.InvalidArgument(
                f"model '{owner._name}': this worker's parameters or buckets differ from "
                "the first worker's (another model, or another bucket_bytes): every "
                "worker must wrap the same parameters with the same bucket_bytes"
            )
        for bucket in owner._buckets:
            client.pull_tensor(bucket.init, out=bucket.start)
            for param in bucket.params:
                param.p.data.copy_(param.start)

    def after_rollback(self) -> bool:
        """After a rollback: agrees on the initial values again if it undid
        them (True), else takes the stored ones (False). With
        average_gradients each worker's parameters are its own: they are
        what it stores, and a worker that takes other values starts from
        them."""
        owner, client = self.owner, self.owner.client
        if client.pull_tensor(self.ready, out=torch.zeros(1))[0] == 0:
            if owner.average_gradients:
                for param in owner._params:
                    param.start.copy_(param.p.data)
            self.share(keep_start=True)
            return True
        stored = torch.empty(max((b.numel for b in owner._buckets), default=0))
        for bucket in owner._buckets:
            init = client.pull_tensor(bucket.init, out=stored[: bucket.numel])
            if not torch.equal(init, bucket.start):
                bucket.start.copy_(init)
                if owner.average_gradients:
                    for param in bucket.params:
                        param.p.data.copy_(param.start)
        return False

    def layout(self) -> float:
        """A fingerprint of the tensors on the servers (their names and
        sizes, and the parameters' names and shapes in them): a whole number
        in [1, 2^24), which a float32 holds exactly. The first worker stores
        it with the initial values, and every other checks its own."""
        text = ";".join(
            f"{b.tensor.name}:{b.numel}:" + ",".join(f"{q.name}{tuple(q.p.shape)}" for q in b.params)
            for b in self.owner._buckets
        )
        return float(zlib.crc32(text.encode()) % ((1 << 24) - 1) + 1)
