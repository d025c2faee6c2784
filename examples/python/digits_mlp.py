"""Data-parallel MLP on the UCI handwritten digits, in numpy on every core of a vtpu mesh.

Each step's global batch is split over the mesh axis "data" (P("data")) and the parameters are
replicated (P()). Every core runs forward and backward on its rows, vtpu.lax.psum sums the
gradients and loss over "data" (in rank order, the same sum on every core), and every core applies
the same SGD update, so the replicas stay identical. The model is the one `vtpu train mlp` trains:
64 -> hidden -> 10, ReLU, softmax cross-entropy, SGD at 0.2, global batch 64.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/digits_mlp.py --cores 8
"""
import argparse
import gzip
import json

import numpy as np

import vtpu
from vtpu import P, lax


def load_digits():
    """(x_train, y_train), (x_test, y_test): pixels / 16 as float32, a fixed 80/20 split."""
    with gzip.open(vtpu.data_file("digits.csv.gz")) as f:
        d = np.loadtxt(f, delimiter=",", dtype=np.float32)
    d = d[np.random.default_rng(0).permutation(len(d))]
    x, y, n = d[:, :64] / 16, d[:, 64].astype(np.int32), int(0.8 * len(d))
    return (x[:n], y[:n]), (x[n:], y[n:])


def train_step(mesh, batch, lr):
    """One SGD step as a shard_map: (w1, b1, w2, b2, x, y) -> (w1, b1, w2, b2, mean loss)."""
    def step(w1, b1, w2, b2, x, y):  # this core's rows of x and y, all of the parameters
        z = x @ w1 + b1
        a = np.maximum(z, 0)
        logits = a @ w2 + b2
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        rows = np.arange(len(y))
        loss = -np.log(p[rows, y]).sum(keepdims=True)
        p[rows, y] -= 1  # d(loss sum)/d logits; divided by the global batch below
        g = p / batch
        da = g @ w2.T
        da[z <= 0] = 0
        grads = lax.psum((x.T @ da, da.sum(axis=0), a.T @ g, g.sum(axis=0), loss), "data")
        params = tuple(w - lr * dw for w, dw in zip((w1, b1, w2, b2), grads))
        return params + (grads[4] / batch,)
    return vtpu.shard_map(step, mesh=mesh, in_specs=(P(),) * 4 + (P("data"),) * 2,
                          out_specs=(P(),) * 5)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", type=int, default=8, help="cores of the data axis (default 8)")
    ap.add_argument("--steps", type=int, default=300, help="SGD steps (default 300)")
    ap.add_argument("--batch", type=int, default=64, help="global batch, a multiple of --cores")
    ap.add_argument("--hidden", type=int, default=64, help="hidden units (default 64)")
    ap.add_argument("--lr", type=float, default=0.2, help="learning rate (default 0.2)")
    ap.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = ap.parse_args(argv)
    if args.cores < 1 or args.batch % args.cores:
        ap.error(f"--batch {args.batch} must be a multiple of --cores {args.cores}")
    (x_train, y_train), (x_test, y_test) = load_digits()
    runtime = vtpu.Runtime(cores=args.cores, hbm_bytes="64M")
    mesh = vtpu.make_mesh((args.cores,), ("data",), devices=runtime.devices())
    step = train_step(mesh, args.batch, np.float32(args.lr))
    rng = np.random.default_rng(1)  # He initialisation, zero biases
    params = [rng.standard_normal(shape, np.float32) * np.float32(np.sqrt(2 / shape[0]))
              for shape in ((64, args.hidden), (args.hidden, 10))]
    params = (params[0], np.zeros(args.hidden, np.float32), params[1], np.zeros(10, np.float32))
    batches, losses = np.random.default_rng(2), []
    for _ in range(args.steps):
        rows = batches.integers(0, len(y_train), args.batch)
        *params, loss = step(*params, x_train[rows], y_train[rows])
        losses.append(float(np.asarray(loss)[0]))
    w1, b1, w2, b2 = (np.asarray(p) for p in params)
    predicted = (np.maximum(x_test @ w1 + b1, 0) @ w2 + b2).argmax(axis=1)
    result = {"cores": args.cores, "steps": args.steps, "losses": losses,
              "test_accuracy": float(np.mean(predicted == y_test))}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{args.cores} cores, {args.steps} steps: loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
              f"test accuracy {result['test_accuracy']:.4f} ({len(y_test)} held-out digits)")
    return result


if __name__ == "__main__":
    main()
