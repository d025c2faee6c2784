"""Megatron-style tensor-parallel MLP block, y = relu(x @ W1) @ W2, checked against numpy.

W1 is split by columns over the mesh axis "model" (P(None, "model")) and W2 by rows
(P("model", None)), so each core computes relu(x @ W1[:, cols]) @ W2[cols, :] with no
communication, and one psum over "model" adds the partial products (Megatron-LM's f and g
operators). The rows of x are split over "data" when the mesh has one (--model < --cores).

    PYTHONPATH=build/python /usr/bin/python3 examples/python/tensor_parallel_matmul.py --cores 8
"""
import argparse
import json

import numpy as np

import vtpu
from vtpu import P, lax


def mlp_block(x, w1, w2):
    h = np.maximum(x @ w1, 0)  # column-parallel: this core's hidden units, complete
    return lax.psum(h @ w2, "model")  # row-parallel: partial sums over the hidden units


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", type=int, default=8, help="cores (default 8)")
    ap.add_argument("--model", type=int, default=None, help="size of the model axis (default all)")
    ap.add_argument("--rows", type=int, default=32, help="rows of x (default 32)")
    ap.add_argument("--d-model", type=int, default=64, help="columns of x and y (default 64)")
    ap.add_argument("--d-ff", type=int, default=256, help="hidden units (default 256)")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = ap.parse_args(argv)
    model = args.model or args.cores
    if args.cores % model or args.d_ff % model or args.rows % (args.cores // model):
        ap.error(f"--model {model} must divide --cores {args.cores} and --d-ff {args.d_ff}, "
                 f"and --rows {args.rows} must split over the data axis")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.rows, args.d_model), np.float32)
    w1 = rng.standard_normal((args.d_model, args.d_ff), np.float32) / np.float32(8)
    w2 = rng.standard_normal((args.d_ff, args.d_model), np.float32) / np.float32(16)

    runtime = vtpu.Runtime(cores=args.cores, hbm_bytes="64M")
    mesh = vtpu.make_mesh((args.cores // model, model), ("data", "model"),
                          devices=runtime.devices())
    specs = (P("data", None), P(None, "model"), P("model", None))
    args_on_mesh = [vtpu.device_put(a, vtpu.NamedSharding(mesh, s)) for a, s in zip((x, w1, w2), specs)]
    block = vtpu.shard_map(mlp_block, mesh=mesh, in_specs=specs, out_specs=P("data", None))
    y = np.asarray(block(*args_on_mesh))

    expected = np.maximum(x @ w1, 0) @ w2
    # The same sum in psum's order (rank order over the model shards): equal to the last bit.
    cols = np.split(np.arange(args.d_ff), model)
    in_order = np.maximum(x @ w1[:, cols[0]], 0) @ w2[cols[0]]
    for c in cols[1:]:
        in_order = in_order + np.maximum(x @ w1[:, c], 0) @ w2[c]
    result = {"cores": args.cores, "mesh": dict(mesh.shape), "shape": list(y.shape),
              "max_rel_diff": float(np.abs(y - expected).max() / np.abs(expected).max()),
              "max_abs_diff_rank_order": float(np.abs(y - in_order).max()),
              "w1_shard_shape": list(args_on_mesh[1].addressable_shards[0].data.shape)}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"mesh {result['mesh']}: y {tuple(y.shape)}, W1 shards "
              f"{tuple(result['w1_shard_shape'])}; max |y - numpy| / max |numpy| = "
              f"{result['max_rel_diff']:.2e}; vs numpy in psum's order: "
              f"{result['max_abs_diff_rank_order']:.2e}")
    return result


if __name__ == "__main__":
    main()
