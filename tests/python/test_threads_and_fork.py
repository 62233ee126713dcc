"""Threads, lifetimes and processes: a blocked call lets other Python threads
run, an asynchronous call keeps its arrays alive until it is done, and a
forked child cannot use its parent's client.

A pull is made to block for as long as the test wants: a table under
SSP(0), a worker A one clock ahead of a worker B; A's pull waits at the
server until B calls clock()."""

import gc
import os
import threading
import time
import weakref

import numpy as np
import pytest

import ductile

WAIT_S = 30  # bound of every wait below; never reached unless broken


def wait_until(predicate, what):
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.001)


@pytest.fixture
def two_workers(connect, table_name):
    """(a, b, table): A is one clock ahead of B on an SSP(0) table, so that
    A's pulls block until B calls clock()."""
    a = connect()
    b = connect()
    table = a.create_table(table_name, width=4, rule="add", consistency="ssp:0")
    a.push(table, [1], np.ones(4, np.float32))
    assert a.current_clock == b.current_clock
    a.clock()
    return a, b, table


def test_another_thread_runs_while_a_pull_blocks(two_workers):
    a, b, table = two_workers
    counter = 0
    stop = threading.Event()

    def count():
        nonlocal counter
        while not stop.is_set():
            counter += 1

    result = {}

    def pull():
        result["before"] = counter
        result["values"] = a.pull(table, [1])
        result["after"] = counter

    counting = threading.Thread(target=count)
    pulling = threading.Thread(target=pull)
    counting.start()
    pulling.start()
    try:
        # The pull cannot return before b.clock(), which runs only once the
        # counter has moved on by 100000 since the pull began: so the counting
        # thread ran while the pull was blocked.
        wait_until(lambda: "before" in result, "the pull to start")
        wait_until(lambda: counter >= result["before"] + 100000, "the counter")
        assert pulling.is_alive() and "values" not in result
        b.clock()
        pulling.join(WAIT_S)
        assert not pulling.is_alive()
    finally:
        stop.set()
        counting.join(WAIT_S)
    assert result["after"] - result["before"] >= 100000
    np.testing.assert_array_equal(result["values"], np.ones(4))


def test_an_async_pull_keeps_its_output_alive_without_the_callers_reference(two_workers):
    a, b, table = two_workers
    out = np.zeros(4, np.float32)
    alive = weakref.ref(out)
    handle = a.pull_async(table, [1], out=out)
    del out
    gc.collect()
    assert not handle.done  # blocked at the server until b clocks
    assert alive() is not None
    b.clock()
    result = handle.wait()
    assert result is alive()
    np.testing.assert_array_equal(result, np.ones(4))
    del result, handle
    gc.collect()
    assert alive() is None  # let go once done


def test_a_dropped_handle_leaves_its_arrays_to_the_client_until_done(two_workers):
    a, b, table = two_workers
    out = np.zeros(4, np.float32)
    keys = np.array([1], np.uint64)
    out_alive, keys_alive = weakref.ref(out), weakref.ref(keys)
    handle = a.push_pull_async(table, keys, np.ones(4, np.float32), out=out)
    del out, keys, handle
    gc.collect()
    assert out_alive() is not None and keys_alive() is not None
    b.clock()
    # The client lets them go at a later call, once the call is done.
    other = a.create_table("other_" + table.name, width=1)

    def released():
        a.push(other, [0], np.ones(1, np.float32))
        gc.collect()
        return out_alive() is None and keys_alive() is None

    wait_until(released, "the dropped call's arrays to be let go")


def test_async_push_values_may_be_dropped_before_wait(client, table_name):
    tensor = client.register_tensor(table_name, 1 << 20, rule="assign")
    values = np.arange(1 << 20, dtype=np.float32)
    expected = values.copy()
    values_alive = weakref.ref(values)
    handle = client.push_tensor_async(tensor, values)
    del values
    gc.collect()
    assert values_alive() is not None  # the handle holds it
    np.zeros(1 << 20, np.float32)  # reuses freed memory, if any was freed
    handle.wait()
    np.testing.assert_array_equal(client.pull_tensor(tensor), expected)
    del handle
    gc.collect()
    assert values_alive() is None  # let go once the call is done


