"""vtpu.Runtime, Mesh, PartitionSpec, NamedSharding, device_put and Array against numpy."""

import itertools

import numpy as np
import pytest

import vtpu


@pytest.fixture(scope="module")
def rt():
    return vtpu.Runtime(cores=8, hbm_bytes="64M")


@pytest.fixture(scope="module")
def mesh(rt):
    return vtpu.make_mesh((4, 2), ("x", "y"), devices=rt.devices())


def every_spec_2d():
    entries = [None, "x", "y", ("x", "y"), ("y", "x")]
    for a, b in itertools.product(entries, repeat=2):
        named = [n for e in (a, b) if e is not None for n in ((e,) if isinstance(e, str) else e)]
        if len(named) == len(set(named)):  # an axis may split one dimension only
            yield vtpu.P(a, b)


def random_array(shape, dtype, rng):
    if dtype == "bf16":
        return rng.integers(0, 1 << 16, size=shape, dtype=np.uint16)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, "bf16", np.int32, np.int64])
@pytest.mark.parametrize("shape", [(8, 4), (7, 5), (1, 3), (0, 4)])
def test_device_put_round_trips_bit_for_bit_for_every_spec(mesh, dtype, shape):
    rng = np.random.default_rng(len(shape) * 100 + shape[0])
    x = random_array(shape, dtype, rng)
    for spec in every_spec_2d():
        a = vtpu.device_put(x, vtpu.NamedSharding(mesh, spec),
                            dtype="bf16" if dtype == "bf16" else None)
        back = np.asarray(a)
        assert back.dtype == x.dtype and back.shape == x.shape, spec
        assert back.tobytes() == x.tobytes(), spec


def test_rank_1_and_rank_3_round_trip(mesh):
    x = np.arange(11, dtype=np.int32)
    for spec in [vtpu.P(), vtpu.P("x"), vtpu.P(("x", "y"))]:
        assert np.array_equal(np.asarray(vtpu.device_put(x, vtpu.NamedSharding(mesh, spec))), x)
    y = np.arange(4 * 3 * 2, dtype=np.float32).reshape(4, 3, 2)
    a = vtpu.device_put(y, vtpu.NamedSharding(mesh, vtpu.P("x", None, "y")))
    assert np.array_equal(np.asarray(a), y)


def test_a_0d_array_keeps_the_shape_of_a_scalar_as_in_jax(mesh):
    s = vtpu.NamedSharding(mesh, vtpu.P())
    for value in (np.float32(2.5), np.array(7, np.int32), 4):
        x = vtpu.device_put(value, s)
        assert x.shape == () and x.ndim == 0 and x.size == 1
        assert np.asarray(x).shape == () and np.asarray(x) == np.asarray(value)
    with pytest.raises(TypeError):
        len(vtpu.device_put(np.float32(1), s))


def test_addressable_shards_tile_the_array_as_devices_indices_map_says(mesh):
    x = np.arange(7 * 5, dtype=np.float32).reshape(7, 5)
    s = vtpu.NamedSharding(mesh, vtpu.P("x", "y"))
    a = vtpu.device_put(x, s)
    indices = s.devices_indices_map(x.shape)
    assert len(a.addressable_shards) == 8
    for shard in a.addressable_shards:
        assert shard.index == indices[shard.device]
        assert np.array_equal(shard.data, x[shard.index])
        assert shard.replica_id == 0
    # Rows 7 over 4 shards: ceil(7/4) = 2, so the blocks have 2, 2, 2 and 1 rows.
    assert [a.addressable_shards[2 * i].data.shape[0] for i in range(4)] == [2, 2, 2, 1]
    assert s.shard_shape((7, 5)) == (2, 3)


def test_replicas_get_replica_ids(mesh):
    a = vtpu.device_put(np.ones((4, 2), np.float32), vtpu.NamedSharding(mesh, vtpu.P("x")))
    assert [s.replica_id for s in a.addressable_shards] == [0, 1] * 4


def test_array_attributes(mesh):
    x = np.zeros((6, 4), np.float16)
    s = vtpu.NamedSharding(mesh, vtpu.P("y"))
    a = vtpu.device_put(x, s)
    assert a.shape == (6, 4) and a.dtype == np.float16 and a.ndim == 2
    assert a.size == 24 and a.nbytes == 48 and len(a) == 6
    assert a.sharding == s and a.element_type == "f16"
    assert a.block_until_ready() is a
    a.delete()
    assert a.is_deleted()
    with pytest.raises(vtpu.FailedPreconditionError):
        np.asarray(a)


