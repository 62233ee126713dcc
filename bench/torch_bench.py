#!/usr/bin/python3
"""The PyTorch examples on ductile against plain torch and DistributedDataParallel.

For each model (the CNN of examples/torch/cnn.py, the MLP of
examples/torch/mlp.py: the same make_model() and data) and each
configuration, runs one training job and measures its samples/s and the
time to a target test accuracy (0.90 for the CNN, 0.88 for the MLP):

    torch-1          one plain torch process
    ddp-N            N processes of torch DistributedDataParallel (gloo,
                     env:// on 127.0.0.1), a DistributedSampler each
    ductile-N-MODE   `ductile local --servers=S --workers=N -- python3 THIS`,
                     N workers through ductile.torch (DistributedOptimizer
                     with consistency MODE: bsp, ssp2 (ssp:2) or async;
                     ElasticSampler); the servers run the optimizer.
                     A suffix -bBYTES sets DistributedOptimizer's
                     bucket_bytes (ductile-1-bsp-b0: a tensor per
                     parameter); without one, its default
    cpp-N            the built-in C++ app (MLP only): `ductile local
                     --app=fmnist-mlp`, same layers, batch, Adam and rate

Every process runs the same training loop (this file's --worker mode):
batches of --batch_size per process, Adam(--lr), torch.set_num_threads(
--threads), an evaluation on the 10,000 test samples every --eval_every
batches of the job (and at each epoch's end) by every process (a ductile
worker by its clock, so that under BSP the workers evaluate together, as
DDP's processes do), timed apart:
"train_s" is the wall time of the loop less its evaluations. A run stops at
the evaluation that reaches the target (all processes of a DDP job see the
same model; a ductile job stops when worker 0 reaches it) or after
--epochs; a target not reached is reported as such. samples/s is the job's
trained samples over the slowest process's train_s. Runs alternate: each
repetition runs every configuration once, in an order rotated by one each
time; the summary gives medians over the repetitions.

The Python layer's cost: the MLP's per-step time (median over steps, loop
less evaluations) of ductile-N-bsp against cpp-N's (its CSV log's step_ms,
the time between clocks, median over its windows), and torch-1's (the same
torch computation with no ductile). "cpu ms" is a Python process's own CPU
time per step (all its threads, time.process_time(); median over steps),
which other load on the machine moves less than the wall time; the C++
app does not report it.

    PYTHONPATH=build/python /usr/bin/python3 bench/torch_bench.py --quick
    PYTHONPATH=build/python /usr/bin/python3 bench/torch_bench.py \\
        --models=cnn,mlp --repeats=3 --out_dir=/tmp/torch-bench

Writes OUT_DIR/runs.csv (one row per run), OUT_DIR/summary.csv (medians)
and, when matplotlib is importable, OUT_DIR/torch_bench.png.
"""

import argparse
import csv
import importlib.util
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"cnn": 0.90, "mlp": 0.88}
DEFAULT_CONFIGS = ("torch-1,ddp-2,ductile-1-bsp,ductile-1-ssp2,ductile-1-async,"
                   "ductile-2-bsp,ductile-2-ssp2,ductile-2-async,cpp-1,cpp-2")
QUICK_CONFIGS = "torch-1,ddp-2,ductile-2-bsp,ductile-2-async,cpp-1"
CONSISTENCY = {"bsp": "bsp", "ssp2": "ssp:2", "async": "async"}


# ---------------------------------------------------------------- worker ---

