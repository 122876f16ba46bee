"""Ranges, API calls and trace events that end before they start: exit 4, never lost operations.

A range whose end comes before its start cannot nest; before this check such
an export ran on until its own totals failed (exit 11) or, for API calls,
silently misplaced launches. Each case makes such spans in a copy of a real
export or trace (and in a synthetic one, which needs no corpus), and expects
one line, exit 4, the number of reversed spans counted independently, and no
outputs.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from devtools.synth import SynthExport
from nsysmap.core.errors import ExitCode
from nsysmap.sources.choose import BY_PROCESS, choice
from tests.cli_runner import nsysmap_cli
from tests.corpus import corpus_path
from tests.torch_traces import complete, kernel, launch, op, write_trace

FASTVIDEO = "fastvideo_training_mfu_h100x2_before.sqlite"  # two H100s, 19,118 NVTX ranges
DLRM = "param_dlrm_ddp_rank0of8_nccl_alltoall_v100.pt.trace.json"
# The swap: every other row's start and end change places (SQLite evaluates the right sides
# on the old row).
SWAP = 'UPDATE "{table}" SET start = "end", "end" = start WHERE rowid % 2 = 0'
RANGES = "NVTX_EVENTS"
CALLS = "CUPTI_ACTIVITY_KIND_RUNTIME"
TINY_GB = 1e-6  # a memory budget below any export: read one process at a time


def _swapped(source: Path, target: Path, table: str) -> int:
    """A copy of `source` with the spans of every other row of `table` swapped; how many
    of them now end before they start (ranges: push/pop and start/end only)."""
    shutil.copyfile(source, target)
    target.chmod(0o644)
    with sqlite3.connect(target) as conn:
        conn.execute(SWAP.format(table=table))
        kinds = " AND eventType IN (59, 60)" if table == RANGES else ""
        query = f'SELECT count(*) FROM "{table}" WHERE "end" < start{kinds}'
        (reversed_,) = conn.execute(query).fetchone()
    conn.close()
    return int(reversed_)


def _refused(argv: list[object], capsys: pytest.CaptureFixture[str], out: Path) -> str:
    code = nsysmap_cli(argv)
    err = capsys.readouterr().err
    assert code == ExitCode.UNUSABLE_INPUT, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not out.exists()
    return err


def _synthetic(path: Path, processes: int = 1) -> Path:
    """One step of three kernels per process (process p on GPU p)."""
    b = SynthExport()
    for p in range(processes):
        pid, tid = 10 * (p + 1), 10 * (p + 1) + 1
        b.thread(pid, tid, "python")
        b.range(pid, tid, 0, 20, "nsysmap:step:0")
        for i, at in enumerate([2, 6, 10]):
            corr = 10 * p + i + 1
            b.range(pid, tid, at, at + 3, f"nsysmap:fwd:Linear:fc{i}")
            b.launch(pid, tid, at + 1, at + 1.5, corr=corr)
            b.kernel(pid, p, 7, at + 2, at + 4, corr=corr, name=f"void k{i}()")
    return b.write(path)


@pytest.mark.corpus
@pytest.mark.parametrize(("table", "what"), [(RANGES, "NVTX range"), (CALLS, "runtime API call")])
def test_a_real_export_with_reversed_spans_is_refused(tmp_path, capsys, table, what):
    source = tmp_path / "swapped.sqlite"
    n = _swapped(corpus_path(FASTVIDEO), source, table)
    assert n > 1000  # the corpus file has thousands of each
    out = tmp_path / "out"
    err = _refused(["attribute", source, "-o", out, "--quiet"], capsys, out)
    assert f": {n:,} {what}s end before they start (first: " in err
    assert err.strip().endswith("the export is damaged")


@pytest.mark.corpus
@pytest.mark.parametrize(("table", "what"), [(RANGES, "NVTX range"), (CALLS, "runtime API call")])
def test_reversed_spans_read_one_process_at_a_time_are_refused_too(tmp_path, capsys, table, what):
    source = tmp_path / "swapped.sqlite"
    _swapped(corpus_path(FASTVIDEO), source, table)
    out = tmp_path / "out"
    argv: list[object] = ["attribute", source, "-o", out, "--quiet", "--memory-gb", "0.0001"]
    assert f"{what}s end before they start" in _refused(argv, capsys, out)


@pytest.mark.parametrize(("table", "what"), [(RANGES, "NVTX range"), (CALLS, "runtime API call")])
def test_a_synthetic_export_with_reversed_spans_is_refused(tmp_path, capsys, table, what):
    source = tmp_path / "swapped.sqlite"
    n = _swapped(_synthetic(tmp_path / "made.sqlite"), source, table)
    out = tmp_path / "out"
    err = _refused(["attribute", source, "-o", out], capsys, out)
    count = f"{n} {what}s end before they start" if n > 1 else f"1 {what} ends before it starts"
    assert count in err


@pytest.mark.parametrize(("table", "what"), [(RANGES, "NVTX range"), (CALLS, "runtime API call")])
def test_reversed_spans_of_a_synthetic_export_read_one_process_at_a_time_are_refused(
    tmp_path, capsys, table, what
):
    source = tmp_path / "swapped.sqlite"
    _swapped(_synthetic(tmp_path / "made.sqlite", processes=2), source, table)
    assert choice(source, TINY_GB).processes == (10, 20)  # read one process at a time
    assert choice(source, TINY_GB).how == BY_PROCESS
    out = tmp_path / "out"
    argv: list[object] = ["attribute", source, "-o", out, "--quiet", "--memory-gb", TINY_GB]
    err = _refused(argv, capsys, out)  # refused at the first process that has one
    assert re.search(rf": \d+ {what}(s end before they start| ends before it starts) ", err), err


@pytest.mark.slow
def test_spans_of_no_length_and_open_ranges_are_not_reversed(tmp_path, capsys):
    source = _synthetic(tmp_path / "made.sqlite")
    with sqlite3.connect(source) as conn:
        conn.execute(f'UPDATE {RANGES} SET "end" = start WHERE rowid % 2 = 0')
        conn.execute(f'UPDATE {RANGES} SET "end" = NULL WHERE rowid % 3 = 0')
        conn.execute(f'UPDATE {CALLS} SET "end" = start')
    conn.close()
    assert nsysmap_cli(["attribute", source, "-o", tmp_path / "out", "--quiet"]) == 0


# ----------------------------------------------------------------- torch.profiler traces
def _events() -> list[dict]:
    return [
        complete("user_annotation", "ProfilerStep#0", 0, 20),
        op("aten::mm", 1, 10),
        launch(2, 5),
        kernel("gemm", 4, 1, 5),
    ]


@pytest.mark.parametrize("index", range(4), ids=["user_annotation", "cpu_op", "runtime", "kernel"])
def test_a_trace_event_with_a_negative_dur_is_refused(tmp_path, capsys, index):
    events = _events()
    events[index]["dur"] = -3
    out = tmp_path / "out"
    err = _refused(["attribute", write_trace(tmp_path / "t.json", events), "-o", out], capsys, out)
    assert (
        f"1 trace event ends before it starts, a negative dur (first: {events[index]['cat']}" in err
    )


@pytest.mark.corpus
def test_a_real_trace_with_negative_durations_is_refused(tmp_path, capsys):
    doc = json.loads(corpus_path(DLRM).read_text())
    kinds = {"kernel", "cpu_op", "user_annotation"}
    changed = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in kinds][::2]
    for event in changed:
        event["dur"] = -1 - event["dur"]
    source = tmp_path / "negative.json"
    source.write_text(json.dumps(doc))
    out = tmp_path / "out"
    err = _refused(["attribute", source, "-o", out], capsys, out)
    assert f"{len(changed):,} trace events end before they start" in err
