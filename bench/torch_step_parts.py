#!/usr/bin/python3
"""Where a DistributedOptimizer step's time goes: the MLP of
examples/torch/mlp.py (or --model=cnn, examples/torch/cnn.py) trained with
each part timed, by each worker of the job.

Run as a ductile worker, once per bucket_bytes:

    for b in 4194304 0; do
      PYTHONPATH=build/python build/ductile local --servers=1 --workers=1 -- \\
          /usr/bin/python3 bench/torch_step_parts.py --bucket_bytes=$b
    done

Prints the median over the steps after --warmup of: forward and backward
("fwd+bwd", the pushes from the hooks included), the pushes ("push": the
copies into the bucket and the send, one line per push), step() ("step"),
and within it the wait for the pushes ("wait pushes"), the clock ("clock")
and the pulls with the add into the parameters ("pull").
"""

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch

import ductile.torch as dt

ROOT = Path(__file__).resolve().parents[1]


def timed(times, f):
    def call(*args, **kwargs):
        start = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            times.append(time.perf_counter() - start)
    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    parser.add_argument("--bucket_bytes", type=int, default=4 << 20)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--data_dir", type=Path, default=Path("/usr/share/datasets/fashion-mnist"))
    args = parser.parse_args()
    spec = importlib.util.spec_from_file_location(
        args.model, ROOT / "examples" / "torch" / f"{args.model}.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    torch.set_num_threads(1)
    dt.init()
    train = example.load(args.data_dir, "train")
    x, y = train.tensors if args.model == "cnn" else train
    model = example.make_model()
    optimizer = dt.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.001),
                                        model.named_parameters(),
                                        bucket_bytes=args.bucket_bytes)
    parts = {name: [] for name in ("fwd+bwd", "push", "step", "wait pushes", "clock", "pull")}
    optimizer.synchronize = timed(parts["wait pushes"], optimizer.synchronize)
    optimizer._pull = timed(parts["pull"], optimizer._pull)
    optimizer._push = timed(parts["push"], optimizer._push)
    client = optimizer.client

    class TimedClock:
        clock = staticmethod(timed(parts["clock"], client.clock))

        def __getattr__(self, name):
            return getattr(client, name)

    optimizer.client = TimedClock()
    n = len(x) - len(x) % args.batch_size
    for i in range(args.steps):
        batch = slice((args.batch_size * i) % n, (args.batch_size * i) % n + args.batch_size)
        start = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
        middle = time.perf_counter()
        optimizer.step()
        parts["fwd+bwd"].append(middle - start)
        parts["step"].append(time.perf_counter() - middle)
    pushes = len(parts["push"]) // args.steps
    print(f"worker {dt.rank()}, bucket_bytes={args.bucket_bytes}: "
          f"{len(optimizer._buckets)} tensors, "
          f"medians over steps {args.warmup}-{args.steps}:")
    for name, times in parts.items():
        skip = args.warmup * (pushes if name == "push" else 1)
        print(f"  {name:<12} {statistics.median(times[skip:]) * 1000:.3f} ms"
              + (f" (each of {pushes})" if name == "push" and pushes > 1 else ""))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
