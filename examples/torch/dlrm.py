"""A DLRM-style click-through model (Naumov et al. 2019) trained with
ductile: the 26 categorical features' embeddings live on the servers, in one
table of rows by id shared by the features (ductile.torch.Embedding; feature
f's id i is the row (f << 40) | i, so the vocabulary may be any size and
each step pulls and pushes one batch of rows); a bottom MLP embeds the 13
dense features, the pairwise dot products of the 27 vectors and the dense
vector go to a top MLP, and DistributedOptimizer trains both MLPs on the
servers. The data is ductile.clicks.SyntheticClicks, whose labels come from
a planted logistic model, so the test AUC has a ceiling: the planted
model's AUC, printed next to it.

    # every worker of a job the launcher started:
    ductile local --servers=2 --workers=2 -- /usr/bin/python3 examples/torch/dlrm.py
    # or against a coordinator started by hand:
    /usr/bin/python3 examples/torch/dlrm.py --coordinator=tcp://127.0.0.1:7000

The job's first workers wait for each other at the start (under BSP a
worker alone would train its first steps without the others), then share
the training batches through the job's data plan (ElasticSampler): every
batch is trained once, however workers join (`ductile local
--resize_schedule`), are drained or killed, and across rollbacks. A worker
that joins later starts at the job's clock, with the rows and parameters
as they are then. Each prints its loss every --log_every steps and, at the
end, how many batches it trained and "test auc X planted auc Y" (a worker
that left the job early prints only its batches: the rows are the job's).
"""

import argparse
import os
import time
from typing import List, Optional

import numpy as np
import torch

import ductile.torch as dt  # ductile
from ductile.clicks import NUM_DENSE, NUM_SPARSE, SyntheticClicks, auc

FEATURE_SHIFT = 40  # feature f's ids are rows (f << 40) | id


def mlp(sizes: List[int], last_activation: bool) -> torch.nn.Sequential:
    layers: List[torch.nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2 or last_activation:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class DLRM(torch.nn.Module):
    """Bottom MLP on the dense features, `embedding` (ids (B, 26) -> rows (B,
    26, dim)) for the categorical ones, the dot products of every pair of
    the 27 vectors next to the dense vector, a top MLP to one logit."""

    def __init__(self, embedding: torch.nn.Module, dim: int, bottom: List[int], top: List[int]):
        super().__init__()
        self.embedding = embedding
        self.bottom = mlp([NUM_DENSE] + bottom + [dim], last_activation=True)
        vectors = NUM_SPARSE + 1
        self.pairs = torch.triu_indices(vectors, vectors, offset=1)
        self.top = mlp([dim + self.pairs.shape[1]] + top + [1], last_activation=False)

    def forward(self, dense: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        vectors = torch.cat([x.unsqueeze(1), self.embedding(ids)], dim=1)
        dots = torch.bmm(vectors, vectors.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([x, dots], dim=1)).squeeze(1)


def start_together(client, timeout_s: float = 60.0) -> int:
    """Waits until the job's initial workers (DUCTILE_WORKERS, set by the
    launcher; else those registered when this one connected) are all live,
    so that under BSP none trains its first steps alone, and returns their
    number."""
    workers = int(os.environ.get("DUCTILE_WORKERS", "0")) or client.num_workers
    deadline = time.monotonic() + timeout_s
    while len(client.live_workers) < workers:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(client.live_workers)} of {workers} workers joined "
                               f"within {timeout_s} s")
        time.sleep(0.05)
    client.barrier()
    return workers


def row_ids(sparse: np.ndarray) -> torch.Tensor:
    """Feature f's id i as the shared table's row (f << 40) | i."""
    features = np.arange(NUM_SPARSE, dtype=np.int64) << FEATURE_SHIFT
    return torch.from_numpy(sparse | features)


