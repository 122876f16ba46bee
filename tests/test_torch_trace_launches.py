"""Every launch path of a torch.profiler trace is attributed like cudaLaunchKernel.

Driver-API launches, the extended runtime launches, graph launches (several
kernels, one correlation id), copies and sets, and the categories of old
traces (Operator, Runtime, Kernel, Memcpy, Memset, with `async` flow links);
annotation copies on the GPU timeline (`gpu_user_annotation`) are neither
operations nor ranges. Times are whole µs.
"""

from __future__ import annotations

import copy
from pathlib import Path

import polars as pl
import pytest

from nsysmap.flow.verbs import analyse, load_profile
from nsysmap.read.torch.torch_trace import read_trace
from tests.torch_traces import STREAM, complete, flow, launch, module, op, write_trace

APIS = (
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cuLaunchKernelEx",
    "cudaLaunchKernelExC",
    "cudaGraphLaunch",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
)
_GPU = {"cudaMemcpyAsync": "gpu_memcpy", "cudaMemsetAsync": "gpu_memset"}


def _gpu(api: str, i: int, ts: float) -> dict:
    """The GPU operation of launch i (correlation i + 1), on device 0, i + 1 µs long."""
    return complete(_GPU.get(api, "kernel"), f"{api}_op", ts, i + 1, STREAM, pid=0, device=0,
                    stream=STREAM, correlation=i + 1, bytes=8)  # fmt: skip


def _launch_events() -> list[dict]:
    events = [module("Net_0", 0, 200, 0)]
    for i, api in enumerate(APIS):
        events += [op(f"aten::op{i}", 10 + 20 * i, 10), launch(11 + 20 * i, i + 1, api)]
        events.append(_gpu(api, i, 300 + 10 * i))
    events.append(_gpu("cudaGraphLaunch", 4, 400))  # a graph's second kernel, same correlation
    events.append(complete("gpu_user_annotation", "Net_0", 300, 150, STREAM, pid=0))
    return events


@pytest.fixture
def launches(tmp_path) -> Path:
    return write_trace(tmp_path / "launches.json", _launch_events())


@pytest.mark.slow
def test_every_launch_path_attributed(launches):
    ops = analyse(load_profile(launches)).ops.sort("op_id")
    got = ops.select("kind", "launch_api", "aten_op", "module", "dur_ns").rows()
    expected = [
        (
            "kernel" if api not in _GPU else _GPU[api][4:],
            api,
            f"aten::op{i}",
            "Net_0",
            1000 * (i + 1),
        )
        for i, api in enumerate(APIS)
    ]
    expected.append(("kernel", "cudaGraphLaunch", "aten::op4", "Net_0", 5000))  # at 400 µs
    assert got == expected
    assert set(ops["attribution"]) == {"range"}
    assert ops["launch_start_ns"].to_list()[:2] == [11000, 31000]


def test_gpu_user_annotations_are_neither_ops_nor_ranges(launches):
    report = read_trace(launches)
    # kernels, copy and set: 1 + 2 + ... + 7 µs, and the graph's second kernel (5 µs)
    assert report.ops["dur_ns"].sum() == 1000 * (sum(range(1, 8)) + 5)
    assert report.ops.height == len(APIS) + 1
    assert report.ranges.filter(pl.col("pid") == 0).is_empty()
    assert report.meta_value("gpu_user_annotations") == "1"


def _old_trace(with_correlation: bool) -> list[dict]:
    """A 2021-style trace: capitalised categories, "external id", stream tids, async flows."""
    ext = {"External id": 5}
    events = [
        complete("Operator", "aten::mm", 10, 10, 4242, **ext),
        complete("Runtime", "cudaLaunchKernel", 12, 2, 4242, cbid=211, correlation=77,
                 **{"external id": 5}),
        complete("Kernel", "volta_sgemm_128x64_nn", 30, 4, "stream 7", pid=0, device=0,
                 stream=7, correlation=77, **{"external id": 5}),
        complete("Operator", "aten::copy_", 40, 10, 4242),
        complete("Runtime", "cudaMemcpyAsync", 41, 1, 4242, correlation=78),
        complete("Memcpy", "Memcpy HtoD (Pageable -> Device)", 45, 2, "stream 7", pid=0,
                 device=0, stream=7, correlation=78, bytes=64),
        complete("Runtime", "cudaMemsetAsync", 43, 1, 4242, correlation=79),
        complete("Memset", "Memset (Device)", 48, 1, "stream 7", pid=0, device=0, stream=7,
                 correlation=79, bytes=64),
    ]  # fmt: skip
    for corr, src, dst in ((77, 12, 30), (78, 41, 45), (79, 43, 48)):
        events += [
            flow("s", corr, src, 4242, "async"),
            flow("f", corr, dst, "stream 7", "async", 0),
        ]
    if not with_correlation:
        for ev in events:
            ev.get("args", {}).pop("correlation", None)
    return events


@pytest.mark.slow
@pytest.mark.parametrize("with_correlation", [True, False])
def test_old_trace_categories_and_async_flows(tmp_path, with_correlation):
    path = write_trace(tmp_path / "old.json", _old_trace(with_correlation), deviceProperties=[])
    ops = analyse(load_profile(path)).ops.sort("op_id")
    assert ops.select(
        "kind", "correlation_id", "launch_api", "aten_op", "tid", "dur_ns"
    ).rows() == [
        ("kernel", 77, "cudaLaunchKernel", "aten::mm", 4242, 4000),
        ("memcpy", 78, "cudaMemcpyAsync", "aten::copy_", 4242, 2000),
        ("memset", 79, "cudaMemsetAsync", "aten::copy_", 4242, 1000),
    ]
    assert ops["input_shapes"].to_list() == [None] * 3
    assert set(ops["stream_id"]) == {7}


def test_old_trace_shapes_join_through_lower_case_external_id(tmp_path):
    events = copy.deepcopy(_old_trace(True))
    events[0]["args"]["Input Dims"] = [[8, 16], [16, 4]]
    ops = read_trace(write_trace(tmp_path / "old.json", events)).ops
    assert ops["input_shapes"].to_list()[0] == "[[8, 16], [16, 4]]"
