"""Stage 2 of the nsys reader: run the queries (SQL only, no lookups or joins).

Given the probed `Export` (`nsysmap.read.nsys.nsys_probe`), `read_tables` reads
every table the reader uses, once each, in parallel threads, and hands back
one frame per table (None for a table the export lacks); `read_table` reads
one. Nothing here interprets a value: string lookups, id decoding and joins
are the frames stage's (`nsysmap.read.nsys.nsys_frames`), which may pass a function
to apply to each batch as it arrives.

Each table is described by a `TableSpec` (`nsysmap.read.nsys.nsys_specs`): the
logical columns it wants, each with the physical column names that have held
it over nsys versions. The SELECT text is assembled only from these constants
and the columns the file turned out to have (a missing column reads as NULL),
so no SQL is ever built from data.

Rows arrive through the ADBC SQLite driver as Arrow, column by column. The
driver types each column by its first batch (int64 when all NULL) and refuses
a later value of another type, so integers are read as stored and, where
that fails, again as `CAST(col AS INTEGER)` (`fetch`); every text is read as
`CAST(coalesce(col, x'') AS BLOB)`: always binary, never NULL (an empty text
means unset). Binary becomes String in Arrow's C++ cast, which validates
UTF-8; a column that fails takes a slow path that decodes its distinct values
with U+FFFD replacement (`nsys_probe.decode`). Every failure of the storage
stack on bad input becomes NotAProfile.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial

import adbc_driver_manager
import adbc_driver_sqlite.dbapi as adbc
import polars as pl
import pyarrow as pa

from nsysmap.core.errors import NotAProfile
from nsysmap.core.scalars import opt_int
from nsysmap.read.nsys.nsys_probe import (
    BACKEND_ERRORS,
    BATCH_ROWS,
    Export,
    arrow,
    decode,
    unreadable,
)
from nsysmap.read.nsys.nsys_specs import (
    ID_MASK,
    KERNEL,
    NVTX,
    RUNTIME,
    TableSpec,
)
from nsysmap.read.nsys.row_window import RowWindow
from nsysmap.read.nsys.rowid_parts import rowid_condition, split_rows

Batch = Callable[[pl.DataFrame], pl.DataFrame]
Raw = dict[str, pl.DataFrame | None]

# Tables are read in this many threads (the SQLite driver releases the GIL).
READ_THREADS = min(3, os.cpu_count() or 1)
# Tables with more rows than this are read in READ_THREADS parts, by rowid.
SPLIT_ROWS = 1 << 20
SPLIT_TABLES = frozenset(spec.table for spec in (NVTX, KERNEL, RUNTIME))
# A batch of at most this many rows is copied out of the driver's buffers (`_frame`):
# they hold at least 16 times what it needs.
SMALL_BATCH = BATCH_ROWS // 16


def read_tables(
    export: Export,
    specs: Sequence[TableSpec],
    batches: Mapping[str, Batch] | None = None,
    process: int | None = None,
    window: RowWindow | None = None,
) -> Raw:
    """Table name -> its rows (None when absent), every table read in parallel threads.

    Tables are submitted in the order given (biggest first, so the threads
    finish together); large ones are read in READ_THREADS parts by rowid and
    the parts joined in rowid order (one chunk per batch: nothing is copied).
    `batches` maps a table name to the function applied to each of its
    batches as it arrives. `process`: only that process's rows of the tables
    that say whose they are (`TableSpec.process`); `window`: only the rows of
    that time window (`RowWindow`).
    """
    batches = batches or {}
    with ThreadPoolExecutor(READ_THREADS) as pool:
        futures = {
            spec.table: [
                pool.submit(read_table, export, spec, rows, batches.get(spec.table), process, part)
                for rows, part in _parts(export, spec, window)
            ]
            for spec in specs
        }
        return {name: _joined([f.result() for f in parts]) for name, parts in futures.items()}


def read_table(
    export: Export,
    spec: TableSpec,
    rows: tuple[int, int] | None = None,
    batch: Batch | None = None,
    process: int | None = None,
    window: RowWindow | None = None,
    *,
    with_rowid: bool = False,
) -> pl.DataFrame | None:
    """The table of `spec` as a frame, or None when the export lacks it.

    With `rows` = (low, high), only the rows with low < rowid <= high; with
    `process`, only that process's rows (when the table says whose they are).
    `batch` is applied to each batch as it arrives (see `fetch`); `with_rowid`: rowid too.
    """
    present = export.columns(spec.table)
    if present is None:
        return None
    if with_rowid:
        spec, present = replace(spec, ints=f"{spec.ints} rowid"), present | {"rowid"}
    try:
        with export.connect() as conn:
            return fetch(conn, spec, present, rows, batch, process, window)
    except BACKEND_ERRORS as exc:
        raise unreadable(export.file, exc) from None


def process_rows(export: Export, spec: TableSpec) -> dict[int | None, int]:
    """How many rows the table holds of each process (None: rows without one); empty
    when the export lacks the table."""
    present = export.columns(spec.table)
    if present is None or not has_process_column(spec, present):
        return {}
    column = f'"{spec.process}"'
    query = (
        f"SELECT (({column} >> 24) & {ID_MASK}) AS pid, count(*) AS n "
        f"FROM {_quoted(spec.table)} GROUP BY pid"
    )
    try:
        with export.connect() as conn:
            found = arrow(conn, query)
    except BACKEND_ERRORS as exc:
        raise unreadable(export.file, exc) from None
    pids, counts = found["pid"].to_pylist(), found["n"].to_pylist()
    return {opt_int(p): int(n) for p, n in zip(pids, counts, strict=True)}


def last_rowid(export: Export, table: str) -> int | None:
    """The table's largest rowid; None when unknown (not its row count: rowids need
    be neither dense nor positive, see `row_bound`)."""
    return _aggregate(export, table, "max(rowid)")


def first_rowid(export: Export, table: str) -> int:
    """The table's smallest rowid (0 when unknown)."""
    return _aggregate(export, table, "min(rowid)") or 0


