"""connect_from_env(): a Client from the environment a launcher sets.

`ductile local -- COMMAND` sets them for each worker it runs as COMMAND
(their names are launch/launch_env.h's), from the flags it would give its
built-in workers. They name the `ductile worker` flags they stand for:

  DUCTILE_COORDINATOR          --coordinator: the coordinator's address
  DUCTILE_KEYS                 --keys: directory of the cluster's keys
                               (unset or empty: plain mode)
  DUCTILE_MEMBER_KEY           --member_key: this worker's own key file
  DUCTILE_REQUIRE_MEMBER_KEYS  --require_member_keys (1 unless 0 or false)
  DUCTILE_TIMEOUT_MS           --timeout_ms: connect and request timeout
  DUCTILE_IO_THREADS           --io_threads
  DUCTILE_SHM_VALUES           --shm_values (1 unless 0 or false)
  DUCTILE_CACHE                --cache (0 unless 1 or true)
  DUCTILE_RANK                 --worker_id (see below)
  DUCTILE_WORKERS              the job's initial number of workers (not read
                               here: client.num_workers is the live count)

and the worker id is the launcher's rank, as for `ductile worker`: the first
set of DUCTILE_RANK, SLURM_PROCID (srun) and JOB_COMPLETION_INDEX (a
Kubernetes Indexed Job); unset, the coordinator chooses.
"""

import os
from typing import Any, Mapping, Optional, Tuple

from ductile._ductile import Client, connect
from ductile.errors import InvalidArgument

# As launch/launch_env.h's kRankVariables, first set wins.
RANK_VARIABLES = ("DUCTILE_RANK", "SLURM_PROCID", "JOB_COMPLETION_INDEX")
# ductile/limits.h's kMaxMemberId.
MAX_MEMBER_ID = (1 << 20) - 1


def rank_from_env(
    environ: Optional[Mapping[str, str]] = None,
) -> Tuple[int, Optional[str]]:
    """The launcher's rank and the variable it came from, or (-1, None).

    Raises ductile.InvalidArgument naming the variable when its value is not
    a rank in [0, 1048575].
    """
    env = os.environ if environ is None else environ
    for name in RANK_VARIABLES:
        value = env.get(name)
        if value is None:
            continue
        if not (value.isascii() and value.isdigit()) or int(value) > MAX_MEMBER_ID:
            raise InvalidArgument(
                f"{name}='{value}' is not a rank in [0, {MAX_MEMBER_ID}]"
            )
        return int(value), name
    return -1, None


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    value = env.get(name)
    if value is None or value == "":
        return default
    lowered = value.lower()
    if lowered in ("1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no"):
        return False
    raise InvalidArgument(f"{name}='{value}' is not 1, 0, true or false")


def _integer(env: Mapping[str, str], name: str) -> Optional[int]:
    value = env.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise InvalidArgument(f"{name}='{value}' is not an integer") from None


def connect_from_env(
    environ: Optional[Mapping[str, str]] = None, **overrides: Any
) -> Client:
    """Connects as the worker a launcher started (see the module's doc for
    the variables read). Keyword arguments are those of ductile.connect() and
    take precedence over the environment::

        client = ductile.connect_from_env(request_timeout_ms=30000)

    Raises ductile.InvalidArgument when DUCTILE_COORDINATOR is not set or a
    variable's value is not what it should be.
    """
    env = os.environ if environ is None else environ
    options: dict = {}
    address = env.get("DUCTILE_COORDINATOR")
    if not address and "address" not in overrides:
        raise InvalidArgument(
            "DUCTILE_COORDINATOR is not set: connect_from_env() reads the "
            "coordinator's address from the environment a launcher sets "
            "(ductile.connect(address) takes it explicitly)"
        )
    options["address"] = address
    rank, _ = rank_from_env(env)
    options["worker_id"] = rank
    if env.get("DUCTILE_KEYS"):
        options["keys"] = env["DUCTILE_KEYS"]
    if env.get("DUCTILE_MEMBER_KEY"):
        options["member_key"] = env["DUCTILE_MEMBER_KEY"]
    options["require_member_keys"] = _flag(env, "DUCTILE_REQUIRE_MEMBER_KEYS", True)
    timeout_ms = _integer(env, "DUCTILE_TIMEOUT_MS")
    if timeout_ms is not None:
        options["connect_timeout_ms"] = timeout_ms
        options["request_timeout_ms"] = timeout_ms
    io_threads = _integer(env, "DUCTILE_IO_THREADS")
    if io_threads is not None:
        options["io_threads"] = io_threads
    if not _flag(env, "DUCTILE_SHM_VALUES", True):
        options["shm_reply_bytes"] = 0
    options["enable_cache"] = _flag(env, "DUCTILE_CACHE", False)
    options.update(overrides)
    return connect(**options)
