"""A CNN on Fashion-MNIST (two convolutions, two dense layers; Adam 0.001,
batches of 64) as an ordinary torch script; the four lines marked "ductile"
make it a worker of a ductile job (a fifth, optional, reports the loss for
`ductile status` and the policies), run by the launcher as each worker:

    PYTHONPATH=build/python build/ductile local --servers=2 --workers=2 -- \\
        /usr/bin/python3 examples/torch/cnn.py --epochs=1

The workers share each epoch through the job's data plan (ElasticSampler),
the servers run Adam on the parameters (DistributedOptimizer, BSP), and each
worker prints the test accuracy at each epoch's end. torch's intra-op
threads are set explicitly (--threads, default 1: one per worker, for
several workers on a small machine).
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


def load(data_dir: Path, split: str) -> torch.utils.data.TensorDataset:
    images = idx(data_dir / f"{split}-images-idx3-ubyte.gz").reshape(-1, 1, 28, 28)
    labels = idx(data_dir / f"{split}-labels-idx1-ubyte.gz")
    return torch.utils.data.TensorDataset(
        torch.from_numpy(images.astype(np.float32) / 255), torch.from_numpy(labels.astype(np.int64))
    )


def accuracy(model: torch.nn.Module, test: torch.utils.data.TensorDataset) -> float:
    x, y = test.tensors
    with torch.no_grad():
        return (model(x).argmax(1) == y).float().mean().item()


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 7 * 7, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data_dir", type=Path, default=Path("/usr/share/datasets/fashion-mnist"))
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--train_samples", type=int, default=None, help="train on the first N samples only")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    train, test = load(args.data_dir, "train"), load(args.data_dir, "t10k")
    dt.init()  # ductile
    if args.train_samples is not None:
        train = torch.utils.data.TensorDataset(*(t[: args.train_samples] for t in train.tensors))
    model = make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    optimizer = dt.DistributedOptimizer(optimizer, model.named_parameters())  # ductile
    loader = torch.utils.data.DataLoader(train, batch_sampler=dt.ElasticSampler(len(train), args.batch_size, args.epochs))  # ductile

    for epoch in range(args.epochs):
        for step, (x, y) in enumerate(loader):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            dt.report(loss=loss)  # ductile: the loss in status and for the policies
            if step % 100 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
        print(f"epoch {epoch} test accuracy {accuracy(model, test):.4f}", flush=True)


if __name__ == "__main__":
    main()
