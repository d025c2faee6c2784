"""vtpu.lax: every named collective inside vtpu.shard_map on a (2, 4) mesh, against numpy.

Every core returns its own result with two leading unit dimensions, stacked by out spec P("x", "y")
into an array whose [i, j] entry is the result of the core at mesh position (i, j); the reference
computes each core's result from the blocks with numpy. Values are small multiples of 0.5, so
every sum and mean is exact in every dtype and the comparisons are bit for bit.
"""

import numpy as np
import pytest

import vtpu
from vtpu import lax

P = vtpu.P
MB = 1 << 20
DTYPES = [np.float32, np.float16, "bf16", np.int32, np.int64]


@pytest.fixture(scope="module")
def rt():
    return vtpu.Runtime(cores=8, hbm_bytes=64 * MB)


@pytest.fixture(scope="module")
def mesh(rt):
    return vtpu.make_mesh((2, 4), ("x", "y"), devices=rt.devices())


def bf16_bits(values):
    """float values (exact in bf16) as bf16 bit patterns (uint16)."""
    return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def bf16_values(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def sample(shape, dtype, seed=0):
    """Values in [-8, 8) in steps of 0.5 (integers for integer dtypes), as `dtype`."""
    rng = np.random.default_rng(seed)
    v = rng.integers(-16, 16, size=shape) / 2.0
    if dtype == "bf16":
        return bf16_bits(v)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-100, 100, size=shape).astype(dtype)
    return v.astype(dtype)


def as_float(x):
    """Values of a result or reference for comparison: bf16 bits decoded, others as float64."""
    x = np.asarray(x)
    return bf16_values(x).astype(np.float64) if x.dtype == np.uint16 else x.astype(np.float64)


def blocks_of(x, rows=2, cols=4):
    """blocks[i][j]: the block of the core at mesh position (i, j) under P("x", "y")."""
    return [[b for b in np.split(r, cols, axis=1)] for r in np.split(x, rows, axis=0)]


def per_core(mesh, body, x, in_spec=P("x", "y")):
    """Runs body(block) on every core; returns results[i][j] of the core at (i, j)."""
    f = vtpu.shard_map(lambda b: np.asarray(body(b))[None, None], mesh=mesh, in_specs=in_spec,
                       out_specs=P("x", "y"), check_vma=False)
    out = np.asarray(f(x))
    return [[out[i, j] for j in range(4)] for i in range(2)]


def check(results, expected, dtype=None):
    for i in range(2):
        for j in range(4):
            got, want = results[i][j], expected[i][j]
            if dtype is not None:
                assert got.dtype == np.dtype(np.uint16 if dtype == "bf16" else dtype)
            assert got.shape == want.shape, (i, j)
            np.testing.assert_array_equal(as_float(got), as_float(want), err_msg=f"core {(i, j)}")


def group_of(i, j, axes):
    """Mesh positions of the group of (i, j) over `axes`, in axis-index order."""
    if axes == "x":
        return [(k, j) for k in range(2)]
    if axes == "y":
        return [(i, k) for k in range(4)]
    if axes == ("x", "y"):
        return [(a, b) for a in range(2) for b in range(4)]
    return [(a, b) for b in range(4) for a in range(2)]  # ("y", "x")


