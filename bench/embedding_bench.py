"""The DLRM of examples/torch/dlrm.py on ductile.clicks.SyntheticClicks,
trained two ways, at several vocabulary sizes:

  ductile: `ductile local --servers=2 --workers=W`, the rows on the servers
           (ductile.torch.Embedding, one table of rows by id, AdaGrad there;
           the MLPs through DistributedOptimizer, Adam, BSP);
  ddp:     W processes of torch DistributedDataParallel (gloo), each holding
           the whole table as a dense nn.EmbeddingBag (dense gradients,
           all-reduced whole every step; AdaGrad on the workers).
  ddp-sparse: the same with nn.EmbeddingBag(sparse=True): each step's
           table gradient is sparse (the batch's rows), all-reduced by
           gloo's sparse all-reduce (an all-gather of the rows); AdaGrad
           steps only those rows. Each worker still holds the whole table.

Each run trains --steps steps of --batch_size samples per worker (the first
--warmup not timed) and reports, per run: the median step time (the
slowest worker's median), samples/s over the workers, the workers' peak RSS
(VmHWM, the largest), the servers' RSS at the end (ductile), and the test
AUC after the steps (with the planted model's). The two systems' runs
alternate, --repeats times each per size; the summary quotes medians over
the repeats. Every worker sets torch.set_num_threads(--threads).

    /usr/bin/python3 bench/embedding_bench.py --vocabs=100000,1000000 \\
        --workers=2 --steps=200 --repeats=3 --csv=/tmp/embedding_bench.csv

--vocabs are total rows (split evenly over the 26 features). The same file
is the worker (--role=ductile|ddp), started by the driver.

With --fill (ductile only, with --emb_consistency=async) the workers first
store every row of the vocabulary (a zero gradient pushed for each id, in
calls of --fill_chunk ids), so that the steps run against the table at its
full size, as after long training; the CSV adds the fill's seconds and its
slowest call. The largest table this machine holds:

    /usr/bin/python3 bench/embedding_bench.py --systems=ductile \\
        --vocabs=60000000 --steps=20 --warmup=5 --repeats=1 --fill \\
        --emb_consistency=async
"""

import argparse
import csv
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

SOURCE_DIR = Path(__file__).resolve().parents[1]
FIELDS = ["system", "vocab", "workers", "repeat", "steps", "batch_size", "step_ms",
          "samples_per_s", "worker_rss_mb", "server_rss_mb", "auc", "planted_auc", "wall_s",
          "fill_s", "fill_slowest_push_s", "status"]


def rss_mb(pid: str = "self", field: str = "VmHWM") -> float:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


# ---- Workers.