def evaluate(model: DLRM, data: SyntheticClicks, samples: int, ids_of=row_ids,
             chunk: int = 8192) -> tuple:
    """(the model's AUC, the planted model's AUC) on `samples` of the test
    split."""
    test = data.batch(0, samples, split="test")
    scores = np.empty(samples, dtype=np.float32)
    with torch.no_grad():
        for begin in range(0, samples, chunk):
            end = min(begin + chunk, samples)
            scores[begin:end] = model(torch.from_numpy(test.dense[begin:end]),
                                      ids_of(test.sparse[begin:end])).numpy()
    return auc(test.labels, scores), auc(test.labels, data.logits(test))


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--coordinator", help="the coordinator's address (default: the environment's)")
    parser.add_argument("--vocab", type=int, default=10000, help="ids per categorical feature")
    parser.add_argument("--zipf", type=float, default=1.05, help="the ids' Zipf exponent")
    parser.add_argument("--seed", type=int, default=1, help="the data's and the model's seed")
    parser.add_argument("--train_samples", type=int, default=300000)
    parser.add_argument("--test_samples", type=int, default=20000)
    parser.add_argument("--batch_size", type=int, default=256, help="samples per batch (each worker's step)")
    parser.add_argument("--dim", type=int, default=16, help="embedding width")
    parser.add_argument("--lr", type=float, default=0.001, help="Adam's, for the MLPs")
    parser.add_argument("--emb_lr", type=float, default=0.05, help="the rows' AdaGrad's")
    parser.add_argument("--consistency", default="bsp", help="bsp, ssp:K or async")
    parser.add_argument("--admit_after_pushes", type=int, default=0,
                        help="store a row at the N-th push of its id (0: the first)")
    parser.add_argument("--evict_idle_clocks", type=int, default=0,
                        help="remove rows not updated for this many steps (0: never)")
    parser.add_argument("--max_rows", type=int, default=0,
                        help="rows per server, the rest removed by --eviction (0: no limit)")
    parser.add_argument("--eviction", default="least_recent", choices=("least_recent", "least_used"),
                        help="which rows --max_rows removes: the least recently updated, or "
                             "the least pushed (counted for every id, evicted or not)")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--log_every", type=int, default=100, help="steps between loss lines")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    connect = {"address": args.coordinator} if args.coordinator else {}  # ductile
    client = dt.init(**connect)  # ductile
    rank = dt.rank()  # ductile
    if client.current_clock == 0:  # ductile: the job's first workers, not a joiner
        start_together(client)
    data = SyntheticClicks(args.vocab, zipf_exponent=args.zipf, seed=args.seed)

    torch.manual_seed(args.seed)
    embedding = dt.Embedding(  # ductile: the rows live on the servers
        None, args.dim, table="dlrm.embeddings", rule="adagrad", learning_rate=args.emb_lr,
        init={"kind": "normal", "stddev": 0.01, "seed": args.seed}, consistency=args.consistency,
        admit_after_pushes=args.admit_after_pushes, evict_idle_clocks=args.evict_idle_clocks,
        max_rows=args.max_rows, eviction=args.eviction)
    model = DLRM(embedding, args.dim, bottom=[64], top=[64, 32])
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    optimizer = dt.DistributedOptimizer(optimizer, model.named_parameters(),  # ductile
                                        consistency=args.consistency, name="dlrm")
    loss_fn = torch.nn.BCEWithLogitsLoss()

    # ductile: batch i of the plan is the data's batch i (in order: shuffle=False)
    sampler = dt.ElasticSampler(args.train_samples, args.batch_size, shuffle=False)
    losses: List[float] = []
    start = time.monotonic()
    for step, indices in enumerate(sampler):
        batch = data.batch(indices[0] // args.batch_size, args.batch_size)
        optimizer.zero_grad()
        logits = model(torch.from_numpy(batch.dense), row_ids(batch.sparse))
        loss = loss_fn(logits, torch.from_numpy(batch.labels))
        loss.backward()  # pushes the rows' gradients
        optimizer.step()  # ductile: the MLPs' step, and the clock of both
        losses.append(loss.item())
        dt.report(loss=losses[-1])  # ductile: for status and policies (the sampler counts samples)
        if (step + 1) % args.log_every == 0:
            print(f"worker {rank} step {step + 1} loss {np.mean(losses[-args.log_every:]):.4f} "
                  f"{(step + 1) * args.batch_size / (time.monotonic() - start):.0f} samples/s",
                  flush=True)
    print(f"worker {rank} trained {len(sampler.trained)} batches", flush=True)  # ductile
    if sampler.left:  # ductile: drained; the rows are the job's, no longer this worker's to read
        return
    model_auc, planted_auc = evaluate(model, data, args.test_samples)
    print(f"test auc {model_auc:.4f} planted auc {planted_auc:.4f}", flush=True)


if __name__ == "__main__":
    main()
