"""Fixtures of the ductile package's tests: a real cluster (a coordinator and
a server, processes of the `ductile` binary) for the whole session, and
clients of it that leave the job when their test ends.

The binary is $DUCTILE_BINARY (ctest sets it), else build/ductile in the
source tree. Every wait is bounded; the processes are stopped by PID at the
end, and die with this process (PR_SET_PDEATHSIG) if it is killed.
"""

import ctypes
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator, List

import pytest

import ductile

SOURCE_DIR = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30
CONNECT_TIMEOUT_MS = 30000
# Longer than the coordinator's heartbeat timeout below, so that a call
# waiting on a worker another test left alive fails only if it is a bug.
REQUEST_TIMEOUT_MS = 30000


def _binary() -> str:
    binary = os.environ.get("DUCTILE_BINARY") or str(SOURCE_DIR / "build" / "ductile")
    if not os.access(binary, os.X_OK):
        pytest.exit(f"no ductile binary at {binary} (set DUCTILE_BINARY)", 2)
    return binary


def _die_with_parent() -> None:
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


class Cluster:
    """A running coordinator and server; `address` is the coordinator's."""

    def __init__(self, address: str, workdir: Path):
        self.address = address
        self.workdir = workdir

    def connect(self, **options) -> ductile.Client:
        options.setdefault("connect_timeout_ms", CONNECT_TIMEOUT_MS)
        options.setdefault("request_timeout_ms", REQUEST_TIMEOUT_MS)
        return ductile.connect(self.address, **options)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    binary = _binary()
    workdir = tmp_path_factory.mktemp("cluster")
    address_file = workdir / "coordinator.address"
    processes: List[subprocess.Popen] = []
    logs = []

    def start(name: str, args: List[str]) -> subprocess.Popen:
        log = open(workdir / f"{name}.log", "wb")
        logs.append(log)
        process = subprocess.Popen(
            [binary] + args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        processes.append(process)
        return process

    try:
        coordinator = start(
            "coordinator",
            [
                "coordinator",
                "--listen=tcp://127.0.0.1:0",
                f"--address_file={address_file}",
                "--servers=1",
                "--workers=0",  # runs until stopped: tests' clients come and go
                "--no_worker_timeout_ms=0",
                "--heartbeat_timeout_ms=3000",
            ],
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        address = ""
        while not address:
            if coordinator.poll() is not None:
                pytest.fail(f"the coordinator exited: {(workdir / 'coordinator.log').read_text()}")
            if time.monotonic() > deadline:
                pytest.fail("the coordinator did not report its address in time")
            if address_file.exists():
                address = address_file.read_text().strip()
            time.sleep(0.02)
        start(
            "server",
            [
                "server",
                f"--coordinator={address}",
                f"--ipc_dir={workdir}",
                "--coordinator_timeout_ms=60000",
            ],
        )
        yield Cluster(address, workdir)
    finally:
        for process in reversed(processes):
            _stop(process)
        for log in logs:
            log.close()


@pytest.fixture
def connect(cluster: Cluster):
    """connect(**options): a client of the session's cluster; as a worker it
    leaves the job when the test ends, so that no later test waits for it."""
    clients: List[ductile.Client] = []

    def make(**options) -> ductile.Client:
        client = cluster.connect(**options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        if not client.closed:
            if client.worker_id >= 0:
                client.leave()
            client.close()


@pytest.fixture
def client(connect) -> ductile.Client:
    return connect()


_tables = 0


@pytest.fixture
def table_name(request) -> str:
    """A table name no other test uses."""
    global _tables
    _tables += 1
    return f"t{_tables}_{request.node.name[:60]}".replace("[", "_").replace("]", "_")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
