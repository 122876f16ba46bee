"""Names in torch.profiler traces that are not valid UTF-8: read, with U+FFFD in place.

A trace is JSON, but a profiler writes operator and kernel names as the bytes
it was given: a byte such as 0xFF (Latin-1 text) or an escape of a lone UTF-16
surrogate (`\\ud800`) holds no character. Both readers (the Arrow one and the
general one) read such a trace as the nsys reader reads such an export: the
bad bytes become U+FFFD, everything else of the name and of the trace stays.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from nsysmap.flow.verbs import analyse, load_profile
from nsysmap.read.torch.torch_trace import read_trace
from tests.torch_traces import kernel, launch, op

MARK = "@MARK@"


def _write(path: Path, events: list[dict], raw: bytes, *, general: bool) -> Path:
    """The trace with every MARK replaced by `raw`; `general`: a key that only the general
    reader reads, so the Arrow reader declines the trace."""
    doc = {"schemaVersion": 1, "traceEvents": events}
    if general:
        events[0]["args"]["external id"] = 1
    path.write_bytes(json.dumps(doc).encode().replace(MARK.encode(), raw))
    return path


def _cpu_events() -> list[dict]:
    return [
        op(f"aten::mm{MARK}", 1, 10, **{"External id": 1, "Input Dims": [[8, 16], [16, 4]]}),
        op(f"aten::add{MARK}, seq = 4", 12, 3, **{"Sequence number": 4}),
        op("aten::relu", 16, 2),
    ]


def _gpu_events() -> list[dict]:
    return [
        op(f"aten::mm{MARK}", 1, 10, **{"External id": 1}),
        launch(2, 5),
        kernel(f"gemm{MARK}<float>", 4, 1, 5),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("general", [False, True], ids=["arrow", "general"])
@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (b"\xff", "\ufffd"),
        (b"caf\xe9", "caf\ufffd"),  # Latin-1
        (b"\xe2\x82", "\ufffd"),  # a UTF-8 sequence cut short
        (b"\\ud800", "\ufffd"),  # an escaped lone surrogate
        (b"\\udc00x", "\ufffdx"),
        (b"\\ud83d\\ude00", "\U0001f600"),  # an escaped pair: one character, kept
        (b"\\\\ud800", "\\ud800"),  # an escaped backslash, then text: kept as written
    ],
    ids=["ff", "latin1", "cut-sequence", "lone-high", "lone-low", "pair", "backslash"],
)
def test_cpu_operator_names_keep_what_they_can(tmp_path, raw, shown, general):
    path = _write(tmp_path / "t.json", _cpu_events(), raw, general=general)
    ops = read_trace(path).ops.sort("start_ns")
    assert ops["name"].to_list() == [f"aten::mm{shown}", f"aten::add{shown}, seq = 4", "aten::relu"]
    assert ops["dur_ns"].sum() == 15_000


@pytest.mark.slow
@pytest.mark.parametrize("general", [False, True], ids=["arrow", "general"])
def test_attribution_cuts_such_names_by_bytes(tmp_path, general):
    """Operator names are cut at their call fields (`, seq = `) as bytes: never inside a
    character, never refused (it used to fail with "invalid utf8")."""
    path = _write(tmp_path / "t.json", _cpu_events(), b"\xff", general=general)
    ops = analyse(load_profile(path)).ops.sort("start_ns")
    assert ops.select("name", "aten_op", "dur_ns").rows() == [
        ("aten::mm\ufffd", "aten::mm\ufffd", 10000),
        ("aten::add\ufffd, seq = 4", "aten::add\ufffd, seq = 4", 3000),
        ("aten::relu", "aten::relu", 2000),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("general", [False, True], ids=["arrow", "general"])
def test_kernel_and_range_names_with_a_bad_byte(tmp_path, general):
    path = _write(tmp_path / "t.json", _gpu_events(), b"\xff", general=general)
    ops = analyse(load_profile(path)).ops
    assert ops.select("name", "range_name", "dur_ns").rows() == [
        ("gemm\ufffd<float>", "aten::mm\ufffd", 1000)
    ]
    assert ops["launch_api"].to_list() == ["cudaLaunchKernel"]


def test_a_bad_byte_in_the_header(tmp_path):
    """The header is read by the same text rules (a device name of Latin-1 bytes)."""
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": f"GPU{MARK}"}],
        "traceEvents": _gpu_events(),
    }
    path = tmp_path / "t.json"
    path.write_bytes(json.dumps(doc).encode().replace(MARK.encode(), b"\xff"))
    profile = load_profile(path)
    assert profile.devices["name"].to_list() == ["GPU\ufffd"]
    assert profile.ops.filter(pl.col("kind") == "kernel")["name"].to_list() == ["gemm\ufffd<float>"]
