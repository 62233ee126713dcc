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
from ductile import _elastic  # noqa: E402

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


@pytest.mark.parametrize("bucket_bytes", [0, 1 << 22])
@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_one_worker_trains_as_torch_optim_does(client, table_name, kind, bucket_bytes):
    x, y = regression_data(1)
    net = model(2)
    oracle = copy.deepcopy(net)
    before = full_loss(net, x, y)
    optimizer = dt.DistributedOptimizer(
        OPTIMIZERS[kind](net.parameters()), net.named_parameters(), client=client, name=table_name,
        bucket_bytes=bucket_bytes,
    )
    train(net, optimizer, x, y)
    train(oracle, OPTIMIZERS[kind](oracle.parameters()), x, y)
    for (name, p), q in zip(net.named_parameters(), oracle.parameters()):
        torch.testing.assert_close(p.data, q.data, **TOLERANCE, msg=name)
    assert full_loss(net, x, y) < 0.5 * before


SCHEDULES = {
    "step": lambda o: torch.optim.lr_scheduler.StepLR(o, 10, 0.3),
    # A warm-up from a rate of 0: torch.optim still moves its state then.
    "warmup": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: min(1.0, s / 5)),
}


@pytest.mark.parametrize("schedule", sorted(SCHEDULES))
@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_every_rule_follows_a_torch_lr_scheduler(client, table_name, kind, schedule):
    x, y = regression_data(3)
    net = model(4)
    oracle = copy.deepcopy(net)
    wrapped = OPTIMIZERS[kind](net.parameters())
    optimizer = dt.DistributedOptimizer(wrapped, net.named_parameters(), client=client, name=table_name)
    plain = OPTIMIZERS[kind](oracle.parameters())
    train(net, optimizer, x, y, scheduler=SCHEDULES[schedule](wrapped))
    train(oracle, plain, x, y, scheduler=SCHEDULES[schedule](plain))
    assert wrapped.param_groups[0]["lr"] != plain.defaults["lr"] or schedule == "warmup"
    for p, q in zip(net.parameters(), oracle.parameters()):
        torch.testing.assert_close(p.data, q.data, **TOLERANCE)


def test_a_scheduler_made_before_the_wrapper_counts_from_its_initial_rate(client, table_name):
    """A warm-up scheduler made first sets the rate to 0 at once: the
    servers' rate is the scheduler's initial one, not 0."""
    x, y = regression_data(7)
    net = model(8)
    oracle = copy.deepcopy(net)
    wrapped = OPTIMIZERS["adam"](net.parameters())
    scheduler = SCHEDULES["warmup"](wrapped)
    assert wrapped.param_groups[0]["lr"] == 0
    optimizer = dt.DistributedOptimizer(wrapped, net.named_parameters(), client=client, name=table_name)
    plain = OPTIMIZERS["adam"](oracle.parameters())
    train(net, optimizer, x, y, scheduler=scheduler)
    train(oracle, plain, x, y, scheduler=SCHEDULES["warmup"](plain))
    for p, q in zip(net.parameters(), oracle.parameters()):
        torch.testing.assert_close(p.data, q.data, **TOLERANCE)


def test_a_negative_learning_rate_is_refused(client, table_name):
    x, y = regression_data(5)
    net = model(6)
    wrapped = torch.optim.Adam(net.parameters(), lr=0.01)
    optimizer = dt.DistributedOptimizer(wrapped, net.named_parameters(), client=client, name=table_name)
    train(net, optimizer, x, y, steps=1)
    wrapped.param_groups[0]["lr"] = -0.005
    with pytest.raises(ductile.InvalidArgument, match="must be 0 or positive"):
        train(net, optimizer, x, y, steps=1)


def mean_gradient_oracle(initial, data, make_optimizer, steps=STEPS):
    """What BSP should give: one model from `initial` stepping torch's
    optimizer on the mean of the two workers' gradients of each step's
    batches; its parameters after each step."""
    net = model(20)
    for p, q in zip(net.parameters(), initial):
        p.data.copy_(q)
    optimizer = make_optimizer(net.parameters())
    history = []
    for i in range(steps):
        grads = []
        for x, y in data:
            batch = slice((8 * i) % len(x), (8 * i) % len(x) + 8)
            net.zero_grad()
            torch.nn.functional.mse_loss(net(x[batch]), y[batch]).backward()
            grads.append([p.grad.clone() for p in net.parameters()])
        for p, g0, g1 in zip(net.parameters(), *grads):
            p.grad = (g0 + g1) / 2
        optimizer.step()
        history.append([p.detach().clone() for p in net.parameters()])
    return history


