#!/usr/bin/python3
"""PyTorch DistributedDataParallel baseline for `vtpu train mlp`.

Trains a 64 -> H -> 10 MLP (Linear, ReLU, Linear; softmax cross-entropy; plain
SGD; float32) data-parallel over N processes on this host with the gloo
backend. The global batch B is split evenly, B/N rows per process. Each process
uses one intra-op thread, so N processes stand for N simulated cores.

Rank 0 times every step with time.perf_counter: zero_grad + forward + backward
(DDP all-reduces gradient buckets during backward) + optimizer step. There is
no barrier in the loop; the all-reduce keeps ranks in lockstep. The first
--warmup steps are not timed. Prints one JSON object on stdout.

Needs Debian's python3-torch (scripts/install-deps.sh --bench); run it with
/usr/bin/python3 if another python3 is first on PATH. Debian's torch uses
whatever libblas.so.3 is on the library path (the netlib reference BLAS by
default); bench/ddp/fetch-openblas.sh provides OpenBLAS for LD_LIBRARY_PATH.
"""

import argparse
import gzip
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

REPO = Path(__file__).resolve().parents[2]
NUM_ROWS = 1797
NUM_TRAIN = 1437  # first 80% (rounded down) after the fixed shuffle
SPLIT_SEED = 0


def load_digits(path):
    with gzip.open(path, "rt") as f:
        data = np.loadtxt(f, delimiter=",", dtype=np.float64, ndmin=2)
    if data.shape != (NUM_ROWS, 65):
        sys.exit(f"{path}: expected {NUM_ROWS}x65 values, got {data.shape[0]}x{data.shape[1]}")
    x = (data[:, :64] / 16.0).astype(np.float32)
    y = data[:, 64].astype(np.int64)
    if x.min() < 0 or x.max() > 1 or y.min() < 0 or y.max() > 9:
        sys.exit(f"{path}: pixel or label out of range")
    perm = np.random.RandomState(SPLIT_SEED).permutation(NUM_ROWS)
    train = perm[:NUM_TRAIN]
    return x[train], y[train]


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def blas_library():
    """Path of the BLAS shared library this process loaded (Linux only)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libblas" in line}
    except OSError:
        return "unknown"
    return ",".join(sorted(os.path.realpath(p) for p in paths)) or "none"


def make_model(hidden):
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))


def worker(rank, args, x_np, y_np, port, results):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", rank=rank, world_size=args.procs)
    try:
        torch.manual_seed(args.seed)  # same init everywhere; DDP also broadcasts rank 0's
        model = DDP(make_model(args.hidden))
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
        x_all = torch.from_numpy(x_np)
        y_all = torch.from_numpy(y_np)
        n = x_all.shape[0]
        local = args.batch // args.procs
        total = args.warmup + args.steps

        # Global batch of step s: B consecutive rows of an epoch-wise shuffled
        # order (same on every rank); rank r takes rows [r*B/N, (r+1)*B/N).
        g = torch.Generator().manual_seed(args.seed + 1)
        order = torch.cat([torch.randperm(n, generator=g)
                           for _ in range((total * args.batch + n - 1) // n)])

        times = []
        loss = None
        for step in range(total):
            start = step * args.batch + rank * local
            idx = order[start:start + local]
            xb, yb = x_all[idx], y_all[idx]  # data loading is outside the timed region

            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            t1 = time.perf_counter()
            if step >= args.warmup:
                times.append(t1 - t0)

        # Global-batch loss of the last step (mean of equal-sized shards).
        last = loss.detach().clone()
        dist.all_reduce(last)
        last /= args.procs

        if rank == 0:
            with torch.no_grad():
                logits = model.module(x_all)
                full_loss = F.cross_entropy(logits, y_all).item()
                acc = (logits.argmax(1) == y_all).float().mean().item()
            ms = sorted(t * 1e3 for t in times)
            results.put({
                "framework": "pytorch-ddp-gloo",
                "procs": args.procs,
                "batch": args.batch,
                "hidden": args.hidden,
                "steps": args.steps,
                "warmup": args.warmup,
                "lr": args.lr,
                "median_step_ms": statistics.median(ms),
                "p90_step_ms": float(np.percentile(ms, 90)),
                "mean_step_ms": statistics.fmean(ms),
                "min_step_ms": ms[0],
                "final_loss": last.item(),
                "train_loss": full_loss,
                "train_accuracy": acc,
                "torch_version": torch.__version__,
                "blas": blas_library(),
            })
    finally:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", type=int, default=1, help="number of processes (N)")
    p.add_argument("--steps", type=int, default=200, help="timed steps (S)")
    p.add_argument("--batch", type=int, default=256, help="global batch size (B)")
    p.add_argument("--hidden", type=int, default=128, help="hidden width (H)")
    p.add_argument("--lr", type=float, default=0.2, help="SGD learning rate (vtpu train mlp default)")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first (W)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default=os.environ.get(
        "VTPU_DATA", str(Path(os.environ.get("VTPU_DATA_DIR", REPO / "data")) / "digits.csv.gz")))
    args = p.parse_args()
    if args.procs < 1 or args.steps < 1 or args.warmup < 0 or args.hidden < 1:
        p.error("--procs, --steps and --hidden must be >= 1, --warmup >= 0")
    if args.batch < args.procs or args.batch % args.procs:
        p.error(f"--batch {args.batch} must be a positive multiple of --procs {args.procs}")
    if not os.path.exists(args.data):
        sys.exit(f"{args.data} not found; run scripts/fetch-data.sh")

    x, y = load_digits(args.data)
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.spawn(worker, args=(args, x, y, free_port(), results), nprocs=args.procs, join=True)
    print(json.dumps(results.get()), flush=True)


if __name__ == "__main__":
    main()
