"""DistributedOptimizer's buckets: parameters fused into one tensor on the
servers per bucket train as one tensor per parameter does (bucket_bytes=0)
and as torch.optim does, whatever the cap, the param groups, the memory
format or a parameter left without gradient."""

import copy

import pytest

torch = pytest.importorskip("torch")

import ductile  # noqa: E402
import ductile.torch as dt  # noqa: E402
from ductile._buckets import DEFAULT_BUCKET_BYTES  # noqa: E402
from test_torch import (  # noqa: E402
    OPTIMIZERS, STEPS, TOLERANCE, batch_loss, model, regression_data, train, two_workers)

# The model's parameters in reverse registration order, with their bytes:
# 2.bias 4, 2.weight 32, 0.bias 32, 0.weight 128. A 64-byte cap splits them
# into [2.bias, 2.weight], [0.bias], [0.weight] (larger than the cap, alone).
SPLIT_BYTES = 64
SPLIT = [["2.bias", "2.weight"], ["0.bias"], ["0.weight"]]


def layout(optimizer):
    return [[q.name for q in bucket.params] for bucket in optimizer._buckets]


@pytest.mark.parametrize("kind", ["sgd", "sgd_momentum_decay", "adam"])
def test_two_workers_train_the_same_with_and_without_buckets(connect, table_name, kind):
    runs = {}
    for bucket_bytes in (0, SPLIT_BYTES, DEFAULT_BUCKET_BYTES):
        clients = []

        def tracked():
            clients.append(connect())
            return clients[-1]

        history, nets, _, _ = two_workers(tracked, f"{table_name}_{bucket_bytes}",
                                          OPTIMIZERS[kind], bucket_bytes=bucket_bytes)
        for c in clients:  # out of the job: the next pair's BSP waits for nobody else
            c.leave()
            c.close()
        assert len(history[0]) == len(history[1]) == STEPS
        for a, b in zip(*history):
            for p, q in zip(a, b):
                torch.testing.assert_close(p, q, rtol=0, atol=0)
        runs[bucket_bytes] = history[0]
    for bucket_bytes in (SPLIT_BYTES, DEFAULT_BUCKET_BYTES):
        for step, (ours, theirs) in enumerate(zip(runs[bucket_bytes], runs[0])):
            for p, q in zip(ours, theirs):
                torch.testing.assert_close(p, q, **TOLERANCE, msg=f"{bucket_bytes}: step {step}")


def test_the_cap_splits_the_parameters_into_tensors_on_the_servers(client, table_name):
    net = model(40)
    x, y = regression_data(41)
    oracle = copy.deepcopy(net)
    optimizer = dt.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9),
                                        net.named_parameters(), client=client, name=table_name,
                                        bucket_bytes=SPLIT_BYTES)
    assert layout(optimizer) == SPLIT
    assert [b.tensor.name for b in optimizer._buckets] == [
        f"{table_name}.bucket{i}" for i in range(3)]
    assert [b.tensor.num_floats for b in optimizer._buckets] == [9, 8, 32]
    assert [b.init.name for b in optimizer._buckets] == [
        f"{table_name}.bucket{i}.init" for i in range(3)]
    with pytest.raises(ductile.NotFound):
        client.get_table(f"{table_name}.0.weight")
    train(net, optimizer, x, y, steps=10)
    train(oracle, torch.optim.SGD(oracle.parameters(), lr=0.05, momentum=0.9), x, y, steps=10)
    for p, q in zip(net.parameters(), oracle.parameters()):
        torch.testing.assert_close(p.data, q.data, **TOLERANCE)


def test_the_default_fuses_a_small_model_into_one_tensor(client, table_name):
    net = model(42)
    optimizer = dt.DistributedOptimizer(torch.optim.Adam(net.parameters(), lr=0.01),
                                        net.named_parameters(), client=client, name=table_name)
    assert layout(optimizer) == [["2.bias", "2.weight", "0.bias", "0.weight"]]
    assert optimizer._buckets[0].tensor.num_floats == 49


