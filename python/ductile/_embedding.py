"""ductile.torch.Embedding and EmbeddingBag: embedding tables whose rows live
on the servers, looked up by id.

    table = client.create_table("user_emb", width=16, rule="adagrad",
                                learning_rate=0.05,
                                init={"kind": "normal", "stddev": 0.01})
    users = dt.Embedding(None, 16, table=table)
    items = dt.EmbeddingBag(None, 16, table="item_emb", mode="mean",
                            rule="sgd", learning_rate=0.1)
    loss = model(users(user_ids), items(item_ids)).sum()
    loss.backward()                  # pushes the rows' gradients

The forward pass pulls the rows of the batch's ids (each distinct id once,
Client.pull_rows); the backward pass pushes their gradients
(Client.push_rows_async, a repeated id's gradients summed) and goes on
without waiting for the servers, and the servers apply the table's update
rule: there is no torch parameter and the module is not given to a torch
optimizer. Next to DistributedOptimizer for the dense part of the model,
the pushes of a step carry the same clock, and DistributedOptimizer.step()
ends the step for both, under the table's consistency model: it waits for
the backward passes' pushes (a failed one raises there, and a rollback is
taken there as for the dense part) before the clock moves. Without
DistributedOptimizer, call wait_pushes(client) before Client.clock(); the
next lookup waits for them too (raising a push's error). A rollback that
fails a lookup is taken there (every DistributedOptimizer and
ElasticSampler of the client restored, as step() does), and the lookup
reads the checkpoint's rows; the step goes on, but pushes nothing (its
gradients would mix the two timelines; an ElasticSampler hands its batch
out again), and its step() moves the clock on: the loop goes on.
"""

from typing import Any, Optional, Union

import torch

import ductile
from ductile import _elastic

_MODES = ("sum", "mean")
_ROW_POLICY = ("admit_after_pushes", "admission_counters", "evict_idle_clocks", "max_rows",
               "eviction")
_EVICTIONS = ("least_recent", "least_used")


def _default_client() -> ductile.Client:
    from ductile import torch as dt  # ductile.torch imports this module

    return dt.client()


def _check_ids(ids: torch.Tensor, what: str) -> torch.Tensor:
    if not isinstance(ids, torch.Tensor):
        ids = torch.as_tensor(ids)
    if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise TypeError(f"{what} must be an integer tensor (torch.int64), not {ids.dtype}")
    if ids.device.type != "cpu":
        raise ValueError(f"{what} must be on the CPU, not {ids.device}")
    return ids.to(torch.int64).contiguous()


def _row_policy(eviction: Optional[str] = None, **fields: Optional[int]) -> dict:
    """The `rows` table option of the fields given (not None), each checked:
    an int (not a bool), non-negative; eviction one of _EVICTIONS."""
    policy = {}
    if eviction is not None:
        if eviction not in _EVICTIONS:
            raise ValueError(f"eviction must be one of {', '.join(_EVICTIONS)}, "
                             f"not {eviction!r}")
        policy["eviction"] = eviction
    for name, value in fields.items():
        if value is None:
            continue
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise TypeError(f"{name} must be an integer, not {value!r}")
        if value < 0:
            raise ValueError(f"{name} must be >= 0, not {value}")
        policy[name] = int(value)
    return policy


def _recovering(client: ductile.Client, call: Any) -> Any:
    """call(), with a rollback that fails it taken (every optimizer and
    sampler of `client` restored, _elastic.recover) and call() made again;
    the step under way is then abandoned: its gradients, of two timelines,
    are not pushed (its batch is handed out again). The job's shutdown
    raises LeftJob."""
    for _ in range(_elastic.MAX_ROLLBACKS_IN_A_ROW):
        try:
            with _elastic.stops_at_shutdown(client):
                return call()
        except _elastic.RECOVERABLE as error:
            _elastic.recover(client, error)  # raises `error` if no rollback explains it
            _elastic.abandon_step(client)
    with _elastic.stops_at_shutdown(client):
        return call()


