"""`nsysmap export`'s default window on large reports, and the trace written in chunks.

A report of more than OPERATION_LIMIT operations is exported over the time of
its first steady steps, and the trace says what it leaves out. Each trace is
read back with Python's json module, and what it should hold is worked out
here from ops.parquet, not by the code under test.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import polars as pl
import pytest

from devtools.synth.bulk import write_export
from devtools.synth.tile import gpt_tables
from nsysmap.export import perfetto, window
from nsysmap.export.perfetto import NOTE_PID, Selection, trace_text
from nsysmap.export.window import default_selection
from nsysmap.flow.verbs import analyse_file
from nsysmap.report.report_files import read_run
from tests.cli_runner import nsysmap_cli

SPAN_TRACKS = ("steps", "phases", "modules", "note")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two GPUs, five steps of 902 operations (451 per GPU), no warm-up."""
    root = tmp_path_factory.mktemp("window")
    export = write_export(root / "g.sqlite", gpt_tables(4500, seed=3))
    analyse_file(export, root / "run")
    return root / "run"


def exported(run_dir: Path, tmp_path: Path, capsys, *options: object) -> tuple[dict, str]:
    target = tmp_path / "trace.json"
    assert nsysmap_cli(["export", run_dir, "--perfetto", target, *options]) == 0
    return json.loads(target.read_text()), capsys.readouterr().err


def op_ids(trace: dict) -> set[int]:
    return {
        e["args"]["op_id"]
        for e in trace["traceEvents"]
        if e["ph"] == "X" and e["cat"] not in SPAN_TRACKS
    }


def first_steps_window(ops: pl.DataFrame, n: int) -> set[int]:
    """The operations that overlap the time of the first `n` steps (none is warm-up)."""
    steps = sorted(ops["step"].drop_nulls().unique().to_list())[:n]
    inside = ops.filter(pl.col("step").is_in(steps))
    first, last = inside["start_ns"].min(), inside["end_ns"].max()
    overlap = (pl.col("start_ns") < last) & (pl.col("end_ns") > first)
    return set(ops.filter(overlap)["op_id"].to_list())


@pytest.mark.slow
def test_a_large_report_gets_the_first_steps_and_says_what_it_left_out(
    run, tmp_path, capsys, monkeypatch
):
    ops = read_run(run).ops
    assert ops["step"].n_unique() == 5
    monkeypatch.setattr(window, "OPERATION_LIMIT", 3000)  # the report has 4510 operations
    trace, err = exported(run, tmp_path, capsys)
    kept = first_steps_window(ops, 3)
    assert op_ids(trace) == kept  # every operation of the window, none outside it
    assert {e["args"]["step"] for e in trace["traceEvents"] if e.get("cat") == "steps"} == {0, 1, 2}
    left_out = ops.height - len(kept)
    note = trace["traceEvents"][0]  # the first event names the note's process
    assert note["pid"] == NOTE_PID and f"{left_out:,} operations left out" in note["args"]["name"]
    (event,) = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "note"]
    assert event["args"]["left_out"] == left_out and "--all" in event["name"]
    assert trace["otherData"]["left_out"] == left_out
    assert f"{left_out:,} are left out" in err


@pytest.mark.slow
def test_first_steps_and_all(run, tmp_path, capsys):
    ops = read_run(run).ops
    one, err = exported(run, tmp_path, capsys, "--first-steps", "1")
    assert op_ids(one) == first_steps_window(ops, 1) and "left out" in err
    everything, err = exported(run, tmp_path, capsys, "--all")
    assert op_ids(everything) == set(ops["op_id"].to_list())
    assert "left out" not in err and everything["otherData"]["left_out"] == 0
    assert all(e["pid"] != NOTE_PID for e in everything["traceEvents"])


@pytest.mark.slow
def test_a_small_report_is_exported_whole(run, tmp_path, capsys):
    trace, err = exported(run, tmp_path, capsys)
    assert len(op_ids(trace)) == read_run(run).ops.height and "left out" not in err


@pytest.mark.slow
@pytest.mark.parametrize(
    "options",
    [
        ["--all", "--steps", "1"],
        ["--all", "--first-steps", "2"],
        ["--window", "0:5", "--first-steps", "2"],
        ["--first-steps", "0"],
    ],
)
def test_choices_that_exclude_each_other_exit_with_usage(run, tmp_path, options):
    target = tmp_path / "t.json"
    assert nsysmap_cli(["export", run, "--perfetto", target, *options]) == 2
    assert not target.exists()


def ops_of_steps(steps: list[int], warm: set[int], per_step: int = 4) -> pl.DataFrame:
    """`per_step` back-to-back 1 µs operations per step; the steps in `warm` are warm-up."""
    rows = [(s, s in warm, (s * per_step + i) * 1000) for s in steps for i in range(per_step)]
    frame = pl.DataFrame(rows, schema=["step", "warmup", "start_ns"], orient="row")
    return frame.with_columns(end_ns=pl.col("start_ns") + 1000)


def test_the_default_window_skips_warm_up_steps():
    ops = ops_of_steps([0, 1, 2, 3, 4, 5], warm={0, 1})
    chosen = default_selection(ops, 3, limit=20).apply(ops, 0)
    assert chosen["step"].unique().sort().to_list() == [2, 3, 4]
    assert "steady" in (default_selection(ops, 3, limit=20).label or "")


def test_the_default_window_holds_fewer_steps_when_they_are_large_but_never_none():
    ops = ops_of_steps([0, 1, 2, 3], warm=set())
    assert default_selection(ops, 3, limit=9).apply(ops, 0)["step"].unique().len() == 2
    assert default_selection(ops, 3, limit=2).apply(ops, 0)["step"].unique().to_list() == [0]


def test_a_report_without_steps_gets_its_first_operations():
    ops = ops_of_steps([0, 1, 2], warm=set()).with_columns(step=pl.lit(None, pl.Int64))
    assert default_selection(ops, limit=5).apply(ops, 0).height == 5
    assert default_selection(ops, limit=12).window_ms is None  # not above the limit: all


def test_an_instantaneous_operation_on_the_window_edge_is_kept():
    ops = pl.DataFrame(
        {"step": [0, 0, 1], "start_ns": [0, 2000, 2000], "end_ns": [2000, 2000, 3000]}
    )
    assert Selection(window_ms=(0.0, 0.002)).apply(ops, 0)["end_ns"].to_list() == [2000, 2000]


@pytest.mark.slow
def test_the_trace_written_in_small_chunks_is_the_same_json(run, monkeypatch):
    ops = read_run(run).ops
    whole, _ = trace_text(ops, {}, Selection())
    monkeypatch.setattr(perfetto, "CHUNK", 7)  # spans and operations cut in hundreds of chunks
    chunked, _ = trace_text(ops, {}, Selection())
    assert chunked == whole and len(op_ids(json.loads(chunked))) == ops.height


@pytest.mark.slow
def test_a_failed_write_leaves_no_half_trace(run, tmp_path, capsys, monkeypatch):
    def full_disk(self, out) -> None:
        out.write('{"traceEvents": [')
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(perfetto.Trace, "write", full_disk)
    target = tmp_path / "t.json"
    assert nsysmap_cli(["export", run, "--perfetto", target]) == 10
    assert not target.exists() and "No space left on device" in capsys.readouterr().err