def test_zero_gives_each_parameter_its_tensor_by_name(client, table_name):
    net = model(43)
    optimizer = dt.DistributedOptimizer(torch.optim.Adam(net.parameters(), lr=0.01),
                                        net.named_parameters(), client=client, name=table_name,
                                        bucket_bytes=0)
    assert layout(optimizer) == [["2.bias"], ["2.weight"], ["0.bias"], ["0.weight"]]
    assert [b.tensor.name for b in optimizer._buckets] == [
        f"{table_name}.{n}" for n in ("2.bias", "2.weight", "0.bias", "0.weight")]


def test_param_groups_never_share_a_bucket(client, table_name):
    net = model(44)
    x, y = regression_data(45)
    oracle = copy.deepcopy(net)

    def make(m):
        return torch.optim.SGD([{"params": m[0].parameters()},
                                {"params": m[2].parameters(), "lr": 0.01}], lr=0.05)

    wrapped = make(net)
    optimizer = dt.DistributedOptimizer(wrapped, net.named_parameters(), client=client,
                                        name=table_name)
    assert layout(optimizer) == [["2.bias", "2.weight"], ["0.bias", "0.weight"]]
    # The second group's rate halves: its bucket follows, the other keeps its own.
    train(net, optimizer, x, y, steps=3)
    wrapped.param_groups[1]["lr"] = 0.005
    train(net, optimizer, x, y, steps=3)
    plain = make(oracle)
    train(oracle, plain, x, y, steps=3)
    plain.param_groups[1]["lr"] = 0.005
    train(oracle, plain, x, y, steps=3)
    for p, q in zip(net.parameters(), oracle.parameters()):
        torch.testing.assert_close(p.data, q.data, **TOLERANCE)


def test_adams_param_groups_follow_their_own_rates(client, table_name):
    """Each bucket's pushes carry its group's rate against the one its
    tensor was made with: one group's change leaves the other's alone."""
    net = model(46)
    x, y = regression_data(47)
    oracle = copy.deepcopy(net)

    def make(m):
        return torch.optim.Adam([{"params": m[0].parameters()},
                                 {"params": m[2].parameters(), "lr": 0.02}], lr=0.01)

    wrapped = make(net)
    optimizer = dt.DistributedOptimizer(wrapped, net.named_parameters(), client=client,
                                        name=table_name, bucket_bytes=SPLIT_BYTES)
    plain = make(oracle)
    for opt, m in ((optimizer, net), (plain, oracle)):
        train(m, opt, x, y, steps=3)
        opt.param_groups[0]["lr"] = 0.003
        train(m, opt, x, y, steps=3)
        opt.param_groups[1]["lr"] = 0.05
        train(m, opt, x, y, steps=3)
    for p, q in zip(net.parameters(), oracle.parameters()):
        torch.testing.assert_close(p.data, q.data, **TOLERANCE)


@pytest.mark.parametrize("kind", ["sgd_momentum", "adam"])
@pytest.mark.parametrize("bucket_bytes", [0, SPLIT_BYTES, DEFAULT_BUCKET_BYTES])
def test_a_parameter_without_gradient_in_a_bucket_pushes_zeros(client, table_name, kind,
                                                               bucket_bytes):
    """A step whose loss reaches only the last weight. Fused, the others of
    its bucket push zeros: as torch.optim with zeroed (not None) gradients,
    whose momentum moves them. A bucket with no gradient at all is not
    pushed: as torch.optim skipping a parameter whose grad is None."""
    make = {"sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
            "adam": lambda p: torch.optim.Adam(p, lr=0.05)}[kind]
    x, y = regression_data(48)
    net = model(49)
    oracle = copy.deepcopy(net)
    optimizer = dt.DistributedOptimizer(make(net.parameters()), net.named_parameters(),
                                        client=client, name=table_name, bucket_bytes=bucket_bytes)
    plain = make(oracle.parameters())
    # Pushed with 2.weight (zeros where no gradient): its bucket's parameters.
    zeroed = {q.name for b in optimizer._buckets if "2.weight" in [q.name for q in b.params]
              for q in b.params}
    for i in range(6):
        for m, o in ((net, optimizer), (oracle, plain)):
            if i == 3:
                o.zero_grad()
                for name, p in m.named_parameters():
                    p.grad = torch.zeros_like(p) if name in zeroed else None
                m[2].weight.sum().backward()
            else:
                o.zero_grad()
                batch_loss(m, x, y, i).backward()
            o.step()
    for (name, p), q in zip(net.named_parameters(), oracle.parameters()):
        torch.testing.assert_close(p.data, q.data, **TOLERANCE, msg=name)


