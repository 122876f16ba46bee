"""Traces recorded on an H100 by the project's own scripts (tests/data/cuda/README.md).

They carry what only a GPU shows: kernels launched asynchronously, backward
kernels launched from PyTorch's autograd engine thread, cuBLAS launches through
the driver API. Every check here is against the trace's own JSON or against
facts of the recording (which thread ran backward, which module launched what).
"""

from __future__ import annotations

import gzip
import json
from decimal import ROUND_HALF_UP, Decimal
from functools import cache
from pathlib import Path

import polars as pl
import pytest

from nsysmap.flow.verbs import analyse_file

pytestmark = pytest.mark.slow  # conservation checks over every recorded trace

DATA = Path(__file__).parent / "data" / "cuda"
TRACES = sorted(p.name for p in DATA.glob("*.json.gz"))
GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}


@cache
def _events(name: str) -> tuple[dict, ...]:
    with gzip.open(DATA / name, "rt") as f:
        return tuple(json.load(f)["traceEvents"])


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    done = {}

    def run(name: str):
        if name not in done:
            out = tmp_path_factory.mktemp(name.split(".")[0])
            done[name] = analyse_file(DATA / name, out, options={"command": "attribute"})
        return done[name]

    return run


def _ns(us) -> int:
    return int((Decimal(str(us)) * 1000).quantize(Decimal(1), ROUND_HALF_UP))


def test_the_three_traces_are_there():
    assert len(TRACES) == 3


@pytest.mark.parametrize("name", TRACES)
def test_gpu_time_conserved_against_the_json(analysed, name):
    events = [e for e in _events(name) if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES]
    ops = analysed(name).ops
    assert ops.height == len(events)
    assert ops["dur_ns"].sum() == sum(_ns(e["dur"]) for e in events)


def _autograd_tids(name: str) -> set[int]:
    """Threads that ran `autograd::engine::evaluate_function` operators."""
    return {
        e["tid"]
        for e in _events(name)
        if e.get("cat") == "cpu_op" and e["name"].startswith("autograd::engine::evaluate_function")
    }


def test_backward_kernels_from_the_autograd_thread_get_module_and_phase(analysed):
    name = "gpt2_tiny_nsysmap_run_h100.json.gz"
    autograd = _autograd_tids(name)
    ops = analysed(name).ops
    from_engine = ops.filter(pl.col("tid").is_in(list(autograd)))
    assert from_engine.height > 100  # CUDA runs backward on the engine's own thread
    assert set(from_engine["phase"].unique()) == {"backward"}
    moduled = from_engine.filter(pl.col("module").is_not_null())
    assert moduled["dur_ns"].sum() / from_engine["dur_ns"].sum() >= 0.95
    assert set(moduled["direction"].unique()) == {"backward"}
    layers = set(moduled["module"].unique())
    for block in ("transformer.h.0", "transformer.h.1"):
        for part in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            assert f"{block}.{part}" in layers


def test_nsysmap_run_trace_gives_every_phase_and_modules_outside_the_optimizer(analysed):
    ops = analysed("gpt2_tiny_nsysmap_run_h100.json.gz").ops
    assert {"forward", "backward", "optimizer", "loss"} <= set(ops["phase"].drop_nulls())
    model = ops.filter(pl.col("phase").is_in(["forward", "backward"]))
    share = model.filter(pl.col("module").is_not_null())["dur_ns"].sum() / model["dur_ns"].sum()
    assert share >= 0.95


def test_with_modules_without_stack_says_how_to_get_modules(analysed):
    analysis = analysed("gpt2_tiny_train_with_modules_h100.json.gz")
    assert analysis.ops["module"].is_null().all()  # PyTorch wrote no module frames
    assert analysis.profile.meta_value("with_modules") == "1"
    assert "with_stack=True" in analysis.summary_text


def test_profiler_steps_and_optimizer_annotations_are_read(analysed):
    ops = analysed("gpt2_small_train_with_modules_h100.json.gz").ops
    steps = {
        int(e["name"].split("#")[1])
        for e in _events("gpt2_small_train_with_modules_h100.json.gz")
        if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")
    }
    assert set(ops["step"].drop_nulls()) == steps
    optimizer = ops.filter(pl.col("phase") == "optimizer")
    assert optimizer.height > 0
    assert set(optimizer["category"]) <= {"optimizer", "elementwise", "reduction", "other"}
