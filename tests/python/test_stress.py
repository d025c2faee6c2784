"""vtpu.stress.run against `vtpu stress --json` with the same options."""

import json
import pathlib
import subprocess
import threading
import time

import pytest

import vtpu

# Figures that repeat run to run with the load off (times and latencies do not).
DETERMINISTIC = ["events", "allocs", "frees", "skipped_frees", "peak_live_bytes",
                 "peak_reserved_bytes", "false_ooms", "true_ooms", "fragmentation_max",
                 "reserved_fragmentation_max", "defragmentations", "defrag_bytes_moved",
                 "min_capacity_bytes"]


def vtpu_binary():
    return pathlib.Path(vtpu._vtpu.__file__).parents[2] / "vtpu"


def cli_stress(tmp_path, *flags):
    out = tmp_path / "stress.json"
    subprocess.run([str(vtpu_binary()), "stress", *flags, "--json", str(out)], check=True,
                   capture_output=True)
    return json.loads(out.read_text())


def figures(report):
    return [(r["allocator"], r["defragment_mode"], [r["summary"][k] for k in DETERMINISTIC],
             [[c[k] for k in DETERMINISTIC] for c in r["per_core"]]) for r in report["runs"]]


def test_policies_side_by_side_match_the_cli(tmp_path):
    py = vtpu.stress.run(cores=2, workload="lognormal", events=3000, live=200, seed=7,
                         allocators=["bfc", "first_fit", "buddy"], auto_defragment="on,off",
                         hbm_bytes="256M", load="off", capacity_search_max="1G")
    cli = cli_stress(tmp_path, "--cores", "2", "--workload", "lognormal", "--events", "3000",
                     "--live", "200", "--seed", "7", "--allocators", "bfc,first_fit,buddy",
                     "--auto-defragment", "on,off", "--hbm-bytes", "256M", "--load", "off",
                     "--capacity-search-max", "1G")
    assert [(r["allocator"], r["defragment_mode"]) for r in py["runs"]] == [
        (a, m) for a in ("bfc", "first_fit", "buddy") for m in ("on_failure", "off")]
    assert figures(py) == figures(cli)
    assert set(py) == set(cli)
    assert py["command"].startswith("vtpu.stress.run(")
    assert vtpu.stress.exit_code(py) == 0


def test_trace_replay_matches_the_cli(tmp_path):
    trace = str(pathlib.Path(__file__).parents[2] / "data" / "traces" / "pytorch_mlp_train.jsonl")
    py = vtpu.stress.run(trace=trace, cores=1, allocators="tlsf,planned", auto_defragment="on",
                         load=False, hbm_bytes="4M")
    cli = cli_stress(tmp_path, "--trace", trace, "--cores", "1", "--allocators", "tlsf,planned",
                     "--auto-defragment", "on", "--load", "off", "--hbm-bytes", "4M")
    assert figures(py) == figures(cli)
    assert py["runs"][0]["summary"]["peak_live_bytes"] == 920064  # data/traces/README.md


def test_under_load_checks_the_all_reduces():
    r = vtpu.stress.run(cores=2, workload="uniform", events=2000, live=100, hbm_bytes="64M",
                        collective_rounds=5, capacity_search="off", auto_defragment="on")
    assert r["load"]["all_reduce_failures"] == 0
    assert r["runs"][0]["summary"]["events"] == 4000  # 2000 per core


def test_stop_on_oom_raises_with_the_report():
    with pytest.raises(vtpu.ResourceExhaustedError) as info:
        vtpu.stress.run(cores=1, workload="uniform", events=2000, live=500, hbm_bytes="16K",
                        load="off", stop_on_oom=True, auto_defragment="off")
    assert info.value.bytes_limit == 16 * 1024


@pytest.mark.parametrize(
    "kwargs, value",
    [
        ({"cores": 0}, "0"),
        ({"cores": 2000}, "2000"),
        ({"allocators": "bfc,best_fit"}, "best_fit"),
        ({"auto_defragment": "sometimes"}, "sometimes"),
        ({"hbm_bytes": "12Q"}, "12Q"),
        ({"workload": "zipf"}, "zipf"),
        ({"live": 10}, "--live"),  # the default workload (training_step) has no --live
        ({"load": "off", "collective_rounds": 3}, "--collective-rounds"),
        ({"trace": "x.jsonl", "seed": 3}, "--seed"),
        ({"hbm_byte": "1G"}, "hbm_byte"),
        ({"seed": -1}, "-1"),
    ],
)
def test_bad_options(kwargs, value):
    with pytest.raises(vtpu.InvalidArgumentError) as info:
        vtpu.stress.run(**kwargs)
    assert isinstance(info.value, ValueError)
    assert value in str(info.value)


def test_the_cli_refuses_what_run_refuses(tmp_path):
    p = subprocess.run([str(vtpu_binary()), "stress", "--live", "10"], capture_output=True)
    assert p.returncode == 2
    assert b"--live" in p.stderr


def test_run_releases_the_gil():
    # The main thread keeps running while the harness replays on another thread.
    done = threading.Event()
    result = {}

    def work():
        result["r"] = vtpu.stress.run(cores=2, workload="lognormal", events=40000, live=500,
                                      hbm_bytes="256M", load="off", auto_defragment="on,off")
        done.set()

    t = threading.Thread(target=work)
    t.start()
    ticks = 0
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    t.join()
    assert len(result["r"]["runs"]) == 2
    assert ticks > 20


def test_write_html(tmp_path):
    r = vtpu.stress.run(cores=1, workload="uniform", events=500, live=50, hbm_bytes="16M",
                        load="off", capacity_search="off", auto_defragment="on")
    vtpu.stress.write_html(r, tmp_path / "r.html")
    assert (tmp_path / "r.html").read_text().lstrip().lower().startswith("<!doctype html")


def test_help_reads():
    doc = vtpu.stress.run.__doc__
    assert doc.startswith("run(*, cores=8")
    for flag in ("allocators", "auto_defragment", "capacity_search_max", "stop_on_oom"):
        assert flag in doc
