"""Time windows cut where ranges are open (nsysmap.sources.window_carry): a range around the run,
epochs and step ranges back to back leave no quiet moment, yet a single-process export
is split, and every written table is that of a whole read (tests/window_tables.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl
import pytest

from devtools.synth.bulk import write_export
from devtools.synth.tile import gpt_tables, with_ranges
from nsysmap.core.timings import Stages
from nsysmap.flow.verbs import analyse_file
from nsysmap.read.nsys import nsys_sql, window_cuts, window_plan
from nsysmap.read.nsys.nsys_sqlite import open_export, read_sqlite
from nsysmap.sources import window_carry
from nsysmap.sources.by_window import WindowCheck, window_profiles
from nsysmap.sources.choose import WINDOWS_ENV
from tests.window_tables import differences, windows_read_apart

pytestmark = pytest.mark.slow  # whole-pipeline runs, twice each
QUIET = Stages(progress=False)
STEP = r"^nsysmap:step:\d+$"


def _spanned(tables: dict, gap: int = 1) -> dict:
    """`tables` (gpt_tables, one process) with each step range ending `gap` ns before
    the next starts, and on the main thread a range `run` around them all and two
    epochs, `epoch 0` ending with the step before the middle one (`gap` 1) or
    across it (`gap` 3: the step, nsysmap's own, outranks it and clips it)."""
    nvtx = tables["NVTX_EVENTS"]
    nvtx = nvtx if isinstance(nvtx, pl.DataFrame) else pl.concat(list(nvtx))
    steps_ids = tables["StringIds"].filter(pl.col("value").str.contains(STEP))["id"]
    is_step = pl.col("textId").is_in(steps_ids.implode()).fill_null(False)
    steps = nvtx.filter(is_step).sort("start")
    ends = steps.select("start", new=(pl.col("start").shift(-1) - 1).fill_null(pl.col("end")))
    nvtx = nvtx.join(ends, on="start", how="left", maintain_order="left")
    nvtx = nvtx.with_columns(end=pl.when(is_step).then("new").otherwise("end")).drop("new")
    first, last = int(steps["start"][0]) - 10, int(nvtx["end"].max()) + 10  # type: ignore[arg-type]
    middle = int(steps["start"][steps.height // 2])
    outer = pl.DataFrame(
        {
            "start": [first, first, middle],
            "end": [last, middle - gap, last],
            "text": ["run", "epoch 0", "epoch 1"],
        }
    )
    return with_ranges({**tables, "NVTX_EVENTS": nvtx}, outer, int(steps["globalTid"][0]))


@pytest.fixture(scope="module")
def spanned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("spanned")
    return write_export(folder / "spanned.sqlite", _spanned(gpt_tables(3000, seed=3, processes=1)))


def _split(path: Path, out: Path, monkeypatch: pytest.MonkeyPatch, windows: int) -> str | None:
    """`path` attributed whole into out/whole and in `windows` windows into out/split;
    the split's `windows_refused`."""
    monkeypatch.delenv(WINDOWS_ENV, raising=False)
    analyse_file(path, out / "whole", stages=QUIET)
    monkeypatch.setenv(WINDOWS_ENV, str(windows))
    split = analyse_file(path, out / "split", stages=QUIET)
    refused = split.profile.meta_value("windows_refused")
    assert (split.profile.meta_value("windows_read_apart") is None) == (refused is not None)
    return refused


@pytest.mark.parametrize("windows", [4, 8])
def test_ranges_open_across_every_edge_are_carried(spanned, tmp_path, monkeypatch, windows):
    monkeypatch.setenv(WINDOWS_ENV, str(windows))
    plan = windows_read_apart(spanned, None)
    assert plan is not None and plan.refused is None and len(plan.windows) == windows
    assert all(n >= 1 for n in plan.carried[1:])  # no quiet moment: `run` is open throughout
    assert max(plan.carried) >= 3  # and some cut falls inside a step
    assert _split(spanned, tmp_path, monkeypatch, windows) is None
    assert differences(tmp_path / "whole", tmp_path / "split") == []
    by_range = pl.read_parquet(tmp_path / "split" / "by_range.parquet")
    run = by_range.filter(pl.col("range_path") == "run")
    assert run.height == 1 and run["calls"][0] == 1  # one instance, in every window


def test_a_carried_range_keeps_its_id_in_every_window(spanned, monkeypatch):
    monkeypatch.setenv(WINDOWS_ENV, "4")
    plan = windows_read_apart(spanned, None)
    assert plan is not None
    check = WindowCheck(plan.ops, plan.autograd, plan.nodes)
    ids = [
        profile.ranges.filter(pl.col("name") == "run")["range_id"].to_list()
        for profile in window_profiles(open_export(spanned), plan, stages=QUIET, check=check)
    ]
    assert len(ids) == 4 and all(len(found) == 1 for found in ids)
    assert len({found[0] for found in ids}) == 1
    assert check.refused is None


def test_by_range_counts_an_instance_across_edges_once(spanned, tmp_path, monkeypatch):
    """Without merging the instances read in two windows, by_range would count `run`
    once per window and add up its spans."""
    monkeypatch.setattr(WindowCheck, "carried_instances", lambda self: None)
    assert _split(spanned, tmp_path, monkeypatch, 4) is None
    assert differences(tmp_path / "whole", tmp_path / "split") == ["by_range.parquet"]
    by_range = pl.read_parquet(tmp_path / "split" / "by_range.parquet")
    assert by_range.filter(pl.col("range_path") == "run")["calls"][0] == 4


def test_without_carried_rows_the_windows_are_refused(spanned, tmp_path, monkeypatch):
    """Windows that do not read the ranges open across their start are refused (the
    window before saw them open across the edge), and the export is read whole."""
    monkeypatch.setattr(window_plan, "carried_rows", lambda export, pid, cuts: [[] for _ in cuts])
    refused = _split(spanned, tmp_path, monkeypatch, 4)
    assert refused is not None and "not read on both sides" in refused
    assert differences(tmp_path / "whole", tmp_path / "split") == []


def test_a_carried_range_nested_apart_is_refused(tmp_path, monkeypatch):
    """`epoch 0` crosses the end of the step it holds; nsysmap's step range outranks it
    and clips it in a whole read, but a window after the step would not: refused."""
    path = write_export(
        tmp_path / "clipped.sqlite", _spanned(gpt_tables(3000, seed=3, processes=1), gap=3)
    )
    refused = _split(path, tmp_path, monkeypatch, 4)
    assert refused is not None and "edge" in refused
    assert differences(tmp_path / "whole", tmp_path / "split") == []


def test_the_subtree_of_a_carried_range_is_what_by_range_counts_inside_it(spanned, monkeypatch):
    monkeypatch.setenv(WINDOWS_ENV, "4")
    plan = windows_read_apart(spanned, None)
    assert plan is not None
    profile = next(iter(window_profiles(open_export(spanned), plan, stages=QUIET)))
    ranges = profile.ranges
    run = ranges.filter(pl.col("name") == "run")["range_id"]
    inside = window_carry.inside(ranges, run)
    assert isinstance(inside, pl.DataFrame)
    same_thread = ranges.filter(pl.col("tid") == ranges.filter(pl.col("name") == "run")["tid"][0])
    assert inside.height == same_thread.height  # everything of its thread, itself included
    paths = window_carry.path_rows(ranges, run)
    assert paths.select("range_path", "range_name", "range_depth").row(0) == ("run", "run", 1)


def _crossing(path: Path, edges: list[int]) -> list[int]:
    """How many ranges of the export are open across each of `edges` (start < t <= end)."""
    with sqlite3.connect(path) as db:
        return [
            db.execute(
                "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND start < ? "
                "AND coalesce(end, ?) >= ?",
                (edge, 1 << 62, edge),
            ).fetchone()[0]
            for edge in edges
        ]


@pytest.mark.parametrize("fixture", ["spanned", "quiet"])
def test_the_ranges_open_across_each_cut_are_found_over_many_batches(
    fixture, spanned, tmp_path, monkeypatch, request
):
    """Read in batches of 500 NVTX rows: candidate cuts and their counts come from
    many batches (overlapping in time where the outer ranges are written last),
    and each window still reads exactly the ranges open across its start."""
    monkeypatch.setattr(nsys_sql, "BATCH_ROWS", 500)
    monkeypatch.setattr(window_cuts, "CHUNK_ROWS", 128)
    path = spanned if fixture == "spanned" else request.getfixturevalue("quiet")
    monkeypatch.setenv(WINDOWS_ENV, "6")
    plan = windows_read_apart(path, None)
    assert plan is not None and plan.refused is None and len(plan.windows) == 6
    edges = [w.start_lo for w in plan.windows[1:]]
    assert list(plan.carried) == [0, *_crossing(path, [e for e in edges if e is not None])]
    assert (min(plan.carried[1:]) > 0) == (fixture == "spanned")
    whole = read_sqlite(path)
    parts = [read_sqlite(path, process=plan.pid, window=w) for w in plan.windows]
    assert sum(p.ranges.height for p in parts) == whole.ranges.height + sum(plan.carried)
    assert _split(path, tmp_path, monkeypatch, 6) is None
    assert differences(tmp_path / "whole", tmp_path / "split") == []


@pytest.fixture(scope="module")
def quiet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The export of `spanned` without its outer ranges and with gaps between steps."""
    folder = tmp_path_factory.mktemp("quiet")
    return write_export(folder / "quiet.sqlite", gpt_tables(3000, seed=3, processes=1))


@pytest.mark.parametrize("outliers", [0, 1 << 14])
def test_each_range_is_read_in_the_window_of_its_start(spanned, monkeypatch, outliers):
    """Extents per 128 NVTX rows: the outer ranges, written last, are read by rowid in
    the window of their start, or (too many of them) widen their chunk's extent;
    either way every range is read once, and again in each window it is carried to."""
    monkeypatch.setattr(window_cuts, "CHUNK_ROWS", 128)
    monkeypatch.setattr(window_cuts, "MAX_OUTLIERS", outliers)
    monkeypatch.setenv(WINDOWS_ENV, "6")
    plan = windows_read_apart(spanned, None)
    assert plan is not None and plan.refused is None
    whole = read_sqlite(spanned)
    parts = [read_sqlite(spanned, process=plan.pid, window=w) for w in plan.windows]
    assert sum(p.ranges.height for p in parts) == whole.ranges.height + sum(plan.carried)
    with sqlite3.connect(spanned) as db:
        (last,) = db.execute("SELECT max(rowid) FROM NVTX_EVENTS").fetchone()
    first = plan.windows[0].nvtx_rows
    assert first is not None
    # Kept apart, the outer ranges (the last rows) do not stretch the first window's
    # rows to the end of the table.
    assert (first[1] >= last) == (outliers == 0)
