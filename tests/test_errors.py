"""Every misuse and every damaged input: one line, a documented exit code, nothing half-written.

Inputs that are not regular files or cannot be read, output paths that
cannot be written, times that make no duration or overflow a total, column
names in another letter case, a run whose totals do not add up, and what
is left in an output directory when a run fails.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import polars as pl
import pytest

import nsysmap.flow.run_stages as flow
import nsysmap.output.writer as writer
from devtools.synth import SynthExport
from nsysmap.attribution.normalise import check_span_times
from nsysmap.core.errors import DamagedTimes, ExitCode, NotAnOutput, NotAProfile
from nsysmap.core.schemas import API_CALLS, RANGES
from nsysmap.report.report_files import read_run
from tests.cli_runner import nsysmap_cli
from tests.fuzz import sqlite_totals

MS = 1_000_000


def _export(path: Path, *, step_name: str = "nsysmap:step:0", op: str = "aten::mm") -> Path:
    """Two devices, three kernels and a memcpy of whole milliseconds inside one step;
    the first kernel is launched inside the operator range `op`, the third in a module."""
    b = SynthExport()
    b.thread(10, 11, "python")
    b.range(10, 11, 0, 20, step_name)
    b.range(10, 11, 0.5, 2, op)
    b.range(10, 11, 4.5, 7, "nsysmap:fwd:Linear:fc")
    for i, (at, device) in enumerate([(1, 0), (3, 1), (5, 0)]):
        b.launch(10, 11, at, at + 0.5, corr=i + 1)
        b.kernel(10, device, 7, at + 1, at + 3, corr=i + 1, name=f"void k{i}()")
    b.launch(10, 11, 9, 9.5, corr=9, api="cudaMemcpyAsync_v3020")
    b.memcpy(10, 1, 7, 10, 11, corr=9)
    return b.write(path)


def _run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str]:
    """Exit code and stderr of `nsysmap ARGV`; stderr must be one line when it fails."""
    code = nsysmap_cli([str(a) for a in argv])
    err = capsys.readouterr().err
    if code:
        assert len(err.strip().splitlines()) == 1, err
        assert "internal error" not in err and "Traceback" not in err, err
    return code, err


# ------------------------------------------------------------------ inputs
def test_a_fifo_is_refused_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "pipe.sqlite"
    os.mkfifo(fifo)
    code, err = _run(capsys, "attribute", fifo, "-o", tmp_path / "out")
    assert code == ExitCode.INPUT_NOT_FOUND and "named pipe (FIFO)" in err


def test_a_trace_that_is_a_fifo_is_refused_too(tmp_path, capsys):
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    code, err = _run(capsys, "attribute", fifo, "-o", tmp_path / "out")
    assert code == ExitCode.INPUT_NOT_FOUND and "not a torch.profiler trace" in err


@pytest.mark.parametrize("name", ["run.sqlite", "trace.json.gz"])
def test_an_unreadable_input_exits_3_with_permission_denied(tmp_path, capsys, monkeypatch, name):
    path = tmp_path / name
    path.write_bytes(b"SQLite format 3\x00")
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode: False if Path(p) == path else real_access(p, mode)
    )
    code, err = _run(capsys, "attribute", path, "-o", tmp_path / "out")
    assert code == ExitCode.INPUT_NOT_FOUND
    assert err.strip().endswith("cannot read it (Permission denied)")


# ----------------------------------------------------------------- outputs
@pytest.mark.slow
@pytest.mark.parametrize(
    ("where", "fragment"),
    [
        (lambda d: d / "a_file", "exists and is not a directory"),
        (lambda d: d / "a_file" / "out", "is a file"),
        (lambda d: d / ("x" * 300) / "out", "longer than"),
    ],
    ids=["is_a_file", "under_a_file", "name_too_long"],
)
def test_output_paths_that_cannot_be_written(tmp_path, capsys, where, fragment):
    source = _export(tmp_path / "run.sqlite")
    (tmp_path / "a_file").write_text("mine\n")
    code, err = _run(capsys, "attribute", source, "-o", where(tmp_path))
    assert code == ExitCode.OUTPUT_FAILED and fragment in err
    assert (tmp_path / "a_file").read_text() == "mine\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes whatever the mode")
def test_a_read_only_output_directory(tmp_path, capsys):
    source = _export(tmp_path / "run.sqlite")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    code, err = _run(capsys, "attribute", source, "-o", locked / "out")
    assert code == ExitCode.OUTPUT_FAILED and "Permission denied" in err


def test_a_read_only_output_directory_as_the_system_reports_it(tmp_path, capsys, monkeypatch):
    source = _export(tmp_path / "run.sqlite")
    real_access = os.access
    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setattr(
        os, "access", lambda p, m: False if Path(p) == locked else real_access(p, m)
    )
    code, err = _run(capsys, "attribute", source, "-o", locked / "out")
    assert code == ExitCode.OUTPUT_FAILED and "Permission denied" in err


def test_run_refuses_an_output_path_that_is_a_file_before_profiling(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    (tmp_path / "a_file").write_text("mine\n")
    code, err = _run(capsys, "run", "--backend", "torch", "-o", tmp_path / "a_file", script)
    assert code == ExitCode.OUTPUT_FAILED and "exists and is not a directory" in err
    assert (tmp_path / "a_file").read_text() == "mine\n"


@pytest.mark.slow
def test_report_markdown_path_that_is_a_directory(tmp_path, capsys):
    source = _export(tmp_path / "run.sqlite")
    assert _run(capsys, "attribute", source, "-o", tmp_path / "out")[0] == 0
    code, err = _run(capsys, "report", tmp_path / "out", "--markdown", tmp_path)
    assert code == ExitCode.OUTPUT_FAILED and "is a directory" in err


# ---------------------------------------------------------- whole outputs
def _outputs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


@pytest.mark.slow
def test_a_failed_write_leaves_the_previous_outputs_complete(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"
    assert _run(capsys, "attribute", _export(tmp_path / "a.sqlite"), "-o", out)[0] == 0
    (out / "notes.txt").write_text("the user's own file\n")
    before = _outputs(out)
    real = writer.write_coded

    def failing(blocks: object, schema: pl.Schema, path: Path, *args: object) -> int:
        if path.name == "by_kernel.parquet":
            raise OSError(28, "No space left on device")
        return real(blocks, schema, path, *args)

    monkeypatch.setattr(writer, "write_coded", failing)
    b = _export(tmp_path / "b.sqlite", step_name="nsysmap:step:7")
    code, err = _run(capsys, "attribute", b, "-o", out)
    assert code == ExitCode.OUTPUT_FAILED and "No space left on device" in err
    assert _outputs(out) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left


@pytest.mark.slow
def test_a_new_run_replaces_every_output_of_the_old_one(tmp_path, capsys):
    out = tmp_path / "out"
    assert _run(capsys, "attribute", _export(tmp_path / "a.sqlite"), "-o", out)[0] == 0
    pl.DataFrame({"stale": [1]}).write_parquet(out / "old_table.parquet")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["tables"]["old_table"] = {"file": "old_table.parquet", "rows": 1}
    (out / "manifest.json").write_text(json.dumps(manifest))
    b = _export(tmp_path / "b.sqlite", step_name="nsysmap:step:7")
    assert _run(capsys, "attribute", b, "-o", out)[0] == 0
    assert not (out / "old_table.parquet").exists()
    assert pl.read_parquet(out / "by_step.parquet")["step"].unique().to_list() == [7]


@pytest.mark.slow  # runs a script under the launcher
def test_run_failing_before_capture_leaves_no_previous_outputs_looking_current(tmp_path, capsys):
    out = tmp_path / "out"
    assert _run(capsys, "attribute", _export(tmp_path / "a.sqlite"), "-o", out)[0] == 0
    script = tmp_path / "crash.py"
    script.write_text("raise SystemExit(3)\n")
    code = nsysmap_cli(["run", "--backend", "torch", "-o", str(out), str(script)])
    capsys.readouterr()
    assert code == 3
    assert not list(out.glob("*.parquet")) and not (out / "manifest.json").exists()


# --------------------------------------------------------- damaged times
def test_reversed_times_are_damaged_times_a_kind_of_not_a_profile():
    ranges = pl.DataFrame(
        [{"range_id": 0, "pid": 1, "tid": 1, "name": "r", "start_ns": 5, "end_ns": 2}],
        schema=RANGES,
    )
    with pytest.raises(DamagedTimes, match="1 NVTX range ends before it starts") as info:
        check_span_times(ranges, pl.DataFrame(schema=API_CALLS), "run.sqlite")
    assert isinstance(info.value, NotAProfile) and info.value.exit_code == 4


@pytest.mark.parametrize("manifest", ["[]", "{not json", '{"tables": {}}'])
def test_a_bad_manifest_is_not_an_output_not_a_bad_profile(tmp_path, capsys, manifest):
    (tmp_path / "manifest.json").write_text(manifest)
    with pytest.raises(NotAnOutput, match="not an nsysmap manifest") as info:
        read_run(tmp_path)
    assert not isinstance(info.value, NotAProfile)
    code, err = _run(capsys, "report", tmp_path)
    assert code == ExitCode.UNUSABLE_INPUT == 4 and "not an nsysmap manifest" in err


def _edit(path: Path, *statements: str) -> Path:
    with sqlite3.connect(path) as conn:
        for statement in statements:
            conn.execute(statement)
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("statement", "fragment"),
    [
        ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc' WHERE rowid = 2", "non-numeric"),
        ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 5 WHERE rowid = 1", "end before"),
        ("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET end = x'0102'", "1 GPU operation without"),
        (f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = {(1 << 62) + (1 << 61)}", "2^63-1 ns"),
    ],
    ids=["text_start", "end_before_start", "blob_end", "total_overflows"],
)
def test_unusable_times_are_refused_not_wrapped(tmp_path, capsys, statement, fragment):
    path = _edit(_export(tmp_path / "run.sqlite"), statement)
    code, err = _run(capsys, "attribute", path, "-o", tmp_path / "out")
    assert code == ExitCode.UNUSABLE_INPUT and fragment in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_columns_renamed_in_letter_case_are_read(tmp_path, capsys):
    path = _edit(
        _export(tmp_path / "run.sqlite"),
        'ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN "deviceId" TO "DEVICEID"',
        'ALTER TABLE CUPTI_ACTIVITY_KIND_MEMCPY RENAME TO "tmp"',
        'ALTER TABLE "tmp" RENAME TO "cupti_activity_kind_memcpy"',
    )
    assert _run(capsys, "attribute", path, "-o", tmp_path / "out")[0] == 0
    ops = pl.read_parquet(tmp_path / "out" / "ops.parquet")
    by_device = dict(ops.group_by("device_id").agg(pl.col("dur_ns").sum()).iter_rows())
    assert by_device == {0: 4 * MS, 1: 3 * MS}
    assert (ops.height, int(ops["dur_ns"].sum())) == sqlite_totals(path)


@pytest.mark.slow
def test_api_calls_without_thread_ids_leave_every_op_without_a_launch(tmp_path, capsys):
    """A renamed globalTid reads as NULL: no call has a process, so none launches an op."""
    path = _edit(
        _export(tmp_path / "run.sqlite"),
        'ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME RENAME COLUMN "globalTid" TO "globalTid_x"',
    )
    assert _run(capsys, "attribute", path, "-o", tmp_path / "out")[0] == 0
    ops = pl.read_parquet(tmp_path / "out" / "ops.parquet")
    assert ops["attribution"].to_list() == ["no_launch"] * 4


@pytest.mark.slow
def test_numbers_beyond_64_bits_in_range_names_are_no_number(tmp_path, capsys):
    huge = "99999999999999999999"
    path = _export(
        tmp_path / "run.sqlite", step_name=f"ProfilerStep#{huge}", op=f"aten::mm, seq = {huge}"
    )
    assert _run(capsys, "attribute", path, "-o", tmp_path / "out")[0] == 0
    ops = pl.read_parquet(tmp_path / "out" / "ops.parquet")
    assert ops["step"].null_count() == 4 and ops["aten_op"].to_list()[0] == "aten::mm"


# ------------------------------------------------------------ conservation
@pytest.mark.slow
def test_totals_that_do_not_add_up_are_an_error_and_nothing_is_written(
    tmp_path, capsys, monkeypatch
):
    real = flow.partial_summaries

    def losing_one(ops: pl.DataFrame) -> dict[str, pl.DataFrame]:
        return real(ops.slice(1))  # as if a join had dropped a row

    monkeypatch.setattr(flow, "partial_summaries", losing_one)
    code, err = _run(capsys, "attribute", _export(tmp_path / "run.sqlite"), "-o", tmp_path / "o")
    assert code == ExitCode.TOTALS_MISMATCH and "totals do not add up" in err
    assert not (tmp_path / "o").exists()


def test_internal_errors_are_one_line(tmp_path, capsys, monkeypatch):
    def failing(ops: pl.DataFrame) -> dict[str, pl.DataFrame]:
        raise pl.exceptions.ComputeError("first line\n\nResolved plan:\n  SELECT ...\n")

    monkeypatch.setattr(flow, "partial_summaries", failing)
    code = nsysmap_cli(
        ["attribute", str(_export(tmp_path / "r.sqlite")), "-o", str(tmp_path / "o")]
    )
    err = capsys.readouterr().err
    assert code == ExitCode.INTERNAL and len(err.strip().splitlines()) == 1
    assert "internal error: ComputeError: first line Resolved plan: SELECT ..." in err


@pytest.mark.slow
def test_report_old_output_option_still_names_the_markdown_file(tmp_path, capsys):
    source = _export(tmp_path / "run.sqlite")
    assert _run(capsys, "attribute", source, "-o", tmp_path / "out")[0] == 0
    code, err = _run(capsys, "report", tmp_path / "out", "-o", tmp_path / "mine.md", "--quiet")
    assert code == 0 and "is now --markdown FILE" in err
    assert (tmp_path / "mine.md").read_text().startswith("#")
    code, err = _run(
        capsys, "report", tmp_path / "out", "-o", tmp_path / "a.md", "--markdown", tmp_path / "b.md"
    )
    assert code == ExitCode.USAGE and "give the Markdown file once" in err
