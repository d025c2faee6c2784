"""vtpu.memory: one arena with a chosen policy, worked by hand, and trace replay against the CLI."""

import json
import os
import pathlib
import subprocess

import pytest

import vtpu
from vtpu.memory import Arena, Buffer, POLICIES, replay_trace

SOURCE = pathlib.Path(os.environ.get("VTPU_SOURCE_DIR", pathlib.Path(__file__).parents[2]))
TRACES = SOURCE / "data" / "traces"
KIB = 1024


def vtpu_binary():
    # build/python/vtpu/_vtpu*.so -> build/vtpu
    ext = pathlib.Path(vtpu._vtpu.__file__)
    return ext.parents[2] / "vtpu"


def three_with_middle_freed(policy="bfc", **options):
    """A 1 KiB arena holding 256-byte buffers at 0 and 512, the one at 256 freed."""
    arena = Arena("1K", policy=policy, **options)
    a, b, c = (arena.alloc(256, label=name) for name in "abc")
    b.free()
    return arena, a, b, c


def test_policies_are_the_cpp_names():
    assert set(POLICIES) == {"bfc", "tlsf", "first_fit", "buddy"}


def test_import_forms():
    import vtpu.memory as m

    assert m.Arena is vtpu.memory.Arena is Arena
    assert isinstance(Arena(4 * KIB).alloc(1), Buffer)


@pytest.mark.parametrize("policy", ["bfc", "first_fit", "tlsf"])
def test_alloc_256_x3_free_middle(policy):
    arena, a, _, c = three_with_middle_freed(policy)
    # Free: [256, 512) and [768, 1024), two 256-byte holes that are not neighbours.
    assert (a.offset, c.offset) == (0, 512)
    assert arena.total_free_bytes == 512
    assert arena.largest_free_block_bytes == 256
    assert arena.fragmentation == pytest.approx(1 - 256 / 512)
    s = arena.stats()
    assert s["bytes_in_use"] == 512
    assert s["peak_bytes_in_use"] == 768
    assert s["bytes_limit"] == 1024
    assert s["largest_free_block_bytes"] == 256
    assert s["num_allocs"] == 3
    assert s["num_frees"] == 1
    assert s["fragmentation"] == pytest.approx(0.5)
    assert arena.memory_stats() == s
    assert [(b["offset"], b["size"], b["state"]) for b in arena.blocks()] == [
        (0, 256, "active_allocated"),
        (256, 256, "inactive"),
        (512, 256, "active_allocated"),
        (768, 256, "inactive"),
    ]
    assert [b["label"] for b in arena.blocks()] == ["a", "", "c", ""]
    arena.check_consistency()


def test_jax_memory_stats_keys():
    keys = set(Arena("1M").stats())
    assert {"bytes_in_use", "peak_bytes_in_use", "bytes_limit", "largest_alloc_size",
            "largest_free_block_bytes", "num_allocs", "bytes_reserved", "peak_bytes_reserved",
            "bytes_reservable_limit", "pool_bytes", "peak_pool_bytes"} <= keys


def test_fragmentation_oom_report_worked_by_hand():
    arena, *_ = three_with_middle_freed(auto_defragment=False)
    with pytest.raises(vtpu.ResourceExhaustedError) as info:
        arena.alloc(512, label="big")
    e = info.value
    assert isinstance(e, MemoryError)
    # 512 free bytes in two 256-byte holes: the request fits the total but no block.
    assert e.requested_bytes == 512
    assert e.rounded_bytes == 512
    assert e.bytes_in_use == 512
    assert e.bytes_limit == 1024
    assert e.total_free_bytes == 512
    assert e.largest_free_block_bytes == 256
    assert e.fragmentation == pytest.approx(0.5)
    assert e.label == "big"
    assert e.policy == "bfc"
    assert e.report["requested_bytes"] == 512
    assert sorted(b["size_bytes"] for b in e.largest_live_buffers) == [256, 256]
    s = arena.stats()
    assert (s["num_ooms"], s["num_fragmentation_ooms"]) == (1, 1)


def test_true_oom_rounds_to_granule():
    arena = Arena("1K")
    arena.alloc(700)  # a 768-byte chunk (3 granules); 256 bytes stay free
    with pytest.raises(vtpu.ResourceExhaustedError) as info:
        arena.alloc(300)
    assert info.value.rounded_bytes == 512
    assert info.value.total_free_bytes == 256
    assert arena.stats()["num_fragmentation_ooms"] == 0


def test_defragment_moves_the_last_buffer_down():
    arena, _, _, c = three_with_middle_freed(auto_defragment=False)
    r = arena.defragment()
    assert (r["buffers_moved"], r["bytes_moved"]) == (1, 256)
    assert (r["largest_free_before"], r["largest_free_after"]) == (256, 512)
    assert c.offset == 256
    assert arena.fragmentation == 0.0
    assert arena.alloc(512).offset == 512


def test_auto_defragment_makes_the_request_fit():
    arena, _, _, c = three_with_middle_freed()
    big = arena.alloc(512)
    assert (c.offset, big.offset) == (256, 512)
    assert arena.stats()["num_defragmentations"] == 1


