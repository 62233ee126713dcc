"""Errors: status codes raise their exception classes, and arrays the client
cannot use in place are refused before anything is sent (the table is left
as it was)."""

import re
from pathlib import Path

import numpy as np
import pytest

import ductile
from conftest import SOURCE_DIR, free_port


def status_codes():
    """(name, number) of every code in include/ductile/status.h."""
    text = (SOURCE_DIR / "include" / "ductile" / "status.h").read_text()
    enum = re.search(r"enum class StatusCode : int \{(.*?)\};", text, re.S).group(1)
    return [(name, int(number)) for name, number in re.findall(r"k(\w+) = (\d+)", enum)]


def test_every_status_code_has_its_exception_class():
    codes = status_codes()
    assert len(codes) > 5
    for name, number in codes:
        if name == "Ok":
            continue
        cls = getattr(ductile, name)
        assert issubclass(cls, ductile.DuctileError)
        assert cls.code == number
        assert ductile.errors.class_for_code(number) is cls


def test_exceptions_are_also_the_matching_builtin_ones():
    assert issubclass(ductile.InvalidArgument, ValueError)
    assert issubclass(ductile.DeadlineExceeded, TimeoutError)
    assert issubclass(ductile.NotFound, LookupError)
    assert issubclass(ductile.Unavailable, ConnectionError)


@pytest.fixture
def table(client, table_name):
    """A table of width 2 whose keys 1 and 2 hold [1, 1, 1, 1]."""
    t = client.create_table(table_name, width=2, rule="add")
    client.push(t, [1, 2], np.ones(4, np.float32))
    return t


def assert_unchanged(client, table):
    np.testing.assert_array_equal(client.pull(table, [1, 2]), np.ones(4))


@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.dtype(">f4")])
def test_values_of_another_dtype_are_a_type_error(client, table, dtype):
    for call in (client.push, client.push_async, client.push_pull):
        with pytest.raises(TypeError, match="float32"):
            call(table, [1, 2], np.ones(4, dtype=dtype))
    assert_unchanged(client, table)


def test_big_endian_float32_is_refused_as_values_and_as_out(client, table):
    big = np.ones(4, np.float32).astype(">f4")
    with pytest.raises(TypeError, match="native byte order"):
        client.push(table, [1, 2], big)
    with pytest.raises(TypeError, match="native byte order"):
        client.pull(table, [1, 2], out=big)
    assert_unchanged(client, table)


def test_a_list_of_floats_is_a_type_error(client, table):
    with pytest.raises(TypeError, match="float32"):
        client.push(table, [1, 2], [1.0, 1.0, 1.0, 1.0])
    assert_unchanged(client, table)


def test_non_contiguous_values_are_a_value_error(client, table):
    strided = np.ones(8, np.float32)[::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        client.push(table, [1, 2], strided)
    with pytest.raises(ValueError, match="C-contiguous"):
        client.push_async(table, [1, 2], strided)
    assert_unchanged(client, table)


@pytest.mark.parametrize("size", [0, 3, 5, 8])
def test_a_buffer_of_the_wrong_size_is_invalid_argument(client, table, size):
    for call in (client.push, client.push_async):
        with pytest.raises(ductile.InvalidArgument, match="widths add up to 4"):
            call(table, [1, 2], np.ones(size, np.float32))
    with pytest.raises(ValueError):  # InvalidArgument is a ValueError
        client.pull(table, [1, 2], out=np.zeros(size, np.float32))
    assert_unchanged(client, table)


def test_a_servers_refusal_of_an_async_call_is_raised_by_wait(client, table):
    # Only what is refused before sending raises at the call; a server's
    # answer, however quick, is the handle's (one key: one server, which
    # refuses the NaN itself).
    nan = np.array([1.0, np.nan], np.float32)
    for _ in range(50):
        handle = client.push_async(table, [1], nan)
        with pytest.raises(ductile.InvalidArgument, match="non-finite"):
            handle.wait()
    assert_unchanged(client, table)


def test_an_output_numpy_cannot_write_into_is_refused(client, table):
    read_only = np.zeros(4, np.float32)
    read_only.setflags(write=False)
    with pytest.raises(ValueError, match="read-only"):
        client.pull(table, [1, 2], out=read_only)
    with pytest.raises(ValueError, match="read-only"):
        client.pull_async(table, [1, 2], out=read_only)
    assert not read_only.any()
    with pytest.raises(ValueError, match="C-contiguous"):
        client.pull(table, [1, 2], out=np.zeros(8, np.float32)[::2])
    with pytest.raises(TypeError, match="float32"):
        client.pull(table, [1, 2], out=np.zeros(4, np.float64))
    with pytest.raises(TypeError):  # numpy would copy it: results lost
        client.pull(table, [1, 2], out=bytearray(16))


def test_bad_keys_are_refused(client, table):
    with pytest.raises(ductile.InvalidArgument, match="strictly increasing"):
        client.push(table, [2, 1], np.ones(4, np.float32))
    with pytest.raises(ValueError, match="out of range"):
        client.push(table, [-1, 2], np.ones(4, np.float32))
    with pytest.raises(TypeError, match="integers"):
        client.push(table, [1.0, 2.0], np.ones(4, np.float32))
    with pytest.raises(ValueError, match="1-D"):
        client.push(table, [[1, 2]], np.ones(4, np.float32))
    assert_unchanged(client, table)


def test_an_unknown_table_is_not_found(client):
    with pytest.raises(ductile.NotFound, match="no-such-table"):
        client.get_table("no-such-table")
    with pytest.raises(LookupError):
        client.get_table("no-such-table")


def test_something_other_than_a_table_is_a_type_error(client):
    with pytest.raises(TypeError, match="ductile.Table"):
        client.push(7, [1], np.ones(1, np.float32))


def test_bad_table_options_are_refused(client, table_name):
    with pytest.raises(TypeError, match="unknown table option 'widht'"):
        client.create_table(table_name, widht=4)
    with pytest.raises(ValueError, match="rule must be one of"):
        client.create_table(table_name, rule="rmsprop")
    with pytest.raises(ValueError, match="consistency"):
        client.create_table(table_name, consistency="ssp:-1")
    with pytest.raises(TypeError, match="learning_rate must be a number"):
        client.create_table(table_name, learning_rate="fast")
    with pytest.raises(TypeError, match="init has no field 'sigma'"):
        client.create_table(table_name, init={"kind": "normal", "sigma": 1})
    with pytest.raises(ductile.AlreadyExists):
        client.create_table(table_name, width=1)
        client.create_table(table_name, width=2)


def test_a_dead_coordinator_address_fails_within_the_connect_timeout():
    address = f"tcp://127.0.0.1:{free_port()}"
    with pytest.raises((ductile.DeadlineExceeded, ductile.Unavailable)) as error:
        ductile.connect(address, connect_timeout_ms=300)
    assert address in str(error.value)


def test_a_closed_client_raises_failed_precondition(cluster):
    client = cluster.connect(worker=False)
    client.close()
    assert client.closed
    with pytest.raises(ductile.FailedPrecondition, match="closed"):
        client.get_table("anything")
    client.close()  # again: nothing to do


def test_bad_connect_options_are_invalid_argument(cluster):
    with pytest.raises(ductile.InvalidArgument, match="io_threads"):
        cluster.connect(io_threads=65)
    with pytest.raises(ductile.InvalidArgument, match="member_key"):
        cluster.connect(member_key="/nonexistent")
