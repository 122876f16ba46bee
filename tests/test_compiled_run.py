"""`nsysmap run` on a torch.compile'd model, end to end on the torch.profiler CPU backend.

The same small script (tests/compiled_model.py) runs three times: compiled
without nsysmap, compiled under `nsysmap run`, eager under `nsysmap run`.
nsysmap must not change what Dynamo compiles nor the numbers the model
computes, the compiled kernels must land in the modules the eager run ran
the same work in, and compilation is kept apart from the profiled steps.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.cli_runner import nsysmap_cli

pytestmark = pytest.mark.slow
REPO = Path(__file__).parents[1]
SCRIPT = str(REPO / "tests" / "compiled_model.py")
LINEARS = [f"blocks.{i}.{n}" for i in range(3) for n in ("fc1", "fc2")] + ["head"]


def nsysmap_run(out: Path, *script_args: str) -> dict:
    result = out / "result.json"
    argv = ["run", "--backend", "torch", "--quiet", "-o", str(out), SCRIPT, "--"]
    assert nsysmap_cli([*argv, "--out", str(result), *script_args]) == 0
    return json.loads(result.read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    base = tmp_path_factory.mktemp("compiled")
    plain = base / "plain.json"
    subprocess.run([sys.executable, SCRIPT, "--compile", "--out", str(plain)], check=True)
    return {
        "plain": (base, json.loads(plain.read_text())),
        "compiled": (base / "c", nsysmap_run(base / "c", "--compile")),
        "eager": (base / "e", nsysmap_run(base / "e")),
    }


def test_nsysmap_changes_neither_what_is_compiled_nor_the_losses(runs):
    plain, compiled = runs["plain"][1], runs["compiled"][1]
    assert compiled["dynamo"] == plain["dynamo"]
    assert plain["dynamo"]["graph_breaks"] == 0 and plain["dynamo"]["graphs"] == 1
    assert compiled["losses"] == plain["losses"]  # float.hex: bitwise


def compiled_kernels(run_dir: Path) -> pl.DataFrame:
    ops = pl.read_parquet(run_dir / "ops.parquet")
    return ops.filter(pl.col("compiled_graph").is_not_null())


def test_compiled_kernels_land_in_the_modules_the_eager_run_used(runs):
    """>= 90 % of the compiled graphs' time is in the right module.

    Right: a matrix multiply in the module of the eager run's matrix multiply
    at the same place (the k-th `aten::addmm` of a forward, the per-module
    count of `aten::mm` in a backward); any other kernel in a module the eager
    run has in that direction (or their common parent), covering only such
    modules.
    """
    kernels = compiled_kernels(runs["compiled"][0])
    eager = pl.read_parquet(runs["eager"][0] / "ops.parquet")
    known = {
        d: _with_parents(eager.filter(pl.col("direction") == d)["module"].drop_nulls())
        for d in ("forward", "backward")
    }
    fwd_order = _addmm_order(eager.filter(pl.col("phase") == "forward"), "module")
    assert fwd_order == LINEARS  # the eager reference itself
    right = kernels.with_columns(
        ok=pl.struct("module", "direction", "fused_modules").map_elements(
            lambda r: _plausible(r, known), return_dtype=pl.Boolean
        )
    )
    calls = right.filter(pl.col("name") == "aten::addmm", pl.col("direction") == "forward")
    per_call = calls.with_columns(k=pl.int_range(pl.len()).over("compiled_graph", "step"))
    assert per_call.group_by("k").agg(pl.col("module").unique())["module"].list.len().max() == 1
    assert per_call.sort("k").unique("k", maintain_order=True)["module"].to_list() == LINEARS
    mm = _per_step(right.filter(pl.col("name") == "aten::mm"))
    expected = _per_step(
        eager.filter(pl.col("name") == "aten::mm", pl.col("direction") == "backward")
    )
    # Inductor may turn a matmul into a fused kernel (head's 1-column weight gradient)
    assert all(n <= expected.get(module, 0) for module, n in mm.items()), (mm, expected)
    assert all(mm[m] == expected[m] for m in LINEARS[:-1]), (mm, expected)
    share = right.filter("ok")["dur_ns"].sum() / right["dur_ns"].sum()
    print(f"compiled kernel time in the right module: {share:.1%}")
    assert share >= 0.9, share
    assert set(kernels["direction"]) == {"forward", "backward"}


def _per_step(ops: pl.DataFrame) -> dict[str, int]:
    """Operators per module in one step (the most of any step)."""
    counts = (
        ops.group_by("module", "step").agg(pl.len()).group_by("module").agg(pl.col("len").max())
    )
    return dict(counts.iter_rows())


def _with_parents(modules: pl.Series) -> set[str]:
    out = set()
    for path in modules.unique():
        parts = path.split(".") if path else []
        out.update(".".join(parts[:i]) for i in range(len(parts) + 1))
    return out


def _addmm_order(ops: pl.DataFrame, column: str) -> list[str]:
    first_step = ops.filter(pl.col("step") == ops["step"].min(), pl.col("name") == "aten::addmm")
    return first_step.sort("start_ns")[column].to_list()


def _plausible(row: dict, known: dict[str, set[str]]) -> bool:
    modules = known.get(row["direction"] or "", set())
    covered = [m for m in (row["fused_modules"] or "").split(", ") if m]
    return row["module"] in modules and bool(covered) and all(m in modules for m in covered)


def test_module_paths_name_the_model_not_the_compiled_wrapper(runs):
    ops = pl.read_parquet(runs["compiled"][0] / "ops.parquet")
    modules = set(ops["module"].drop_nulls())
    assert not any("_orig_mod" in m for m in modules)
    roots = ops.filter(pl.col("module") == "")["module_class"].unique().to_list()
    assert roots == ["Net"]
    assert {f"blocks.{i}.act" for i in range(3)} <= modules


def test_compilation_is_kept_apart_and_waited_for(runs):
    run_dir = runs["compiled"][0]
    launch = json.loads((run_dir / "capture" / "launch.json").read_text())
    compile_info = launch["compile"]
    assert compile_info["compilations"] >= 1
    assert compile_info["profiled_compilations"] == 0
    assert compile_info["warmup_waited_steps"] == 1  # step 0 compiled, step 1 did not
    assert launch["profiled_steps"] == [2, 4]
    assert compile_info["provenance"] == "compiled.json"
    meta = json.loads((run_dir / "manifest.json").read_text())["report_meta"]
    assert meta["compiled_graphs"] == "2" and meta["compile_events"] == "0"
    eager_launch = json.loads((runs["eager"][0] / "capture" / "launch.json").read_text())
    assert eager_launch["compile"]["provenance"] is None
    assert eager_launch["profiled_steps"] == [1, 3]


@pytest.mark.parametrize("variant", ["blocks", "inplace", "break"])
def test_other_ways_of_compiling_are_left_as_they_are(tmp_path, variant):
    """Compiled submodules, `module.compile()`, graph breaks in user code: under the
    launcher (profiling steps 1..3, every hook attached) Dynamo compiles the same."""
    args = [SCRIPT, "--compile", "--variant", variant, "--out"]
    subprocess.run([sys.executable, *args, str(tmp_path / "plain.json")], check=True)
    launcher = [sys.executable, "-m", "instrument.launch", "--backend", "torch", "--no-flops"]
    subprocess.run(
        [*launcher, "--out", str(tmp_path / "capture"), "--", *args, str(tmp_path / "ran.json")],
        check=True,
        cwd=REPO,
    )
    plain, ran = (json.loads((tmp_path / f).read_text()) for f in ("plain.json", "ran.json"))
    assert ran == plain
    assert plain["dynamo"]["graph_breaks"] == (3 if variant == "break" else 0)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_on_cuda_triton_and_cuda_graph_kernels_land_in_modules(tmp_path, mode):
    """CUDA: Triton and cuBLAS kernels (mode None), replayed CUDA graphs (reduce-overhead)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    extra = ["--device", "cuda", *(["--mode", mode] if mode else [])]
    plain = tmp_path / "plain.json"
    subprocess.run([sys.executable, SCRIPT, "--compile", *extra, "--out", str(plain)], check=True)
    compiled = nsysmap_run(tmp_path / "c", "--compile", *extra)
    assert compiled["dynamo"] == json.loads(plain.read_text())["dynamo"]
    nsysmap_run(tmp_path / "e", "--device", "cuda")
    eager = pl.read_parquet(tmp_path / "e" / "ops.parquet")
    known = _with_parents(eager["module"].drop_nulls())
    kernels = compiled_kernels(tmp_path / "c").filter(pl.col("kind") == "kernel")
    assert kernels.height > 0 and set(kernels["direction"]) == {"forward", "backward"}
    named = kernels.filter(pl.col("fused_modules").is_not_null() & pl.col("module").is_in(known))
    share = named["dur_ns"].sum() / kernels["dur_ns"].sum()
    print(f"CUDA ({mode or 'default'}): {share:.1%} of compiled kernel time matched to a module")
    assert share >= 0.9, share