def test_closing_the_client_cancels_a_blocked_async_pull(two_workers):
    a, b, table = two_workers
    handle = a.pull_async(table, [1])
    a.close()
    with pytest.raises(ductile.DuctileError):
        handle.wait()


def test_closing_the_client_cancels_a_blocking_pull_on_another_thread(connect, table_name):
    # The pull's thread waits without the GIL while close() destroys the
    # client; it must get an error, and nothing may touch the destroyed
    # client (a use after free the sanitizer builds would report).
    for round_ in range(5):
        a, b = connect(), connect()
        table = a.create_table(f"{table_name}_{round_}", width=1, consistency="ssp:0")
        a.clock()  # A's pull at clock 1 waits for B, who never clocks
        result = {}
        started = threading.Event()

        def pull():
            started.set()
            try:
                a.pull(table, [1])
                result["error"] = None
            except ductile.DuctileError as error:
                result["error"] = error

        thread = threading.Thread(target=pull)
        thread.start()
        started.wait(WAIT_S)
        time.sleep(0.05)  # lets the pull block: the test holds either way
        a.close()
        thread.join(WAIT_S)
        assert not thread.is_alive()
        assert isinstance(result["error"], ductile.Cancelled), result
        b.leave()
        b.close()


def run_in_child(body):
    """Runs body() in a forked child; returns its exit status (0: it
    returned True). The child never returns into pytest."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if body() else 1
        except BaseException:  # reported through the exit status
            code = 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + WAIT_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child did not finish")
        time.sleep(0.01)


def test_a_forked_child_gets_a_clear_error_and_the_parent_goes_on(client, table_name):
    table = client.create_table(table_name, width=2, rule="add")
    client.push(table, [1], np.ones(2, np.float32))
    pending = client.pull_async(table, [1])

    def child():
        for call in (lambda: client.pull(table, [1]),
                     lambda: client.push(table, [1], np.ones(2, np.float32)),
                     lambda: client.clock(),
                     lambda: pending.wait(),
                     lambda: client.close()):
            try:
                call()
                return False
            except ductile.FailedPrecondition as error:
                if "forked" not in str(error):
                    return False
        return True

    assert run_in_child(child) == 0
    pending.wait()
    np.testing.assert_array_equal(client.push_pull(table, [1], np.ones(2, np.float32)),
                                  np.full(2, 2))


def test_a_forked_child_may_drop_its_copy_of_the_client(cluster, table_name):
    parent = cluster.connect(worker=False)
    table = parent.create_table(table_name, width=1)
    handle = parent.pull_async(table, [1])

    def child():
        nonlocal parent, handle
        del parent, handle  # neither joins the parent's thread nor closes its sockets
        gc.collect()
        return True

    assert run_in_child(child) == 0
    handle.wait()
    parent.push(table, [1], np.ones(1, np.float32))
    np.testing.assert_array_equal(parent.pull(table, [1]), [1])
    parent.close()


try:
    import torch
    import torch.utils.data
except ImportError:
    torch = None


@pytest.mark.skipif(torch is None, reason="torch is not importable")
def test_a_dataloader_worker_using_the_client_raises_failed_precondition(client, table_name):
    table = client.create_table(table_name, width=1)

    class Pulls(torch.utils.data.Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, index):
            return torch.from_numpy(client.pull(table, [index]))

    loader = torch.utils.data.DataLoader(Pulls(), num_workers=1, timeout=WAIT_S,
                                         multiprocessing_context="fork")
    with pytest.raises(ductile.FailedPrecondition, match="forked"):
        next(iter(loader))
    np.testing.assert_array_equal(client.pull(table, [0, 1]), [0, 0])
