"""vtpu.shard_map: inputs, outputs, specs, errors and recovery, checked against numpy."""

import threading
import time

import numpy as np
import pytest

import vtpu
from vtpu import lax

P = vtpu.P
MB = 1 << 20
TIMEOUT_MS = 5000


@pytest.fixture(scope="module")
def rt():
    return vtpu.Runtime(cores=8, hbm_bytes=64 * MB, collective_timeout_ms=TIMEOUT_MS)


@pytest.fixture(scope="module")
def mesh(rt):
    return vtpu.make_mesh((2, 4), ("x", "y"), devices=rt.devices())


def psum_rows(mesh):
    return vtpu.shard_map(lambda b: lax.psum(b, "x"), mesh=mesh, in_specs=P("x", "y"),
                          out_specs=P(None, "y"))


def test_numpy_and_array_inputs(mesh):
    x = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    f = psum_rows(mesh)
    want = x[:4] + x[4:]
    out = f(x)
    assert isinstance(out, vtpu.Array)
    assert tuple(out.shape) == (4, 16)
    np.testing.assert_array_equal(np.asarray(out), want)
    a = vtpu.device_put(x, vtpu.NamedSharding(mesh, P("x", "y")))
    np.testing.assert_array_equal(np.asarray(f(a)), want)
    # An array laid out otherwise is resharded to the in spec first.
    b = vtpu.device_put(x, vtpu.NamedSharding(mesh, P("y", None)))
    np.testing.assert_array_equal(np.asarray(f(b)), want)


def test_blocks_are_the_in_spec_blocks(mesh):
    x = np.arange(8 * 12, dtype=np.int64).reshape(8, 12)
    seen = {}

    def f(b):
        seen[(lax.axis_index("x"), lax.axis_index("y"))] = b.copy()
        return b
    out = vtpu.shard_map(f, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y"))(x)
    np.testing.assert_array_equal(np.asarray(out), x)
    for (i, j), b in seen.items():
        np.testing.assert_array_equal(b, x[4 * i:4 * i + 4, 3 * j:3 * j + 3])
    assert len(seen) == 8


def test_several_inputs_and_outputs(mesh):
    x = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    y = np.arange(4, dtype=np.int32)

    def f(a, b):
        return a * 2, b + lax.axis_index("y"), lax.psum(a, ("x", "y"))
    g = vtpu.shard_map(f, mesh=mesh, in_specs=(P(("x", "y")), P()),
                       out_specs=(P(("x", "y")), P("y"), P()))
    r = g(x, y)
    assert isinstance(r, tuple) and len(r) == 3
    np.testing.assert_array_equal(np.asarray(r[0]), x * 2)
    np.testing.assert_array_equal(np.asarray(r[1]), np.concatenate([y + j for j in range(4)]))
    np.testing.assert_array_equal(np.asarray(r[2]), x.sum(0, keepdims=True))
    # One P for every input.
    h = vtpu.shard_map(lambda a, b: a + b, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    np.testing.assert_array_equal(np.asarray(h(x, x)), 2 * x)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint16, np.int32, np.int64])
def test_dtypes_round_trip(mesh, dtype):
    x = (np.arange(8 * 8) % 251).astype(dtype).reshape(8, 8)
    out = vtpu.shard_map(lambda b: b, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y"))(x)
    got = np.asarray(out)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, x)


def test_float64_output_becomes_float32(mesh):
    out = vtpu.shard_map(lambda b: b.astype(np.float64) / 2, mesh=mesh, in_specs=P("x"),
                         out_specs=P("x"))(np.ones((2, 3), np.float32))
    assert np.asarray(out).dtype == np.float32
    np.testing.assert_array_equal(np.asarray(out), np.full((2, 3), 0.5, np.float32))


def test_input_views_are_read_only(mesh):
    def f(b):
        with pytest.raises(ValueError):
            b[0] = 1
        return b
    vtpu.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(np.zeros((2, 3), np.float32))