def test_float64_is_stored_as_float32_and_bf16_rounds_to_nearest_even(mesh):
    s = vtpu.NamedSharding(mesh, vtpu.P())
    assert vtpu.device_put(np.array([1.5, 2.0]), s).dtype == np.float32
    # 1 + 2^-8 is halfway between bf16 1.0 (0x3F80) and 1 + 2^-7 (0x3F81): ties go to even.
    a = vtpu.device_put(np.array([1.0, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8], np.float32), s,
                        dtype="bf16")
    assert a.element_type == "bf16"
    assert np.asarray(a).tolist() == [0x3F80, 0x3F80, 0x3F82]


def test_reshard_by_device_put_of_an_array(mesh):
    x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    a = vtpu.device_put(x, vtpu.NamedSharding(mesh, vtpu.P("x", "y")))
    b = vtpu.device_put(a, vtpu.NamedSharding(mesh, vtpu.P("y", None)))
    assert b.sharding.spec == vtpu.P("y", None)
    assert np.array_equal(np.asarray(b), x)


def test_partition_spec_behaves_like_jax(mesh):
    p = vtpu.P("x", None, ("x", "y"))
    assert len(p) == 3 and p[0] == "x" and p[1] is None and p[2] == ("x", "y") and p[-1] == p[2]
    assert repr(p) == "PartitionSpec('x', None, ('x', 'y'))"
    assert vtpu.P("x") == vtpu.PartitionSpec("x") and vtpu.P("x") != vtpu.P("y")
    with pytest.raises(ValueError):
        vtpu.P(3)


def test_mesh_from_a_device_array(rt):
    devices = np.array(rt.devices()[:4], dtype=object).reshape(2, 2)
    m = vtpu.Mesh(devices, ("a", "b"))
    assert m.shape == {"a": 2, "b": 2} and m.axis_names == ("a", "b") and m.size == 4
    assert m.device_ids.tolist() == [[0, 1], [2, 3]]
    assert [d.id for d in m.devices.ravel()] == [0, 1, 2, 3]


def test_bad_input_raises_the_error_class_naming_the_value(rt, mesh):
    with pytest.raises(vtpu.InvalidArgumentError) as e:
        vtpu.make_mesh((4, 4), ("x", "y"), devices=rt.devices())
    assert "16" in str(e.value)
    with pytest.raises(ValueError) as e:
        vtpu.device_put(np.zeros(3, np.int8), vtpu.NamedSharding(mesh, vtpu.P()))
    assert "int8" in str(e.value) and e.value.code == "InvalidArgument"
    with pytest.raises(ValueError) as e:
        vtpu.NamedSharding(mesh, vtpu.P("z"))
    with pytest.raises(ValueError) as e:
        vtpu.Runtime(cores=0)
    with pytest.raises(ValueError) as e:
        vtpu.Runtime(no_such_option=1)
    assert "no_such_option" in str(e.value)


def test_out_of_memory_is_a_memory_error_with_the_report():
    rt = vtpu.Runtime(cores=8, hbm_bytes="64M")
    mesh = vtpu.make_mesh((8,), ("x",), devices=rt.devices())
    with pytest.raises(MemoryError) as e:
        vtpu.device_put(np.zeros((1 << 16, 512), np.float32), vtpu.NamedSharding(mesh, vtpu.P()))
    err = e.value
    assert isinstance(err, vtpu.ResourceExhaustedError) and err.code == "ResourceExhausted"
    assert err.requested_bytes == (1 << 16) * 512 * 4
    assert err.bytes_limit == 64 << 20
    assert err.report["requested_bytes"] == err.requested_bytes
    # Nothing stays allocated after a failed device_put.
    assert [d.memory_stats()["bytes_in_use"] for d in rt.devices()] == [0] * 8


def test_memory_stats_count_the_padded_blocks():
    r = vtpu.Runtime(cores=2, hbm_bytes="16M")
    m = vtpu.make_mesh((2,), ("x",), devices=r.devices())
    before = r.devices()[0].memory_stats()["bytes_in_use"]
    a = vtpu.device_put(np.zeros((10, 100), np.float32), vtpu.NamedSharding(m, vtpu.P("x")))
    # Each core holds f32[5,100], stored under the TPU tile (8,128): 8 x 128 x 4 = 4096 bytes.
    assert r.devices()[0].memory_stats()["bytes_in_use"] - before == 4096
    a.delete()
    assert r.devices()[0].memory_stats()["bytes_in_use"] == before


def test_runtime_options_and_config_file(tmp_path):
    cfg = tmp_path / "rt.json"
    cfg.write_text('{"num_cores": 2, "hbm_bytes_per_core": "8M", "pad_arrays": false}')
    r = vtpu.Runtime(config=str(cfg), allocator="first_fit")
    assert r.num_cores == 2 and len(r.devices()) == 2
    assert r.options["hbm_bytes_per_core"] == 8 << 20 and r.options["pad_arrays"] is False
    assert r.options["allocator"] == "first_fit"
    with pytest.raises(FileNotFoundError):
        vtpu.Runtime(config=str(tmp_path / "missing.json"))


