"""Launch calls that share a correlation id: the operations' launches are ambiguous.

An operation finds its launch call by (pid, correlation id). When several calls
of a process carry one id but are different calls (another thread, time or
name), the launch of an operation with that id cannot be told, and neither can
that of the process's operations whose own id no call carries any more (the
ids were overwritten). Such operations are `ambiguous_launch`, with no launch
and no labels guessed from one; `no_launch` keeps its meaning: no call with
the operation's id in the capture. Copies of one call (every column alike)
are one call.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from devtools.synth import SynthExport
from nsysmap.attribution.attribute import attribute
from nsysmap.flow.verbs import analyse, load_profile
from tests.cli_runner import invoke
from tests.frames import MS, Frames
from tests.torch_traces import kernel, launch, op, write_trace

MAIN = 10


def _labels(ops: pl.DataFrame) -> list[tuple]:
    return ops.sort("op_id").select("attribution", "phase", "launch_start_ns").rows()


def _forward(f: Frames, n: int, *, pid: int = 1) -> list[int]:
    f.range(MAIN, "nsysmap:phase:forward", 0, 100, pid=pid)
    return [f.kernel(MAIN, 2 + 5 * i, pid=pid) for i in range(n)]


def test_calls_sharing_one_id_make_every_launch_of_the_process_ambiguous():
    """Every call of process 1 carries the first call's id: its first op finds several
    calls, the others none; neither is `no_launch`, and no phase is guessed."""
    f = Frames()
    _forward(f, 3)
    other = _forward(f, 1, pid=2)[0]
    for call in f.calls[:3]:
        call["correlation_id"] = f.calls[0]["correlation_id"]
    ops = attribute(f.profile())
    assert _labels(ops.filter(pl.col("pid") == 1)) == [("ambiguous_launch", None, None)] * 3
    assert _labels(ops.filter(pl.col("op_id") == other)) == [("range", "forward", 2 * MS)]


def test_two_calls_with_an_operations_id():
    """Of a process's ops, only the one whose id two different calls carry is ambiguous."""
    f = Frames()
    a = _forward(f, 2)[0]
    f.calls.append(dict(f.calls[a], tid=MAIN + 1, start_ns=50 * MS, end_ns=50 * MS + 1000))
    ops = attribute(f.profile())
    assert _labels(ops) == [("ambiguous_launch", None, None), ("range", "forward", 7 * MS)]


def test_copies_of_a_call_and_missing_calls_are_not_ambiguous():
    f = Frames()
    a, _ = _forward(f, 2)
    f.calls.append(dict(f.calls[a]))  # a copy: one call
    lost = f.kernel(None, 30)  # launched before the capture: no call with its id
    ops = attribute(f.profile())
    assert _labels(ops) == [
        ("range", "forward", 2 * MS),
        ("range", "forward", 7 * MS),
        ("no_launch", None, None),
    ]
    assert ops.filter(pl.col("op_id") == lost)["attribution"].to_list() == ["no_launch"]


def _export(path: Path, kernels: int) -> Path:
    """`kernels` kernels, a copy and a fill, each launched inside a forward phase."""
    b = SynthExport()
    b.thread(10, MAIN, "python")
    b.range(10, MAIN, 0, 1000, "nsysmap:phase:forward")
    for i in range(kernels):
        b.launch(10, MAIN, 2 + i * 5, 2.5 + i * 5, corr=i + 1)
        b.kernel(10, 0, 7, 3 + i * 5, 4 + i * 5, corr=i + 1, name=f"void k{i}<float>(int)")
    b.launch(10, MAIN, 900, 900.5, corr=500, api="cudaMemcpyAsync_v3020")
    b.memcpy(10, 0, 7, 901, 902, corr=500)
    b.launch(10, MAIN, 910, 910.5, corr=501, api="cudaMemsetAsync_v3020")
    b.memset(10, 0, 7, 911, 912, corr=501)
    return b.write(path)


@pytest.mark.slow
def test_an_export_whose_calls_share_one_id(tmp_path):
    """All but one of the operations read as "no launch record in the capture" (145 of 146
    with 144 kernels; 8 here), although every launch call is there."""
    path = _export(tmp_path / "x.sqlite", kernels=8)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = 1")
    db.close()
    out = tmp_path / "out"
    code, stdout, _ = invoke(["attribute", path, "-o", out])
    assert code == 0
    assert "100.0% launch ambiguous: several launch calls share correlation ids" in stdout
    ops = pl.read_parquet(out / "ops.parquet")
    assert ops["attribution"].value_counts().rows() == [("ambiguous_launch", 10)]
    coverage = pl.read_parquet(out / "coverage.parquet")
    assert coverage.select("attribution", "ops").rows() == [("ambiguous_launch", 10)]
    meta = json.loads((out / "manifest.json").read_text())["report_meta"]
    assert meta["duplicate_launch_rows"] == "0"  # 10 different calls, all kept


def test_an_export_with_copied_launch_rows_attributes_as_before(tmp_path):
    """Every call row written twice: the copies are dropped and counted, nothing ambiguous."""
    path = _export(tmp_path / "x.sqlite", kernels=4)
    with sqlite3.connect(path) as db:
        db.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME"
        )
    db.close()
    profile = load_profile(path)
    assert profile.meta_value("duplicate_launch_rows") == "6"
    assert analyse(profile).ops["attribution"].unique().to_list() == ["range"]


@pytest.mark.slow
@pytest.mark.parametrize("shared", ["calls", "none"])
def test_a_trace_whose_launch_calls_share_one_id(tmp_path, shared):
    events = [
        op("aten::mm", 1, 10, **{"External id": 1}),
        launch(2, 5),
        kernel("gemm", 4, 1, 5),
        launch(5, 6),
        kernel("gemv", 6, 1, 6),
    ]
    if shared == "calls":
        events[3]["args"]["correlation"] = 5
    ops = analyse(load_profile(write_trace(tmp_path / "t.json", events))).ops.sort("start_ns")
    expected = ["ambiguous_launch"] * 2 if shared == "calls" else ["range"] * 2
    assert ops["attribution"].to_list() == expected