def test_views_kept_after_return_stay_valid(mesh):
    kept = []
    x = np.arange(8 * 2, dtype=np.float32).reshape(8, 2)
    a = vtpu.device_put(x, vtpu.NamedSharding(mesh, P(("x", "y"))))

    def f(b):
        kept.append((lax.axis_index(("x", "y")), b, lax.psum(b, "y")))
        return b
    vtpu.shard_map(f, mesh=mesh, in_specs=P(("x", "y")), out_specs=P(("x", "y")))(a)
    a.delete()
    # Other calls allocate and free on the same cores meanwhile.
    for _ in range(3):
        psum_rows(mesh)(np.ones((8, 16), np.float32))
    for k, view, total in kept:
        np.testing.assert_array_equal(view, x[k:k + 1])
        row = k // 4
        np.testing.assert_array_equal(total, x[4 * row:4 * row + 4].sum(0, keepdims=True))


def test_exception_on_one_core_reaches_the_caller(mesh):
    class Boom(Exception):
        pass

    def f(b):
        if lax.axis_index(("x", "y")) == 3:
            raise Boom("core 3 failed")
        return lax.psum(b, ("x", "y"))  # the others wait here until released
    g = vtpu.shard_map(f, mesh=mesh, in_specs=P("x", "y"), out_specs=P())
    t0 = time.monotonic()
    with pytest.raises(Boom) as e:
        g(np.ones((2, 4), np.float32))
    assert time.monotonic() - t0 < TIMEOUT_MS / 1000
    assert e.value.args == ("core 3 failed",)
    # The runtime and the mesh work again.
    np.testing.assert_array_equal(np.asarray(psum_rows(mesh)(np.ones((8, 16), np.float32))),
                                  np.full((4, 16), 2.0, np.float32))


def test_value_error_on_core_3_then_psum(mesh):
    def f(b):
        if lax.axis_index(("x", "y")) == 3:
            raise ValueError("bad value on core 3")
        return lax.psum(b, "y")
    t0 = time.monotonic()
    with pytest.raises(ValueError) as e:
        vtpu.shard_map(f, mesh=mesh, in_specs=P("x", "y"), out_specs=P("x"))(
            np.ones((2, 4), np.float32))
    assert time.monotonic() - t0 < TIMEOUT_MS / 1000
    assert type(e.value) is ValueError and str(e.value) == "bad value on core 3"
    x = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    np.testing.assert_array_equal(np.asarray(psum_rows(mesh)(x)), x[:4] + x[4:])


def test_core_returning_before_a_collective_fails_its_peers_at_once():
    rt = vtpu.Runtime(cores=4, hbm_bytes=16 * MB, collective_timeout_ms=60000)
    mesh = vtpu.make_mesh((4,), ("i",), devices=rt.devices())

    def f(b):
        if lax.axis_index("i") == 2:
            return b  # skips the psum the others wait in
        return lax.psum(b, "i")
    t0 = time.monotonic()
    with pytest.raises(vtpu.InvalidArgumentError, match="core 2"):
        vtpu.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(np.ones((4, 2), np.float32))
    assert time.monotonic() - t0 < 5  # not the 60 s collective timeout
    g = vtpu.shard_map(lambda b: lax.psum(b, "i"), mesh=mesh, in_specs=P("i"), out_specs=P())
    np.testing.assert_array_equal(np.asarray(g(np.ones((4, 2), np.float32))), [[4.0, 4.0]])


def test_collective_deadline_is_timeout_error():
    rt = vtpu.Runtime(cores=4, hbm_bytes=16 * MB, collective_timeout_ms=300)
    mesh = vtpu.make_mesh((4,), ("i",), devices=rt.devices())

    def f(b):
        if lax.axis_index("i") == 2:
            time.sleep(1.0)  # joins the psum after the others' deadline
        return lax.psum(b, "i")
    t0 = time.monotonic()
    with pytest.raises(TimeoutError) as e:
        vtpu.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P("i"))(np.ones((4, 2), np.float32))
    assert isinstance(e.value, vtpu.DeadlineExceededError)
    assert time.monotonic() - t0 < 10
    g = vtpu.shard_map(lambda b: lax.psum(b, "i"), mesh=mesh, in_specs=P("i"), out_specs=P())
    np.testing.assert_array_equal(np.asarray(g(np.ones((4, 2), np.float32))), [[4.0, 4.0]])