def assert_follows(history, oracle):
    for step, (ours, theirs) in enumerate(zip(history, oracle)):
        for p, q in zip(ours, theirs):
            torch.testing.assert_close(p, q, **TOLERANCE, msg=f"step {step}")


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
    assert_follows(history[0], mean_gradient_oracle(initial, data, OPTIMIZERS[kind]))
    x = torch.cat([data[0][0], data[1][0]])
    y = torch.cat([data[0][1], data[1][1]])
    start = model(20)
    for p, q in zip(start.parameters(), initial):
        p.data.copy_(q)
    assert full_loss(nets[0], x, y) < 0.5 * full_loss(start, x, y)


def test_two_workers_average_gradients_for_any_optimizer(connect, table_name):
    make = lambda p: torch.optim.RMSprop(p, lr=0.01)  # noqa: E731
    history, nets, data, initial = two_workers(connect, table_name, make, average_gradients=True)
    for a, b in zip(*history):
        for p, q in zip(a, b):
            torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert_follows(history[0], mean_gradient_oracle(initial, data, make))
    x, y = data[0]
    assert full_loss(nets[0], x, y) < full_loss(model(20), x, y)


def batch_loss(net, x, y, i):
    batch = slice((8 * i) % len(x), (8 * i) % len(x) + 8)
    return torch.nn.functional.mse_loss(net(x[batch]), y[batch])


def test_a_failed_push_leaves_nothing_to_fail_the_next_steps(client, table_name, monkeypatch):
    # step() waits for a rollback to explain the failure; none comes here.
    monkeypatch.setattr(_elastic, "ROLLBACK_WAIT_MS", 200)
    x, y = regression_data(8)
    net = model(9)
    oracle = copy.deepcopy(net)
    optimizer = dt.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.05),
                                        net.named_parameters(), client=client, name=table_name)
    real = optimizer.client

    class Lost:  # a push whose server was lost: nothing applied
        def wait(self):
            raise ductile.Aborted("the server was lost")

    class LosingPushes:
        def __getattr__(self, name):
            return getattr(real, name)

        def push_tensor_async(self, tensor, values):
            return Lost()

    optimizer.client = LosingPushes()
    optimizer.zero_grad()
    batch_loss(net, x, y, 0).backward()
    with pytest.raises(ductile.Aborted):
        optimizer.step()
    optimizer.client = real  # recovered
    train(net, optimizer, x, y, steps=3)
    train(oracle, torch.optim.SGD(oracle.parameters(), lr=0.05), x, y, steps=3)
    for p, q in zip(net.parameters(), oracle.parameters()):
        torch.testing.assert_close(p.data, q.data, **TOLERANCE)


def test_backward_passes_per_step_sums_the_passes_into_one_push(client, table_name):
    x, y = regression_data(12)
    net = model(13)
    oracle = copy.deepcopy(net)
    optimizer = dt.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9),
                                        net.named_parameters(), client=client, name=table_name,
                                        backward_passes_per_step=2)
    plain = torch.optim.SGD(oracle.parameters(), lr=0.05, momentum=0.9)
    for i in range(0, 10, 2):
        optimizer.zero_grad()
        batch_loss(net, x, y, i).backward()
        batch_loss(net, x, y, i + 1).backward()
        optimizer.step()
        plain.zero_grad()
        (batch_loss(oracle, x, y, i) + batch_loss(oracle, x, y, i + 1)).backward()
        plain.step()
    for p, q in zip(net.parameters(), oracle.parameters()):
        torch.testing.assert_close(p.data, q.data, **TOLERANCE)
    before = [p.detach().clone() for p in net.parameters()]
    optimizer.zero_grad()
    batch_loss(net, x, y, 0).backward()
    batch_loss(net, x, y, 1).backward()
    with pytest.raises(Exception, match="backward_passes_per_step=2") as error:
        batch_loss(net, x, y, 2).backward()
    assert isinstance(error.value, (ductile.FailedPrecondition, RuntimeError))
    for p, q in zip(net.parameters(), before):
        torch.testing.assert_close(p.data, q, rtol=0, atol=0)


