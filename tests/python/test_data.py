"""Pushes and pulls round trip: numpy arrays and CPU torch tensors used in
place, tables of fixed and variable width, dense tensors, asynchronous
calls."""

import numpy as np
import pytest

import ductile

try:
    import torch
except ImportError:  # the torch tests are skipped
    torch = None


def test_push_then_pull_reads_the_sgd_update(client, table_name):
    table = client.create_table(table_name, width=4, rule="sgd", learning_rate=0.5)
    keys = [3, 17, 42]
    client.push(table, keys, np.ones(12, dtype=np.float32))
    np.testing.assert_array_equal(client.pull(table, keys), np.full(12, -0.5, np.float32))


def test_pull_writes_into_out_and_returns_it(client, table_name):
    table = client.create_table(table_name, width=2, rule="assign")
    keys = np.array([1, 2, 3], dtype=np.uint64)
    values = np.arange(6, dtype=np.float32).reshape(3, 2)
    client.push(table, keys, values)
    out = np.zeros((3, 2), dtype=np.float32)
    assert client.pull(table, keys, out=out) is out
    np.testing.assert_array_equal(out, values)


def test_push_pull_returns_the_updated_values(client, table_name):
    table = client.create_table(table_name, width=3)  # rule "add"
    keys = [5, 9]
    first = client.push_pull(table, keys, np.full(6, 2, np.float32))
    second = client.push_pull(table, keys, np.full(6, 3, np.float32))
    np.testing.assert_array_equal(first, np.full(6, 2, np.float32))
    np.testing.assert_array_equal(second, np.full(6, 5, np.float32))


def test_keys_of_any_integer_type_address_the_same_rows(client, table_name):
    table = client.create_table(table_name, width=1, rule="assign")
    client.push(table, [10, 20], np.array([1, 2], np.float32))
    for keys in ([10, 20], np.array([10, 20], np.int32), np.array([10, 20], np.uint64)):
        np.testing.assert_array_equal(client.pull(table, keys), [1, 2])


def test_strided_and_reversed_keys_address_the_rows_they_show(client, table_name):
    table = client.create_table(table_name, width=1, rule="assign")
    every_other = np.arange(20, dtype=np.int64)[::2]  # 0, 2, ..., 18: a strided view
    client.push(table, every_other, np.arange(10, dtype=np.float32) + 1)
    everything = client.pull(table, np.arange(20, dtype=np.uint64))
    expected = np.zeros(20, np.float32)
    expected[::2] = np.arange(10) + 1
    np.testing.assert_array_equal(everything, expected)
    # A reversed view and a strided view of uint32 (converted, not borrowed).
    reversed_keys = np.array([6, 4, 0], np.int64)[::-1]  # 0, 4, 6: negative strides
    np.testing.assert_array_equal(client.pull(table, reversed_keys), [1, 3, 4])
    strided_u32 = np.arange(20, dtype=np.uint32)[2:8:2]  # 2, 4, 6
    np.testing.assert_array_equal(client.pull(table, strided_u32), [2, 3, 4])


def test_variable_width_lengths_may_be_a_strided_view(client, table_name):
    table = client.create_table(table_name, width=0, rule="assign")
    lengths = np.array([2, 99, 3, 99], np.int64)[::2]  # 2, 3
    values = np.arange(5, dtype=np.float32)
    client.push(table, [1, 4], values, lengths=lengths)
    np.testing.assert_array_equal(client.pull(table, [1, 4], lengths=[2, 3]), values)


def test_a_float32_array_that_went_through_pickle_is_accepted(client, table_name):
    import pickle

    table = client.create_table(table_name, width=2, rule="assign")
    values = pickle.loads(pickle.dumps(np.array([1, 2, 3, 4], np.float32)))
    out = pickle.loads(pickle.dumps(np.zeros(4, np.float32)))
    keys = pickle.loads(pickle.dumps(np.array([5, 6], np.uint64)))
    client.push(table, keys, values)
    assert client.pull(table, keys, out=out) is out
    np.testing.assert_array_equal(out, [1, 2, 3, 4])


def test_variable_width_table_takes_lengths(client, table_name):
    table = client.create_table(table_name, width=0, rule="assign")
    keys, lengths = [1, 4], [2, 3]
    values = np.arange(5, dtype=np.float32)
    client.push(table, keys, values, lengths=lengths)
    np.testing.assert_array_equal(client.pull(table, keys, lengths=lengths), values)