def load_example(model: str):
    spec = importlib.util.spec_from_file_location(
        f"example_{model}", ROOT / "examples" / "torch" / f"{model}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def datasets(module, model: str, data_dir: Path, train_samples):
    import torch
    if model == "cnn":
        train, test = module.load(data_dir, "train"), module.load(data_dir, "t10k")
    else:
        train = torch.utils.data.TensorDataset(*module.load(data_dir, "train"))
        test = torch.utils.data.TensorDataset(*module.load(data_dir, "t10k"))
    if train_samples:
        train = torch.utils.data.TensorDataset(*(t[:train_samples] for t in train.tensors))
    return train, test


def report(kind: str, **fields) -> None:
    print(f"BENCH {json.dumps(dict(kind=kind, **fields))}", flush=True)


def run_worker(args) -> None:
    import torch
    torch.set_num_threads(args.threads)
    module = load_example(args.model)
    train, test = datasets(module, args.model, args.data_dir, args.train_samples)
    model = module.make_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    rank, world, sampler, client = 0, 1, None, None
    if args.worker == "ddp":
        import torch.distributed as dist
        dist.init_process_group("gloo", init_method="env://")
        rank, world = dist.get_rank(), dist.get_world_size()
        net = torch.nn.parallel.DistributedDataParallel(model)
        sampler = torch.utils.data.distributed.DistributedSampler(
            train, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=True)
        loader = torch.utils.data.DataLoader(train, batch_size=args.batch_size,
                                             sampler=sampler, drop_last=True)
    elif args.worker == "ductile":
        import ductile.torch as dt
        dt.init()
        rank, world, client = dt.rank(), dt.size(), dt.client()
        net = model
        fusion = {} if args.bucket_bytes < 0 else {"bucket_bytes": args.bucket_bytes}
        optimizer = dt.DistributedOptimizer(optimizer, model.named_parameters(),
                                            consistency=args.consistency, **fusion)
        loader = torch.utils.data.DataLoader(
            train, batch_sampler=dt.ElasticSampler(len(train), args.batch_size, args.epochs))
    else:
        net = model
        loader = torch.utils.data.DataLoader(train, batch_size=args.batch_size,
                                             shuffle=True, drop_last=True)
    stop_file = Path(args.stop_file) if args.stop_file else None
    test_x, test_y = test.tensors
    train_s = eval_s = 0.0
    steps = samples = 0
    step_ms = []
    cpu_ms = []  # this process's CPU time (all its threads) per step
    reached = None
    stop = False

    def evaluate(epoch):
        nonlocal reached, stop
        with torch.no_grad():
            accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
        report("eval", rank=rank, epoch=epoch, step=steps, samples=samples,
               train_s=train_s, accuracy=accuracy)
        if reached is None and accuracy >= args.target:
            reached = dict(train_s=train_s, epoch=epoch, step=steps, accuracy=accuracy)
            if args.stop_at_target:
                stop = True
                if rank == 0 and stop_file is not None:
                    stop_file.write_text("reached\n")

    last_eval = 0
    mark = time.perf_counter()
    cpu_mark = time.process_time()
    for epoch in range(args.epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        evaluated_at = -1
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()
            now = time.perf_counter()
            cpu_ms.append((time.process_time() - cpu_mark) * 1000)
            step_ms.append((now - mark) * 1000)
            train_s += now - mark
            steps += 1
            samples += len(x)
            # A ductile worker evaluates by its clock, which under BSP is
            # the same on every worker after step(): they evaluate together,
            # as DDP's processes do, and none waits on another's evaluation.
            position = client.current_clock if client is not None else steps
            if args.eval_every and position // args.eval_every > last_eval:
                last_eval = position // args.eval_every
                evaluate(epoch)
                evaluated_at = steps
                eval_s += time.perf_counter() - now
            # A ductile job stops with its worker 0 (the others' models may
            # differ under SSP and async).
            if args.worker == "ductile" and rank != 0 and stop_file and stop_file.exists():
                stop = True
            mark = time.perf_counter()
            cpu_mark = time.process_time()
            if stop:
                break
        if not stop and evaluated_at != steps:
            start = time.perf_counter()
            evaluate(epoch)
            eval_s += time.perf_counter() - start
            mark = time.perf_counter()
            cpu_mark = time.process_time()
        if stop:
            break
    report("done", rank=rank, world=world, steps=steps, samples=samples, train_s=train_s,
           eval_s=eval_s, step_ms_median=statistics.median(step_ms) if step_ms else None,
           cpu_ms_median=statistics.median(cpu_ms) if cpu_ms else None,
           reached=reached)
    if args.worker == "ddp":
        import torch.distributed as dist
        dist.destroy_process_group()


# ---------------------------------------------------------------- driver ---

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_config(config: str):
    """(system, workers, mode, bucket_bytes: -1 for the default)."""
    parts = config.split("-")
    try:
        system, workers = parts[0], int(parts[1])
        mode = parts[2] if len(parts) > 2 else "bsp"
        bucket_bytes = int(parts[3][1:]) if len(parts) > 3 and parts[3][:1] == "b" else -1
        known = len(parts) <= 3 or (system == "ductile" and len(parts) == 4 and bucket_bytes >= 0)
    except (IndexError, ValueError):
        known = False
    if not known or system not in ("torch", "ddp", "ductile", "cpp") or mode not in CONSISTENCY \
            or (system == "torch" and workers != 1):
        raise SystemExit(f"unknown configuration '{config}' (torch-1, ddp-N, "
                         "ductile-N-bsp|ssp2|async[-bBYTES], cpp-N)")
    return system, workers, mode, bucket_bytes


def worker_args(args, model: str, workers: int, mode: str, bucket_bytes: int,
                stop_file: Path):
    global_eval = args.eval_every or {"cnn": 300, "mlp": 300}[model]
    return [sys.executable, str(Path(__file__).resolve()), f"--worker={{}}",
            f"--model={model}", f"--epochs={epochs_of(args, model)}",
            f"--batch_size={args.batch_size}", f"--lr={args.lr}", f"--threads={args.threads}",
            f"--eval_every={max(1, global_eval // workers)}", f"--target={TARGETS[model]}",
            f"--consistency={CONSISTENCY[mode]}", f"--bucket_bytes={bucket_bytes}",
            f"--stop_file={stop_file}",
            f"--data_dir={args.data_dir}"] + \
        ([f"--train_samples={args.train_samples}"] if args.train_samples else []) + \
        ([] if args.no_stop else ["--stop_at_target"])


def epochs_of(args, model: str) -> int:
    return args.epochs or (args.cnn_epochs if model == "cnn" else args.mlp_epochs)


def parse_reports(output: str):
    """Every `BENCH {...}` report, also where two workers' lines ran into
    one (`BENCH {...}BENCH {...}`): each object is decoded from its start."""
    decoder = json.JSONDecoder()
    return [decoder.raw_decode(output, m.end())[0] for m in re.finditer(r"BENCH (?=\{)", output)]


def run_python(args, model, system, workers, mode, bucket_bytes, tmp: Path):
    stop_file = tmp / f"stop-{time.monotonic_ns()}"
    command = worker_args(args, model, workers, mode, bucket_bytes, stop_file)
    env = dict(os.environ, PYTHONPATH=str(Path(args.build) / "python"))
    env.setdefault("OMP_NUM_THREADS", str(args.threads))
    start = time.monotonic()
    if system in ("torch", "ddp"):
        command[2] = "--worker=" + system
        processes = []
        port = free_port()
        for rank in range(workers):
            penv = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                        RANK=str(rank), WORLD_SIZE=str(workers))
            processes.append(subprocess.Popen(command, env=penv, stdout=subprocess.PIPE,
                                              stderr=subprocess.STDOUT, text=True))
        output = ""
        codes = []
        for p in processes:
            try:
                out, _ = p.communicate(timeout=args.run_timeout_s)
            except subprocess.TimeoutExpired:
                for q in processes:
                    q.kill()
                out, _ = p.communicate()
            output += out
            codes.append(p.returncode)
        code = max(abs(c) for c in codes)
    else:
        command[2] = "--worker=ductile"
        job = [str(Path(args.build) / "ductile"), "local", f"--servers={args.servers}",
               f"--workers={workers}", "--"] + command
        try:
            done = subprocess.run(job, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True,
                                  timeout=args.run_timeout_s)
            output, code = done.stdout, done.returncode
        except subprocess.TimeoutExpired as e:
            output, code = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) \
                else (e.stdout or ""), -1
    wall_s = time.monotonic() - start
    (tmp / f"{model}-{system}-{workers}-{mode}-{int(time.time())}.log").write_text(output)
    if code != 0:
        print(f"  failed (exit {code}); the log's end:\n{output[-2000:]}", file=sys.stderr)
        return None
    reports = parse_reports(output)
    done = [r for r in reports if r["kind"] == "done"]
    evals = [r for r in reports if r["kind"] == "eval" and r["rank"] == 0]
    lead = next((r for r in done if r["rank"] == 0), None)
    if lead is None:
        print(f"  no result from rank 0; the log's end:\n{output[-2000:]}", file=sys.stderr)
        return None
    reached = lead["reached"]
    # The train seconds to lower accuracies too, from worker 0's evaluations.
    thresholds = ";".join(
        f"{t}:{fmt(next((e['train_s'] for e in evals if e['accuracy'] >= t), None)) or '-'}"
        for t in args.thresholds)
    return dict(
        samples=sum(r["samples"] for r in done),
        train_s=max(r["train_s"] for r in done),
        samples_per_s=sum(r["samples"] for r in done) / max(1e-9, max(r["train_s"] for r in done)),
        step_ms=lead["step_ms_median"],
        cpu_ms=lead["cpu_ms_median"],
        time_to_target_s=reached["train_s"] if reached else None,
        target_epoch=reached["epoch"] + 1 if reached else None,
        best_accuracy=max((e["accuracy"] for e in evals), default=None),
        final_accuracy=evals[-1]["accuracy"] if evals else None,
        epochs_run=(evals[-1]["epoch"] + 1) if evals else None,
        thresholds_s=thresholds, wall_s=wall_s)


