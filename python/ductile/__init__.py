"""ductile: a parameter server for distributed training, from Python.

Connect to a cluster, make tables or dense tensors on its servers, and push
gradients and pull parameters with numpy arrays or CPU torch tensors, used in
place::

    import numpy as np
    import ductile

    client = ductile.connect("tcp://127.0.0.1:7000")
    table = client.create_table("weights", width=4, rule="sgd",
                                learning_rate=0.1)
    keys = [3, 17, 42]                         # strictly increasing
    grad = np.ones(12, dtype=np.float32)
    client.push(table, keys, grad)
    weights = client.pull(table, keys)         # a new float32 array
    client.clock()
    client.finish()

Every failure raises a subclass of ductile.DuctileError named after its status
code (ductile.Unavailable, ductile.Aborted, ductile.DeadlineExceeded,
ductile.InvalidArgument, ...). Arrays of the wrong dtype or layout raise
TypeError or ValueError before anything is sent. See docs/python.md.
"""

from ductile.errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    DeadlineExceeded,
    DuctileError,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)
from ductile._ductile import (
    Batch,
    BatchKind,
    Client,
    Handle,
    Recovery,
    Stats,
    Table,
    Tensor,
    connect,
)
from ductile._env import connect_from_env, rank_from_env

__all__ = [
    "Aborted",
    "AlreadyExists",
    "Batch",
    "BatchKind",
    "Cancelled",
    "Client",
    "DeadlineExceeded",
    "DuctileError",
    "FailedPrecondition",
    "Handle",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "Recovery",
    "ResourceExhausted",
    "Stats",
    "Table",
    "Tensor",
    "Unavailable",
    "connect",
    "connect_from_env",
    "rank_from_env",
]