def row_bound(export: Export, table: str) -> int:
    """At most how many rows the table holds, from its smallest and largest rowid (no
    scan): its row count when the rowids are dense, far more when they are not (one
    row at rowid 2^40). 0 when the table is absent, empty or unreadable."""
    last = last_rowid(export, table)
    return 0 if last is None else max(0, last - first_rowid(export, table) + 1)


def row_count(export: Export, table: str) -> int:
    """How many rows the table holds, counted (SQLite walks its pages: about 25 ns a
    row from the page cache); 0 when the table is absent or unreadable."""
    return _aggregate(export, table, "count(*)") or 0


def _aggregate(export: Export, table: str, what: str) -> int | None:
    """One aggregate over the table (`what`: a constant of this module)."""
    if not export.has(table):
        return None
    query = f"SELECT {what} AS n FROM {_quoted(table)}"
    try:
        with export.connect() as conn:
            value = arrow(conn, query)["n"][0]
    except BACKEND_ERRORS:
        return None
    return opt_int(value.as_py())


_Part = tuple[tuple[int, int] | None, RowWindow | None]


def _parts(export: Export, spec: TableSpec, window: RowWindow | None = None) -> list[_Part]:
    """The parts to read `spec` in, each a rowid range (None: unbounded) and the window
    it reads in: one part for small tables; within `window`'s bounds for the table,
    when it has some (an NVTX window's ranges: `_nvtx_parts`)."""
    if window is not None and spec == NVTX and window.nvtx_rows is not None:
        return [(None, part) for part in _nvtx_parts(window)]
    return [(rows, window) for rows in _row_parts(export, spec, window)]


