"""The reader's integers: read as stored, and read again with casts where a value
is not an integer (nsysmap.read.nsys.nsys_sql.fetch).

SQLite keeps any value in any column. The casts that make a text or a real in an
integer column an integer (or, in a time column, NULL) cost SQLite about a fifth
of a large table's read, so a table is first read without them; the driver types
a column by its first batch and refuses a later value of another type, and a
first batch of another type is refused by the reader. Either way the profile
must be the one the casts alone give.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

from devtools.synth import write_export
from devtools.synth.tile import gpt_tables
from nsysmap.read.nsys import nsys_sql
from nsysmap.read.nsys.nsys_sqlite import read_sqlite

KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"
NVTX = "NVTX_EVENTS"
FRAMES = ("ops", "api_calls", "ranges", "threads", "devices", "graph_links")


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("plain")
    return write_export(folder / "clean.sqlite", gpt_tables(400, seed=5, processes=1))


def _spied(monkeypatch: pytest.MonkeyPatch, *, casts_only: bool = False) -> list[str]:
    """Record every query the reader runs (with `casts_only`, never without casts)."""
    queries: list[str] = []
    select = nsys_sql.select_sql

    def recording(*args, plain: bool = False, **kwargs):
        query = select(*args, plain=plain and not casts_only, **kwargs)
        queries.append(query[0])
        return query

    monkeypatch.setattr(nsys_sql, "select_sql", recording)
    monkeypatch.setattr(nsys_sql, "BATCH_ROWS", 100)  # many batches per table
    return queries


def _of(queries: list[str], table: str) -> list[str]:
    return [q for q in queries if f'FROM "{table}"' in q]


def _same_profile(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The queries of reading `path`, after checking that the profile read equals the
    one read with casts only."""
    queries = _spied(monkeypatch)
    got = read_sqlite(path)
    monkeypatch.undo()
    _spied(monkeypatch, casts_only=True)
    want = read_sqlite(path)
    monkeypatch.undo()
    for name in FRAMES:
        assert_frame_equal(getattr(got, name), getattr(want, name), check_exact=True)
    return queries


def test_a_clean_export_is_read_once_without_casts(clean, monkeypatch):
    queries = _same_profile(clean, monkeypatch)
    for table in (KERNELS, NVTX):
        (query,) = _of(queries, table)
        assert "AS INTEGER" not in query and "typeof" not in query, query
        assert "AS BLOB" in query or table == KERNELS  # texts keep their cast


def _altered(clean: Path, tmp_path: Path, sql: str) -> Path:
    path = tmp_path / "altered.sqlite"
    path.write_bytes(clean.read_bytes())
    with sqlite3.connect(path) as conn:
        assert conn.execute(sql).rowcount >= 1
    return path


@pytest.mark.parametrize(
    "sql",
    [
        # a text in a later batch: the driver refuses the batch
        f"UPDATE {KERNELS} SET streamId = 'seven' WHERE rowid = 300",
        # a real in a later batch of a time column: it is truncated, as the cast does
        f'UPDATE {KERNELS} SET "end" = "end" + 0.75 WHERE rowid = 350',
        # the first row: the driver types the column as text, which the reader refuses
        f"UPDATE {KERNELS} SET correlationId = 'x' WHERE rowid = 1",
        # a text in a time column of the ranges: NULL there, not 0
        f"UPDATE {NVTX} SET start = 'soon' WHERE rowid = 900",
    ],
    ids=["text-later", "real-later", "text-first", "text-time"],
)
def test_a_value_of_another_type_reads_as_the_casts_read_it(clean, tmp_path, monkeypatch, sql):
    path = _altered(clean, tmp_path, sql)
    queries = _same_profile(path, monkeypatch)
    table = KERNELS if KERNELS in sql else NVTX
    plain, cast = _of(queries, table)
    assert "AS INTEGER" not in plain and "AS INTEGER" in cast


def test_a_first_batch_of_nulls_reads_once_as_integers(clean, tmp_path, monkeypatch):
    """The driver types an integer column that starts with a batch of NULLs as int64:
    the later integers read without a second read."""
    nulls = f"UPDATE {KERNELS} SET correlationId = NULL WHERE rowid <= 150"
    path = _altered(clean, tmp_path, nulls)
    queries = _same_profile(path, monkeypatch)
    (query,) = _of(queries, KERNELS)
    assert "AS INTEGER" not in query