def test_check_vma(mesh):
    f = lambda b: b + lax.axis_index("y")
    with pytest.raises(ValueError) as e:
        vtpu.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(np.zeros((2, 3), np.int32))
    assert isinstance(e.value, vtpu.InvalidArgumentError) and "'y'" in str(e.value)
    # Without the check, index 0 along the unnamed axis supplies the block.
    out = vtpu.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                         check_vma=False)(np.zeros((2, 3), np.int32))
    np.testing.assert_array_equal(np.asarray(out), np.zeros((2, 3), np.int32))


def test_bad_calls(mesh):
    f = vtpu.shard_map(lambda b: b, mesh=mesh, in_specs=(P("x"),), out_specs=P("x"))
    with pytest.raises(ValueError):
        f(np.ones((8, 16), np.float32), np.ones((8, 16), np.float32))
    with pytest.raises(ValueError):
        vtpu.shard_map(lambda b: b, mesh=mesh, in_specs=P("z"), out_specs=P())
    with pytest.raises(ValueError):
        vtpu.shard_map(lambda b: b, mesh=mesh, in_specs="x", out_specs=P())
    with pytest.raises(ValueError):  # two outputs promised, one returned
        vtpu.shard_map(lambda b: b, mesh=mesh, in_specs=P("x"),
                       out_specs=(P("x"), P("x")))(np.ones((2, 2), np.float32))
    with pytest.raises(ValueError):  # cores return different shapes
        vtpu.shard_map(lambda b: np.zeros(lax.axis_index("x") + 1, np.float32), mesh=mesh,
                       in_specs=P("x"), out_specs=P("x"))(np.ones((2, 2), np.float32))