def _row_parts(
    export: Export, spec: TableSpec, window: RowWindow | None = None
) -> list[tuple[int, int] | None]:
    known = None if window is None else window.rows_of(spec.table)
    if known is not None and (spec.table not in SPLIT_TABLES or known[1] - known[0] < SPLIT_ROWS):
        return [known]
    if spec.table not in SPLIT_TABLES or READ_THREADS < 2:
        return [None]
    if known is not None:
        low, last = known
    else:
        last_found = last_rowid(export, spec.table)
        if last_found is None or last_found < SPLIT_ROWS:
            return [None]
        low, last = first_rowid(export, spec.table) - 1, last_found
    return split_rows(low, last, READ_THREADS)


def _nvtx_parts(window: RowWindow) -> list[RowWindow]:
    """`window` (NVTX rows bounded) as windows over READ_THREADS stretches of its NVTX
    rowids, each domain creation read by the one whose stretch holds its rowid (those
    below the first and above the last by the first and the last): every row once, in
    rowid order by kind. A window's rows bound its NVTX reads by a condition of their
    own (`condition`); a rowid range of the whole table beside it would make SQLite
    scan that range instead of the window's rows."""
    assert window.nvtx_rows is not None
    low, high = window.nvtx_rows
    if READ_THREADS < 2 or high - low < SPLIT_ROWS:
        return [window]
    stretches = [s for s in split_rows(low, high, READ_THREADS) if s is not None]
    if not stretches:  # rowids down to the lowest integer: left whole
        return [window]
    bounds = [low, *(stretch_high for _, stretch_high in stretches)]
    mine: list[list[int]] = [[] for _ in stretches]
    for rowid in window.domains:
        at = bisect.bisect_left(bounds, rowid) - 1  # bounds[at] < rowid <= bounds[at + 1]
        mine[min(max(at, 0), len(stretches) - 1)].append(rowid)
    return [
        replace(window, nvtx_rows=stretch, domains=tuple(sorted(domains)))
        for stretch, domains in zip(stretches, mine, strict=True)
    ]


def _joined(parts: list[pl.DataFrame | None]) -> pl.DataFrame | None:
    """The parts of one table, in rowid order (not copied)."""
    frames = [part for part in parts if part is not None]
    if not frames:
        return None
    return pl.concat(frames, rechunk=False)


def select_sql(
    spec: TableSpec,
    present: set[str],
    *,
    rows: tuple[int, int] | None = None,
    process: int | None = None,
    window: RowWindow | None = None,
    plain: bool = False,
) -> tuple[str, tuple[int, ...]]:
    """The SELECT for `spec` given the columns the table has, and its parameters.

    `rows` = (low, high) adds `low < rowid <= high`; `process` keeps that
    process's rows, when the table has its `spec.process` column. Values
    are parameters, never SQL text. `plain`: integer columns as they are
    stored, without the casts that make anything else an integer or NULL
    (`fetch` reads that way first).
    """
    parts = []
    folded = {c.lower() for c in present}  # SQLite column names are case-insensitive
    for alias, is_text, candidates in spec.columns():
        column = next((c for c in candidates if c.lower() in folded), None)
        if column is None:
            value = "x''" if is_text else "NULL"
        elif is_text:
            value = f"CAST(coalesce(\"{column}\", x'') AS BLOB)"
        elif plain:
            value = f'"{column}"'
        else:
            value = _integer(column) if alias in _GUARDED else f'CAST("{column}" AS INTEGER)'
        parts.append(f'{value} AS "{alias}"')
    conditions = [spec.where.removeprefix(" WHERE ")] if spec.where else []
    parameters: list[int] = []
    if rows is not None:
        condition, bounds = rowid_condition(*rows)
        conditions.append(condition)
        parameters.extend(bounds)
    if process is not None and has_process_column(spec, present):
        conditions.append(f'(("{spec.process}" >> 24) & {ID_MASK}) = ?')
        parameters.append(process)
    timed, values = (None, ()) if window is None else window.condition(spec)
    if timed is not None:
        conditions.append(timed)
        parameters.extend(values)
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    return f"SELECT {', '.join(parts)} FROM {_quoted(spec.table)}{where}", tuple(parameters)


# Columns whose values make durations: text there must not read as 0 (guarding every
# integer column so costs a third more CPU; stray text elsewhere reads as 0).
_GUARDED = frozenset(("start", "end"))