def test_buddy_rounds_to_powers_of_two():
    arena = Arena(1024, policy="buddy")
    a = arena.alloc(300)
    assert arena.stats()["bytes_in_use"] == 512
    assert arena.largest_free_block_bytes == 512
    arena.alloc(257)
    with pytest.raises(vtpu.ResourceExhaustedError) as info:
        arena.alloc(1)
    assert (info.value.rounded_bytes, info.value.total_free_bytes) == (256, 0)
    arena.free(a.id)  # an id works as well as the Buffer
    assert arena.total_free_bytes == 512


def test_buffer_fields_and_double_free():
    arena = Arena("64K")
    b = arena.alloc("4K", label="w")
    assert (b.size, b.offset, b.label, b.freed) == (4096, 0, "w", False)
    arena.free(b)
    assert b.freed
    with pytest.raises(vtpu.InvalidArgumentError) as info:
        b.free()
    assert str(b.id) in str(info.value)


def test_buffer_of_another_arena_is_refused():
    one, other = Arena("4K"), Arena("4K")
    b = one.alloc(16)
    other.alloc(16)  # the same id lives in `other`
    with pytest.raises(vtpu.InvalidArgumentError):
        other.free(b)
    assert other.stats()["num_live_buffers"] == 1


@pytest.mark.parametrize(
    "kwargs, value",
    [
        ({"capacity_bytes": "12Q"}, "12Q"),
        ({"capacity_bytes": -1}, "-1"),
        ({"capacity_bytes": "1M", "policy": "best_fit"}, "best_fit"),
        ({"capacity_bytes": "1M", "auto_defragment": "sometimes"}, "sometimes"),
    ],
)
def test_bad_arena_arguments(kwargs, value):
    with pytest.raises(vtpu.InvalidArgumentError) as info:
        Arena(**kwargs)
    assert isinstance(info.value, ValueError)
    assert value in str(info.value)


@pytest.mark.parametrize("nbytes", [0, -5, "lots", 1.5])
def test_bad_alloc_sizes(nbytes):
    with pytest.raises(vtpu.InvalidArgumentError) as info:
        Arena("1M").alloc(nbytes)
    assert str(nbytes) in str(info.value)


def test_event_log_replays_to_the_same_peak(tmp_path):
    arena = Arena("1M", record_events=True)
    bufs = [arena.alloc(1000 * (i + 1)) for i in range(4)]
    bufs[1].free()
    arena.alloc(500)
    path = tmp_path / "log.jsonl"
    arena.save_event_log(str(path))
    r = replay_trace(path, capacity_bytes="1M")
    # Live bytes peak after the fourth alloc (10000); after the free and the fifth, 8500.
    assert r["peak_live_bytes"] == 10000
    assert (r["allocs"], r["frees"], r["events"]) == (5, 1, 6)


def test_replay_real_trace_peak_live_matches_readme():
    r = replay_trace(TRACES / "pytorch_mlp_train.jsonl", "bfc", "16G")
    assert r["peak_live_bytes"] == 920064  # data/traces/README.md
    assert r["allocs"] == 4012
    assert r["true_ooms"] == 0 and r["false_ooms"] == 0


@pytest.mark.parametrize("policy", ["bfc", "buddy"])
def test_replay_matches_cli_stress_on_one_core(tmp_path, policy):
    trace = TRACES / "pytorch_cnn_train.jsonl"
    out = tmp_path / "s.json"
    subprocess.run(
        [str(vtpu_binary()), "stress", "--trace", str(trace), "--cores", "1", "--load", "off",
         "--allocators", policy, "--auto-defragment", "on", "--hbm-bytes", "64M",
         "--capacity-search", "off", "--json", str(out)],
        check=True, capture_output=True)
    cli = json.loads(out.read_text())["runs"][0]["per_core"][0]
    py = replay_trace(trace, policy, "64M", auto_defragment=True)
    for key in ["events", "allocs", "frees", "peak_live_bytes", "peak_reserved_bytes",
                "false_ooms", "true_ooms", "defragmentations", "fragmentation_max",
                "reserved_fragmentation_max"]:
        assert py[key] == cli[key], key


def test_replay_capacity_search_is_at_least_peak_live():
    r = replay_trace(TRACES / "pytorch_mlp_train.jsonl", "first_fit", "16G", search_capacity=True)
    assert 920064 <= r["min_capacity_bytes"] <= r["capacity_search_max_bytes"]


def test_replay_missing_trace():
    with pytest.raises(vtpu.NotFoundError) as info:
        replay_trace("/nonexistent/trace.jsonl")
    assert "/nonexistent/trace.jsonl" in str(info.value)


def test_help_reads():
    assert "policy" in Arena.__doc__
    assert "ResourceExhaustedError" in Arena.__doc__
    for f in (Arena.alloc, Arena.free, Arena.stats, Arena.defragment, Arena.blocks, replay_trace):
        assert f.__doc__ and len(f.__doc__) > 40


def test_a_buffer_freed_by_id_reads_as_freed_and_zero_bytes_is_refused(tmp_path):
    arena = vtpu.memory.Arena(1024)
    buf = arena.alloc(256)
    arena.free(buf.id)
    assert buf.freed and "freed" in repr(buf)
    with pytest.raises(vtpu.InvalidArgumentError) as e:
        arena.alloc(0)
    assert "nbytes=0" in str(e.value)
    with pytest.raises(vtpu.FailedPreconditionError):
        arena.save_event_log(str(tmp_path / "a.jsonl"))
