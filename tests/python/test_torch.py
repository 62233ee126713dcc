"""ductile.torch: a torch model trained with its optimizer on the servers,
against the same model trained by torch.optim in this process (the oracle),
by one worker and by two workers (threads, each its own client) of the
tests' cluster."""

import copy
import subprocess
import sys
import threading

import pytest

torch = pytest.importorskip("torch")

import ductile  # noqa: E402
import ductile.torch as dt  # noqa: E402

STEPS = 30
TOLERANCE = dict(rtol=1e-4, atol=1e-5)


def regression_data(seed: int, n: int = 64):
    """A linear regression problem: y = x @ w + b + noise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = x @ torch.tensor([[1.5], [-2.0], [0.5], [3.0]]) + 0.7
    return x, y + 0.01 * torch.randn(n, 1, generator=g)


def model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def full_loss(net, x, y) -> float:
    with torch.no_grad():
        return torch.nn.functional.mse_loss(net(x), y).item()


def train(net, optimizer, x, y, steps=STEPS, scheduler=None, after_step=None):
    for i in range(steps):
        batch = slice((8 * i) % len(x), (8 * i) % len(x) + 8)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(net(x[batch]), y[batch]).backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        if after_step is not None:
            after_step(i)


OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.05),
    "sgd_momentum_decay": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=0.01),
    "adam": lambda p: torch.optim.Adam(p, lr=0.05),
    "adam_decay": lambda p: torch.optim.Adam(p, lr=0.05, weight_decay=0.01, betas=(0.8, 0.99)),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
}


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_one_worker_trains_as_torch_optim_does(client, table_name, kind):
    x, y = regression_data(1)
    net = model(2)
    oracle = copy.deepcopy(net)
    before = full_loss(net, x, y)
    optimizer = dt.DistributedOptimizer(
        OPTIMIZERS[kind](net.parameters()), net.named_parameters(), client=client, name=table_name
    )
    train(net, optimizer, x, y)
    train(oracle, OPTIMIZERS[kind](oracle.parameters()), x, y)
    for (name, p), q in zip(net.named_parameters(), oracle.parameters()):
        torch.testing.assert_close(p.data, q.data, **TOLERANCE, msg=name)
    assert full_loss(net, x, y) < 0.5 * before


def test_sgd_follows_a_torch_lr_scheduler(client, table_name):
    x, y = regression_data(3)
    net = model(4)
    oracle = copy.deepcopy(net)
    wrapped = torch.optim.SGD(net.parameters(), lr=0.1)
    optimizer = dt.DistributedOptimizer(wrapped, net.named_parameters(), client=client, name=table_name)
    plain = torch.optim.SGD(oracle.parameters(), lr=0.1)
    train(net, optimizer, x, y, scheduler=torch.optim.lr_scheduler.StepLR(wrapped, 10, 0.3))
    train(oracle, plain, x, y, scheduler=torch.optim.lr_scheduler.StepLR(plain, 10, 0.3))
    assert wrapped.param_groups[0]["lr"] < 0.1
    for p, q in zip(net.parameters(), oracle.parameters()):
        torch.testing.assert_close(p.data, q.data, **TOLERANCE)


def test_adam_refuses_a_changed_learning_rate(client, table_name):
    x, y = regression_data(5)
    net = model(6)
    wrapped = torch.optim.Adam(net.parameters(), lr=0.01)
    optimizer = dt.DistributedOptimizer(wrapped, net.named_parameters(), client=client, name=table_name)
    train(net, optimizer, x, y, steps=1)
    wrapped.param_groups[0]["lr"] = 0.005
    with pytest.raises(ductile.InvalidArgument, match="average_gradients=True"):
        train(net, optimizer, x, y, steps=1)


def two_workers(connect, table_name, make_optimizer, **options):
    """Two workers (a thread each) train copies of a model initialised
    differently on different data under BSP; returns their parameters after
    each step, the models and the data."""
    data = [regression_data(10), regression_data(11)]
    nets = [model(20), model(21)]
    clients = [connect(), connect()]
    # The first one's initial values become both workers'.
    initial = [p.detach().clone() for p in nets[0].parameters()]
    optimizers = [
        dt.DistributedOptimizer(make_optimizer(net.parameters()), net.named_parameters(),
                                client=c, name=table_name, **options)
        for net, c in zip(nets, clients)
    ]
    for p, q in zip(nets[1].parameters(), initial):
        torch.testing.assert_close(p.data, q, rtol=0, atol=0)
    history = [[], []]
    errors = []

    def run(w):
        def snapshot(_):
            history[w].append([p.detach().clone() for p in nets[w].parameters()])
        try:
            train(nets[w], optimizers[w], *data[w], after_step=snapshot)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    return history, nets, data, initial


@pytest.mark.parametrize("kind", ["sgd_momentum_decay", "adam"])
def test_two_workers_hold_the_same_parameters_after_every_step(connect, table_name, kind):
    history, nets, data, initial = two_workers(connect, table_name, OPTIMIZERS[kind])
    assert len(history[0]) == len(history[1]) == STEPS
    for step, (a, b) in enumerate(zip(*history)):
        for p, q in zip(a, b):
            torch.testing.assert_close(p, q, rtol=0, atol=0, msg=f"step {step}")
    x = torch.cat([data[0][0], data[1][0]])
    y = torch.cat([data[0][1], data[1][1]])
    start = model(20)
    for p, q in zip(start.parameters(), initial):
        p.data.copy_(q)
    assert full_loss(nets[0], x, y) < 0.5 * full_loss(start, x, y)


def test_two_workers_average_gradients_for_any_optimizer(connect, table_name):
    history, nets, data, _ = two_workers(
        connect, table_name, lambda p: torch.optim.RMSprop(p, lr=0.01), average_gradients=True
    )
    for a, b in zip(*history):
        for p, q in zip(a, b):
            torch.testing.assert_close(p, q, rtol=0, atol=0)
    x, y = data[0]
    assert full_loss(nets[0], x, y) < full_loss(model(20), x, y)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda p: torch.optim.RMSprop(p, lr=0.01), "RMSprop has no update rule"),
        (lambda p: torch.optim.AdamW(p, lr=0.01), "AdamW with weight_decay"),
        (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True), "nesterov"),
        (lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True), "amsgrad"),
    ],
)
def test_an_optimizer_the_servers_lack_is_refused(client, table_name, make, match):
    net = model(7)
    with pytest.raises(ductile.InvalidArgument, match=match) as error:
        dt.DistributedOptimizer(make(net.parameters()), net.named_parameters(), client=client,
                                name=table_name)
    assert "average_gradients=True" in str(error.value)
    assert "SGD" in str(error.value) and "Adam" in str(error.value)


def test_init_connects_from_the_environment(cluster, monkeypatch):
    monkeypatch.setenv("DUCTILE_COORDINATOR", cluster.address)
    monkeypatch.setenv("DUCTILE_RANK", "91")
    client = dt.init(request_timeout_ms=30000)
    try:
        assert dt.client() is client
        assert dt.rank() == 91
        assert dt.size() >= 1
        with pytest.raises(ductile.FailedPrecondition):
            dt.init()
    finally:
        client.leave()
        client.close()
    with pytest.raises(ductile.FailedPrecondition, match="init"):
        dt.rank()


def test_importing_ductile_does_not_import_ductile_torch():
    code = "import sys, ductile\nassert 'torch' not in sys.modules\nassert 'ductile.torch' not in sys.modules\n"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
