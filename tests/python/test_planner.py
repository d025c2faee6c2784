"""vtpu.planner.plan against `vtpu plan --json` with the same options."""

import json
import pathlib
import subprocess

import pytest

import vtpu

MODELS = pathlib.Path(__file__).parents[2] / "examples" / "models"


def vtpu_binary():
    return pathlib.Path(vtpu._vtpu.__file__).parents[2] / "vtpu"


def cli_plan(*args):
    p = subprocess.run([str(vtpu_binary()), "plan", *args, "--json"], capture_output=True,
                       check=True)
    return json.loads(p.stdout)


@pytest.mark.parametrize(
    "kwargs, flags",
    [
        ({"mesh": "2x4"}, ["--mesh", "2x4"]),
        ({"mesh": "1x8", "hbm_bytes": "8G", "batch": 128}, ["--mesh", "1x8", "--hbm-bytes", "8G",
                                                             "--batch", "128"]),
        ({"mesh": "2x2", "axes": ["a", "b"], "any_strategy": True, "pad_arrays": False},
         ["--mesh", "2x2", "--axes", "a,b", "--any-strategy", "--pad-arrays", "false"]),
    ],
)
def test_mlp_plan_equals_the_cli(kwargs, flags):
    model = str(MODELS / "mlp.json")
    assert vtpu.planner.plan(model, **kwargs) == cli_plan(model, *flags)


def test_transformer_with_a_pinned_strategy_equals_the_cli():
    model = str(MODELS / "transformer.json")
    cli = cli_plan(model, "--mesh", "2x2", "--strategy", "dp(data)+tp(model)")
    py = vtpu.planner.plan(model, mesh="2x2", strategy="tp(model)+dp(data)")
    assert py == cli
    assert (py["chosen"], py["chosen_by"]) == ("dp(data)+tp(model)", "--strategy")


def test_winner_is_the_fastest_runnable_fitting_candidate():
    r = vtpu.planner.plan(str(MODELS / "mlp.json"), mesh="2x4")
    ok = [c for c in r["candidates"] if c["runnable"] and c["fits"]]
    assert r["winner"] == min(ok, key=lambda c: c["step_seconds"])["strategy"]
    assert r["plan"]["format"] == "vtpu-plan"


def test_nothing_fits():
    model = str(MODELS / "mlp.json")
    with pytest.raises(vtpu.ResourceExhaustedError):
        vtpu.planner.plan(model, hbm_bytes=1024)
    r = vtpu.planner.plan(model, hbm_bytes=1024, check_fit=False)
    assert r["winner"] is None and "plan" not in r
    assert r["hbm_limit_bytes"] == 1024


@pytest.mark.parametrize(
    "kwargs, value",
    [
        ({"mesh": "2xq"}, "2xq"),
        ({"mesh": "2x4", "axes": "data"}, "--axes"),
        ({"strategy": "zz(data)"}, "zz(data)"),
        ({"hbm_bytes": 0}, "0"),
        ({"hbm_bytes": "big"}, "big"),
        ({"batch": 0}, "0"),
        ({"hardware": "v99"}, "v99"),
    ],
)
def test_bad_options(kwargs, value):
    with pytest.raises(vtpu.InvalidArgumentError) as info:
        vtpu.planner.plan(str(MODELS / "mlp.json"), **kwargs)
    assert value in str(info.value)


def test_missing_model():
    with pytest.raises(vtpu.NotFoundError) as info:
        vtpu.planner.plan("/nonexistent/model.json")
    assert "/nonexistent/model.json" in str(info.value)


def test_help_reads():
    doc = vtpu.planner.plan.__doc__
    for word in ("mesh", "hbm_bytes", "strategy", "any_strategy", "winner"):
        assert word in doc
