"""Work launched on a thread without step or phase ranges takes them from another thread of
its process (nsysmap.attribution.locate.latest_open): the range open at launch that started
last, whatever crossed it earlier. A read in time windows starts with only the ranges open
at its edge, so an answer that depended on earlier crossings would differ from a whole
read's (tests/window_tables.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest

from devtools.synth.bulk import global_tid, write_export
from devtools.synth.tile import FIRST_PID, gpt_tables, with_ranges
from nsysmap.core.timings import Stages
from nsysmap.flow.verbs import analyse_file
from nsysmap.sources.choose import WINDOWS_ENV
from tests.window_tables import differences, windows_read_apart

pytestmark = pytest.mark.slow  # whole-pipeline runs, twice each
QUIET = Stages(progress=False)
BACKWARD = "nsysmap:phase:backward"
LOADER = "nsysmap:phase:data"
NAMES, PHASES = [BACKWARD, LOADER], ["backward", "data"]
LOADER_TID = FIRST_PID + 40  # a data-loading thread of the one process


def _crossing(tables: dict) -> dict:
    """`tables` (gpt_tables, one process) with, on a loader thread, a `data` phase range
    from the middle of each step's backward phase range into the first quarter of the
    next one: each crosses a main-thread range on either side of it.

        main     |--- backward k ---|   ...   |--- backward k+1 ---|
        loader             |------- data k -------|
    """
    nvtx = tables["NVTX_EVENTS"]
    nvtx = nvtx if isinstance(nvtx, pl.DataFrame) else pl.concat(list(nvtx))
    strings = tables["StringIds"]
    backward_id = strings.filter(pl.col("value") == BACKWARD)["id"]
    backward = nvtx.filter(pl.col("textId").is_in(backward_id.implode())).sort("start")
    starts, ends = backward["start"], backward["end"]
    middle = (starts + (ends - starts) // 2).slice(0, backward.height - 1)
    stop = starts.slice(1) + (ends.slice(1) - starts.slice(1)) // 4
    loader = pl.DataFrame({"start": middle, "end": stop, "text": LOADER})
    return with_ranges({**tables, "NVTX_EVENTS": nvtx}, loader, global_tid(FIRST_PID, LOADER_TID))


@pytest.fixture(scope="module")
def crossing(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("crossing")
    tables = _crossing(gpt_tables(3000, seed=5, processes=1))
    return write_export(folder / "crossing.sqlite", tables)


@pytest.fixture(scope="module")
def whole(crossing: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("whole") / "out"
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(WINDOWS_ENV, raising=False)
        analyse_file(crossing, out, stages=QUIET)
    return out


def _phase_ranges(path: Path) -> pl.DataFrame:
    """The export's backward and loader `data` ranges: start, end, name."""
    query = (
        "SELECT e.start, e.end, coalesce(e.text, s.value) AS name FROM NVTX_EVENTS e"
        " LEFT JOIN StringIds s ON s.id = e.textId WHERE e.eventType = 59"
    )
    with sqlite3.connect(path) as db:
        rows = db.execute(query).fetchall()
    frame = pl.DataFrame(rows, schema=["start", "end", "name"], orient="row")
    return frame.filter(pl.col("name").is_in(NAMES))


def test_the_range_that_started_last_gives_the_phase(crossing, whole):
    """Work launched from autograd's thread (whose own ranges name no phase) while the
    loader's `data` range and a backward range are both open takes the phase of the
    one that started last."""
    ops = pl.read_parquet(whole / "ops.parquet").filter(
        pl.col("other_thread_range_id").is_not_null() & pl.col("phase").is_in(PHASES)
    )
    launch = pl.col("launch_start_ns")
    open_at = (
        ops.select("op_id", "launch_start_ns", "phase")
        .join(_phase_ranges(crossing), how="cross")
        .filter((pl.col("start") <= launch) & (launch < pl.col("end")))
    )
    both = open_at.group_by("op_id").agg(pl.col("name").n_unique()).filter(pl.col("name") == 2)
    assert both.height > 100  # much work was launched where the two cross
    latest = open_at.sort("start", descending=True).unique("op_id", keep="first")
    assert latest.height == ops.height
    assert set(latest["phase"]) == set(PHASES)
    assert (
        latest["phase"] == latest["name"].replace_strict(dict(zip(NAMES, PHASES, strict=True)))
    ).all()


@pytest.mark.parametrize("windows", [4, 8])
def test_windows_give_the_whole_reads_tables(crossing, whole, tmp_path, monkeypatch, windows):
    monkeypatch.setenv(WINDOWS_ENV, str(windows))
    plan = windows_read_apart(crossing, None)
    assert plan is not None and plan.refused is None and len(plan.windows) == windows
    split = analyse_file(crossing, tmp_path / "split", stages=QUIET)
    assert split.profile.meta_value("windows_refused") is None
    assert differences(whole, tmp_path / "split") == []