def test_initializer_gives_unwritten_keys_their_value(client, table_name):
    table = client.create_table(table_name, width=2, init=1.5)
    np.testing.assert_array_equal(client.pull(table, [7]), [1.5, 1.5])
    assert table.options["init"]["kind"] == "constant"


def test_dense_tensor_round_trips_across_chunks(client, table_name):
    tensor = client.register_tensor(table_name, 10_000, chunk_floats=4096, rule="add")
    assert tensor.num_chunks == 3 and len(tensor) == 10_000
    values = np.arange(10_000, dtype=np.float32)
    client.push_tensor(tensor, values)
    np.testing.assert_array_equal(client.pull_tensor(tensor), values)
    np.testing.assert_array_equal(client.push_pull_tensor(tensor, values), 2 * values)


def test_async_calls_complete_with_the_blocking_results(client, table_name):
    table = client.create_table(table_name, width=2, rule="add")
    keys = [1, 2]
    push = client.push_async(table, keys, np.ones(4, np.float32))
    assert isinstance(push, ductile.Handle)
    assert push.wait() is None
    assert push.done
    out = np.zeros(4, np.float32)
    pull = client.pull_async(table, keys, out=out)
    assert pull.wait() is out
    np.testing.assert_array_equal(out, np.ones(4))
    both = client.push_pull_async(table, keys, np.ones(4, np.float32))
    np.testing.assert_array_equal(both.wait(), np.full(4, 2))
    # wait() again returns the same result.
    np.testing.assert_array_equal(both.wait(), np.full(4, 2))


def test_tensor_async_calls(client, table_name):
    tensor = client.register_tensor(table_name, 100, rule="assign")
    values = np.arange(100, dtype=np.float32)
    client.push_tensor_async(tensor, values).wait()
    np.testing.assert_array_equal(client.pull_tensor_async(tensor).wait(), values)
    np.testing.assert_array_equal(
        client.push_pull_tensor_async(tensor, values + 1).wait(), values + 1)


def test_get_table_finds_a_created_table(client, table_name):
    created = client.create_table(table_name, width=8, rule="adam", consistency="ssp:2")
    found = client.get_table(table_name)
    assert (found.id, found.width, found.consistency) == (created.id, 8, "ssp(2)")
    assert found.options["rule"] == "adam"
    # Creating it again with equal options gives the same table.
    assert client.create_table(table_name, width=8, rule="adam", consistency="ssp:2").id == created.id


@pytest.mark.skipif(torch is None, reason="torch is not importable")
class TestTorch:

    def test_cpu_tensors_are_pushed_and_pulled_in_place(self, client, table_name):
        table = client.create_table(table_name, width=4, rule="sgd", learning_rate=1.0)
        keys = [0, 1]
        grad = torch.arange(8, dtype=torch.float32).reshape(2, 4)
        client.push(table, keys, grad)
        weights = torch.zeros(2, 4)
        assert client.pull(table, keys, out=weights) is weights
        assert torch.equal(weights, -grad)

    def test_a_parameters_data_is_updated_in_place(self, client, table_name):
        layer = torch.nn.Linear(3, 2)
        tensor = client.register_tensor(table_name, layer.weight.numel(), rule="assign")
        client.push_tensor(tensor, torch.ones(2, 3))
        client.pull_tensor(tensor, out=layer.weight.data)
        assert torch.equal(layer.weight.data, torch.ones(2, 3))

    def test_async_pull_into_a_tensor(self, client, table_name):
        table = client.create_table(table_name, width=2, rule="assign")
        client.push(table, [4], torch.tensor([1.0, 2.0]))
        out = torch.zeros(2)
        assert client.pull_async(table, [4], out=out).wait() is out
        assert out.tolist() == [1.0, 2.0]

    def test_refused_tensors_raise_before_sending(self, client, table_name):
        table = client.create_table(table_name, width=2, rule="add")
        with pytest.raises(TypeError, match="float32"):
            client.push(table, [1, 2], torch.ones(4, dtype=torch.float64))
        with pytest.raises(ValueError, match="C-contiguous"):
            client.push(table, [1, 2], torch.ones(2, 2).t())
        with pytest.raises(ValueError, match="C-contiguous"):
            client.pull(table, [1, 2], out=torch.zeros(2, 2).t())
        np.testing.assert_array_equal(client.pull(table, [1, 2]), np.zeros(4))
