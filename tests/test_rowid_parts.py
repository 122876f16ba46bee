"""A rowid range split into parts read at once (nsysmap.read.nsys.rowid_parts), as the
whole read (nsys_sql) and the planning's scans (window_scans) use it."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devtools.synth.bulk import write_export
from devtools.synth.tile import gpt_tables
from nsysmap.read.nsys import nsys_specs as specs
from nsysmap.read.nsys import nsys_sql as sql
from nsysmap.read.nsys.nsys_sqlite import open_export
from nsysmap.read.nsys.rowid_parts import LOWEST_BOUND, split_rows

HIGHEST = (1 << 63) - 1


def _bounds(parts: list[tuple[int, int] | None]) -> list[int]:
    """The bounds of parts that follow one another (each begins where the last ended)."""
    assert None not in parts
    pairs = [p for p in parts if p is not None]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(pairs))
    return [pairs[0][0], *(high for _, high in pairs)]


@given(
    low=st.integers(LOWEST_BOUND, HIGHEST - 1),
    span=st.integers(1, 1 << 40),
    parts=st.integers(1, 8),
    align=st.one_of(st.just(1), st.integers(1, 1 << 20)),
)
def test_the_parts_hold_every_rowid_of_the_range_once(low, span, parts, align):
    high = min(low + span, HIGHEST)
    split = split_rows(low, high, parts, align)
    bounds = _bounds(split)
    assert bounds[0] == low and bounds[-1] == high
    assert all(a < b for a, b in itertools.pairwise(bounds))  # no part empty, none overlap
    assert 1 <= len(split) <= parts
    assert all(b % align == 0 for b in bounds[1:-1])


def test_without_alignment_the_range_is_split_evenly():
    assert split_rows(0, 3_000_000, 3) == [
        (0, 1_000_000),
        (1_000_000, 2_000_000),
        (2_000_000, 3_000_000),
    ]
    assert split_rows(-10, 10, 2) == [(-10, 0), (0, 10)]
    assert split_rows(5, 12, 3) == [(5, 7), (7, 9), (9, 12)]  # floor of each third
    assert split_rows(5, 12, 1) == [(5, 12)]


def test_inner_bounds_fall_to_a_multiple_of_the_alignment():
    assert split_rows(0, 3_000_000, 3, 1 << 16) == [
        (0, 983040),
        (983040, 1966080),
        (1966080, 3_000_000),
    ]
    assert split_rows(-100, 50, 2, 64) == [(-100, -64), (-64, 50)]  # -25 falls to -64
    # bounds that fall together or outside the range are left out: fewer parts, none empty
    assert split_rows(10, 100, 3, 64) == [(10, 64), (64, 100)]
    assert split_rows(10, 60, 3, 64) == [(10, 60)]
    assert split_rows(64, 100, 2, 64) == [(64, 100)]  # a bound on `low` itself


def test_a_range_below_the_lowest_integer_is_one_unbounded_part():
    """A table whose rowids reach -2**63: its lower bound would not bind as a 64-bit integer."""
    assert split_rows(LOWEST_BOUND - 1, 1 << 40, 3) == [None]
    assert split_rows(LOWEST_BOUND - 1, 1 << 40, 3, 64) == [None]
    lowest = split_rows(LOWEST_BOUND, 1 << 40, 3)
    assert len(lowest) == 3 and _bounds(lowest)[0] == LOWEST_BOUND


def _known(table: str, low: int, high: int) -> sql.RowWindow:
    return sql.RowWindow(None, None, 0, 0, rows=((table, low, high),))


def test_the_whole_read_splits_a_windows_rows_evenly(monkeypatch):
    monkeypatch.setattr(sql, "READ_THREADS", 3)
    monkeypatch.setattr(sql, "SPLIT_ROWS", 256)
    parts = sql._row_parts(None, specs.RUNTIME, _known(specs.RUNTIME.table, 99, 1299))  # type: ignore[arg-type]
    assert parts == [(99, 499), (499, 899), (899, 1299)]
    low = LOWEST_BOUND - 1  # the window's rows begin at the lowest rowid: read unbounded
    assert sql._row_parts(None, specs.RUNTIME, _known(specs.RUNTIME.table, low, 1299)) == [None]  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def lowest_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An export whose NVTX table also holds rows at rowid -2**63 and 2**21."""
    folder = tmp_path_factory.mktemp("lowest")
    path = write_export(folder / "one.sqlite", gpt_tables(200, seed=3, processes=1))
    with sqlite3.connect(path) as conn:
        table = specs.NVTX.table
        columns = [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]
        names = ", ".join(f'"{c}"' for c in columns)
        for rowid in (LOWEST_BOUND, 1 << 21):
            conn.execute(
                f'INSERT INTO "{table}" (rowid, {names}) SELECT ?, {names} FROM "{table}"'
                " WHERE eventType = 59 LIMIT 1",
                (rowid,),
            )
    return path


def test_the_whole_read_of_rowids_down_to_the_lowest_integer_reads_every_row(
    lowest_export, monkeypatch
):
    monkeypatch.setattr(sql, "READ_THREADS", 3)
    opened = open_export(lowest_export)
    assert sql.first_rowid(opened, specs.NVTX.table) == LOWEST_BOUND
    whole = sql.read_table(opened, specs.NVTX, with_rowid=True)
    assert whole is not None and whole["rowid"].min() == LOWEST_BOUND
    assert sql._row_parts(opened, specs.NVTX) == [None]
    read = sql.read_tables(opened, [specs.NVTX])[specs.NVTX.table]
    assert read is not None
    assert read.equals(whole.drop("rowid"))


def test_a_window_whose_rows_begin_at_the_lowest_rowid_reads_them(lowest_export, monkeypatch):
    """A window's NVTX stretch that begins at rowid -2**63 (its lower bound one below)
    is read without a lower bound: every row of the stretch, none beyond it."""
    from nsysmap.read.nsys.row_window import RowWindow

    opened = open_export(lowest_export)
    whole = sql.read_table(opened, specs.NVTX, with_rowid=True)
    assert whole is not None
    high = 1 << 20  # the stretch: every row but the one at 2**21
    window = RowWindow(None, None, 0, 0, nvtx_rows=(LOWEST_BOUND - 1, high))
    for threads in (1, 3):
        monkeypatch.setattr(sql, "READ_THREADS", threads)
        read = sql.read_tables(opened, [specs.NVTX], window=window)[specs.NVTX.table]
        assert read is not None
        assert read.equals(whole.filter(whole["rowid"] <= high).drop("rowid"))


def test_a_rowid_condition_has_no_lower_bound_below_the_lowest_integer():
    from nsysmap.read.nsys.rowid_parts import rowid_condition

    assert rowid_condition(3, 9) == ('"rowid" > ? AND "rowid" <= ?', (3, 9))
    assert rowid_condition(LOWEST_BOUND, 9) == ('"rowid" > ? AND "rowid" <= ?', (LOWEST_BOUND, 9))
    assert rowid_condition(LOWEST_BOUND - 1, 9) == ('"rowid" <= ?', (9,))
