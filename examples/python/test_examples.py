"""Runs the Python examples and the code blocks of docs/PYTHON.md, and checks their numbers:
values worked out by hand or computed with numpy, never vtpu's own output."""
import ast
import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
SOURCE_DIR = Path(os.environ.get("VTPU_SOURCE_DIR", HERE.parent.parent))
sys.path.insert(0, str(HERE))

import digits_mlp  # noqa: E402
import fragmentation  # noqa: E402
import tensor_parallel_matmul  # noqa: E402

KIB = 1024


@pytest.fixture(scope="module")
def digits_runs():
    return {n: digits_mlp.main(["--cores", str(n), "--json"]) for n in (1, 2, 4, 8)}


@pytest.mark.parametrize("cores", [1, 2, 4, 8])
def test_digits_mlp_reaches_090_test_accuracy(digits_runs, cores):
    assert digits_runs[cores]["test_accuracy"] >= 0.90


@pytest.mark.parametrize("cores", [2, 4, 8])
def test_digits_mlp_losses_match_one_core_at_every_step(digits_runs, cores):
    one = np.array(digits_runs[1]["losses"])
    many = np.array(digits_runs[cores]["losses"])
    assert len(many) == len(one) == 300
    assert one[-1] < one[0] / 4  # it trains
    np.testing.assert_allclose(many, one, rtol=1e-5, atol=0)


def test_digits_mlp_rejects_a_batch_that_does_not_split():
    with pytest.raises(SystemExit):
        digits_mlp.main(["--cores", "3", "--batch", "64"])


@pytest.mark.parametrize("cores,model", [(8, 8), (8, 4), (2, 1)])
def test_tensor_parallel_matmul_equals_numpy(cores, model):
    r = tensor_parallel_matmul.main(["--cores", str(cores), "--model", str(model), "--json"])
    assert r["mesh"] == {"data": cores // model, "model": model}
    assert r["shape"] == [32, 64]
    assert r["w1_shard_shape"] == [64, 256 // model]  # W1 split by columns over "model"
    assert r["max_rel_diff"] <= 1e-6
    assert r["max_abs_diff_rank_order"] == 0.0  # psum adds the model shards in rank order


def test_fragmentation_checkerboard_as_worked_by_hand():
    rows = {(r["policy"], r["auto_defragment"]): r for r in fragmentation.main(["--json"])
            ["checkerboard"]}
    for policy in ("bfc", "tlsf", "first_fit"):
        r = rows[(policy, False)]
        # Eight live 48 KiB buffers; eight 48 KiB holes plus the 256 KiB tail are free.
        assert r["bytes_in_use"] == 8 * 48 * KIB
        assert r["total_free_bytes"] == 8 * 48 * KIB + 256 * KIB
        assert r["largest_free_block_bytes"] == 256 * KIB
        assert r["fragmentation"] == pytest.approx(1 - 256 / 640)
        assert r["alloc_300K"].startswith("OOM (largest free 256 KiB)")
        assert rows[(policy, True)]["alloc_300K"] == "ok"  # compacted: 640 KiB in one block
    r = rows[("buddy", False)]
    # 48 KiB rounds to 64 KiB; eight 64 KiB holes, none next to its (live) buddy.
    assert r["bytes_in_use"] == 8 * 64 * KIB
    assert r["total_free_bytes"] == 8 * 64 * KIB
    assert r["largest_free_block_bytes"] == 64 * KIB
    assert r["fragmentation"] == pytest.approx(1 - 64 / 512)
    assert r["alloc_300K"].startswith("OOM (largest free 64 KiB)")
    assert rows[("buddy", True)]["alloc_300K"] == "ok"  # compacted: 512 KiB in one block


def test_fragmentation_trace_replay_is_sane():
    result = fragmentation.main(["--json"])
    assert {r["policy"] for r in result["replay"]} == {"bfc", "tlsf", "first_fit", "buddy"}
    for r in result["replay"]:
        assert r["peak_live_bytes"] == 41_094_944  # data/traces/README.md's figure for the trace
        assert r["peak_reserved_bytes"] >= r["peak_live_bytes"]
        assert r["reserved_over_live"] == pytest.approx(
            r["peak_reserved_bytes"] / r["peak_live_bytes"], rel=1e-9)
        assert r["true_ooms"] == 0  # 64 MiB holds the 41 MB peak


def run_script(args, **kw):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300,
                          cwd=SOURCE_DIR, **kw)


def test_examples_run_from_the_command_line():
    p = run_script([str(HERE / "tensor_parallel_matmul.py"), "--cores", "4"])
    assert p.returncode == 0, p.stderr
    assert "mesh {'data': 1, 'model': 4}" in p.stdout


def test_every_python_block_of_the_guide_runs():
    """The ```python blocks of docs/PYTHON.md, run in order as one script."""
    text = (SOURCE_DIR / "docs" / "PYTHON.md").read_text()
    # Everything outside the blocks becomes blank lines, so that a traceback's line numbers are
    # the page's.
    script, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = line == "```python"
            script.append("")
        else:
            script.append(line if inside else "")
    assert sum(1 for line in text.splitlines() if line == "```python") >= 5
    p = run_script(["-c", "\n".join(script)])
    assert p.returncode == 0, p.stderr


def stub_api(path):
    """The public names of a .pyi, each class's members and each function's parameters."""
    names, members, params = set(), {}, {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
            members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        elif isinstance(node, ast.FunctionDef):
            names.add(node.name)
            a = node.args
            params[node.name] = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom) and node.module == "vtpu":
            names.update(alias.asname or alias.name for alias in node.names)
    return {n for n in names if not n.startswith("_")}, members, params


def parameter_names(fn):
    """A Python function's parameter names, or a pybind11 function's from its signature line."""
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        inner = re.match(r"\w+\((.*?)\)\s*->", fn.__doc__, flags=re.S).group(1)
        return [re.split("[:=]", p)[0].strip() for p in re.split(r",\s*(?![^\[]*\])", inner)
                if p.strip() and not p.strip().startswith("*")]


@pytest.mark.parametrize("module_name,stub", [
    ("vtpu", "__init__.pyi"), ("vtpu.lax", "lax.pyi"), ("vtpu.memory", "memory.pyi"),
    ("vtpu.stress", "stress.pyi"), ("vtpu.planner", "planner.pyi")])
def test_stubs_match_the_module(module_name, stub):
    module = importlib.import_module(module_name)
    names, members, params = stub_api(SOURCE_DIR / "python" / "vtpu" / stub)
    # `import vtpu.memory` in __init__.py binds the name vtpu too.
    assert {n for n in dir(module) if not n.startswith("_")} - {"vtpu"} == names
    for cls, stub_members in members.items():
        if issubclass(getattr(module, cls), BaseException):
            continue  # set per instance
        public = {m for m in dir(getattr(module, cls)) if not m.startswith("_")}
        assert public == {m for m in stub_members if not m.startswith("_")}, cls
        assert all(hasattr(getattr(module, cls), m) for m in stub_members), cls
    for fn, stub_params in params.items():
        assert parameter_names(getattr(module, fn)) == stub_params, fn
