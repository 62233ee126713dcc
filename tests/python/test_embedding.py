"""ductile.torch.Embedding and EmbeddingBag: rows on the servers, pulled in
forward and updated from backward, against torch.nn.Embedding and
EmbeddingBag trained by torch.optim in this process (the oracle); next to
DistributedOptimizer for a dense layer; bad input refused with nothing
pushed."""

import pytest

torch = pytest.importorskip("torch")

import ductile  # noqa: E402
import ductile.torch as dt  # noqa: E402

VOCAB = 20
DIM = 4
STEPS = 10
TOLERANCE = dict(rtol=1e-5, atol=1e-6)
INIT = {"kind": "normal", "stddev": 0.5, "seed": 3}


def oracle_of(module, kind=torch.nn.Embedding, **kwargs):
    """A torch module holding the rows `module` holds now."""
    oracle = kind(VOCAB, DIM, **kwargs)
    with torch.no_grad():
        oracle.weight.copy_(dt.Embedding.forward(module, torch.arange(VOCAB)))
    return oracle


def rows_of(module):
    with torch.no_grad():
        return dt.Embedding.forward(module, torch.arange(VOCAB))


OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1, eps=1e-8),
}


@pytest.mark.parametrize("rule", sorted(OPTIMIZERS))
def test_embedding_trains_as_torch_embedding(client, table_name, rule):
    emb = dt.Embedding(VOCAB, DIM, table=table_name, client=client, rule=rule,
                       learning_rate=0.1, init=INIT)
    oracle = oracle_of(emb)
    opt = OPTIMIZERS[rule](oracle.parameters())
    g = torch.Generator().manual_seed(0)
    target = torch.randn(DIM, generator=g)
    for _ in range(STEPS):
        ids = torch.randint(0, VOCAB, (8, 3), generator=g)  # repeats within a batch
        for module in (emb, oracle):
            ((module(ids) - target) ** 2).sum().backward()
        opt.step()
        opt.zero_grad()
    torch.testing.assert_close(rows_of(emb), oracle.weight.detach(), **TOLERANCE)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_trains_as_torch_embedding_bag(client, table_name, mode):
    bag = dt.EmbeddingBag(VOCAB, DIM, table=table_name, client=client, mode=mode,
                          learning_rate=0.2, init=INIT)
    oracle = oracle_of(bag, torch.nn.EmbeddingBag, mode=mode)
    opt = torch.optim.SGD(oracle.parameters(), lr=0.2)
    g = torch.Generator().manual_seed(1)
    target = torch.randn(DIM, generator=g)
    for step in range(STEPS):
        if step % 2 == 0:  # bags of one size, 2-D
            ids, offsets = torch.randint(0, VOCAB, (6, 3), generator=g), None
        else:  # bags of any sizes, one of them empty
            ids = torch.randint(0, VOCAB, (10,), generator=g)
            offsets = torch.tensor([0, 2, 2, 7])
        for module in (bag, oracle):
            ((module(ids, offsets) - target) ** 2).sum().backward()
        opt.step()
        opt.zero_grad()
    torch.testing.assert_close(rows_of(bag), oracle.weight.detach(), **TOLERANCE)