def test_shard_map_inside_shard_map_is_refused(mesh):
    inner = psum_rows(mesh)

    def f(b):
        inner(np.ones((8, 16), np.float32))
        return b
    with pytest.raises(vtpu.FailedPreconditionError):
        vtpu.shard_map(f, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(np.ones((2, 2), np.float32))


def run_in_threads(*bodies):
    """Runs each body on its own thread; returns the exceptions they raised."""
    errors = []

    def guarded(body):
        try:
            body()
        except Exception as e:  # noqa: BLE001 - returned to the test
            errors.append(e)
    threads = [threading.Thread(target=guarded, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_calls_from_several_host_threads(mesh):
    x = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    f = psum_rows(mesh)

    def worker():
        for _ in range(5):
            np.testing.assert_array_equal(np.asarray(f(x)), x[:4] + x[4:])
    assert run_in_threads(worker, worker, worker) == []


def test_docstrings():
    assert "in_specs" in vtpu.shard_map.__doc__ and "out_specs" in vtpu.shard_map.__doc__
    for name in lax.__all__:
        assert getattr(lax, name).__doc__, name


def test_traceback_reaches_into_f(mesh):
    import traceback

    def f_that_raises(b):
        raise KeyError("always")
    with pytest.raises(KeyError) as e:
        vtpu.shard_map(f_that_raises, mesh=mesh, in_specs=P("x"), out_specs=P("x"))(
            np.ones((2, 2), np.float32))
    assert "f_that_raises" in "".join(traceback.format_tb(e.value.__traceback__))


EXIT_AFTER_FAILURES = """
import numpy as np, vtpu
rt = vtpu.Runtime(cores=8, hbm_bytes=16 << 20)
mesh = vtpu.make_mesh((8,), ("i",), devices=rt.devices())
def f(b):
    if vtpu.lax.axis_index("i") == 3:
        raise KeyError("core 3")
    return vtpu.lax.psum(b, "i")
for _ in range(100):
    try:
        vtpu.shard_map(f, mesh=mesh, in_specs=vtpu.P("i"), out_specs=vtpu.P())(np.ones(8, np.float32))
    except KeyError:
        pass
"""


def run_python(code, timeout=120):
    """Runs `code` in a new interpreter; returns its stdout, asserting it exited with 0."""
    import os
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ), capture_output=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    return r.stdout.decode()


def test_process_exits_cleanly_after_failures():
    # Core threads once dropped f's exceptions after the interpreter had finalised (terminate).
    for _ in range(3):
        run_python(EXIT_AFTER_FAILURES)


def test_failure_before_the_first_collective_releases_the_others(rt):
    # Cores once waited for the timeout in a communicator made after another core had failed
    # (the runtime aborts only those that exist when it fails). A new mesh has none yet.
    def f(b):
        if lax.axis_index("i") == 3:
            raise ValueError("core 3")
        return lax.psum(b, "i")
    for _ in range(20):
        mesh = vtpu.make_mesh((8,), ("i",), devices=rt.devices())
        t0 = time.monotonic()
        with pytest.raises(ValueError):
            vtpu.shard_map(f, mesh=mesh, in_specs=P("i"), out_specs=P())(np.ones(8, np.float32))
        assert time.monotonic() - t0 < TIMEOUT_MS / 1000 / 2


class _Raises:
    def __array__(self, *args):
        raise RuntimeError("no array")


@pytest.mark.parametrize("bad,error", [
    ([[1, 2], [3]], ValueError), (_Raises(), RuntimeError),
    (np.broadcast_to(np.float32(1), (2**33,)), MemoryError),
])
@pytest.mark.parametrize("use", [lambda v: (v,), lambda v: (lax.psum(v, "x"),)])
def test_outputs_and_operands_numpy_cannot_make_raise_numpys_error(mesh, bad, error, use):
    f = vtpu.shard_map(lambda b: use(bad), mesh=mesh, in_specs=P("x"), out_specs=(P("x"),))
    with pytest.raises(error):
        f(np.ones((2, 2), np.float32))
    np.testing.assert_array_equal(np.asarray(psum_rows(mesh)(np.ones((8, 16), np.float32))), 2.0)


@pytest.mark.parametrize("dtype", [">f4", ">i4", ">i8", ">f2"])
def test_big_endian_outputs_keep_their_values(mesh, dtype):
    x = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    f = vtpu.shard_map(lambda b: b.astype(dtype), mesh=mesh, in_specs=P("x", "y"),
                       out_specs=P("x", "y"))
    np.testing.assert_array_equal(np.asarray(f(x)), x.astype(dtype))


def test_none_mesh_is_a_type_error():
    with pytest.raises(TypeError, match="None"):
        vtpu.shard_map(lambda b: b, mesh=None, in_specs=P(), out_specs=P())
    with pytest.raises(TypeError, match="None"):
        vtpu._vtpu._bench_psum_cpp(None, 1024, 1, "x")


EXIT_WHILE_RUNNING = """
import numpy as np, vtpu, threading, time
from vtpu import P, lax
rt = vtpu.Runtime(cores=2, hbm_bytes="64M")
m = vtpu.make_mesh((2,), ("a",), runtime=rt)
fn = vtpu.shard_map(lambda b: lax.psum(b * 2, "a"), mesh=m, in_specs=P("a"), out_specs=P())
threading.Thread(target=lambda: [fn(np.ones((2, 2), np.float32)) for _ in iter(int, 1)],
                 daemon=True).start()
time.sleep(0.3)
"""


def test_process_exits_cleanly_while_a_daemon_thread_is_in_shard_map():
    # A core taking the GIL once Python finalized was ended inside C++ frames (terminate).
    for _ in range(10):
        run_python(EXIT_WHILE_RUNNING, timeout=60)


def test_a_failing_call_does_not_fail_concurrent_calls_on_its_cores(rt, mesh):
    x = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    good = psum_rows(mesh)

    def raises(b):
        if lax.axis_index("y") == 1:
            raise KeyError("core")
        return lax.psum(b, "x")
    # The failing calls run on the same mesh and on another mesh over the same cores.
    other = vtpu.make_mesh((2, 4), ("x", "y"), devices=rt.devices())
    bad = [vtpu.shard_map(raises, mesh=m, in_specs=P("x", "y"), out_specs=P(None, "y"))
           for m in (mesh, other)]

    def good_worker():
        for _ in range(30):
            np.testing.assert_array_equal(np.asarray(good(x)), x[:4] + x[4:])

    def bad_worker():
        for k in range(30):
            with pytest.raises(KeyError):
                bad[k % 2](x)
    assert run_in_threads(good_worker, good_worker, bad_worker) == []


def test_single_out_spec_is_a_prefix_for_a_tuple_or_list(mesh):
    x = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    f = vtpu.shard_map(lambda b: (b, b * 2, lax.psum(b, "x")), mesh=mesh, in_specs=P("x", "y"),
                       out_specs=P("x", "y"))
    out = f(x)
    assert type(out) is tuple and len(out) == 3
    np.testing.assert_array_equal(np.asarray(out[0]), x)
    np.testing.assert_array_equal(np.asarray(out[1]), 2 * x)
    rows = x.reshape(2, 4, 4).sum(0)
    np.testing.assert_array_equal(np.asarray(out[2]), np.concatenate([rows, rows]))
    g = vtpu.shard_map(lambda b: [b], mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y"))
    out = g(x)
    assert type(out) is list and len(out) == 1
    np.testing.assert_array_equal(np.asarray(out[0]), x)


@pytest.mark.parametrize("result,name", [
    (lambda b: None, "NoneType"), (lambda b: {"a": b}, "dict"), (lambda b: (v for v in [b]), "generator"),
    (lambda b: (b, None), "NoneType"),
])
def test_non_array_results_name_their_type(mesh, result, name):
    f = vtpu.shard_map(result, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    with pytest.raises(vtpu.InvalidArgumentError, match=name):
        f(np.ones((2, 2), np.float32))
    f = vtpu.shard_map(result, mesh=mesh, in_specs=P("x"), out_specs=(P("x"),))
    with pytest.raises(vtpu.InvalidArgumentError, match=name):
        f(np.ones((2, 2), np.float32))


def test_f_must_be_callable_and_is_wrapped(mesh):
    with pytest.raises(TypeError, match="3"):
        vtpu.shard_map(3, mesh=mesh, in_specs=P("x"), out_specs=P("x"))

    def double(b):
        """Twice the block."""
        return b * 2
    f = vtpu.shard_map(double, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    assert f.__name__ == "double" and f.__doc__ == "Twice the block." and f.__wrapped__ is double
    assert "double" in repr(f) and "PartitionSpec('x'" in repr(f)

    @vtpu.shard_map(mesh=mesh, in_specs=P("x"), out_specs=P("x"))
    def triple(b):
        return b * 3
    assert triple.__name__ == "triple"
    np.testing.assert_array_equal(np.asarray(triple(np.ones((8, 2), np.float32))), 3.0)
    np.testing.assert_array_equal(np.asarray(f(np.ones((8, 2), np.float32))), 2.0)


@pytest.mark.parametrize("in_specs,bad", [
    ((P(), 1), "1"), ([P("x"), "y"], "'y'"), (P(unreduced=("x",)), "unreduced"),
])
def test_bad_in_specs_name_the_spec(mesh, in_specs, bad):
    with pytest.raises(vtpu.InvalidArgumentError) as e:
        vtpu.shard_map(lambda *b: b[0], mesh=mesh, in_specs=in_specs, out_specs=P())
    assert bad in str(e.value)


KEYBOARD_INTERRUPT = """
import os, signal, threading, time, numpy as np, vtpu
from vtpu import P, lax
rt = vtpu.Runtime(cores=2, hbm_bytes="64M", collective_timeout_ms=60000)
m = vtpu.make_mesh((2,), ("a",), runtime=rt)
def f(b):
    if lax.axis_index("a") == 0:
        while True:  # loops in Python
            pass
    return lax.psum(b, "a")  # waits for core 0
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
t0 = time.monotonic()
try:
    vtpu.shard_map(f, mesh=m, in_specs=P("a"), out_specs=P())(np.ones(2, np.float32))
except KeyboardInterrupt:
    print("interrupted after", time.monotonic() - t0)
g = vtpu.shard_map(lambda b: lax.psum(b, "a"), mesh=m, in_specs=P("a"), out_specs=P())
print("then", np.asarray(g(np.ones(2, np.float32))).tolist())
"""


def test_ctrl_c_interrupts_a_call():
    out = run_python(KEYBOARD_INTERRUPT, timeout=60)
    assert float(out.split("interrupted after")[1].split()[0]) < 5
    assert "then [2.0]" in out


def test_runtimes_of_other_sizes_made_one_after_another():
    # A runtime may be made where a destroyed one of fewer cores was: its calls must not use the
    # old one's per-core state.
    for cores in (1, 2, 4, 8, 2, 8):
        rt = vtpu.Runtime(cores=cores, hbm_bytes=4 * MB)
        m = vtpu.make_mesh((cores,), ("i",), devices=rt.devices())
        f = vtpu.shard_map(lambda b: lax.psum(b, "i"), mesh=m, in_specs=P("i"), out_specs=P())
        assert np.asarray(f(np.ones(cores, np.float32))).tolist() == [float(cores)]
        del f, m, rt