def test_memory_profile_writers(rt, tmp_path):
    rt.save_device_memory_profile(str(tmp_path / "p.prof"))
    assert (tmp_path / "p.prof").read_bytes()[:2] == b"\x1f\x8b"  # gzip
    rt.save_memory_snapshot(str(tmp_path / "s.json"))
    assert (tmp_path / "s.json").stat().st_size > 0


def test_dtype_converts_values_and_uint16_is_bf16_bits(mesh):
    s = vtpu.NamedSharding(mesh, vtpu.P())
    # 257 is not a bf16 value: it rounds to 256 (0x4380); 1 and 3 are 0x3F80 and 0x4040.
    a = vtpu.device_put(np.array([1, 3, 257], np.int32), s, dtype="bf16")
    assert np.asarray(a).tolist() == [0x3F80, 0x4040, 0x4380]
    # bf16 bits of 1.0 and -2.5 converted to float32 by value.
    b = vtpu.device_put(np.array([0x3F80, 0xC020], np.uint16), s, dtype=np.float32)
    assert np.asarray(b).tolist() == [1.0, -2.5]


def test_big_endian_and_strided_input_are_read_by_value(mesh):
    s = vtpu.NamedSharding(mesh, vtpu.P("x"))
    x = np.arange(8, dtype=">f4")
    assert np.asarray(vtpu.device_put(x, s)).tolist() == list(range(8))
    y = np.arange(16, dtype=np.int32)[::-2]
    assert np.asarray(vtpu.device_put(y, s)).tolist() == y.tolist()


def test_inputs_that_are_not_numeric_arrays_raise(rt, mesh):
    s = vtpu.NamedSharding(mesh, vtpu.P())
    with pytest.raises(ValueError):  # numpy's own error for a ragged list
        vtpu.device_put([[1, 2], [3]], s)
    with pytest.raises(vtpu.InvalidArgumentError) as e:
        vtpu.device_put({"a": 1}, s)
    assert "dict" in str(e.value)
    with pytest.raises(vtpu.InvalidArgumentError):
        vtpu.device_put(np.array([1 + 2j]), s)
    with pytest.raises(MemoryError):  # 32 GiB cannot be made contiguous
        vtpu.device_put(np.broadcast_to(np.float32(1), (2**33,)), s)
    with pytest.raises(TypeError):
        vtpu.NamedSharding(None, vtpu.P())
    with pytest.raises(vtpu.InvalidArgumentError) as e:
        vtpu.Mesh(np.arange(2), ("a",))
    assert "int" in str(e.value)
    with pytest.raises(vtpu.InvalidArgumentError) as e:
        vtpu.make_mesh((2**62, 4), ("a", "b"), devices=rt.devices())
    assert str(2**62) in str(e.value)
    with pytest.raises(vtpu.InvalidArgumentError) as e:
        vtpu.make_mesh((8,), ("a", 1), devices=rt.devices())
    with pytest.raises(vtpu.InvalidArgumentError) as e:
        vtpu.P("x", unreduced=(1,))
    assert vtpu.P("x", unreduced="y").unreduced == ("y",)
    with pytest.raises(vtpu.InvalidArgumentError) as e:
        vtpu.Runtime(cores=2, collective_timeout_ms=float("nan"))
    assert "collective_timeout_ms" in str(e.value)


def test_every_error_class_has_a_docstring_and_its_builtin_base():
    bases = {"InvalidArgumentError": ValueError, "ResourceExhaustedError": MemoryError,
             "DeadlineExceededError": TimeoutError, "AbortedError": RuntimeError,
             "FailedPreconditionError": RuntimeError, "UnimplementedError": NotImplementedError,
             "InternalError": RuntimeError, "NotFoundError": FileNotFoundError,
             "PermissionDeniedError": PermissionError}
    for name, builtin in bases.items():
        cls = getattr(vtpu, name)
        assert issubclass(cls, vtpu.Error) and issubclass(cls, builtin), name
        assert cls.__doc__, name


def test_event_log_needs_recording(tmp_path):
    r = vtpu.Runtime(cores=1, hbm_bytes="1M")
    with pytest.raises(vtpu.FailedPreconditionError):
        r.save_memory_event_log(str(tmp_path / "e.jsonl"))
    assert not (tmp_path / "e.jsonl").exists()
    r2 = vtpu.Runtime(cores=1, hbm_bytes="1M", record_memory_events=True)
    r2.save_memory_event_log(str(tmp_path / "e.jsonl"))
    assert (tmp_path / "e.jsonl").exists()