def test_workers_constructing_at_once_start_from_the_same_parameters(connect, table_name):
    for round_ in range(3):
        nets = [model(30), model(31)]
        clients = [connect(), connect()]
        barrier = threading.Barrier(2)
        errors = []

        def construct(w):
            try:
                barrier.wait(timeout=60)
                dt.DistributedOptimizer(torch.optim.SGD(nets[w].parameters(), lr=0.1),
                                        nets[w].named_parameters(), client=clients[w],
                                        name=f"{table_name}_{round_}")
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        threads = [threading.Thread(target=construct, args=(w,)) for w in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        for p, q in zip(nets[0].parameters(), nets[1].parameters()):
            torch.testing.assert_close(p.data, q.data, rtol=0, atol=0)
        for c in clients:
            c.leave()
            c.close()


def test_frozen_parameters_are_left_alone(client, table_name):
    x, y = regression_data(14)
    net = model(15)
    frozen = net[0].bias
    frozen.requires_grad_(False)
    oracle = copy.deepcopy(net)
    trainable = [p for p in net.parameters() if p.requires_grad]
    optimizer = dt.DistributedOptimizer(torch.optim.SGD(trainable, lr=0.05),
                                        net.named_parameters(), client=client, name=table_name)
    assert [q.name for b in optimizer._buckets for q in b.params] == ["2.bias", "2.weight",
                                                                      "0.weight"]
    assert optimizer._buckets[0].tensor.num_floats == 1 + 8 + 32
    frozen.data.fill_(0.25)  # the worker's own: never overwritten by a pull
    oracle[0].bias.data.fill_(0.25)
    train(net, optimizer, x, y, steps=5)
    train(oracle, torch.optim.SGD([p for p in oracle.parameters() if p.requires_grad], lr=0.05),
          x, y, steps=5)
    for p, q in zip(net.parameters(), oracle.parameters()):
        torch.testing.assert_close(p.data, q.data, **TOLERANCE)


def test_averaging_counts_a_parameter_without_gradient_as_zero(client, table_name):
    x, y = regression_data(16)
    net = model(17)
    optimizer = dt.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                        net.named_parameters(), client=client, name=table_name,
                                        average_gradients=True)
    optimizer.zero_grad()
    batch_loss(net, x, y, 0).backward()
    optimizer.step()
    bias = net[2].bias.detach().clone()
    # A step whose loss does not reach the last bias: no gradient for it.
    optimizer.zero_grad()
    net[2].weight.sum().backward()
    optimizer.step()
    torch.testing.assert_close(net[2].bias.data, bias, rtol=0, atol=0)


def test_channels_last_parameters_are_updated_in_place(client, table_name):
    torch.manual_seed(18)
    net = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
    oracle = copy.deepcopy(net)
    assert not net.weight.is_contiguous()
    optimizer = dt.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.05),
                                        net.named_parameters(), client=client, name=table_name)
    plain = torch.optim.SGD(oracle.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(19)
    for _ in range(3):
        x = torch.randn(2, 3, 6, 6, generator=g).to(memory_format=torch.channels_last)
        for m, o in ((net, optimizer), (oracle, plain)):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
    assert not net.weight.is_contiguous()
    for p, q in zip(net.parameters(), oracle.parameters()):
        torch.testing.assert_close(p.data, q.data, **TOLERANCE)


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


def test_report_counts_the_loss_and_samples_for_the_status(client, table_name):
    client.clock()  # steps count from the first clock on
    before = client.stats()
    dt.report(loss=torch.tensor(0.75), samples=32, client=client)
    dt.report(loss=0.25, client=client)
    dt.report(loss=float("nan"), samples=0, client=client)  # a loss not finite: not counted
    client.clock()  # samples count toward the step the clock ends
    after = client.stats()
    assert after.losses - before.losses == 2
    assert after.samples - before.samples == 32
    assert 0.25 <= after.recent_loss <= 0.75


def test_report_refuses_what_is_not_a_loss_or_a_count(client):
    with pytest.raises(ValueError, match="one-element"):
        dt.report(loss=torch.ones(3), client=client)
    with pytest.raises(TypeError, match="loss must be"):
        dt.report(loss="0.5", client=client)
    with pytest.raises(TypeError, match="samples must be an int"):
        dt.report(samples=2.5, client=client)
    with pytest.raises(ValueError, match=">= 0"):
        dt.report(samples=-1, client=client)
    assert client.stats().losses == 0


def test_a_closures_loss_is_reported_by_step(client, table_name):
    net = model(3)
    x, y = regression_data(3)
    optimizer = dt.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.05),
                                        net.named_parameters(), client=client, name=table_name)

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(net(x[:8]), y[:8])
        loss.backward()
        return loss

    loss = optimizer.step(closure)
    assert client.stats().losses == 1
    assert client.stats().recent_loss == pytest.approx(loss.item())


def test_init_after_the_job_ended_exits_cleanly_with_left_job(monkeypatch, capsys):
    # A worker started late (a resize or a replacement as the job ends): the
    # coordinator answers its registration so, and there is nothing to train.
    def job_ended(**_):
        raise ductile.Unavailable("cluster is shutting down")

    monkeypatch.setattr(dt, "_client", None)
    monkeypatch.setattr(dt, "connect_from_env", job_ended)
    with pytest.raises(dt.LeftJob) as left:
        dt.init()
    assert left.value.code == 0
    assert "the job ended before this worker joined" in capsys.readouterr().err


def test_init_raises_any_other_unavailable_error(monkeypatch):
    def unreachable(**_):
        raise ductile.Unavailable("no coordinator answered at tcp://127.0.0.1:9")

    monkeypatch.setattr(dt, "_client", None)
    monkeypatch.setattr(dt, "connect_from_env", unreachable)
    with pytest.raises(ductile.Unavailable, match="no coordinator answered"):
        dt.init()
