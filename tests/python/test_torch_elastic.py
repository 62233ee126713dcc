"""ductile.torch.ElasticSampler on the job's data plan: every batch of every
epoch trained exactly once by one worker, by two sharing each epoch, when
one of them is asked to leave, and across a rollback that undoes batches
(which the plan hands out again, and whose step() puts the checkpoint's
parameters back).

Each test has a cluster of its own (the data plan is the job's): the
durable one of test_recovery.py, a coordinator and a server with a state
directory, every wait bounded and every process stopped at the end."""

import subprocess
import threading

import pytest

torch = pytest.importorskip("torch")

import ductile  # noqa: E402
import ductile.torch as dt  # noqa: E402
from conftest import _binary  # noqa: E402
from test_recovery import WAIT_S, durable_cluster  # noqa: E402,F401

SAMPLES = 40
BATCH = 8  # 5 batches an epoch
EPOCHS = 2
EVERY_BATCH = sorted((e, i) for e in range(EPOCHS) for i in range(SAMPLES // BATCH))


def data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, 4, generator=g)
    return torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))


def model() -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Linear(4, 1)


def connect(cluster) -> ductile.Client:
    return ductile.connect(cluster.address, connect_timeout_ms=WAIT_S * 1000,
                           request_timeout_ms=WAIT_S * 1000)


class Worker:
    """A worker of the job: a client, a model, its DistributedOptimizer and
    an ElasticSampler; train() runs the epochs' loop of a script."""

    def __init__(self, cluster, sampler=True):
        self.client = connect(cluster)
        self.net = model()
        self.optimizer = dt.DistributedOptimizer(
            torch.optim.SGD(self.net.parameters(), lr=0.05), self.net.named_parameters(),
            client=self.client)
        if sampler:
            self.sampler = dt.ElasticSampler(SAMPLES, BATCH, EPOCHS, client=self.client)
            self.loader = torch.utils.data.DataLoader(data(), batch_sampler=self.sampler)
        self.iterations = []  # the (samples, ...) of each iteration's batches
        self.steps = 0

    def train(self, after_step=None) -> None:
        for _ in range(EPOCHS + 1):  # one more: empty, the plan has ended
            seen = []
            for x, y in self.loader:
                self.optimizer.zero_grad()
                torch.nn.functional.mse_loss(self.net(x), y).backward()
                self.optimizer.step()
                self.steps += 1
                seen.append(len(x))
                if after_step is not None:
                    after_step(self)
            self.iterations.append(seen)

    def close(self) -> None:
        self.client.close()


def run_together(*calls, timeout=WAIT_S) -> None:
    """Runs each call in a thread of its own (the workers of a job); fails
    unless every one returns within `timeout` without raising."""
    errors = []

    def run(call):
        try:
            call()
        except BaseException as error:  # noqa: B902, reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a worker did not finish"
    assert errors == []


