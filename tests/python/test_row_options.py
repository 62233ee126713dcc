"""The row policy of tables of rows by id from Python (create_table's `rows`,
the row keywords of ductile.torch.Embedding and EmbeddingBag): given back
by Table.options, bad values refused before any table is made, and
admission and eviction taking effect on the servers (the tests' cluster
has one server, so a budget per server is the table's)."""

import re
import subprocess
import time

import numpy as np
import pytest

import ductile
from conftest import _binary

try:
    import torch
except ImportError:  # the torch tests are skipped
    torch = None

INIT = 0.5  # every row's initial value
WIDTH = 2
STATUS_TIMEOUT_S = 20  # servers report counters with their heartbeats (1 s)


def rows_table(client, name, **rows):
    return client.create_table(name, width=WIDTH, rule="sgd", learning_rate=1.0,
                               init=INIT, rows=rows)


def test_create_table_takes_a_row_policy_and_gives_it_back(client, table_name):
    table = rows_table(client, table_name, admit_after_pushes=3, admission_counters=4096,
                       evict_idle_clocks=10, max_rows=1000, eviction="least_used")
    assert table.options["rows"] == {"admit_after_pushes": 3, "admission_counters": 4096,
                                     "evict_idle_clocks": 10, "max_rows": 1000,
                                     "eviction": "least_used"}
    assert client.get_table(table_name).options["rows"] == table.options["rows"]
    plain = client.create_table(table_name + "_plain", width=WIDTH)
    assert plain.options["rows"] == {"admit_after_pushes": 0, "admission_counters": 0,
                                     "evict_idle_clocks": 0, "max_rows": 0,
                                     "eviction": "least_recent"}


@pytest.mark.parametrize("rows, error, message", [
    ({"max_rows": -1}, ValueError, "max_rows must be >= 0"),
    ({"evict_idle_clocks": -5}, ValueError, "evict_idle_clocks must be >= 0"),
    ({"admit_after_pushes": 70000}, ductile.InvalidArgument, "admit_after_pushes must be in"),
    ({"admission_counters": 10}, ValueError, "admission_counters must be"),
    ({"max_rows": 2**41}, ValueError, "max_rows must be in"),
    ({"max_rows": "many"}, TypeError, "must be an integer"),
    ({"max_rows": 1.5}, TypeError, "must be an integer"),
    ({"max_rows": True}, TypeError, "must be an integer"),
    ({"budget": 10}, TypeError, "rows has no field 'budget'"),
    ([("max_rows", 10)], TypeError, "rows must be a dict"),
    ({"eviction": "lfu"}, ValueError, "rows eviction must be one of least_recent, least_used"),
    ({"eviction": 1}, ValueError, "rows eviction must be one of"),
], ids=["negative_budget", "negative_idle", "admit_too_large", "too_few_counters",
        "budget_too_large", "string", "float", "bool", "unknown_field", "not_a_dict",
        "unknown_eviction", "eviction_number"])
def test_bad_row_policies_raise_and_make_no_table(client, table_name, rows, error, message):
    with pytest.raises(error, match=message):
        client.create_table(table_name, width=WIDTH, rows=rows)
    with pytest.raises(ductile.NotFound):
        client.get_table(table_name)


def test_a_row_pushed_fewer_than_n_times_reads_the_initializer(client, table_name):
    table = rows_table(client, table_name, admit_after_pushes=3)
    ids = np.array([7, 9])
    grads = np.ones((2, WIDTH), np.float32)
    for _ in range(2):
        client.push_rows(table, ids, grads)  # dropped: not admitted yet
        np.testing.assert_array_equal(client.pull_rows(table, ids), np.full((2, WIDTH), INIT))
    # The third push admits the rows and is applied; the earlier ones stay
    # lost. An id pushed once still reads the initializer.
    client.push_rows(table, np.array([7, 9, 11]), np.ones((3, WIDTH), np.float32))
    rows = client.pull_rows(table, np.array([7, 9, 11]))
    np.testing.assert_array_equal(rows, [[INIT - 1] * WIDTH] * 2 + [[INIT] * WIDTH])
    client.push_rows(table, ids, grads)
    np.testing.assert_array_equal(client.pull_rows(table, ids), np.full((2, WIDTH), INIT - 2))


def test_rows_beyond_the_budget_are_evicted_least_recently_updated_first(client, table_name):
    table = rows_table(client, table_name, max_rows=2)
    one = np.ones((1, WIDTH), np.float32)
    for i in (1, 2, 3):  # 1 is the least recently updated when 3 comes
        client.push_rows(table, np.array([i]), one)
    rows = client.pull_rows(table, np.array([1, 2, 3]))
    np.testing.assert_array_equal(rows, [[INIT] * WIDTH] + [[INIT - 1] * WIDTH] * 2)
    client.push_rows(table, np.array([2]), one)  # now 3 is the oldest
    client.push_rows(table, np.array([4]), one)
    rows = client.pull_rows(table, np.array([1, 2, 3, 4]))
    np.testing.assert_array_equal(
        rows, [[INIT] * WIDTH, [INIT - 2] * WIDTH, [INIT] * WIDTH, [INIT - 1] * WIDTH])


