"""The window planning scans large tables in parts at once (nsysmap.read.nsys.window_scans)."""

from __future__ import annotations

import itertools
from pathlib import Path

import polars as pl
import pytest

from devtools.synth.bulk import write_export
from devtools.synth.tile import gpt_tables
from nsysmap.core.timings import Stages
from nsysmap.flow.verbs import analyse_file
from nsysmap.read.nsys import nsys_specs as specs
from nsysmap.read.nsys import nsys_sql as sql
from nsysmap.read.nsys import window_scans
from nsysmap.read.nsys.nsys_sqlite import open_export
from nsysmap.sources.choose import WINDOWS_ENV
from tests.window_tables import differences

QUIET = Stages(progress=False)


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("scans")
    return write_export(folder / "one.sqlite", gpt_tables(1500, seed=5, processes=1))


def _split_small(monkeypatch: pytest.MonkeyPatch, threads: int = 3) -> None:
    """Scans of more than 256 rowids in `threads` parts, each beginning at a multiple of 64."""
    monkeypatch.setattr(sql, "READ_THREADS", threads)
    monkeypatch.setattr(sql, "SPLIT_ROWS", 256)
    monkeypatch.setattr(window_scans, "PART_ROWS", 64)


def test_parts_cover_the_rowids_once_each_from_a_multiple_of_part_rows(export, monkeypatch):
    _split_small(monkeypatch)
    opened = open_export(export)
    table = specs.NVTX.table
    parts = window_scans.scan_parts(opened, table)
    assert len(parts) == 3
    bounds = [parts[0][0], *(high for _, high in parts)]  # type: ignore[index,misc]
    assert bounds[0] == sql.first_rowid(opened, table) - 1
    assert bounds[-1] == sql.last_rowid(opened, table)
    assert all(low < high for low, high in itertools.pairwise(bounds))
    assert all(b % 64 == 0 for b in bounds[1:-1])


def test_a_small_table_is_one_unbounded_part(export, monkeypatch):
    monkeypatch.setattr(sql, "READ_THREADS", 3)
    assert window_scans.scan_parts(open_export(export), specs.NVTX.table) == [None]
    _split_small(monkeypatch, threads=1)  # one thread: never split
    assert window_scans.scan_parts(open_export(export), specs.NVTX.table) == [None]


def test_a_table_read_with_rowid_has_each_rows_rowid_after_the_spec_integers(export):
    """`scan` reads through read_table's `with_rowid`: every row as read without it."""
    opened = open_export(export)
    plain = sql.read_table(opened, specs.NVTX, rows=(99, 1 << 30))
    with_rowid = sql.read_table(opened, specs.NVTX, rows=(99, 1 << 30), with_rowid=True)
    assert plain is not None and with_rowid is not None and plain.height > 0
    ints = len(specs.NVTX.ints.split())  # rowid is read as one more integer column
    assert with_rowid.columns == [*plain.columns[:ints], "rowid", *plain.columns[ints:]]
    assert with_rowid.drop("rowid").equals(plain)
    rowids = with_rowid["rowid"]
    assert rowids.dtype == pl.Int64 and rowids.is_sorted() and rowids.min() > 99  # type: ignore[operator]
    assert rowids.max() == sql.last_rowid(opened, specs.NVTX.table)


def test_a_scan_in_parts_reduces_every_row_once_in_rowid_order(export, monkeypatch):
    """The same rows as one scan (each batch's rowids, kept whole), in the same order."""
    opened = open_export(export)
    spec = window_scans.counted(specs.RUNTIME.table, "start correlationId", specs.RUNTIME.process)
    pid = int(sql.read_table(opened, specs.RUNTIME)["globalTid"][0]) >> 24 & specs.ID_MASK  # type: ignore[index]
    whole = window_scans.scan(opened, spec, lambda batch: batch, pid)
    _split_small(monkeypatch)
    parted = window_scans.scan(opened, spec, lambda batch: batch, pid)
    assert whole is not None and parted is not None
    assert parted.n_chunks() >= 3  # one batch per part at least: it was read in parts
    assert whole.height > 256
    assert parted.equals(whole)


@pytest.mark.slow
def test_windows_planned_by_scans_in_parts_give_the_tables_of_the_whole(
    export, tmp_path, monkeypatch
):
    monkeypatch.delenv(WINDOWS_ENV, raising=False)
    analyse_file(export, tmp_path / "whole", stages=QUIET)
    _split_small(monkeypatch)
    monkeypatch.setenv(WINDOWS_ENV, "4")
    split = analyse_file(export, tmp_path / "split", stages=QUIET)
    assert split.profile.meta_value("windows_refused") is None
    assert split.profile.meta_value("windows_read_apart") == "4"
    assert differences(tmp_path / "whole", tmp_path / "split") == []
    ops = pl.read_parquet(tmp_path / "split" / "ops.parquet")
    assert ops["op_id"].is_unique().all()


def test_rowids_down_to_the_lowest_integer_are_scanned_in_one_part(export, monkeypatch):
    """A bound below the smallest rowid would not fit SQLite's 64-bit integers."""
    _split_small(monkeypatch)
    monkeypatch.setattr(sql, "first_rowid", lambda *_: -(1 << 63))
    monkeypatch.setattr(sql, "last_rowid", lambda *_: 1 << 40)
    assert window_scans.scan_parts(open_export(export), specs.NVTX.table) == [None]
    monkeypatch.setattr(sql, "first_rowid", lambda *_: -(1 << 63) + 1)
    assert len(window_scans.scan_parts(open_export(export), specs.NVTX.table)) == 3


def test_a_windows_nvtx_rows_are_read_in_stretches_each_domain_by_one(monkeypatch):
    """The window's own NVTX rowids split among the threads, never the whole table's;
    each domain creation read by exactly one part (the first or last past the ends)."""
    monkeypatch.setattr(sql, "READ_THREADS", 3)
    monkeypatch.setattr(sql, "SPLIT_ROWS", 256)
    window = sql.RowWindow(
        100, 200, 1, 9, nvtx_rows=(1000, 4000), domains=(3, 1000, 1001, 2500, 9000)
    )
    parts = sql._parts(None, specs.NVTX, window)  # type: ignore[arg-type]
    assert [rows for rows, _ in parts] == [None, None, None]
    windows = [part for _, part in parts]
    assert [w.nvtx_rows for w in windows] == [(1000, 2000), (2000, 3000), (3000, 4000)]
    assert [w.domains for w in windows] == [(3, 1000, 1001), (2500,), (9000,)]
    assert all(w.start_lo == 100 and w.start_hi == 200 for w in windows)
    small = sql.RowWindow(100, 200, 1, 9, nvtx_rows=(1000, 1200), domains=(3,))
    assert sql._parts(None, specs.NVTX, small) == [(None, small)]  # type: ignore[arg-type]