def test_one_worker_trains_each_epoch_in_one_iteration(durable_cluster):
    worker = Worker(durable_cluster)
    try:
        batches = []
        for epoch in range(EPOCHS):
            epoch_samples = []
            for x, y in worker.loader:
                batches.append(len(x))
                epoch_samples += [tuple(row.tolist()) for row in x]
                worker.optimizer.zero_grad()
                torch.nn.functional.mse_loss(worker.net(x), y).backward()
                worker.optimizer.step()
            # An epoch is every sample once, in batches of BATCH.
            assert sorted(epoch_samples) == sorted(tuple(r.tolist()) for r, _ in data())
        assert batches == [BATCH] * (SAMPLES // BATCH) * EPOCHS
        assert list(worker.loader) == []  # the plan has ended
        assert sorted(worker.sampler.trained) == EVERY_BATCH
        assert worker.client.current_clock >= len(batches)
    finally:
        worker.close()


def test_two_workers_share_the_epochs_and_train_every_batch_once(durable_cluster):
    workers = [Worker(durable_cluster), Worker(durable_cluster)]
    try:
        run_together(workers[0].train, workers[1].train)
        trained = workers[0].sampler.trained + workers[1].sampler.trained
        assert sorted(trained) == EVERY_BATCH
        # Under BSP both end with the same parameters.
        for p, q in zip(workers[0].net.parameters(), workers[1].net.parameters()):
            torch.testing.assert_close(p.data, q.data)
    finally:
        for w in workers:
            w.close()


def test_a_worker_asked_to_leave_ends_its_loop_and_the_other_trains_the_rest(
        durable_cluster):
    workers = [Worker(durable_cluster), Worker(durable_cluster)]
    leaver = workers[1]
    try:
        def drain_after_two_steps(worker):
            if worker.steps != 2:
                return
            subprocess.run([_binary(), "drain", f"--coordinator={durable_cluster.address}",
                            f"worker:{worker.client.worker_id}"],
                           check=True, capture_output=True, timeout=WAIT_S)
            # Its next batch is where it leaves: once it knows.
            deadline = threading.Event()
            for _ in range(WAIT_S * 50):
                if worker.client.leave_requested:
                    return
                deadline.wait(0.02)
            raise AssertionError("the drain did not reach the worker")

        run_together(workers[0].train, lambda: leaver.train(drain_after_two_steps))
        assert leaver.sampler.left and leaver.steps == 2
        assert sum(map(len, leaver.iterations)) == 2
        trained = workers[0].sampler.trained + leaver.sampler.trained
        assert sorted(trained) == EVERY_BATCH
    finally:
        for w in workers:
            w.close()


def test_a_rollback_hands_out_again_the_batches_it_undid(durable_cluster):
    worker = Worker(durable_cluster)
    try:
        state = {}

        def kill_after_five_steps(w):
            if w.steps == 3:
                state["checkpoint"] = durable_cluster.checkpoint()
                state["parameters"] = [p.detach().clone() for p in w.net.parameters()]
            elif w.steps == 5:
                durable_cluster.restart_server()
            elif w.steps == 6:  # the step that took the rollback
                state["clock"] = w.client.current_clock
                state["after"] = [p.detach().clone() for p in w.net.parameters()]

        worker.train(kill_after_five_steps)
        assert state["checkpoint"] == 3
        # The sixth step's calls failed: step() took the rollback and pulled
        # the checkpoint's parameters.
        assert state["clock"] == 3
        for p, q in zip(state["after"], state["parameters"]):
            torch.testing.assert_close(p, q)
        # The two batches trained after the checkpoint (and the sixth's,
        # lost) were handed out again: every batch once in the end.
        assert sorted(worker.sampler.trained) == EVERY_BATCH
        assert worker.steps == len(EVERY_BATCH) + 3
    finally:
        worker.close()


def test_without_a_sampler_a_worker_asked_to_leave_leaves_at_its_step_with_left_job(
        durable_cluster):
    workers = [Worker(durable_cluster, sampler=False), Worker(durable_cluster, sampler=False)]
    leaver = workers[1]
    x, y = data().tensors
    outcome = {}

    def loop(worker, steps, drain_at=None):
        try:
            for step in range(steps):
                worker.optimizer.zero_grad()
                torch.nn.functional.mse_loss(worker.net(x[:BATCH]), y[:BATCH]).backward()
                worker.optimizer.step()
                if step + 1 == drain_at:
                    subprocess.run(
                        [_binary(), "drain", f"--coordinator={durable_cluster.address}",
                         f"worker:{worker.client.worker_id}"],
                        check=True, capture_output=True, timeout=WAIT_S)
                    for _ in range(WAIT_S * 50):
                        if worker.client.leave_requested:
                            break
                        threading.Event().wait(0.02)
            outcome[worker] = "finished"
        except dt.LeftJob as left:
            outcome[worker] = (left.code, str(left), step)
        except BaseException as error:  # noqa: B902, reported below
            outcome[worker] = error

    try:
        # The other worker goes on under BSP after the leaver is gone: had
        # it stayed in the job, the other's steps would wait for it.
        threads = [threading.Thread(target=loop, args=(workers[0], 20)),
                   threading.Thread(target=loop, args=(leaver, 20, 3))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT_S * 2)
        assert not any(t.is_alive() for t in threads), "a worker did not finish"
        assert outcome[workers[0]] == "finished"
        code, message, step = outcome[leaver]
        assert code == 0 and step == 3  # the step after the drain
        assert message.startswith(f"worker {leaver.client.worker_id} left the job at clock")
        assert leaver.client.worker_id not in workers[0].client.live_workers
    finally:
        for w in workers:
            w.close()


def test_a_job_shut_down_mid_training_ends_each_loop_with_left_job(durable_cluster):
    # One worker with an ElasticSampler, one without: `ductile shutdown`
    # during their loops ends both at their next call, cleanly (exit
    # status 0), with no wait for a timeout; any call after that fails at
    # once and finish() returns.
    workers = [Worker(durable_cluster), Worker(durable_cluster, sampler=False)]
    x, y = data().tensors
    outcome = {}

    def shut_down_after_two_steps(worker):
        if worker.steps == 2:
            subprocess.run([_binary(), "shutdown", f"--coordinator={durable_cluster.address}"],
                           check=True, capture_output=True, timeout=WAIT_S)

    def with_sampler(worker):
        try:
            worker.train(shut_down_after_two_steps)
            outcome[worker] = "finished"
        except dt.LeftJob as left:
            outcome[worker] = (left.code, str(left))
        except BaseException as error:  # noqa: B902, reported below
            outcome[worker] = error

    def without_sampler(worker):
        try:
            for _ in range(100000):  # until the job ends under it
                worker.optimizer.zero_grad()
                torch.nn.functional.mse_loss(worker.net(x[:BATCH]), y[:BATCH]).backward()
                worker.optimizer.step()
            outcome[worker] = "finished"
        except dt.LeftJob as left:
            outcome[worker] = (left.code, str(left))
        except BaseException as error:  # noqa: B902, reported below
            outcome[worker] = error

    try:
        threads = [threading.Thread(target=with_sampler, args=(workers[0],), daemon=True),
                   threading.Thread(target=without_sampler, args=(workers[1],), daemon=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT_S)
        assert not any(t.is_alive() for t in threads), "a worker did not stop"
        for w in workers:
            code, message = outcome[w]
            assert code == 0
            assert message.startswith(
                f"worker {w.client.worker_id}: the job was shut down at clock")
            assert w.client.shutting_down
            with pytest.raises(ductile.Unavailable, match="cluster is shutting down"):
                w.client.barrier(timeout_ms=WAIT_S * 1000)
            w.client.finish()
            w.client.leave()
        # The step after the shutdown may still have been answered, sent
        # before the worker heard of it.
        assert 2 <= workers[0].steps < len(EVERY_BATCH)
    finally:
        for w in workers:
            w.close()


def test_a_job_shut_down_ends_a_loop_of_embeddings_with_left_job(durable_cluster):
    # The rows' pull (forward) or push (backward) may be the call that finds
    # the job shut down: either ends the loop as step() would.
    client = connect(durable_cluster)
    try:
        embedding = dt.EmbeddingBag(None, 4, table="shutdown.rows", mode="sum", client=client)
        head = torch.nn.Linear(4, 1)
        optimizer = dt.DistributedOptimizer(torch.optim.SGD(head.parameters(), lr=0.05),
                                            head.named_parameters(), client=client)
        ids = torch.tensor([[1, 2, 3], [3, 4, 5]])
        steps = 0
        with pytest.raises(dt.LeftJob) as left:
            for steps in range(1, 1000):
                optimizer.zero_grad()
                head(embedding(ids)).sum().backward()
                optimizer.step()
                if steps == 2:
                    subprocess.run([_binary(), "shutdown",
                                    f"--coordinator={durable_cluster.address}"],
                                   check=True, capture_output=True, timeout=WAIT_S)
        assert left.value.code == 0
        assert str(left.value).startswith(
            f"worker {client.worker_id}: the job was shut down at clock")
        assert 2 <= steps < 10
    finally:
        client.close()


def test_a_rollback_under_a_loop_of_embeddings_is_taken_with_no_error(durable_cluster):
    # The first call after the server's restart is a lookup (forward): it
    # takes the rollback (the optimizer restored too) and reads the
    # checkpoint's rows; that step pushes nothing (its gradients would mix
    # two timelines) and moves the clock on; the loop runs on from the
    # checkpoint's clock with no error.
    client = connect(durable_cluster)
    try:
        embedding = dt.EmbeddingBag(None, 4, table="rollback.rows", mode="sum",
                                    rule="sgd", learning_rate=0.1, client=client)
        head = torch.nn.Linear(4, 1)
        optimizer = dt.DistributedOptimizer(torch.optim.SGD(head.parameters(), lr=0.05),
                                            head.named_parameters(), client=client)
        ids = torch.tensor([[1, 2, 3], [3, 4, 5]])
        clocks, before = [], []
        for step in range(1, 11):
            with torch.no_grad():
                before.append(embedding(ids).clone())
            optimizer.zero_grad()
            head(embedding(ids)).sum().backward()
            optimizer.step()
            clocks.append(client.current_clock)
            if step == 3:
                assert durable_cluster.checkpoint() == 3
                with torch.no_grad():
                    at_checkpoint = embedding(ids).clone()
            elif step == 5:
                durable_cluster.restart_server()
        assert clocks == [1, 2, 3, 4, 5, 4, 5, 6, 7, 8]
        # before[k]: the rows as step k + 1 began. Each step moved them;
        # step 6 read them as the checkpoint holds them, not as step 5
        # left them.
        torch.testing.assert_close(before[3], at_checkpoint)
        assert not torch.equal(before[4], at_checkpoint)
        assert not torch.equal(before[5], before[4])
        torch.testing.assert_close(before[5], at_checkpoint)
        # Step 6 pushed nothing: step 7 began where the checkpoint was.
        torch.testing.assert_close(before[6], at_checkpoint)
        assert not torch.equal(before[7], at_checkpoint)
    finally:
        client.close()


def test_a_rollback_taken_at_a_lookup_hands_its_batch_out_again(durable_cluster):
    # After step 5 the server restarts, and an evaluation's lookup takes the
    # rollback: the two batches trained since the checkpoint are handed out
    # again, and the next batch's gradients are pushed as any other's (the
    # rollback came before it). Every batch is trained once.
    client = connect(durable_cluster)
    try:
        embedding = dt.EmbeddingBag(None, 4, table="plan.rows", mode="sum", client=client)
        head = torch.nn.Linear(4, 1)
        optimizer = dt.DistributedOptimizer(torch.optim.SGD(head.parameters(), lr=0.05),
                                            head.named_parameters(), client=client)
        sampler = dt.ElasticSampler(SAMPLES, BATCH, EPOCHS, client=client)
        loader = torch.utils.data.DataLoader(data(), batch_sampler=sampler)
        steps = 0
        for _ in range(EPOCHS + 1):
            for x, y in loader:
                ids = (x.abs() * 10).long()  # the features as ids, 4 a bag
                with torch.no_grad():
                    rows_before = embedding(ids).clone()
                optimizer.zero_grad()
                loss = torch.nn.functional.mse_loss(head(embedding(ids)), y)
                loss.backward()
                optimizer.step()
                steps += 1
                if steps == 3:
                    assert durable_cluster.checkpoint() == 3
                elif steps == 5:
                    durable_cluster.restart_server()
                with torch.no_grad():
                    evaluated = embedding(ids)  # after step 5: takes the rollback
                if steps == 5:
                    assert client.current_clock == 3
                elif steps == 6:
                    assert client.current_clock == 4
                    assert not torch.equal(evaluated, rows_before)  # pushed
        assert sorted(sampler.trained) == EVERY_BATCH
        assert steps == len(EVERY_BATCH) + 2
    finally:
        client.close()


@pytest.mark.parametrize("average_gradients", [False, True])
def test_a_rollback_that_undoes_the_initial_values_leaves_the_workers_agreeing(
        durable_cluster, average_gradients):
    """Worker A stores the initial values (it is first); the job then rolls
    back to a checkpoint from before them while worker B wraps its model.
    Both must start again from one set of values, as they would have without
    the rollback, and train in step (with the servers' optimizer, or each
    worker's own on the mean gradient)."""
    clients = [connect(durable_cluster)]
    try:
        clients[0].clock()
        assert durable_cluster.checkpoint() == 1  # before any tensor
        torch.manual_seed(1)
        nets = [torch.nn.Linear(4, 1)]
        optimizers = [dt.DistributedOptimizer(
            torch.optim.SGD(nets[0].parameters(), lr=0.05), nets[0].named_parameters(),
            average_gradients=average_gradients, client=clients[0])]
        seeds = {1: [p.detach().clone() for p in nets[0].parameters()]}
        durable_cluster.restart_server()  # the initial values are gone

        clients.append(connect(durable_cluster))
        torch.manual_seed(2)
        nets.append(torch.nn.Linear(4, 1))
        seeds[2] = [p.detach().clone() for p in nets[1].parameters()]
        optimizers.append(dt.DistributedOptimizer(
            torch.optim.SGD(nets[1].parameters(), lr=0.05), nets[1].named_parameters(),
            average_gradients=average_gradients, client=clients[1]))

        x, y = data().tensors
        after = [[], []]  # each worker's parameters before each step

        def run(i):
            while clients[i].current_clock < 5:
                after[i].append([p.detach().clone() for p in nets[i].parameters()])
                optimizers[i].zero_grad()
                torch.nn.functional.mse_loss(nets[i](x), y).backward()
                optimizers[i].step()

        run_together(lambda: run(0), lambda: run(1))
        # A's first step took the rollback (its gradients were dropped, its
        # clock stayed at 1); from its second on, both hold the same
        # parameters before each step, from one worker's initial values.
        assert len(after[0]) == len(after[1]) + 1
        assert all(torch.equal(p, q) for p, q in zip(after[0][0], seeds[1]))
        start = after[1][0]
        assert any(all(torch.equal(p, q) for p, q in zip(start, seed))
                   for seed in seeds.values())
        for a, b in zip(after[0][1:], after[1]):
            for p, q in zip(a, b):
                torch.testing.assert_close(p, q)
        for p, q in zip(nets[0].parameters(), nets[1].parameters()):
            torch.testing.assert_close(p.data, q.data)
    finally:
        for c in clients:
            c.close()