@pytest.mark.parametrize("bucket_bytes", [0, SPLIT_BYTES, DEFAULT_BUCKET_BYTES])
def test_backward_passes_per_step_push_each_bucket_once(client, table_name, bucket_bytes):
    x, y = regression_data(50)
    net = model(51)
    oracle = copy.deepcopy(net)
    optimizer = dt.DistributedOptimizer(torch.optim.Adam(net.parameters(), lr=0.05),
                                        net.named_parameters(), client=client, name=table_name,
                                        backward_passes_per_step=2, bucket_bytes=bucket_bytes)
    plain = torch.optim.Adam(oracle.parameters(), lr=0.05)
    pushes = []
    real = optimizer.client

    class Counting:
        def __getattr__(self, name):
            return getattr(real, name)

        def push_tensor_async(self, tensor, values):
            pushes.append(tensor.name)
            return real.push_tensor_async(tensor, values)

    optimizer.client = Counting()
    for i in range(0, 8, 2):
        optimizer.zero_grad()
        batch_loss(net, x, y, i).backward()
        assert not pushes  # not before the second pass
        batch_loss(net, x, y, i + 1).backward()
        assert sorted(pushes) == sorted(b.tensor.name for b in optimizer._buckets)
        optimizer.step()
        pushes.clear()
        plain.zero_grad()
        (batch_loss(oracle, x, y, i) + batch_loss(oracle, x, y, i + 1)).backward()
        plain.step()
    for p, q in zip(net.parameters(), oracle.parameters()):
        torch.testing.assert_close(p.data, q.data, **TOLERANCE)


@pytest.mark.parametrize("bucket_bytes", [0, 64, DEFAULT_BUCKET_BYTES])
def test_channels_last_parameters_in_buckets_are_updated_in_place(client, table_name,
                                                                  bucket_bytes):
    torch.manual_seed(52)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Conv2d(4, 2, 3)).to(
        memory_format=torch.channels_last)
    oracle = copy.deepcopy(net)
    assert not net[0].weight.is_contiguous()
    optimizer = dt.DistributedOptimizer(
        torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=0.01),
        net.named_parameters(), client=client, name=table_name, bucket_bytes=bucket_bytes)
    plain = torch.optim.SGD(oracle.parameters(), lr=0.05, momentum=0.9, weight_decay=0.01)
    g = torch.Generator().manual_seed(53)
    for _ in range(3):
        x = torch.randn(2, 3, 7, 7, generator=g).to(memory_format=torch.channels_last)
        for m, o in ((net, optimizer), (oracle, plain)):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
    assert not net[0].weight.is_contiguous() and not net[1].weight.is_contiguous()
    for p, q in zip(net.parameters(), oracle.parameters()):
        torch.testing.assert_close(p.data, q.data, **TOLERANCE)


@pytest.mark.parametrize("bad", [-1, 1.5, "4096", True, None])
def test_a_bad_bucket_bytes_is_refused_before_anything_is_registered(client, table_name, bad):
    net = model(54)
    with pytest.raises(ductile.InvalidArgument, match="bucket_bytes"):
        dt.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                net.named_parameters(), client=client, name=table_name,
                                bucket_bytes=bad)
    with pytest.raises(ductile.NotFound):
        client.get_table(f"{table_name}.claims")


@pytest.mark.parametrize("second", [{"bucket_bytes": 0}, {"bucket_bytes": SPLIT_BYTES}, {"other": True}])
def test_a_worker_whose_buckets_differ_from_the_first_workers_is_refused(connect, table_name,
                                                                         second):
    """Two workers of one model with different bucket_bytes (or models)
    would use different tensors on the servers, each training its own: the
    second is refused when it joins, naming why."""
    first = connect()
    net = model(48)
    dt.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), net.named_parameters(),
                            client=first, name=table_name)
    other = connect()
    if second.get("other"):
        net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        second = {}
    with pytest.raises(ductile.InvalidArgument, match="same bucket_bytes"):
        dt.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1), net.named_parameters(),
                                client=other, name=table_name, **second)
