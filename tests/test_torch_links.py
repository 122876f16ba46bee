"""Which CPU operator launched each GPU operation of a torch.profiler trace.

A GPU operation's recorded input shapes are those of the operator that launched
it. Some traces (older Kineto) write the correlation id as every launch's and
kernel's "External id", which then names an unrelated operator: the operator
must be the one open on the launching thread when the launch call starts.
"""

from __future__ import annotations

import json

import pytest

from nsysmap.read.torch.torch_trace import read_trace
from tests.corpus import corpus_path
from tests.torch_traces import complete, launch, op, write_trace


def _kernel(name: str, ts: float, correlation: int, external: int) -> dict:
    return complete("kernel", name, ts, 2, 7, pid=0, device=0, stream=7,
                    correlation=correlation, **{"External id": external})  # fmt: skip


def _launch(ts: float, correlation: int, external: int) -> dict:
    event = launch(ts, correlation)
    event["args"]["External id"] = external
    return event


def test_external_ids_that_are_correlation_ids_name_no_operator(tmp_path):
    """Kernel 23's External id is 23, which is also a view's: its shapes are the addmm's
    around its launch call. A trace whose External ids name operators keeps them."""
    addmm = {"External id": 14, "Input Dims": [[1280], [8192, 1024], [1024, 1280], [], []]}
    view = {"External id": 23, "Input Dims": [[8192], []]}
    events = [
        op("aten::addmm", 10, 10, **addmm),
        _launch(12, 23, 23),
        op("aten::view", 30, 1, **view),
        _kernel("ampere_sgemm_64x64_tn", 40, 23, 23),
        # the usual case: the kernel names its launching operator, an outer one here
        op("aten::linear", 50, 10, **{"External id": 40, "Input Dims": [[8, 16], [32, 16]]}),
        op("aten::mm", 51, 8, **{"External id": 41, "Input Dims": [[8, 16], [16, 32]]}),
        _launch(52, 60, 40),
        _kernel("ampere_sgemm_32x32_nn", 70, 60, 40),
        # no launch call: nothing says which operator launched it
        _kernel("orphan", 80, 61, 41),
    ]
    ops = read_trace(write_trace(tmp_path / "t.json", events)).ops.sort("start_ns")
    assert ops["input_shapes"].to_list() == [
        json.dumps(addmm["Input Dims"]),
        "[[8, 16], [32, 16]]",
        None,
    ]


@pytest.mark.corpus
def test_switch_transformer_kernels_have_their_launching_operators_shapes():
    """Every kernel's shapes are those of the innermost operator open at its launch call's
    start on the launching thread, found here by scanning the trace's events."""
    path = corpus_path("switchtransformer_moe_fwd_with_modules_a100.json")
    events = json.loads(path.read_text())["traceEvents"]
    cpu = [e for e in events if e.get("cat") == "cpu_op"]
    calls = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    expected = {}
    for kernel in (e for e in events if e.get("cat") == "kernel"):
        call = calls[kernel["args"]["correlation"]]
        around = [
            e for e in cpu
            if (e["pid"], e["tid"]) == (call["pid"], call["tid"])
            and e["ts"] <= call["ts"] < e["ts"] + e["dur"]
        ]  # fmt: skip
        dims = min(around, key=lambda e: e["dur"])["args"].get("Input Dims") if around else None
        expected[kernel["args"]["correlation"]] = dims
    ops = read_trace(path).ops.filter(kind="kernel")
    got = dict(zip(ops["correlation_id"], ops["input_shapes"], strict=True))
    assert len(got) == len(expected) == 484
    assert got == {c: None if d is None else json.dumps(d) for c, d in expected.items()}