def run_worker(args: argparse.Namespace) -> None:
    import numpy as np
    import torch

    sys.path.insert(0, str(SOURCE_DIR / "examples" / "torch"))
    import dlrm
    from ductile.clicks import NUM_SPARSE, SyntheticClicks

    torch.set_num_threads(args.threads)
    per_feature = max(1, args.vocab // NUM_SPARSE)
    data = SyntheticClicks(per_feature, seed=args.seed)
    torch.manual_seed(args.seed)
    if args.role == "ductile":
        import ductile.torch as dt

        client = dt.init()
        rank, workers = dt.rank(), dlrm.start_together(client)
        embedding = dt.Embedding(None, args.dim, table="bench.embeddings", rule="adagrad",
                                 learning_rate=args.emb_lr,
                                 init={"kind": "normal", "stddev": 0.01, "seed": args.seed},
                                 consistency=args.emb_consistency)
        fill_s, fill_slowest_s = fill_rows(client, embedding.table, per_feature, rank,
                                           workers, args)
        ids_of = dlrm.row_ids
        model = dlrm.DLRM(embedding, args.dim, bottom=[64], top=[64, 32])
        optimizer = dt.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=args.lr),
                                            model.named_parameters(), name="bench")
        step_fn = optimizer.step
        zero = optimizer.zero_grad
    else:
        fill_s, fill_slowest_s = 0.0, 0.0
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, workers = dist.get_rank(), dist.get_world_size()
        offsets = torch.arange(NUM_SPARSE, dtype=torch.int64) * per_feature

        class DenseTable(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.bag = torch.nn.EmbeddingBag(per_feature * NUM_SPARSE, args.dim, mode="sum",
                                                 sparse=args.role == "ddp-sparse")
                torch.nn.init.normal_(self.bag.weight, std=0.01)

            def forward(self, ids):
                flat = ids.reshape(-1)
                bags = self.bag(flat, torch.arange(flat.numel()))
                return bags.reshape(ids.shape[0], ids.shape[1], args.dim)

        local = dlrm.DLRM(DenseTable(), args.dim, bottom=[64], top=[64, 32])
        model = torch.nn.parallel.DistributedDataParallel(local)
        ids_of = lambda sparse: torch.from_numpy(sparse) + offsets  # noqa: E731
        adam = torch.optim.Adam(list(local.bottom.parameters()) + list(local.top.parameters()),
                                lr=args.lr)
        adagrad = torch.optim.Adagrad(local.embedding.parameters(), lr=args.emb_lr)

        def step_fn():
            adam.step()
            adagrad.step()

        def zero():
            adam.zero_grad()
            adagrad.zero_grad()

    loss_fn = torch.nn.BCEWithLogitsLoss()
    times: List[float] = []
    for step in range(args.steps):
        batch = data.batch(rank + step * workers, args.batch_size)
        begin = time.perf_counter()
        zero()
        loss = loss_fn(model(torch.from_numpy(batch.dense), ids_of(batch.sparse)),
                       torch.from_numpy(batch.labels))
        loss.backward()
        step_fn()
        if step >= args.warmup:
            times.append(time.perf_counter() - begin)
    worker_rss = rss_mb()
    evaluated = model if args.role == "ductile" else model.module
    model_auc, planted_auc = dlrm.evaluate(evaluated, data, args.test_samples, ids_of=ids_of)
    result = {"rank": rank, "step_ms": 1000 * statistics.median(times), "rss_mb": worker_rss,
              "auc": model_auc, "planted_auc": planted_auc, "fill_s": fill_s,
              "fill_slowest_push_s": fill_slowest_s}
    with open(os.path.join(args.result_dir, f"{args.role}.{rank}.json"), "w") as f:
        json.dump(result, f)
    if args.role != "ductile":
        dist.barrier()
        dist.destroy_process_group()


def fill_rows(client, table, per_feature: int, rank: int, workers: int,
              args: argparse.Namespace) -> Tuple[float, float]:
    """With --fill, stores every row of the vocabulary before the steps (a
    zero gradient pushed for each id creates its row from the initializer):
    the table at its full size, as after long training. This worker pushes
    its share of each feature's ids (the workers split them evenly, so that
    they finish together whatever --fill_chunk is), --fill_chunk ids a call,
    and prints its progress after each feature. Returns the seconds it took
    and the slowest call's ((0, 0) without --fill)."""
    if not args.fill:
        return 0.0, 0.0
    import numpy as np
    from ductile.clicks import NUM_SPARSE
    import dlrm

    begin = time.perf_counter()
    grads = np.zeros((args.fill_chunk, args.dim), dtype=np.float32)
    done, slowest, slowest_here = 0, 0.0, 0.0
    for feature in range(NUM_SPARSE):
        first = feature << dlrm.FEATURE_SHIFT
        share_end = (rank + 1) * per_feature // workers
        for start in range(rank * per_feature // workers, share_end, args.fill_chunk):
            ids = np.arange(first + start, first + min(start + args.fill_chunk, share_end),
                            dtype=np.int64)
            call = time.perf_counter()
            client.push_rows(table, ids, grads[: len(ids)])
            slowest_here = max(slowest_here, time.perf_counter() - call)
            done += len(ids)
        print(f"worker {rank}: filled feature {feature + 1} of {NUM_SPARSE} "
              f"({done} rows, {time.perf_counter() - begin:.1f} s, slowest push "
              f"{slowest_here:.2f} s)", flush=True)
        slowest, slowest_here = max(slowest, slowest_here), 0.0
    return time.perf_counter() - begin, slowest


# ---- The driver.

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_args(args: argparse.Namespace, role: str, vocab: int, result_dir: str) -> List[str]:
    return [sys.executable, str(Path(__file__).resolve()), f"--role={role}", f"--vocab={vocab}",
            f"--steps={args.steps}", f"--warmup={args.warmup}", f"--batch_size={args.batch_size}",
            f"--dim={args.dim}", f"--threads={args.threads}", f"--seed={args.seed}",
            f"--test_samples={args.test_samples}", f"--lr={args.lr}", f"--emb_lr={args.emb_lr}",
            f"--result_dir={result_dir}", f"--emb_consistency={args.emb_consistency}",
            f"--fill_chunk={args.fill_chunk}"] + (["--fill"] if args.fill else [])


def server_rss(pids: List[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if len(cmd) > 1 and cmd[1] == b"server":
            total = max(total, rss_mb(str(pid), "VmRSS"))
    return total


def children_of(pid: int) -> List[int]:
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        try:
            kids = open(f"/proc/{p}/task/{p}/children").read().split()
        except OSError:
            continue
        for k in kids:
            found.append(int(k))
            frontier.append(int(k))
    return found


def run_once(args: argparse.Namespace, system: str, vocab: int, repeat: int) -> Dict:
    row = {"system": system, "vocab": vocab, "workers": args.workers, "repeat": repeat,
           "steps": args.steps, "batch_size": args.batch_size, "server_rss_mb": ""}
    with tempfile.TemporaryDirectory(prefix="embedding_bench.") as result_dir:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(args.python_path) + os.pathsep + env.get("PYTHONPATH", "")
        start = time.monotonic()
        peak_server = 0.0
        if system == "ductile":
            cmd = [str(args.ductile), "local", "--servers=2", f"--workers={args.workers}",
                   "--"] + worker_args(args, "ductile", vocab, result_dir)
            procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT)]
        else:
            env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                       WORLD_SIZE=str(args.workers))
            procs = [subprocess.Popen(worker_args(args, system, vocab, result_dir),
                                      env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT)
                     for r in range(args.workers)]
        outputs = []
        status = "ok"
        for p in procs:
            while p.poll() is None:  # samples the servers' RSS meanwhile
                if system == "ductile":
                    peak_server = max(peak_server, server_rss(children_of(p.pid)))
                if time.monotonic() - start > args.run_timeout_s:
                    p.kill()
                    status = "timeout"
                time.sleep(0.5)
            outputs.append(p.stdout.read().decode(errors="replace"))
            if p.returncode != 0 and status == "ok":
                status = f"exit {p.returncode}"
        row["wall_s"] = round(time.monotonic() - start, 1)
        results = [json.load(open(os.path.join(result_dir, f)))
                   for f in sorted(os.listdir(result_dir))]
    if len(results) != args.workers:
        row["status"] = status if status != "ok" else "no result"
        sys.stderr.write(f"{system} vocab {vocab}: {row['status']}\n{outputs[-1][-2000:]}\n")
        return row
    step_ms = max(r["step_ms"] for r in results)
    row.update(step_ms=round(step_ms, 2),
               samples_per_s=round(args.workers * args.batch_size / (step_ms / 1000), 0),
               worker_rss_mb=round(max(r["rss_mb"] for r in results), 0),
               auc=round(results[0]["auc"], 4), planted_auc=round(results[0]["planted_auc"], 4),
               fill_s=round(max(r["fill_s"] for r in results), 1),
               fill_slowest_push_s=round(max(r["fill_slowest_push_s"] for r in results), 2),
               status=status)
    if system == "ductile":
        row["server_rss_mb"] = round(peak_server, 0)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=["driver", "ductile", "ddp", "ddp-sparse"],
                        default="driver")
    parser.add_argument("--vocabs", default="100000,1000000", help="total rows, comma-separated")
    parser.add_argument("--vocab", type=int, default=100000, help="(worker) total rows")
    parser.add_argument("--systems", default="ductile,ddp",
                        help="of ductile, ddp, ddp-sparse, comma-separated")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch_size", type=int, default=256, help="per worker")
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per worker")
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--emb_lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--test_samples", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--run_timeout_s", type=float, default=1200)
    parser.add_argument("--csv", default="-", help="where the rows go (-: stdout)")
    parser.add_argument("--ductile", type=Path, default=SOURCE_DIR / "build" / "ductile")
    parser.add_argument("--python_path", type=Path, default=SOURCE_DIR / "build" / "python")
    parser.add_argument("--result_dir", help="(worker) where to write its result")
    parser.add_argument("--fill", action="store_true",
                        help="(ductile) store every row of the vocabulary before the steps")
    parser.add_argument("--fill_chunk", type=int, default=1 << 18, help="rows per push of --fill")
    parser.add_argument("--emb_consistency", default="bsp",
                        help="(ductile) the rows' table's consistency: bsp, ssp:K or async "
                        "(async for --fill: under BSP a clock's pushes are held until it ends)")
    args = parser.parse_args()
    if args.warmup >= args.steps:
        parser.error("--warmup must be below --steps")
    if args.fill and args.emb_consistency == "bsp":
        parser.error("--fill needs --emb_consistency=async or ssp:K (under BSP the filling "
                     "pushes would be held until a clock ends)")
    unknown = set(args.systems.split(",")) - {"ductile", "ddp", "ddp-sparse"}
    if unknown:
        parser.error(f"unknown --systems {','.join(sorted(unknown))} (ductile, ddp, ddp-sparse)")
    if args.role != "driver":
        run_worker(args)
        return

    out = sys.stdout if args.csv == "-" else open(args.csv, "w", newline="")
    writer = csv.DictWriter(out, fieldnames=FIELDS)
    writer.writeheader()
    rows = []
    systems = args.systems.split(",")
    for vocab in [int(v) for v in args.vocabs.split(",")]:
        for repeat in range(args.repeats):
            # Alternate which system goes first, so that neither always
            # runs on a machine the other just warmed or loaded.
            order = systems if repeat % 2 == 0 else systems[::-1]
            for system in order:
                row = run_once(args, system, vocab, repeat)
                writer.writerow(row)
                out.flush()
                rows.append(row)
    sys.stderr.write("\nmedians over repeats (runs that finished):\n")
    sys.stderr.write("system     vocab      step_ms  samples/s  worker_rss_mb  server_rss_mb  auc\n")
    for vocab in sorted({r["vocab"] for r in rows}):
        for system in systems:
            done = [r for r in rows if r["vocab"] == vocab and r["system"] == system
                    and r.get("status") == "ok"]
            if not done:
                sys.stderr.write(f"{system:10s} {vocab:<10d} (no run finished)\n")
                continue
            med = {k: statistics.median(float(r[k]) for r in done)
                   for k in ("step_ms", "samples_per_s", "worker_rss_mb", "auc")}
            server = (statistics.median(float(r["server_rss_mb"]) for r in done)
                      if system == "ductile" else float("nan"))
            sys.stderr.write(f"{system:10s} {vocab:<10d} {med['step_ms']:8.2f} "
                             f"{med['samples_per_s']:10.0f} {med['worker_rss_mb']:14.0f} "
                             f"{server:14.0f} {med['auc']:.4f} (n={len(done)})\n")


if __name__ == "__main__":
    main()
