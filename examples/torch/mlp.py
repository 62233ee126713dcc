"""The built-in fmnist-mlp app (784-256-128-10, ReLU, Adam 0.001, batches of
64) as an ordinary torch script; the lines marked "ductile" make it a worker.

    # every worker of a job the launcher started (it sets DUCTILE_COORDINATOR):
    /usr/bin/python3 examples/torch/mlp.py --epochs=1
    # or against a coordinator started by hand:
    /usr/bin/python3 examples/torch/mlp.py --coordinator=tcp://127.0.0.1:7000

The workers share each epoch through the job's data plan (ElasticSampler:
every batch trained once, across joins, drains and rollbacks); each prints
how many batches it trained and the test accuracy at the end.
"""

import argparse
import gzip
from pathlib import Path

import numpy as np
import torch

import ductile.torch as dt  # ductile


def idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir: Path, split: str):
    images = idx(data_dir / f"{split}-images-idx3-ubyte.gz").reshape(-1, 784)
    labels = idx(data_dir / f"{split}-labels-idx1-ubyte.gz")
    return torch.from_numpy(images.astype(np.float32) / 255), torch.from_numpy(labels.astype(np.int64))


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--coordinator", help="the coordinator's address (default: the environment's)")
    parser.add_argument("--data_dir", type=Path, default=Path("/usr/share/datasets/fashion-mnist"))
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--train_samples", type=int, default=None, help="train on the first N samples only")
    args = parser.parse_args()

    x, y = load(args.data_dir, "train")
    if args.train_samples is not None:
        x, y = x[: args.train_samples], y[: args.train_samples]
    test_x, test_y = load(args.data_dir, "t10k")
    # The data first: from init() on this worker is in the job, and under BSP
    # the others wait for its pushes.
    connect = {"address": args.coordinator} if args.coordinator else {}  # ductile
    dt.init(**connect)  # ductile

    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    optimizer = dt.DistributedOptimizer(optimizer, model.named_parameters())  # ductile

    sampler = dt.ElasticSampler(len(x), args.batch_size, args.epochs)  # ductile
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_sampler=sampler)  # ductile
    for epoch in range(args.epochs):
        for step, (batch_x, batch_y) in enumerate(loader):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(batch_x), batch_y)
            loss.backward()
            optimizer.step()
            dt.report(loss=loss)  # ductile: the loss in status and for the policies
            if step % 100 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
    with torch.no_grad():
        accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
    print(f"worker {dt.rank()} trained {len(sampler.trained)} batches", flush=True)  # ductile
    print(f"test accuracy {accuracy:.4f}", flush=True)


if __name__ == "__main__":
    main()
