"""`nsysmap run examples/train_gpt2.py` end to end on the torch.profiler CPU backend.

The example is the unmodified training script a user would write; nsysmap
instruments it, profiles steps 1..3 and attributes every CPU operator.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from tests.cli_runner import nsysmap_cli

pytestmark = pytest.mark.slow
REPO = Path(__file__).parents[1]
N_LAYER = 2  # the example's tiny size
MODULES = {
    **{f"transformer.h.{i}.{n}": "LayerNorm" for i in range(N_LAYER) for n in ("ln_1", "ln_2")},
    **{
        f"transformer.h.{i}.{n}": "Conv1D"
        for i in range(N_LAYER)
        for n in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
    },
    "transformer.ln_f": "LayerNorm",
    "lm_head": "Linear",
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gpt2")
    script = str(REPO / "examples" / "train_gpt2.py")
    code = nsysmap_cli(
        ["run", "--backend", "torch", "--quiet", "-o", str(out), script, "--", "--steps", "4"]
    )
    assert code == 0
    return out


@pytest.fixture(scope="module")
def ops(run_dir: Path) -> pl.DataFrame:
    return pl.read_parquet(run_dir / "ops.parquet")


def test_every_block_layer_has_forward_and_backward_rows(ops):
    seen = ops.group_by("module", "module_class", "direction").agg(pl.len())
    for module, cls in MODULES.items():
        rows = seen.filter(pl.col("module") == module)
        assert set(rows["module_class"]) == {cls}, module
        assert set(rows["direction"]) == {"forward", "backward"}, module


def test_backward_operators_land_in_the_backward_phase_of_their_module(ops):
    bwd = ops.filter(pl.col("direction") == "backward")
    assert set(bwd["phase"]) == {"backward"}
    for module, cls in MODULES.items():
        rows = bwd.filter(pl.col("module") == module)
        # Attributed through the module's own backward range on the launching thread.
        assert rows["range_path"].str.contains(f"nsysmap:bwd:{cls}:{module}", literal=True).all()
        if cls in ("Conv1D", "Linear"):
            assert "aten::mm" in set(rows["aten_op"]), module  # the weight/input gradients
    forward_mm = ops.filter((pl.col("direction") == "forward") & (pl.col("phase") == "backward"))
    assert forward_mm.is_empty()


def test_optimizer_work_lands_in_the_optimizer_phase(ops):
    adam = ops.filter(pl.col("range_path").str.contains("Optimizer.step#AdamW", literal=True))
    assert adam.height > 0 and set(adam["phase"]) == {"optimizer"}
    assert set(adam["module"].drop_nulls()) == set()


def test_coverage_of_step_phase_and_module(ops):
    total = ops["dur_ns"].sum()
    with_step_phase = ops.filter(pl.col("step").is_not_null() & pl.col("phase").is_not_null())
    assert with_step_phase["dur_ns"].sum() >= 0.99 * total
    # Optimizer updates belong to no module (one fused or looped update of all
    # parameters); everything else must be inside a module.
    model_work = ops.filter(pl.col("phase") != "optimizer")
    with_module = model_work.filter(pl.col("module").is_not_null())
    assert with_module["dur_ns"].sum() >= 0.95 * model_work["dur_ns"].sum()
    assert set(ops["step"].drop_nulls()) == {1, 2, 3}


def test_attributed_total_equals_captured_total(run_dir, ops):
    events = json.loads((run_dir / "capture" / "trace.json").read_text())["traceEvents"]
    cpu_ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    assert len(cpu_ops) == ops.height
    # Captured total: the time of top-level operators per thread (an operator
    # inside another is part of its parent's time), found by a plain sweep.
    by_thread: dict = {}
    for e in cpu_ops:
        by_thread.setdefault((e["pid"], e["tid"]), []).append(
            (round(float(e["ts"]) * 1000), round((float(e["ts"]) + float(e["dur"])) * 1000))
        )
    captured = 0
    for spans in by_thread.values():
        end = None
        for start, stop in sorted(spans, key=lambda s: (s[0], -s[1])):
            if end is None or start >= end:
                captured += stop - start
                end = stop
    assert abs(ops["dur_ns"].sum() - captured) <= len(cpu_ops)  # <= 1 ns rounding per op


def test_manifest_names_the_backend(run_dir):
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["backend"] == "torch.profiler"
    assert json.loads((run_dir / "run.json").read_text())["backend"] == "torch"