def run_cpp(args, model, workers, tmp: Path):
    if model != "mlp":
        return None
    log = tmp / f"cpp-{workers}-{time.monotonic_ns()}.csv"
    job = [str(Path(args.build) / "ductile"), "local", f"--servers={args.servers}",
           f"--workers={workers}", "--app=fmnist-mlp", f"--epochs={epochs_of(args, model)}",
           f"--batch_size={args.batch_size}", "--optimizer=adam",
           f"--learning_rate={args.lr}", "--consistency=bsp", f"--csv_log={log}",
           "--log_every=50", f"--data_dir={args.data_dir}"]
    if args.train_samples:
        job.append(f"--max_samples={args.train_samples * epochs_of(args, model)}")
    start = time.monotonic()
    try:
        done = subprocess.run(job, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=args.run_timeout_s)
    except subprocess.TimeoutExpired:
        print("  the C++ app timed out", file=sys.stderr)
        return None
    wall_s = time.monotonic() - start
    if done.returncode != 0 or not log.exists():
        print(f"  failed (exit {done.returncode}):\n{done.stdout[-2000:]}", file=sys.stderr)
        return None
    rows = list(csv.DictReader(log.open()))
    steps = [r for r in rows if r["kind"] == "step"]
    epochs = [r for r in rows if r["kind"] == "epoch"]
    step_ms = statistics.median(float(r["step_ms"]) for r in steps[1:] or steps)
    reached = next((r for r in epochs if float(r["metric"]) >= TARGETS[model]), None)
    samples_per_s = statistics.median(float(r["samples_per_s"]) for r in steps[1:] or steps)
    return dict(
        samples=None, train_s=float(epochs[-1]["time_s"]) if epochs else None,
        samples_per_s=samples_per_s, step_ms=step_ms, cpu_ms=None,
        # Epoch granularity, its evaluations included (they are short).
        time_to_target_s=float(reached["time_s"]) if reached else None,
        target_epoch=int(reached["epoch"]) if reached else None,
        best_accuracy=max((float(r["metric"]) for r in epochs), default=None),
        final_accuracy=float(epochs[-1]["metric"]) if epochs else None,
        epochs_run=len(epochs), thresholds_s=";".join(
            f"{t}:{next((r['time_s'] for r in epochs if float(r['metric']) >= t), '-')}"
            for t in args.thresholds), wall_s=wall_s)