def test_least_used_eviction_keeps_the_rows_updated_most(client, table_name):
    table = rows_table(client, table_name, max_rows=2, eviction="least_used")
    one = np.ones((2, WIDTH), np.float32)
    for _ in range(3):
        client.push_rows(table, np.array([1, 2]), one)
    # 3 and 4 come after and were updated once: they go, not 1 and 2.
    client.push_rows(table, np.array([3, 4]), one)
    rows = client.pull_rows(table, np.array([1, 2, 3, 4]))
    np.testing.assert_array_equal(rows, [[INIT - 3] * WIDTH] * 2 + [[INIT] * WIDTH] * 2)


def test_rows_idle_for_the_given_clocks_are_evicted(client, table_name):
    table = rows_table(client, table_name, evict_idle_clocks=2)
    one = np.ones((1, WIDTH), np.float32)
    client.push_rows(table, np.array([5]), one)
    client.clock()
    client.push_rows(table, np.array([6]), one)  # updated a clock later
    client.clock()  # 5 idle for 2 clocks: evicted; 6 for 1
    np.testing.assert_array_equal(client.pull_rows(table, np.array([5, 6])),
                                  [[INIT] * WIDTH, [INIT - 1] * WIDTH])
    client.clock()
    np.testing.assert_array_equal(client.pull_rows(table, np.array([5, 6])),
                                  np.full((2, WIDTH), INIT))


def test_ductile_status_counts_admissions_and_evictions(cluster, client, table_name):
    table = rows_table(client, table_name, admit_after_pushes=2, max_rows=1)
    one = np.ones((1, WIDTH), np.float32)
    for i in (100, 100, 101, 101):  # two drops, two admissions, one eviction
        client.push_rows(table, np.array([i]), one)
    # Counters of every table of the server (earlier tests' too), as of
    # its last heartbeat: wait for the line to show at least these.
    pattern = re.compile(r"rows of server \d+: (\d+) stored, (\d+) admitted, (\d+) pushes "
                         r"not admitted, (\d+) evicted idle, (\d+) beyond the budget")
    deadline = time.monotonic() + STATUS_TIMEOUT_S
    counts = None
    while time.monotonic() < deadline:
        out = subprocess.run([_binary(), "status", f"--coordinator={cluster.address}"],
                             capture_output=True, text=True, timeout=STATUS_TIMEOUT_S)
        assert out.returncode == 0, out.stderr
        match = pattern.search(out.stdout)
        counts = [int(x) for x in match.groups()] if match else None
        if counts and counts[1] >= 2 and counts[2] >= 2 and counts[4] >= 1:
            break
        time.sleep(0.2)
    assert counts is not None and counts[1] >= 2 and counts[2] >= 2 and counts[4] >= 1, counts


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_embedding_bags_take_the_row_policy_as_keywords(client, table_name):
    import ductile.torch as dt

    bag = dt.EmbeddingBag(None, WIDTH, table=table_name, mode="sum", client=client,
                          init=INIT, learning_rate=1.0, admit_after_pushes=2, max_rows=100,
                          eviction="least_used")
    assert bag.table.options["rows"]["admit_after_pushes"] == 2
    assert bag.table.options["rows"]["max_rows"] == 100
    assert bag.table.options["rows"]["eviction"] == "least_used"
    ids = torch.tensor([[3, 4]])
    bag(ids).sum().backward()  # the first push of 3 and 4: dropped
    assert torch.equal(bag(ids).detach(), torch.full((1, WIDTH), 2 * INIT))
    bag(ids).sum().backward()  # the second: admitted, applied
    assert torch.equal(bag(ids).detach(), torch.full((1, WIDTH), 2 * (INIT - 1)))


@pytest.mark.skipif(torch is None, reason="torch is not installed")
@pytest.mark.parametrize("keywords, error", [
    ({"max_rows": -1}, ValueError),
    ({"evict_idle_clocks": "soon"}, TypeError),
    ({"admit_after_pushes": 2.0}, TypeError),
    ({"max_rows": 5, "rows": {"max_rows": 5}}, TypeError),
    ({"eviction": "newest"}, ValueError),
])
def test_embeddings_refuse_bad_row_keywords(client, table_name, keywords, error):
    import ductile.torch as dt

    with pytest.raises(error):
        dt.Embedding(None, WIDTH, table=table_name, client=client, **keywords)
    with pytest.raises(ductile.NotFound):
        client.get_table(table_name)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_row_keywords_with_a_table_object_raise(client, table_name):
    import ductile.torch as dt

    table = rows_table(client, table_name)
    with pytest.raises(TypeError, match="table given by name"):
        dt.Embedding(None, WIDTH, table=table, client=client, max_rows=10)