class _RowLookup(torch.autograd.Function):
    """rows = the table's rows of `ids` (shape ids.shape + (width,)); the
    backward pass pushes d(loss)/d(rows) and gives no gradient to torch."""

    @staticmethod
    def forward(ctx, anchor: torch.Tensor, client: ductile.Client, table: Any,
                ids: torch.Tensor) -> torch.Tensor:
        ctx.client, ctx.table = client, table
        ctx.save_for_backward(ids)
        rows = torch.empty(tuple(ids.shape) + (table.width,), dtype=torch.float32)
        _recovering(client, lambda: client.pull_rows(table, ids.numpy(), out=rows.numpy()))
        return rows

    @staticmethod
    def backward(ctx, grad_rows: torch.Tensor):
        (ids,) = ctx.saved_tensors
        if _elastic.step_abandoned(ctx.client):
            return None, None, None, None  # a rollback came midway
        grads = grad_rows.detach().to(torch.float32).contiguous()
        with _elastic.stops_at_shutdown(ctx.client):  # backward() raises it
            try:
                # The handle keeps ids and grads alive until the push is sent.
                handle = ctx.client.push_rows_async(ctx.table, ids.numpy(), grads.numpy())
                _elastic.note_push(ctx.client, handle)
            except _elastic.RECOVERABLE as error:  # a rollback: step() takes it
                _elastic.note_failed_push(ctx.client, error)
        return None, None, None, None


def wait_pushes(client: Optional[ductile.Client] = None) -> None:
    """Waits until every row gradient the backward passes of Embedding and
    EmbeddingBag pushed through `client` (default: ductile.torch's) has
    reached the servers; raises the first push's error once all are done.
    DistributedOptimizer.step() calls it; a loop without one calls it
    before Client.clock()."""
    client = client if client is not None else _default_client()
    with _elastic.stops_at_shutdown(client):
        _elastic.wait_pushes(client)
    _elastic.end_step(client)  # the step's end: the next one pushes


class Embedding(torch.nn.Module):
    """A lookup table of `embedding_dim`-float rows by 64-bit id, held on the
    servers (torch.nn.Embedding's forward: ids of any shape in, rows of shape
    ids.shape + (embedding_dim,) out).

    num_embeddings: the vocabulary size, or None: any non-negative id (a
    hashed feature, say) is a row. When given, ids outside [0,
    num_embeddings) raise IndexError, as torch's do.
    table: a ductile.Table of width embedding_dim (Client.create_table), or
    the name of one to create (or get, if it exists with equal options)
    with **table_options (rule, learning_rate, init, consistency, ...; see
    Client.create_table; default rule "sgd").
    client: the client (default: the one ductile.torch.init() connected).
    admit_after_pushes, admission_counters, evict_idle_clocks, max_rows,
    eviction: the table's row policy (the fields of create_table's `rows`
    dict), for a table given by name: store a row only at the N-th push of
    its id (until then its gradients are dropped and it reads the
    initializer), remove rows not updated for T clocks, keep at most this
    many rows per server, removing beyond it the least recently updated
    (eviction="least_recent") or those pushed the fewest times ("least_used":
    counted for every id, stored or not, in a sketch that ages; popular rows
    stay when a step touches more rows than the budget). Non-negative
    integers and a name;
    None (the default) leaves the field off.

        emb = dt.EmbeddingBag(None, 16, table="ads", mode="sum",
                              admit_after_pushes=2, max_rows=1_000_000)

    The servers update the rows with the table's rule from each backward
    pass's gradients; a repeated id's gradients are summed and applied once.
    """

    def __init__(self, num_embeddings: Optional[int], embedding_dim: int, *,
                 table: Union[str, Any], client: Optional[ductile.Client] = None,
                 admit_after_pushes: Optional[int] = None,
                 admission_counters: Optional[int] = None,
                 evict_idle_clocks: Optional[int] = None, max_rows: Optional[int] = None,
                 eviction: Optional[str] = None, **table_options: Any):
        super().__init__()
        policy = _row_policy(admit_after_pushes=admit_after_pushes,
                             admission_counters=admission_counters,
                             evict_idle_clocks=evict_idle_clocks, max_rows=max_rows,
                             eviction=eviction)
        if policy:
            if "rows" in table_options:
                raise TypeError("give the row policy as rows={...} or as keywords "
                                f"({', '.join(_ROW_POLICY)}), not both")
            table_options["rows"] = policy
        if num_embeddings is not None and num_embeddings <= 0:
            raise ValueError(f"num_embeddings must be positive or None, not {num_embeddings}")
        if embedding_dim <= 0:
            raise ValueError(f"embedding_dim must be positive, not {embedding_dim}")
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.client = client if client is not None else _default_client()
        if isinstance(table, str):
            table_options.setdefault("rule", "sgd")
            table = self.client.create_table(table, width=embedding_dim, **table_options)
        elif table_options:
            raise TypeError("table options are for a table given by name, not "
                            f"{sorted(table_options)} with a ductile.Table")
        if table.width != embedding_dim:
            raise ValueError(f"table {table.name} has rows of {table.width} floats, "
                             f"not embedding_dim={embedding_dim}")
        self.table = table
        # Gives the lookup an input that requires grad, so that autograd
        # calls its backward (which pushes); it never gets a gradient.
        self._anchor = torch.empty(0, requires_grad=True)

    def _rows(self, ids: torch.Tensor) -> torch.Tensor:
        # The last backward pass's pushes (if no step() waited for them).
        _recovering(self.client, lambda: _elastic.wait_pushes(self.client))
        if self.num_embeddings is not None and ids.numel() > 0:
            low, high = int(ids.min()), int(ids.max())
            if low < 0 or high >= self.num_embeddings:
                raise IndexError(f"id {low if low < 0 else high} is out of range "
                                 f"[0, {self.num_embeddings}) of table {self.table.name}")
        if not torch.is_grad_enabled():
            rows = torch.empty(tuple(ids.shape) + (self.embedding_dim,))
            _recovering(self.client,
                        lambda: self.client.pull_rows(self.table, ids.numpy(), out=rows.numpy()))
            return rows
        return _RowLookup.apply(self._anchor, self.client, self.table, ids)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self._rows(_check_ids(ids, "ids"))

    def extra_repr(self) -> str:
        return (f"{self.num_embeddings}, {self.embedding_dim}, table={self.table.name!r}, "
                f"rule={self.table.options.get('rule')!r}")