def _integer(column: str) -> str:
    """An integer column's value, NULL for text or a blob there (not a number).

    INTEGER columns store numeric text as numbers, so text left in one is
    not a number: CAST would turn it into 0 (or its leading digits). Reals
    are truncated to integers.
    """
    quoted = f'"{column}"'
    real = f"CAST({quoted} AS INTEGER)"
    return f"CASE typeof({quoted}) WHEN 'integer' THEN {quoted} WHEN 'real' THEN {real} END"


def has_process_column(spec: TableSpec, present: set[str]) -> bool:
    """Does the table say whose each row is (its `spec.process` column)?"""
    return bool(spec.process) and spec.process.lower() in {c.lower() for c in present}


def _quoted(identifier: str) -> str:
    """A table name from the probe, quoted (names with a quote are refused)."""
    if '"' in identifier:
        raise NotAProfile(f"unexpected table name {identifier!r}")
    return f'"{identifier}"'


def fetch(
    conn: adbc.Connection,
    spec: TableSpec,
    present: set[str],
    rows: tuple[int, int] | None = None,
    batch: Batch | None = None,
    process: int | None = None,
    window: RowWindow | None = None,
) -> pl.DataFrame:
    """The table's columns as a frame: Int64 for integers, String for texts.

    Arrow batches become Polars frames one at a time, so the Arrow copy of a
    large table is never held whole next to the Polars one; `batch`, when
    given, turns each batch into what the caller keeps, so the raw columns
    are never held whole either. The frame keeps one chunk per batch.

    Integers are first read as stored (the casts cost SQLite about a fifth of
    a large table's read); where that read fails (a value not an integer or
    NULL, or any other failure of the driver), the table is read again with
    the casts, and a failure then is the caller's. The frame is the same.
    """
    query = partial(select_sql, spec, present, rows=rows, process=process, window=window)
    try:
        return _fetched(conn, spec, batch, *query(plain=True))
    except (_NotIntegers, *_DRIVER_ERRORS):
        pass  # read again below, once the failed read's batches are let go
    return _fetched(conn, spec, batch, *query())


class _NotIntegers(Exception):
    """A batch read without casts has an integer column of another type."""


_DRIVER_ERRORS = (adbc_driver_manager.Error, OSError)  # "Type mismatch", among others


def _fetched(
    conn: adbc.Connection,
    spec: TableSpec,
    batch: Batch | None,
    query: str,
    parameters: tuple[int, ...],
) -> pl.DataFrame:
    """The rows of `query` as `fetch` gives them."""
    keep = batch or (lambda frame: frame)
    with conn.cursor() as cur:
        cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
        cur.execute(query, parameters=parameters or None)
        frames = [keep(_frame(spec, b)) for b in cur.fetch_record_batch()]
    return pl.concat(frames, rechunk=False) if frames else keep(spec.empty_if_none(None))


def _frame(spec: TableSpec, batch: pa.RecordBatch) -> pl.DataFrame:
    """One batch as a frame. The driver gives each column room for BATCH_ROWS rows
    (8 MiB an integer column) however few it holds, and Polars takes its integers
    and longer texts without a copy: a batch of at most SMALL_BATCH rows is first
    copied, so that a small frame kept to the end does not keep megabytes
    alive. Larger batches are taken as they are (copying raised the peak)."""
    small = batch.num_rows <= SMALL_BATCH
    columns = {}
    for alias, is_text, _ in spec.columns():
        raw = batch.column(alias)  # a small batch's copied into buffers of its own size
        column = pa.chunked_array([pa.concat_arrays([raw]) if small else raw])
        if is_text:
            columns[alias] = pl.from_arrow(decode(column))
        elif not (pa.types.is_int64(column.type) or pa.types.is_null(column.type)):
            raise _NotIntegers(alias)
        else:
            columns[alias] = pl.from_arrow(column).cast(pl.Int64)
    return pl.DataFrame(columns)