AXES = ["x", "y", ("x", "y"), ("y", "x")]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("op", ["psum", "pmax", "pmin", "pmean"])
def test_reductions(mesh, dtype, axes, op):
    x = sample((4, 16), dtype)
    blocks = blocks_of(x)
    fold = {"psum": np.sum, "pmax": np.max, "pmin": np.min, "pmean": np.mean}[op]
    expected = []
    for i in range(2):
        row = []
        for j in range(4):
            stack = np.stack([as_float(blocks[a][b]) for a, b in group_of(i, j, axes)])
            row.append(fold(stack, axis=0))
        expected.append(row)
    results = per_core(mesh, lambda b: getattr(lax, op)(b, axes), x)
    if op == "pmean" and dtype in (np.int32, np.int64):
        dtype = np.float32  # true division of integers, as JAX
    check(results, expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("axis,tiled", [(0, False), (1, False), (-1, False), (0, True), (1, True)])
def test_all_gather(mesh, dtype, axis, tiled):
    x = sample((4, 8), dtype, seed=1)
    blocks = blocks_of(x)
    join = np.concatenate if tiled else np.stack
    expected = [[join([blocks[a][b] for a, b in group_of(i, j, "y")], axis=axis) for j in range(4)]
                for i in range(2)]
    check(per_core(mesh, lambda b: lax.all_gather(b, "y", axis=axis, tiled=tiled), x), expected,
          dtype)


def test_all_gather_tuple_axes(mesh):
    x = sample((4, 8), np.float32, seed=2)
    blocks = blocks_of(x)
    for axes in [("x", "y"), ("y", "x")]:
        expected = [[np.stack([blocks[a][b] for a, b in group_of(i, j, axes)]) for j in range(4)]
                    for i in range(2)]
        check(per_core(mesh, lambda b: lax.all_gather(b, axes), x), expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("dim,tiled", [(0, True), (1, True), (0, False)])
def test_psum_scatter(mesh, dtype, dim, tiled):
    # Blocks of (4, 8): dimension 0 equals the size of "y" (untiled) and both divide by it.
    x = sample((8, 32), dtype, seed=3)
    blocks = blocks_of(x)
    expected = []
    for i in range(2):
        total = sum(as_float(blocks[i][k]) for k in range(4))
        parts = np.split(total, 4, axis=dim)
        expected.append([parts[j] if tiled else parts[j].squeeze(dim) for j in range(4)])
    check(per_core(mesh, lambda b: lax.psum_scatter(b, "y", scatter_dimension=dim, tiled=tiled),
                   x), expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("split,concat,tiled",
                         [(0, 1, True), (1, 0, True), (0, 0, True), (0, 1, False), (0, 0, False),
                          (1, 0, False), (1, 1, False)])
def test_all_to_all(mesh, dtype, split, concat, tiled):
    x = sample((8, 16), dtype, seed=4)
    blocks = blocks_of(x)  # (4, 4) blocks: both dimensions have the size of "y"
    expected = []
    for i in range(2):
        row = []
        for j in range(4):
            sources = [blocks[i][k] for k in range(4)]
            if tiled:
                row.append(np.concatenate([np.split(s, 4, axis=split)[j] for s in sources],
                                          axis=concat))
            else:
                row.append(np.stack([np.take(s, j, axis=split) for s in sources], axis=concat))
        expected.append(row)
    check(per_core(mesh, lambda b: lax.all_to_all(b, "y", split, concat, tiled=tiled), x),
          expected, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("perm", [[(0, 1), (1, 2), (2, 3), (3, 0)], [(0, 2), (3, 1)]])
def test_ppermute(mesh, dtype, perm):
    x = sample((4, 16), dtype, seed=5)
    blocks = blocks_of(x)
    expected = []
    for i in range(2):
        row = []
        for j in range(4):
            src = [s for s, d in perm if d == j]
            row.append(blocks[i][src[0]] if src else np.zeros_like(blocks[i][j]))
        expected.append(row)
    check(per_core(mesh, lambda b: lax.ppermute(b, "y", perm), x), expected, dtype)


def test_ppermute_tuple_axes(mesh):
    x = sample((4, 16), np.int32, seed=6)
    blocks = blocks_of(x)
    shift = [(k, (k + 3) % 8) for k in range(8)]  # over ("x", "y"): index i * 4 + j
    expected = [[None] * 4 for _ in range(2)]
    for k in range(8):
        d = (k + 3) % 8
        expected[d // 4][d % 4] = blocks[k // 4][k % 4]
    check(per_core(mesh, lambda b: lax.ppermute(b, ("x", "y"), shift), x), expected)


def test_axis_index_and_size(mesh):
    def body(b):
        return np.array([lax.axis_index("x"), lax.axis_index("y"), lax.axis_index(("x", "y")),
                         lax.axis_index(("y", "x")), lax.axis_size("x"), lax.axis_size("y"),
                         lax.axis_size(("x", "y")), lax.psum(1, "y"), lax.psum(1, ("x", "y"))],
                        np.int32)
    got = per_core(mesh, body, np.zeros((2, 4), np.float32))
    for i in range(2):
        for j in range(4):
            assert got[i][j].tolist() == [i, j, i * 4 + j, j * 2 + i, 2, 4, 8, 4, 8]


def test_python_scalars(mesh):
    def body(b):
        return np.array([lax.psum(3, "x"), lax.psum(0.5, ("x", "y")), lax.pmean(3, "y"),
                         lax.pmax(7, "y"), lax.pmin(-2, "x")], np.float32)
    got = per_core(mesh, body, np.zeros((2, 4), np.float32))
    assert got[1][2].tolist() == [6.0, 4.0, 3.0, 7.0, -2.0]


def test_a_0d_block_result_stays_0d_as_in_jax(mesh):
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    total = vtpu.shard_map(lambda b: lax.psum(b.sum(), ("x", "y")), mesh=mesh,
                           in_specs=vtpu.P("x", "y"), out_specs=vtpu.P())(x)
    assert total.shape == () and float(np.asarray(total)) == x.sum()
    sums = vtpu.shard_map(lambda b: lax.all_gather(b.sum(), "y"), mesh=mesh,
                          in_specs=vtpu.P("x", "y"), out_specs=vtpu.P("x"))(x)
    assert np.asarray(sums).tolist() == x.reshape(2, 4, 2).sum(axis=2).reshape(-1).tolist()


def test_pytrees(mesh):
    x = sample((4, 16), np.int32, seed=7).astype(np.float32)
    blocks = blocks_of(x)

    def body(b):
        tree = lax.psum((b, [b * 2, {"k": b.astype(np.int32)}], 1), "x")
        assert isinstance(tree, tuple) and isinstance(tree[1], list) and tree[2] == 2
        assert tree[1][1]["k"].dtype == np.int32
        return np.stack([tree[0], tree[1][0], tree[1][1]["k"].astype(np.float32)])
    got = per_core(mesh, body, x)
    for i in range(2):
        for j in range(4):
            s = blocks[0][j] + blocks[1][j]
            np.testing.assert_array_equal(got[i][j], np.stack([s, 2 * s, s]))


def test_float64_becomes_float32(mesh):
    got = per_core(mesh, lambda b: lax.psum(b.astype(np.float64), "x"),
                   sample((4, 16), np.float32))
    assert got[0][0].dtype == np.float32


def test_results_chain_and_are_writable(mesh):
    # A result fed back into a collective is used in place in HBM; results may be modified.
    def body(b):
        y = lax.psum(b, "y")
        y += 1
        return lax.psum(y, "x")
    x = sample((4, 16), np.float32, seed=8)
    blocks = blocks_of(x)
    got = per_core(mesh, body, x)
    want = sum(blocks[i][k] for i in range(2) for k in range(4)) + 2
    np.testing.assert_array_equal(got[1][3], want)


@pytest.mark.parametrize("call", [
    lambda: lax.psum(np.ones(3, np.float32), "x"),
    lambda: lax.psum(1, "x"),
    lambda: lax.all_gather(np.ones(3), ("x", "y")),
    lambda: lax.axis_index("x"),
    lambda: lax.axis_size("y"),
])
def test_unbound_axis_name_outside_shard_map(call):
    with pytest.raises(NameError):
        call()


@pytest.mark.parametrize("call", [
    lambda b: lax.psum(b, "z"),
    lambda b: lax.all_gather(b, ("x", "z")),
    lambda b: lax.axis_index("z"),
])
def test_unknown_axis_inside_shard_map_is_unbound(mesh, call):
    # As JAX, and as outside shard_map: a NameError naming the axis.
    with pytest.raises(NameError, match="'z'"):
        per_core(mesh, call, np.zeros((2, 4), np.float32))


def test_dtype_mismatch_across_cores(mesh):
    def body(b):
        v = b if lax.axis_index("y") == 0 else b.astype(np.int32)
        return lax.psum(v, "y").astype(np.float32)
    with pytest.raises(vtpu.InvalidArgumentError):
        per_core(mesh, body, np.zeros((2, 4), np.float32))
    np.testing.assert_array_equal(per_core(mesh, lambda b: lax.psum(b, "y"),
                                           np.ones((2, 4), np.float32))[0][0], [[4.0]])


def test_bad_arguments(mesh):
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(vtpu.InvalidArgumentError):  # (3, 1) blocks: 3 does not divide by 4
        per_core(mesh, lambda b: lax.psum_scatter(np.zeros((3, 1), np.float32), "y", tiled=True), x)
    with pytest.raises(vtpu.InvalidArgumentError):
        per_core(mesh, lambda b: lax.ppermute(b, "y", [(0, 1), (2, 1)]), x)
    with pytest.raises(vtpu.InvalidArgumentError):
        per_core(mesh, lambda b: lax.all_gather(b, "y", axis=3), x)
    with pytest.raises(vtpu.InvalidArgumentError):
        per_core(mesh, lambda b: lax.psum(b, 7), x)
    with pytest.raises(vtpu.InvalidArgumentError):
        per_core(mesh, lambda b: lax.psum(b.astype(bool), "x"), x)


@pytest.mark.parametrize("perm", [
    [(0.0, 1), (1, 0)], [("0", 1)], [(0, 2**31), (1, 0)], [(True, 1)], [(0, 1, 2)], [0, 1], 5,
])
def test_bad_ppermute_pairs_name_the_entry(mesh, perm):
    with pytest.raises(vtpu.InvalidArgumentError) as e:
        per_core(mesh, lambda b: lax.ppermute(b, "y", perm), np.zeros((2, 4), np.float32))
    bad = perm if perm == 5 else perm[0]
    assert repr(bad) in str(e.value)


def test_ppermute_takes_numpy_integer_indices(mesh):
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    perm = [(np.int64(j), np.int32((j + 1) % 4)) for j in range(4)]
    got = np.array(per_core(mesh, lambda b: lax.ppermute(b, "y", perm), x))
    np.testing.assert_array_equal(got[:, :, 0, 0], np.roll(x, 1, axis=1))


@pytest.mark.parametrize("name", [7, 1.5, None, ("x", 3), b"x"])
def test_bad_axis_name_types_name_the_value(mesh, name):
    with pytest.raises(vtpu.InvalidArgumentError) as e:
        per_core(mesh, lambda b: lax.psum(b, name), np.zeros((2, 4), np.float32))
    assert repr(name) in str(e.value)


def test_big_endian_operands_are_read_by_value(mesh):
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    for dtype in (">f4", ">i4", ">i8"):
        got = np.array(per_core(mesh, lambda b: lax.psum(b.astype(dtype), "y"), x))
        np.testing.assert_array_equal(got[:, :, 0, 0], np.repeat(x.sum(1, keepdims=True), 4, 1))
        got = np.array(per_core(mesh, lambda b: lax.all_gather(b.astype(dtype), "y")[:, 0, 0], x))
        np.testing.assert_array_equal(got[1, 2], x[1])


def test_namedtuples_keep_their_type(mesh):
    import collections
    Pair = collections.namedtuple("Pair", "a b")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    seen = []

    def body(b):
        r = lax.psum(Pair(b, {"c": b * 2}), "y")
        seen.append(r)
        return r.a + r.b["c"]
    got = np.array(per_core(mesh, body, x))
    assert len(seen) == 8 and all(type(r) is Pair and r.a.shape == (1, 1) for r in seen)
    np.testing.assert_array_equal(got[:, :, 0, 0], np.repeat(3 * x.sum(1, keepdims=True), 4, 1))
    got = np.array(per_core(mesh, lambda b: lax.all_gather(Pair(b, b), "y").b[:, 0, 0], x))
    np.testing.assert_array_equal(got[1, 2], x[1])


@pytest.mark.parametrize("cores,shape", [(8, (2, 4)), (64, (8, 8))])
def test_numpy_work_and_collectives_interleave(cores, shape):
    """Many cores alternate numpy work and collectives (the GIL is given up inside each) and agree."""
    rt = vtpu.Runtime(cores=cores, hbm_bytes=16 * MB)
    mesh = vtpu.make_mesh(shape, ("a", "b"), devices=rt.devices())
    n = cores
    x = np.arange(n * 256, dtype=np.float32).reshape(n, 256) % 7

    def body(b):
        acc = b.copy()
        for _ in range(5):
            acc = np.tanh(acc) + lax.psum(acc, ("a", "b")) / n
            acc = lax.pmax(acc, "a") - lax.pmin(acc, "b")
        return acc

    f = vtpu.shard_map(body, mesh=mesh, in_specs=P(("a", "b")), out_specs=P(("a", "b")))
    got = np.asarray(f(x))
    # The same program in numpy, with every core's block a row.
    acc = x.copy()
    grid = lambda v: v.reshape(shape + (256,))
    for _ in range(5):
        acc = np.tanh(acc) + acc.sum(0, keepdims=True) / n
        g = grid(acc)
        acc = (np.broadcast_to(g.max(0, keepdims=True), g.shape) -
               np.broadcast_to(g.min(1, keepdims=True), g.shape)).reshape(n, 256)
    np.testing.assert_allclose(got, acc, rtol=1e-5, atol=1e-5)


def test_psum_on_64_cores():
    rt = vtpu.Runtime(cores=64, hbm_bytes=16 * MB)
    mesh = vtpu.make_mesh((64,), ("i",), devices=rt.devices())
    x = np.arange(64 * 1000, dtype=np.float32).reshape(64, 1000) % 13
    f = vtpu.shard_map(lambda b: lax.psum(b, "i"), mesh=mesh, in_specs=P("i"), out_specs=P())
    np.testing.assert_array_equal(np.asarray(f(x)), x.sum(0, keepdims=True))
