"""Fragmentation under vtpu's allocator policies, side by side, with vtpu.memory.

Part 1, a pattern worked by hand: a 1 MiB arena takes sixteen 48 KiB buffers, every other one is
freed, and a 300 KiB request follows. bfc, tlsf and first_fit round 48 KiB to itself (256 B
granules): eight 48 KiB holes plus the 256 KiB tail are free, 640 KiB in all, so
fragmentation = 1 - 256/640 = 0.6 and the request fails for lack of one large block. buddy rounds
48 KiB to 64 KiB, so the sixteen buffers fill the arena and the eight 64 KiB holes, whose buddies
are live, give 1 - 64/512 = 0.875. With auto-defragmentation (the default) the arena compacts
and retries before reporting an out-of-memory error.

Part 2 replays a real PyTorch allocation trace (data/traces) on one arena of each policy.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/fragmentation.py
"""
import argparse
import json

import vtpu
from vtpu.memory import POLICIES, Arena, replay_trace

KIB = 1024


def checkerboard(policy, auto_defragment):
    """Part 1 on one arena: its stats after the frees and the fate of the 300 KiB request."""
    arena = Arena(1024 * KIB, policy=policy, auto_defragment=auto_defragment)
    buffers = [arena.alloc(48 * KIB) for _ in range(16)]
    for b in buffers[::2]:
        b.free()
    stats = arena.stats()
    row = {"policy": policy, "auto_defragment": auto_defragment,
           "bytes_in_use": stats["bytes_in_use"], "total_free_bytes": arena.total_free_bytes,
           "largest_free_block_bytes": arena.largest_free_block_bytes,
           "fragmentation": arena.fragmentation}
    try:
        arena.alloc(300 * KIB)
        row["alloc_300K"] = "ok"
    except vtpu.ResourceExhaustedError as e:  # a MemoryError carrying the out-of-memory report
        row["alloc_300K"] = f"OOM (largest free {e.largest_free_block_bytes // KIB} KiB)"
    return row


def replay(policy, trace, capacity):
    m = replay_trace(vtpu.data_file("traces/" + trace), policy=policy, capacity_bytes=capacity)
    keys = ("peak_live_bytes", "peak_reserved_bytes", "reserved_over_live", "fragmentation_max",
            "false_ooms", "true_ooms")
    return dict(policy=policy, **{k: m[k] for k in keys})


def print_table(rows, columns):
    widths = [max(len(c), *(len(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]))
                            for r in rows)) for c in columns]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    for r in rows:
        cells = (f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in columns)
        print("  ".join(s.ljust(w) for s, w in zip(cells, widths)))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="pytorch_cnn_train.jsonl",
                    help="a trace of data/traces (default pytorch_cnn_train.jsonl)")
    ap.add_argument("--capacity", default="64M", help="arena size for the replay (default 64M)")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = ap.parse_args(argv)
    result = {"checkerboard": [checkerboard(p, d) for d in (False, True) for p in POLICIES],
              "trace": args.trace,
              "replay": [replay(p, args.trace, args.capacity) for p in POLICIES]}
    if args.json:
        print(json.dumps(result))
        return result
    print("1 MiB arena, sixteen 48 KiB buffers, every other one freed, then a 300 KiB request:")
    print_table(result["checkerboard"], ["policy", "auto_defragment", "bytes_in_use",
                                         "total_free_bytes", "largest_free_block_bytes",
                                         "fragmentation", "alloc_300K"])
    print(f"\n{args.trace} replayed on one {args.capacity} arena per policy:")
    print_table(result["replay"], ["policy", "peak_live_bytes", "peak_reserved_bytes",
                                   "reserved_over_live", "fragmentation_max", "false_ooms",
                                   "true_ooms"])
    return result


if __name__ == "__main__":
    main()