class EmbeddingBag(Embedding):
    """Sums or averages (mode="sum" | "mean") the rows of each bag of ids, as
    torch.nn.EmbeddingBag does, with its rows on the servers (see Embedding
    for num_embeddings, table and client).

    forward(ids, offsets=None): ids of shape (B, N) are B bags of N ids;
    1-D ids with `offsets` (B starts into ids, ascending, the first 0) are B
    bags of any sizes, an empty bag giving zeros. Returns (B, embedding_dim).
    """

    def __init__(self, num_embeddings: Optional[int], embedding_dim: int, *,
                 table: Union[str, Any], mode: str = "mean",
                 client: Optional[ductile.Client] = None, **table_options: Any):
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {', '.join(_MODES)}, not {mode!r}")
        # The row policy's keywords (admit_after_pushes, ...) pass through
        # table_options to Embedding.
        super().__init__(num_embeddings, embedding_dim, table=table, client=client,
                         **table_options)
        self.mode = mode

    def forward(self, ids: torch.Tensor, offsets: Optional[torch.Tensor] = None) -> torch.Tensor:
        ids = _check_ids(ids, "ids")
        if offsets is None:
            if ids.dim() != 2:
                raise ValueError(f"ids must be 2-D (bags, ids per bag) without offsets, "
                                 f"not of shape {tuple(ids.shape)}")
            rows = self._rows(ids)
            return rows.sum(dim=1) if self.mode == "sum" else rows.mean(dim=1)
        if ids.dim() != 1:
            raise ValueError(f"ids must be 1-D with offsets, not of shape {tuple(ids.shape)}")
        offsets = _check_ids(offsets, "offsets")
        if offsets.dim() != 1:
            raise ValueError(f"offsets must be 1-D, not of shape {tuple(offsets.shape)}")
        bags = len(offsets)
        bounds = torch.cat([offsets, torch.tensor([len(ids)])])
        sizes = bounds[1:] - bounds[:-1]
        if bags > 0 and (int(offsets[0]) != 0 or bool((sizes < 0).any()) or
                         int(offsets[-1]) > len(ids)):
            raise ValueError("offsets must ascend from 0 and stay within ids")
        rows = self._rows(ids)
        bag_of = torch.repeat_interleave(torch.arange(bags), sizes)
        out = torch.zeros(bags, self.embedding_dim).index_add(0, bag_of, rows)
        if self.mode == "mean":
            out = out / sizes.clamp(min=1).unsqueeze(1).to(out.dtype)
        return out

    def extra_repr(self) -> str:
        return super().extra_repr() + f", mode={self.mode!r}"