def test_embedding_works_next_to_distributed_optimizer(client, table_name):
    """An embedding and a dense layer: the embedding's rows updated by the
    servers from backward, the layer by DistributedOptimizer, each as torch
    would."""
    emb = dt.Embedding(None, DIM, table=table_name, client=client,
                       learning_rate=0.05, init=INIT)
    torch.manual_seed(5)
    head = torch.nn.Linear(DIM, 1)
    oracle_emb, oracle_head = oracle_of(emb), torch.nn.Linear(DIM, 1)
    oracle_head.load_state_dict(head.state_dict())
    optimizer = dt.DistributedOptimizer(torch.optim.SGD(head.parameters(), lr=0.05),
                                        head.named_parameters(), client=client,
                                        name=table_name + "_head")
    oracle_opt = torch.optim.SGD(list(oracle_emb.parameters()) + list(oracle_head.parameters()),
                                 lr=0.05)
    g = torch.Generator().manual_seed(2)
    for _ in range(STEPS):
        ids = torch.randint(0, VOCAB, (8, 2), generator=g)
        y = torch.randn(8, 1, generator=g)
        for e, h, opt in ((emb, head, optimizer), (oracle_emb, oracle_head, oracle_opt)):
            opt.zero_grad()
            torch.nn.functional.mse_loss(h(e(ids).sum(dim=1)), y).backward()
            opt.step()
    torch.testing.assert_close(rows_of(emb), oracle_emb.weight.detach(), **TOLERANCE)
    torch.testing.assert_close(head.weight.detach(), oracle_head.weight.detach(), **TOLERANCE)


def test_bad_input_raises_and_pushes_nothing(client, table_name):
    emb = dt.Embedding(VOCAB, DIM, table=table_name, client=client, init=INIT)
    before = rows_of(emb)
    with pytest.raises(TypeError, match="integer tensor"):
        emb(torch.tensor([1.0, 2.0]))
    with pytest.raises(IndexError, match="out of range"):
        emb(torch.tensor([1, VOCAB]))
    with pytest.raises(ValueError, match="not embedding_dim=5"):
        dt.Embedding(VOCAB, 5, table=emb.table, client=client)
    with pytest.raises(ValueError, match="mode"):
        dt.EmbeddingBag(VOCAB, DIM, table=emb.table, client=client, mode="max")
    bag = dt.EmbeddingBag(None, DIM, table=emb.table, client=client)
    with pytest.raises(ValueError, match="2-D"):
        bag(torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="offsets"):
        bag(torch.tensor([1, 2, 3]), torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="negative"):
        dt.Embedding(None, DIM, table=emb.table, client=client)(torch.tensor([-1]))
    torch.testing.assert_close(rows_of(emb), before, rtol=0, atol=0)
    assert "rule='sgd'" in repr(emb) and "mode='mean'" in repr(bag)


def test_a_failed_row_push_raises_at_step_and_applies_nothing(client, table_name):
    # backward() sends the rows' gradients and returns; step() waits for
    # them, and raises the servers' refusal of a non-finite gradient.
    emb = dt.Embedding(VOCAB, DIM, table=table_name, client=client, init=INIT)
    head = torch.nn.Linear(DIM, 1)
    optimizer = dt.DistributedOptimizer(torch.optim.SGD(head.parameters(), lr=0.1),
                                        head.named_parameters(), client=client)
    before = rows_of(emb)
    ids = torch.tensor([1, 2, 2])
    (head(emb(ids)).sum() * float("nan")).backward()
    with pytest.raises(ductile.InvalidArgument, match="non-finite"):
        optimizer.step()
    torch.testing.assert_close(rows_of(emb), before, rtol=0, atol=0)
    # The failed push is not waited for again: the next step goes on.
    optimizer.zero_grad()
    head(emb(ids)).sum().backward()
    optimizer.step()
    assert not torch.equal(rows_of(emb), before)


def test_without_an_optimizer_wait_pushes_ends_the_steps_pushes(client, table_name):
    emb = dt.Embedding(VOCAB, DIM, table=table_name, client=client, rule="sgd",
                       learning_rate=0.5, init=INIT)
    before = rows_of(emb)
    emb(torch.tensor([3])).sum().backward()
    dt.wait_pushes(client)
    client.clock()
    expected = before.clone()
    expected[3] -= 0.5  # d(sum)/d(row) = 1 for each float of row 3
    rows = torch.empty(VOCAB, DIM)
    client.pull_rows(emb.table, torch.arange(VOCAB).numpy(), out=rows.numpy())
    torch.testing.assert_close(rows, expected, **TOLERANCE)