FIELDS = ["model", "config", "rep", "threads", "batch_size", "samples", "train_s",
          "samples_per_s", "step_ms", "cpu_ms", "time_to_target_s", "target_epoch", "best_accuracy",
          "final_accuracy", "epochs_run", "thresholds_s", "wall_s"]


def fmt(value, digits=1):
    if value is None:
        return ""
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def median_of(rows, key):
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def summarize(args, rows, out_dir: Path):
    summary = []
    for model in args.models:
        for config in args.configs:
            runs = [r for r in rows if r["model"] == model and r["config"] == config]
            if not runs:
                continue
            reached = [r for r in runs if r["time_to_target_s"] is not None]
            summary.append(dict(
                model=model, config=config, runs=len(runs),
                samples_per_s=median_of(runs, "samples_per_s"),
                step_ms=median_of(runs, "step_ms"),
                cpu_ms=median_of(runs, "cpu_ms"),
                reached=f"{len(reached)}/{len(runs)}",
                # Median over the runs that reached it; "not reached" when none did.
                time_to_target_s=median_of(reached, "time_to_target_s"),
                target_epoch=median_of(reached, "target_epoch"),
                best_accuracy=median_of(runs, "best_accuracy"),
                epochs_run=median_of(runs, "epochs_run")))
    with (out_dir / "summary.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(summary[0].keys()) if summary else ["model"])
        writer.writeheader()
        writer.writerows(summary)
    print(f"\nmedians over the runs; threads={args.threads} per process, "
          f"batch {args.batch_size} per process, Adam lr {args.lr}")
    print(f"{'model':<5} {'config':<16} {'samples/s':>9} {'step ms':>8} {'cpu ms':>7} "
          f"{'to target s':>11} {'epoch':>5} {'reached':>7} {'best acc':>8}")
    for s in summary:
        target = fmt(s["time_to_target_s"]) if s["time_to_target_s"] is not None \
            else "not reached"
        print(f"{s['model']:<5} {s['config']:<16} {fmt(s['samples_per_s'], 0):>9} "
              f"{fmt(s['step_ms'], 2):>8} {fmt(s['cpu_ms'], 2):>7} {target:>11} "
              f"{fmt(s['target_epoch'], 0):>5} "
              f"{s['reached']:>7} {fmt(s['best_accuracy'], 4):>8}")
    return summary


def plot(summary, out_dir: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not importable: no plot (python3-matplotlib)")
        return
    models = sorted({s["model"] for s in summary})
    fig, axes = plt.subplots(2, len(models), figsize=(6 * len(models), 7), squeeze=False)
    for column, model in enumerate(models):
        rows = [s for s in summary if s["model"] == model]
        names = [s["config"] for s in rows]
        axes[0][column].barh(names, [s["samples_per_s"] or 0 for s in rows])
        axes[0][column].set_title(f"{model}: samples/s (higher is better)")
        times = [s["time_to_target_s"] or 0 for s in rows]
        bars = axes[1][column].barh(names, times)
        for bar, s in zip(bars, rows):
            if s["time_to_target_s"] is None:
                axes[1][column].text(0, bar.get_y() + bar.get_height() / 2, " not reached",
                                     va="center")
        axes[1][column].set_title(f"{model}: train seconds to {TARGETS[model]} (lower is better)")
    fig.tight_layout()
    fig.savefig(out_dir / "torch_bench.png", dpi=100)
    print(f"plot: {out_dir / 'torch_bench.png'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=["torch", "ddp", "ductile"], help=argparse.SUPPRESS)
    parser.add_argument("--model", default="mlp", help=argparse.SUPPRESS)
    parser.add_argument("--target", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--stop_file", default="", help=argparse.SUPPRESS)
    parser.add_argument("--stop_at_target", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--consistency", default="bsp", help=argparse.SUPPRESS)
    parser.add_argument("--bucket_bytes", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--models", default="cnn,mlp")
    parser.add_argument("--cnn_target", type=float, default=TARGETS["cnn"])
    parser.add_argument("--mlp_target", type=float, default=TARGETS["mlp"])
    parser.add_argument("--configs", default=None, help=f"default: {DEFAULT_CONFIGS}")
    parser.add_argument("--quick", action="store_true",
                        help=f"configs {QUICK_CONFIGS}; 1 epoch of the first 12800 "
                             "samples; 1 repetition (the targets are not reached)")
    parser.add_argument("--epochs", type=int, default=0, help="the cap for both models")
    parser.add_argument("--cnn_epochs", type=int, default=8)
    parser.add_argument("--mlp_epochs", type=int, default=10)
    parser.add_argument("--train_samples", type=int, default=0, help="the first N only")
    parser.add_argument("--thresholds", default="0.85,0.87",
                        help="lower accuracies whose train seconds are reported too")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--eval_every", type=int, default=0,
                        help="batches of the job between evaluations (default 300)")
    parser.add_argument("--no_stop", action="store_true",
                        help="train every epoch even after the target")
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--run_timeout_s", type=int, default=3600)
    parser.add_argument("--data_dir", type=Path, default=Path("/usr/share/datasets/fashion-mnist"))
    parser.add_argument("--build", default=str(ROOT / "build"))
    parser.add_argument("--out_dir", type=Path, default=Path("/tmp/ductile-torch-bench"))
    args = parser.parse_args()
    if args.worker:
        run_worker(args)
        return
    if args.quick:
        args.configs = args.configs or QUICK_CONFIGS
        args.cnn_epochs = args.mlp_epochs = 1
        args.train_samples = args.train_samples or 12800
        args.repeats = 1
    args.configs = (args.configs or DEFAULT_CONFIGS).split(",")
    args.models = args.models.split(",")
    args.thresholds = [float(t) for t in args.thresholds.split(",") if t]
    TARGETS.update(cnn=args.cnn_target, mlp=args.mlp_target)
    for model in args.models:
        if model not in TARGETS:
            raise SystemExit(f"unknown model '{model}' (cnn, mlp)")
    parsed = {c: parse_config(c) for c in args.configs}
    if not (Path(args.build) / "ductile").exists():
        raise SystemExit(f"no {args.build}/ductile: build first (scripts/build.sh build)")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    tmp = args.out_dir / "logs"
    tmp.mkdir(exist_ok=True)
    rows = []
    with (args.out_dir / "runs.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for rep in range(args.repeats):
            shift = rep % len(args.configs)
            order = args.configs[shift:] + args.configs[:shift]
            for model in args.models:
                for config in order:
                    system, workers, mode, bucket_bytes = parsed[config]
                    if system == "cpp" and model != "mlp":
                        continue
                    print(f"[rep {rep + 1}/{args.repeats}] {model} {config} ...", flush=True)
                    if system == "cpp":
                        result = run_cpp(args, model, workers, tmp)
                    else:
                        result = run_python(args, model, system, workers, mode, bucket_bytes,
                                            tmp)
                    if result is None:
                        continue
                    row = dict(model=model, config=config, rep=rep, threads=args.threads,
                               batch_size=args.batch_size, **result)
                    print("  " + ", ".join(f"{k}={fmt(row[k], 3)}" for k in FIELDS[5:]),
                          flush=True)
                    rows.append(row)
                    writer.writerow({k: fmt(row[k], 4) for k in FIELDS})
                    f.flush()
    summary = summarize(args, rows, args.out_dir)
    print(f"runs: {args.out_dir / 'runs.csv'}; summary: {args.out_dir / 'summary.csv'}")
    if summary:
        plot(summary, args.out_dir)


if __name__ == "__main__":
    main()
