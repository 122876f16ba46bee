"""Malformed torch.profiler traces: a right answer or a one-line error, never an internal error.

Each case changes one field of a small trace (a kernel of 1 µs and a copy of
2 µs, both launched inside an operator) the way fuzzed or hand-edited traces
do. An event whose time, duration, pid, tid or flow id cannot be read is
skipped and counted (a negative duration refuses the trace: see
tests/test_reversed_spans.py); an `args` that is not an object is ignored;
every other odd value reads as null. The GPU time left is worked out by hand per case.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from nsysmap.cli import cli
from nsysmap.core.errors import ExitCode, InputNotFound, NoGpuData, NotAProfile
from nsysmap.flow.verbs import analyse, load_profile
from nsysmap.read.torch.torch_trace import read_trace
from tests.torch_traces import STREAM, complete, flow, kernel, launch, op, write_trace

KERNEL, COPY, OP = 3, 5, 0  # positions in _events()


def _events() -> list[dict]:
    return [
        op("aten::mm", 1, 10, **{"External id": 1, "Input Dims": [[8, 16], [16, 4]]}),
        launch(2, 5),
        flow("s", 5, 2, 100, "ac2g"),
        kernel("gemm", 4, 1, 5),
        launch(5, 6, "cudaMemcpyAsync"),
        complete("gpu_memcpy", "Memcpy HtoD", 6, 2, STREAM, pid=0, device=0, stream=STREAM,
                 correlation=6, bytes=64),
    ]  # fmt: skip


def _set(index: int, key: str, value: Any):
    def change(events: list[dict]) -> None:
        events[index][key] = value

    return change


def _set_arg(index: int, key: str, value: Any):
    def change(events: list[dict]) -> None:
        events[index]["args"][key] = value

    return change


def _drop(index: int, key: str):
    def change(events: list[dict]) -> None:
        events[index].pop(key)

    return change


# (case, change, skipped events, GPU ns left, kernel launched?)
CASES = [
    ("ts text", _set(KERNEL, "ts", "abc"), 1, 2000, None),
    ("ts number as text", _set(KERNEL, "ts", "4.0"), 0, 3000, True),
    ("ts null", _set(KERNEL, "ts", None), 1, 2000, None),
    ("ts true", _set(KERNEL, "ts", True), 1, 2000, None),
    ("ts list", _set(KERNEL, "ts", [4]), 1, 2000, None),
    ("ts beyond 64 bits", _set(KERNEL, "ts", 2**70), 1, 2000, None),
    ("ts 1e303", _set(KERNEL, "ts", 1e303), 1, 2000, None),
    ("dur negative zero", _set(KERNEL, "dur", -0.0), 0, 2000, True),
    ("dur missing", _drop(KERNEL, "dur"), 1, 2000, None),
    ("dur text", _set(COPY, "dur", "2 us"), 1, 1000, True),
    ("pid null", _set(KERNEL, "pid", None), 1, 2000, None),
    ("tid missing", _drop(COPY, "tid"), 1, 1000, True),
    ("args int", _set(KERNEL, "args", 5), 0, 3000, False),
    ("args list", _set(KERNEL, "args", [1, 2]), 0, 3000, False),
    ("args bool", _set(KERNEL, "args", True), 0, 3000, False),
    ("args text", _set(KERNEL, "args", "x"), 0, 3000, False),
    ("args missing", _drop(KERNEL, "args"), 0, 3000, False),
    ("launch args int", _set(1, "args", 7), 0, 3000, True),  # its ac2g flow still links it
    ("tid a list", _set(KERNEL, "tid", [1, 2]), 0, 3000, True),
    ("ids of mixed types", _set(OP, "tid", "main"), 0, 3000, True),
    ("pid beyond 64 bits", _set(KERNEL, "pid", 2**70), 0, 3000, True),
    ("correlation beyond 64 bits", _set_arg(KERNEL, "correlation", 2**70), 0, 3000, False),
    ("correlation text", _set_arg(KERNEL, "correlation", "5"), 0, 3000, False),
    ("correlation true", _set_arg(KERNEL, "correlation", True), 0, 3000, False),
    ("grid of text", _set_arg(KERNEL, "grid", ["a", 1]), 0, 3000, True),
    ("device text", _set_arg(KERNEL, "device", "zero"), 0, 3000, True),
    ("input dims nested deep", _set_arg(OP, "Input Dims", [[[[[[[[1]]]]]]]]), 0, 3000, True),
    ("input dims of text", _set_arg(OP, "Input Dims", [["8"]]), 0, 3000, True),
    ("name a number", _set(KERNEL, "name", 5), 0, 3000, True),
    ("category a list", _set(KERNEL, "cat", ["kernel"]), 0, 2000, None),
    ("flow id text", _set(2, "id", "x"), 1, 3000, True),
    ("event a string", lambda ev: ev.append("not an event"), 0, 3000, True),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("change", "skipped", "gpu_ns", "launched"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_malformed_fields(tmp_path, change, skipped, gpu_ns, launched):
    events = _events()
    change(events)
    report = load_profile(write_trace(tmp_path / "t.json", events))
    ops = analyse(report).ops
    assert ops["dur_ns"].sum() == gpu_ns
    assert int(report.meta_value("events_skipped")) == skipped
    gemm = ops.filter(pl.col("kind") == "kernel")
    assert gemm.is_empty() == (launched is None)
    if launched is not None:
        assert (gemm["launch_api"][0] is not None) == launched
    if skipped:
        assert "skipped" in report.meta_value("events_skipped_detail")


def test_ignored_args_are_counted(tmp_path):
    events = _events()
    events[KERNEL]["args"] = [1]
    assert (
        read_trace(write_trace(tmp_path / "t.json", events)).meta_value("events_args_ignored")
        == "1"
    )


@pytest.mark.parametrize(
    ("header", "devices", "rank"),
    [
        ({"deviceProperties": 5, "distributedInfo": {"rank": "zero"}}, 0, None),
        ({"deviceProperties": [{"id": "0", "name": 7}], "distributedInfo": [0]}, 0, None),
        ({"deviceProperties": [{"id": 0, "numSms": True}], "distributedInfo": {"rank": 3}}, 1, "3"),
    ],
)
def test_header_fields_of_the_wrong_type(tmp_path, header, devices, rank):
    report = read_trace(write_trace(tmp_path / "t.json", _events(), **header))
    assert report.devices.height == devices and report.meta_value("rank") == rank
    assert report.devices["sm_count"].null_count() == devices


@pytest.mark.slow
def test_skipped_events_are_named_in_the_summary(tmp_path):
    events = _events()
    events[KERNEL]["ts"] = "abc"
    path = write_trace(tmp_path / "t.json", events)
    result = CliRunner().invoke(cli, ["attribute", str(path), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0
    assert "Note: 1 trace event skipped: 1 with ts not a number (first: 'gemm' has str 'abc')" in (
        result.output
    )


def test_nothing_readable_is_one_line_no_gpu_data(tmp_path):
    events = [{**e, "ts": "?"} for e in _events()]
    with pytest.raises(NoGpuData) as info:
        read_trace(write_trace(tmp_path / "t.json", events))
    assert "\n" not in str(info.value) and "6 trace events skipped" in str(info.value)
    assert info.value.exit_code == ExitCode.NO_GPU_DATA


def test_json_nested_thousands_deep(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text('{"traceEvents": [' + "[" * 100_000 + "]" * 100_000 + "]}")
    with pytest.raises(NotAProfile, match="nested too deeply"):
        read_trace(path)


def test_deep_args_inside_an_event(tmp_path):
    events = _events()
    text = json.dumps({"traceEvents": events})
    deep = '"Input Dims": ' + "[" * 50_000 + "]" * 50_000
    path = tmp_path / "deep_args.json"
    path.write_text(text.replace('"Input Dims": [[8, 16], [16, 4]]', deep))
    with pytest.raises(NotAProfile) as info:
        read_trace(path)
    assert "\n" not in str(info.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this platform")
def test_named_pipe_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []
    reader = threading.Thread(target=lambda: _catch(outcome, fifo), daemon=True)
    reader.start()
    reader.join(timeout=20)
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert isinstance(outcome[0], InputNotFound) and "not a regular file" in str(outcome[0])


def _catch(outcome: list[BaseException], path: Path) -> None:
    try:
        read_trace(path)
    except BaseException as exc:  # handed to the test thread
        outcome.append(exc)
