"""What a psum costs from Python against the same psum from C++, side by side in one run.

(a) A psum of 1 MiB of f32 per core on 8 cores: one shard_map call whose function psums the
    block `iters` times, timed whole and divided by `iters`, with a Python function
    (vtpu.lax.psum on a numpy array made in the function, so each call copies it into HBM; and
    on the input block, already in HBM) and with the same C++ function
    (vtpu._vtpu._bench_psum_cpp). Target: Python <= 1.5x C++.
(b) The per-call overhead of a named collective: the same with 8 bytes, Python minus C++ per
    call. Target: <= 20 us.

Repetitions alternate the forms, so that load from other processes falls on both alike; the
medians are compared. Prints one JSON object; exits 1 when a target is missed (not with --quick,
a smoke run of a few iterations).

    PYTHONPATH=build/python /usr/bin/python3 bench/python/psum_overhead.py
"""

import argparse
import json
import statistics
import sys
import time

import numpy as np

import vtpu
from vtpu import lax

RATIO_TARGET = 1.5
OVERHEAD_TARGET_US = 20.0


def python_psum(mesh, nbytes, iters, resident):
    """Seconds per psum from a Python shard_map function; checks the last result."""
    n = nbytes // 4
    size = mesh.size

    def body(*block):
        x = block[0] if resident else np.ones(n, np.float32)
        for _ in range(iters):
            y = lax.psum(x, "i")
        if not (y == size).all():
            raise AssertionError(f"psum gave {y[:4]}, expected {size}")
        return ()

    in_specs = (vtpu.P("i"),) if resident else ()
    f = vtpu.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=())
    args = (np.ones(size * n, np.float32),) if resident else ()
    t0 = time.perf_counter()
    f(*args)
    return (time.perf_counter() - t0) / iters


def measure(mesh, nbytes, iters, reps):
    """Median microseconds per psum of each form over `reps` alternating repetitions."""
    forms = {
        "cpp": lambda: vtpu._vtpu._bench_psum_cpp(mesh, nbytes, iters, "i"),
        "python": lambda: python_psum(mesh, nbytes, iters, resident=False),
        "python_resident": lambda: python_psum(mesh, nbytes, iters, resident=True),
    }
    times = {name: [] for name in forms}
    for _ in range(reps):
        for name, run in forms.items():
            times[name].append(run() * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=8)
    parser.add_argument("--large-bytes", type=int, default=1 << 20)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="a smoke run: few iterations")
    args = parser.parse_args()
    reps, large_iters, small_iters = (2, 2, 20) if args.quick else (args.reps, 20, 300)

    rt = vtpu.Runtime(cores=args.cores, hbm_bytes=max(64 << 20, 8 * args.large_bytes))
    mesh = vtpu.make_mesh((args.cores,), ("i",), devices=rt.devices())
    large = measure(mesh, args.large_bytes, large_iters, reps)
    small = measure(mesh, 8, small_iters, reps)
    one_core = measure(vtpu.make_mesh((1,), ("i",), devices=rt.devices()[:1]), 8,
                       small_iters * 10, reps)
    result = {
        "cores": args.cores,
        "large_psum": {"bytes_per_core": args.large_bytes, "us_per_call": large,
                       "ratio_python_to_cpp": large["python"] / large["cpp"],
                       "ratio_resident_to_cpp": large["python_resident"] / large["cpp"],
                       "target_ratio": RATIO_TARGET},
        "small_psum": {"bytes_per_core": 8, "us_per_call": small,
                       "overhead_us": small["python"] - small["cpp"],
                       "target_overhead_us": OVERHEAD_TARGET_US},
        "small_psum_one_core": {"us_per_call": one_core,
                                "overhead_us": one_core["python"] - one_core["cpp"]},
        "quick": args.quick,
    }
    print(json.dumps(result, indent=2))
    missed = (result["large_psum"]["ratio_python_to_cpp"] > RATIO_TARGET or
              result["small_psum"]["overhead_us"] > OVERHEAD_TARGET_US)
    return 1 if missed and not args.quick else 0


if __name__ == "__main__":
    sys.exit(main())
