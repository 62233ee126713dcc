"""Rows by id (Client.pull_rows, push_rows): a batch's raw ids of any shape,
unsorted and repeated; results shaped ids.shape + (width,); repeated ids'
gradients summed and applied once; bad arguments refused with nothing
applied."""

import numpy as np
import pytest

import ductile

try:
    import torch
except ImportError:  # the torch tests are skipped
    torch = None

WIDTH = 3
BATCH = np.array([[42, 7, 901], [7, 2**62, 13], [42, 5, 7]], dtype=np.int64)


def row_of(ids):
    """Row `id` as the tests write it: distinct per id and per column."""
    ids = np.asarray(ids, dtype=np.uint64)
    return (ids[..., None] % 1000).astype(np.float32) * 4 + np.arange(WIDTH, dtype=np.float32)


def written_table(client, name):
    table = client.create_table(name, width=WIDTH, rule="assign")
    keys = np.unique(BATCH).astype(np.uint64)
    client.push(table, keys, row_of(keys))
    return table


def test_pull_rows_gives_each_id_its_row_in_the_shape_of_the_ids(client, table_name):
    table = written_table(client, table_name)
    rows = client.pull_rows(table, BATCH)
    assert rows.dtype == np.float32 and rows.shape == BATCH.shape + (WIDTH,)
    np.testing.assert_array_equal(rows, row_of(BATCH))
    # Any integer dtype and a nested list address the same rows.
    for ids in (BATCH.astype(np.uint64), BATCH.astype(np.uint64)[:, ::-1], BATCH.tolist()):
        np.testing.assert_array_equal(client.pull_rows(table, ids), row_of(np.asarray(ids)))
    # One id, a 0-d array: one row.
    np.testing.assert_array_equal(client.pull_rows(table, np.int64(901)), row_of(901))


def test_pull_rows_writes_into_out_and_returns_it(client, table_name):
    table = written_table(client, table_name)
    out = np.full(BATCH.shape + (WIDTH,), -1, np.float32)
    assert client.pull_rows(table, BATCH, out=out) is out
    np.testing.assert_array_equal(out, row_of(BATCH))
    handle = client.pull_rows_async(table, BATCH.ravel())
    np.testing.assert_array_equal(handle.wait(), row_of(BATCH.ravel()))


def test_push_rows_applies_the_sum_of_a_repeated_ids_gradients_once(client, table_name):
    sgd = client.create_table(table_name + "_sgd", width=WIDTH, rule="sgd", learning_rate=0.5)
    # assign: an id pushed once with the sum holds the sum; once per
    # repeat, its last gradient.
    assign = client.create_table(table_name + "_assign", width=WIDTH, rule="assign")
    grads = (np.arange(BATCH.size * WIDTH, dtype=np.float32).reshape(BATCH.shape + (WIDTH,)) + 1)
    sums = {}
    for i, g in zip(BATCH.ravel(), grads.reshape(-1, WIDTH)):
        sums[int(i)] = sums.get(int(i), 0) + g
    assert client.push_rows(sgd, BATCH, grads) is None
    assert client.push_rows_async(assign, BATCH, grads).wait() is None
    keys = np.array(sorted(sums), dtype=np.uint64)
    expected = np.stack([sums[int(k)] for k in keys])
    np.testing.assert_array_equal(client.pull(sgd, keys).reshape(-1, WIDTH), -0.5 * expected)
    np.testing.assert_array_equal(client.pull(assign, keys).reshape(-1, WIDTH), expected)


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torch_int64_ids_and_float_tensors_are_used_in_place(client, table_name):
    table = client.create_table(table_name, width=WIDTH, rule="sgd", learning_rate=1.0)
    ids = torch.tensor([[3, 8], [8, 3]])  # int64
    client.push_rows(table, ids, torch.ones(2, 2, WIDTH))
    out = torch.zeros(2, 2, WIDTH)
    client.pull_rows(table, ids, out=out)
    assert torch.equal(out, torch.full((2, 2, WIDTH), -2.0))


def test_bad_arguments_raise_and_apply_nothing(client, table_name):
    table = client.create_table(table_name, width=WIDTH, rule="add")
    variable = client.create_table(table_name + "_var", width=0, rule="add")
    grads = np.ones(BATCH.shape + (WIDTH,), np.float32)
    with pytest.raises(TypeError, match="ids must be integers"):
        client.pull_rows(table, BATCH.astype(np.float64))
    with pytest.raises(ValueError, match="negative id"):
        client.push_rows(table, np.array([1, -2]), np.ones(2 * WIDTH, np.float32))
    with pytest.raises(TypeError, match="float32"):
        client.push_rows(table, BATCH, grads.astype(np.float64))
    with pytest.raises(ductile.InvalidArgument, match="grads has 24 floats for 9 ids"):
        client.push_rows(table, BATCH, grads.ravel()[:-3])
    with pytest.raises(ductile.InvalidArgument, match="out has"):
        client.pull_rows_async(table, BATCH, out=np.zeros(BATCH.size * WIDTH + 1, np.float32))
    with pytest.raises(ductile.InvalidArgument, match="variable-width"):
        client.pull_rows(variable, BATCH)
    with pytest.raises(TypeError, match="ductile.Table"):
        client.pull_rows("not a table", BATCH)
    np.testing.assert_array_equal(client.pull_rows(table, BATCH), np.zeros_like(grads))
