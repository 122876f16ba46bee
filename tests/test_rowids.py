"""An nsys export whose row ids are neither dense nor positive reads as one whose are.

SQLite lets a table's rowids be any 64-bit integers: one kernel at rowid 2^40
and one at -5 is a valid export. Nothing may read the largest rowid as a row
count: the memory estimate that decides whether to read by process or by
time window counts the rows when the rowids say more than the budget, so such
an export is read whole, like its dense twin, and in windows (when forced)
gives the same outputs.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from devtools.synth import write_export
from devtools.synth.tile import gpt_tables
from nsysmap.read.nsys import nsys_sql
from nsysmap.read.nsys.nsys_sqlite import BYTES_PER_ROW, MIN_ROW_BYTES, expected_bytes
from nsysmap.sources.choose import WHOLE, choice
from tests.capped import run_capped
from tests.cli_runner import nsysmap_cli
from tests.fuzz import synthetic_export

KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"
FAR, BELOW = 2**40, -5


def sparse_copy(dense: Path, sparse: Path, tables: tuple[str, ...] = (KERNELS,)) -> Path:
    """`dense` with each table's last row moved to rowid 2^40 and its first to -5."""
    shutil.copyfile(dense, sparse)
    with sqlite3.connect(sparse) as db:
        for table in tables:
            low, high = db.execute(f'SELECT min(rowid), max(rowid) FROM "{table}"').fetchone()
            db.execute(f'UPDATE "{table}" SET rowid = ? WHERE rowid = ?', (FAR, high))
            db.execute(f'UPDATE "{table}" SET rowid = ? WHERE rowid = ?', (BELOW, low))
    db.close()
    return sparse


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    dense = synthetic_export(tmp_path / "dense.sqlite")
    tables = (KERNELS, "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME")
    return dense, sparse_copy(dense, tmp_path / "sparse.sqlite", tables)


def test_the_memory_estimate_counts_rows_not_rowids(pair):
    dense, sparse = pair
    rows = expected_bytes(dense) // BYTES_PER_ROW
    assert rows > 0
    assert expected_bytes(sparse) == expected_bytes(dense)
    assert expected_bytes(sparse, 1e9) == expected_bytes(dense)  # counted: the bound is 10^12
    assert expected_bytes(dense, 1e9) == expected_bytes(dense)  # dense: the bound is the count


def test_over_the_budget_only_bounds_the_file_could_not_hold_are_counted(pair, monkeypatch):
    """A bound of at most the file's bytes over MIN_ROW_BYTES rows stands (no scan);
    one past it (rowid 2^40 in a small file) is counted."""
    dense, sparse = pair
    counted: list[str] = []
    count = nsys_sql.row_count

    def counting(export, table):
        counted.append(table)
        return count(export, table)

    monkeypatch.setattr(nsys_sql, "row_count", counting)
    rows = expected_bytes(dense) // BYTES_PER_ROW  # no budget: every table counted
    assert len(counted) == 6  # GPU work (4 tables), runtime calls, NVTX
    counted.clear()
    assert expected_bytes(dense, 1.0) == rows * BYTES_PER_ROW  # over it, dense: no count
    assert counted == []
    assert expected_bytes(sparse, 1.0) == rows * BYTES_PER_ROW
    assert sorted(counted) == sorted((KERNELS, "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME"))
    assert sparse.stat().st_size // MIN_ROW_BYTES < (2**40)


def test_a_sparse_bound_the_file_could_hold_stands(tmp_path):
    """Rowids spread within what the file could hold: an over-estimate (a read in more
    windows than needed, the same outputs), never a scan."""
    dense = synthetic_export(tmp_path / "dense.sqlite")
    spread = tmp_path / "spread.sqlite"
    shutil.copyfile(dense, spread)
    with sqlite3.connect(spread) as db:
        high = db.execute(f'SELECT max(rowid) FROM "{KERNELS}"').fetchone()[0]
        db.execute(f'UPDATE "{KERNELS}" SET rowid = ? WHERE rowid = ?', (high + 1000, high))
    db.close()
    assert expected_bytes(spread, 1.0) == expected_bytes(dense, 1.0) + 1000 * BYTES_PER_ROW
    assert expected_bytes(spread) == expected_bytes(dense)  # no budget: counted


def test_a_small_export_with_sparse_rowids_is_read_whole(pair):
    """Neither by process (the export has two devices, one process) nor in windows."""
    _, sparse = pair
    assert choice(sparse, memory_gb=1.0).how == WHOLE


@pytest.fixture(scope="module")
def gpt_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A one-process GPT-2-like export of 20,000 kernels, and its sparse twin."""
    folder = tmp_path_factory.mktemp("rowids")
    dense = write_export(folder / "dense.sqlite", gpt_tables(20_000, processes=1))
    return dense, sparse_copy(dense, folder / "sparse.sqlite")


def _phase_sums(out: Path) -> list[tuple]:
    ops = pl.read_parquet(out / "ops.parquet")
    by_phase = ops.group_by("phase").agg(pl.len(), pl.col("dur_ns").sum()).sort("phase")
    return [(ops.height, int(ops["dur_ns"].sum())), *by_phase.rows()]


@pytest.mark.slow
def test_sparse_rowids_under_an_address_space_cap(gpt_pair, tmp_path):
    """Read whole under `ulimit -v 8000000`, as its dense twin (it used to be cut into 55
    windows, 9x the time, and died by SIGSEGV or a driver's "Cannot allocate memory"
    under `ulimit -v 6000000`)."""
    dense, sparse = gpt_pair
    outs = {}
    for path in (dense, sparse):
        out = outs[path] = tmp_path / path.stem
        done = run_capped(["attribute", str(path), "-o", str(out), "--quiet"])
        assert done.code == 0, done.stderr[-2000:]
        meta = json.loads((out / "manifest.json").read_text())["report_meta"]
        assert "windows_read_apart" not in meta and "windows_refused" not in meta
    assert _phase_sums(outs[sparse]) == _phase_sums(outs[dense])


@pytest.mark.slow
def test_time_windows_over_sparse_rowids_add_up(gpt_pair, tmp_path, monkeypatch):
    """Windows read their stretches of each table by rowid bounds: with a row at -5 and
    one at 2^40 they still hold every row once."""
    sparse = gpt_pair[1]
    whole = tmp_path / "whole"
    assert nsysmap_cli(["attribute", sparse, "-o", whole, "--quiet"]) == 0
    monkeypatch.setenv("NSYSMAP_WINDOWS", "4")
    windowed = tmp_path / "windows"
    assert nsysmap_cli(["attribute", sparse, "-o", windowed, "--quiet"]) == 0
    meta = json.loads((windowed / "manifest.json").read_text())["report_meta"]
    assert meta.get("windows_read_apart") == "4", meta.get("windows_refused")
    assert _phase_sums(windowed) == _phase_sums(whole)
