"""A rollback reaches a Python worker: a server killed with SIGKILL and
started again on its state makes the job roll back to its latest checkpoint;
the worker's calls raise ductile.Aborted until it takes the rollback with
await_recovery(), which gives back the checkpoint's clock and the resume
state the worker recorded there, and the table reads as it was then.

A cluster of its own (a coordinator and a server with a state directory),
every wait bounded, every process stopped at the end."""

import re
import signal
import subprocess
import time

import numpy as np
import pytest

import ductile
from conftest import _binary, _die_with_parent, _stop

WAIT_S = 60


@pytest.fixture
def durable_cluster(tmp_path):
    binary = _binary()
    address_file = tmp_path / "coordinator.address"
    processes = []

    def start(args, log):
        process = subprocess.Popen(
            [binary] + args, stdout=open(tmp_path / log, "ab"),
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent)
        processes.append(process)
        return process

    try:
        start(["coordinator", "--listen=tcp://127.0.0.1:0",
               f"--address_file={address_file}", "--servers=1", "--workers=0",
               "--no_worker_timeout_ms=0", "--heartbeat_timeout_ms=1000",
               f"--state_dir={tmp_path}/coordinator"], "coordinator.log")
        deadline = time.monotonic() + WAIT_S
        while not (address_file.exists() and address_file.read_text().strip()):
            assert time.monotonic() < deadline, "the coordinator did not start"
            time.sleep(0.02)
        address = address_file.read_text().strip()
        server_args = ["server", f"--coordinator={address}", "--server_id=0",
                       f"--state_dir={tmp_path}/servers", f"--ipc_dir={tmp_path}",
                       "--coordinator_timeout_ms=60000"]

        class Cluster:
            pass

        cluster = Cluster()
        cluster.address = address
        cluster.server = start(server_args, "server.log")

        def restart_server():
            cluster.server.send_signal(signal.SIGKILL)
            cluster.server.wait(timeout=WAIT_S)
            cluster.server = start(server_args, "server.log")

        def checkpoint() -> int:
            out = subprocess.run(
                [binary, "checkpoint", f"--coordinator={address}",
                 f"--timeout_ms={WAIT_S * 1000}"],
                check=True, capture_output=True, text=True, timeout=WAIT_S).stdout
            return int(re.search(r"(\d+)", out).group(1))

        cluster.restart_server = restart_server
        cluster.checkpoint = checkpoint
        yield cluster
    finally:
        for process in reversed(processes):
            _stop(process)


def test_a_rollback_raises_aborted_and_await_recovery_resumes_at_the_checkpoint(
        durable_cluster):
    client = ductile.connect(durable_cluster.address, connect_timeout_ms=WAIT_S * 1000,
                             request_timeout_ms=WAIT_S * 1000)
    try:
        table = client.create_table("counter", width=1, rule="add")
        one = np.ones(1, np.float32)
        for _ in range(3):
            client.set_resume_state(f"at {client.current_clock}")
            client.push(table, [0], one)
            client.clock()
        client.set_resume_state(f"at {client.current_clock}")
        checkpoint = durable_cluster.checkpoint()
        assert checkpoint == 3
        for _ in range(2):  # work the rollback will undo
            client.push(table, [0], one)
            client.clock()
        np.testing.assert_array_equal(client.pull(table, [0]), [5])

        durable_cluster.restart_server()
        aborted = None
        deadline = time.monotonic() + WAIT_S
        while aborted is None:
            assert time.monotonic() < deadline, "no call raised ductile.Aborted"
            try:
                client.push(table, [0], one)
            except ductile.Aborted as error:
                aborted = error
            except (ductile.Unavailable, ductile.DeadlineExceeded):
                pass  # the server is not back yet
        recovery = client.await_recovery(timeout_ms=WAIT_S * 1000)
        assert recovery.clock == checkpoint
        assert recovery.resume_state == b"at 3"
        assert client.current_clock == checkpoint
        np.testing.assert_array_equal(client.pull(table, [0]), [3])
    finally:
        client.leave()
        client.close()
