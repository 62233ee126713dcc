"""The exceptions ductile raises: one class per status code of
include/ductile/status.h, all derived from DuctileError.

Each code says what the caller should do next::

    try:
        client.push(table, keys, grad)
    except ductile.Aborted:            # the job rolled back to a checkpoint
        recovery = client.await_recovery()
    except ductile.Unavailable:        # a peer is not reachable right now
        ...                            # retry the call

Where a built-in exception means the same, the class derives from it too:
InvalidArgument is a ValueError, DeadlineExceeded a TimeoutError, NotFound
a LookupError, PermissionDenied a PermissionError and Unavailable a
ConnectionError.
"""

from typing import Dict, Type

__all__ = [
    "DuctileError",
    "Cancelled",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "Internal",
    "Unavailable",
]


class DuctileError(Exception):
    """A ductile call failed; `code` is the status code's number."""

    code: int = -1


class Cancelled(DuctileError):
    """The caller, or this process's side shutting down, stopped the call
    (the client was closed, the coordinator stopped)."""

    code = 1


class InvalidArgument(DuctileError, ValueError):
    """The request itself is wrong (arguments, sizes, an out-of-range value):
    do not retry it as is."""

    code = 3


class DeadlineExceeded(DuctileError, TimeoutError):
    """A bounded wait (reply, barrier, staleness bound, connect) ran out; the
    operation may still complete later."""

    code = 4


class NotFound(DuctileError, LookupError):
    """A named thing (table, member) does not exist."""

    code = 5


class AlreadyExists(DuctileError):
    """The name or id is taken (by something different)."""

    code = 6


class PermissionDenied(DuctileError, PermissionError):
    """The caller may not do this (an admin operation without the admin key,
    a secret key file others can read)."""

    code = 7


class ResourceExhausted(DuctileError):
    """Out of a resource: disk, memory, a server's limit."""

    code = 8


class FailedPrecondition(DuctileError):
    """The system is not in a state that allows the call (a closed client, a
    client used in a forked child, not registered as a worker): do not retry
    until that changes."""

    code = 9


class Aborted(DuctileError):
    """A failure in the cluster interrupted the call (a member died; for a
    worker, the job rolled back to a checkpoint: take it with
    Client.await_recovery())."""

    code = 10


class Internal(DuctileError):
    """A broken invariant, or a peer that broke the protocol."""

    code = 13


class Unavailable(DuctileError, ConnectionError):
    """A peer is not reachable or not ready right now: retry the call."""

    code = 14


_BY_CODE: Dict[int, Type[DuctileError]] = {
    cls.code: cls
    for cls in (
        Cancelled,
        InvalidArgument,
        DeadlineExceeded,
        NotFound,
        AlreadyExists,
        PermissionDenied,
        ResourceExhausted,
        FailedPrecondition,
        Aborted,
        Internal,
        Unavailable,
    )
}


def class_for_code(code: int) -> Type[DuctileError]:
    """The exception class of a status code (DuctileError for an unknown one)."""
    return _BY_CODE.get(code, DuctileError)
