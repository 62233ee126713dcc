"""Clocks, barriers, membership, the data plan, recovery, statistics and
connecting from the launcher's environment."""

import subprocess
import sys
import threading

import numpy as np
import pytest

import ductile


def test_clock_advances_by_one(client):
    start = client.current_clock
    assert client.clock() == start + 1
    assert client.current_clock == start + 1


def test_a_worker_knows_its_id_and_the_live_workers(client):
    assert client.worker_id >= 0
    assert client.worker_id in client.live_workers
    assert client.num_workers >= 1
    assert client.leave_requested is False
    assert f"worker {client.worker_id}" in repr(client)


def test_barrier_returns_once_every_worker_called_it(connect):
    a, b = connect(), connect()
    errors = []

    def run(c):
        try:
            c.barrier()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(c,)) for c in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


def test_barrier_alone_runs_out_its_timeout(connect):
    a, _ = connect(), connect()
    with pytest.raises(ductile.DeadlineExceeded):
        a.barrier(timeout_ms=200)


def test_the_data_plan_hands_out_every_batch_once(client):
    seen = []
    trained = None
    for _ in range(1000):  # bounded: 4 batches, then END
        batch = client.next_batch(4, 1, trained=trained)
        trained = None
        if batch.kind == ductile.BatchKind.END:
            break
        if batch.kind == ductile.BatchKind.TRAIN:
            seen.append((batch.epoch, batch.index))
            trained = batch
    assert batch.kind == ductile.BatchKind.END
    assert sorted(seen) == [(0, 0), (0, 1), (0, 2), (0, 3)]
    with pytest.raises(ductile.InvalidArgument):
        client.next_batch(0, 1)


def test_await_recovery_without_a_rollback_runs_out(client):
    client.set_resume_state(b"position 7")
    client.set_resume_state("position 8")
    with pytest.raises(TypeError):
        client.set_resume_state(8)
    with pytest.raises(ductile.DeadlineExceeded):
        client.await_recovery(timeout_ms=100)


def test_stats_count_pulls_and_reported_samples(client, table_name):
    table = client.create_table(table_name, width=1)
    client.clock()  # steps count from the first clock() on
    client.pull(table, [1])
    client.record_samples(32)
    client.record_loss(0.5)
    client.clock()
    stats = client.stats()
    assert stats.pulls >= 1
    assert len(stats.staleness) == 64
    assert stats.samples == 32
    assert stats.steps == 1
    assert stats.losses == 1
    assert stats.max_staleness >= 0


def test_set_consistency_returns_the_boundary_clock(client, table_name):
    table = client.create_table(table_name, width=1)
    boundary = client.set_consistency(table, "ssp:1")
    assert boundary >= client.current_clock
    assert client.get_table(table_name).consistency == "ssp(1)"
    with pytest.raises(ValueError):
        client.set_consistency(table, "eventually")


def test_set_push_weight_checks_its_range(client):
    client.set_push_weight(2)
    with pytest.raises(ductile.InvalidArgument):
        client.set_push_weight(0)


def test_set_rate_factor_scales_the_servers_rate_for_its_table(client, table_name):
    table = client.create_table(table_name, width=1, rule="sgd", learning_rate=1.0,
                                consistency="async")
    client.set_rate_factor(table, 0.25)
    client.push(table, [1], np.ones(1, np.float32))
    assert client.pull(table, [1])[0] == pytest.approx(-0.25)
    for bad in (0.0, -1.0, float("nan"), float("inf"), 2e6):
        with pytest.raises(ductile.InvalidArgument):
            client.set_rate_factor(table, bad)
    with pytest.raises(TypeError):
        client.set_rate_factor(table_name, 0.5)  # a name, not a Table


def test_an_observer_is_not_a_worker(connect, table_name):
    observer = connect(worker=False)
    assert observer.worker_id == -1
    table = observer.create_table(table_name, width=1)
    observer.push(table, [1], np.ones(1, np.float32))
    with pytest.raises(ductile.FailedPrecondition):
        observer.next_batch(4, 1)


def test_the_client_is_a_context_manager(cluster):
    with cluster.connect(worker=False) as client:
        assert not client.closed
    assert client.closed


def test_rank_from_env_reads_the_launchers_variables():
    assert ductile.rank_from_env({}) == (-1, None)
    assert ductile.rank_from_env({"SLURM_PROCID": "3"}) == (3, "SLURM_PROCID")
    assert ductile.rank_from_env(
        {"DUCTILE_RANK": "1", "SLURM_PROCID": "3"}) == (1, "DUCTILE_RANK")
    for bad in ("-1", "x", "1048576", ""):
        with pytest.raises(ductile.InvalidArgument, match="DUCTILE_RANK"):
            ductile.rank_from_env({"DUCTILE_RANK": bad})


def test_connect_from_env_needs_the_coordinators_address():
    with pytest.raises(ductile.InvalidArgument, match="DUCTILE_COORDINATOR"):
        ductile.connect_from_env({})


def test_connect_from_env_connects_as_the_launchers_rank(cluster):
    env = {"DUCTILE_COORDINATOR": cluster.address, "DUCTILE_RANK": "77",
           "DUCTILE_TIMEOUT_MS": "30000", "DUCTILE_SHM_VALUES": "0"}
    client = ductile.connect_from_env(env)
    try:
        assert client.worker_id == 77
        assert client.address == cluster.address
    finally:
        client.leave()
        client.close()
    with pytest.raises(ductile.InvalidArgument, match="DUCTILE_TIMEOUT_MS"):
        ductile.connect_from_env(dict(env, DUCTILE_TIMEOUT_MS="soon"))
    with pytest.raises(ductile.InvalidArgument, match="DUCTILE_CACHE"):
        ductile.connect_from_env(dict(env, DUCTILE_CACHE="maybe"))


def test_the_package_loads_neither_torch_nor_libtorch():
    code = ("import sys, ductile\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "maps = open('/proc/self/maps').read()\n"
            "assert 'libductile' in maps and 'libtorch' not in maps\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
