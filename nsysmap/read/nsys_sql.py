"""The format side of the nsys reader: file checks, what it reads, and how.

`open_export(path)` checks the file (header, size), opens it read-only and
probes its tables and columns; `Export.read(spec)` then reads one table.
Every failure of the storage stack on bad input becomes NotAnExport.

Each table the reader needs is described by a `TableSpec`
(`nsysmap.read.nsys_specs`): the logical
columns it wants, each with the physical column names that have held it over
nsys versions. The SELECT text is assembled only from these constants and the
columns the file turned out to have (a missing column reads as NULL), so no
SQL is ever built from data.

Rows arrive through the ADBC SQLite driver as Arrow, column by column. The
driver infers each column's type from its first batch, so every integer is
read as `CAST(col AS INTEGER)` (an all-NULL batch then still reads as int64)
and every text as `CAST(coalesce(col, x'') AS BLOB)`: always binary, never
NULL (an empty text means unset). Binary becomes String in Arrow's C++ cast,
which validates UTF-8; a column that fails takes a slow path that decodes its
distinct values with U+FFFD replacement. `process_id`, `thread_id` and
`text_or_null` decode nsys's serialized ids and the '' that stands for unset.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote

import adbc_driver_manager
import adbc_driver_sqlite.dbapi as adbc
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from nsysmap.errors import InputNotFound, NotAnExport
from nsysmap.read.inputs import regular_file
from nsysmap.read.nsys_specs import (  # noqa: F401 (the reader uses them through this module)
    CUDA_GPU_INFO,
    GPU_INFO,
    GRAPH_EVENTS,
    GRAPH_NODE_EVENTS,
    GRAPH_TRACE,
    KERNEL,
    MEMCPY,
    MEMCPY_KINDS,
    MEMSET,
    META_TABLES,
    NVTX,
    RUNTIME,
    STRINGS,
    THREAD_NAMES,
    TableSpec,
)
from nsysmap.scalars import opt_int

SQLITE_MAGIC = b"SQLite format 3\x00"
_ID_MASK = 0xFFFFFF

# Rows per Arrow batch. Larger batches cut per-batch overhead (measured in
# docs/reading.md) and give fewer chunks (text columns keep one chunk per
# batch, and gathers across many chunks are slower); type inference no longer
# depends on it (see above).
BATCH_ROWS = 1 << 20

# Errors the storage stack raises for bad input; the reader turns them into
# NotAnExport. (The driver reports some type problems as OSError.)
BACKEND_ERRORS: tuple[type[BaseException], ...] = (
    adbc_driver_manager.Error,
    OSError,
    pa.ArrowException,
    pl.exceptions.PolarsError,
)

PROBE_SQL = (
    "SELECT CAST(m.name AS BLOB) AS tbl, CAST(p.name AS BLOB) AS col"
    " FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS p"
    " WHERE m.type = 'table'"
)


class Export:
    """A checked export: its tables with their columns, and a reader per table.

    Each read opens its own read-only connection, so reads may run in threads.
    """

    def __init__(self, file: Path, uri: str, tables: dict[str, set[str]]) -> None:
        self.file = file
        # SQLite names are case-insensitive: tables are found whatever their letter case.
        self.tables = {name.lower(): columns for name, columns in tables.items()}
        self._uri = uri

    def has(self, table: str) -> bool:
        return table.lower() in self.tables

    def read(
        self,
        spec: TableSpec,
        rows: tuple[int, int] | None = None,
        transform: Callable[[pl.DataFrame], pl.DataFrame] | None = None,
    ) -> pl.DataFrame | None:
        """The table of `spec` as a frame, or None when the export lacks it.

        With `rows` = (low, high), only the rows with low < rowid <= high.
        `transform` is applied to each batch as it arrives (see `fetch`).
        """
        present = self.tables.get(spec.table.lower())
        if present is None:
            return None
        try:
            with adbc.connect(self._uri) as conn:
                return fetch(conn, spec, present, rows, transform)
        except BACKEND_ERRORS as exc:
            raise _unreadable(self.file, exc) from None

    def last_rowid(self, table: str) -> int | None:
        """The table's largest rowid (about its row count); None when unknown."""
        return self._rowid(table, "max")

    def first_rowid(self, table: str) -> int:
        """The table's smallest rowid (0 when unknown)."""
        return self._rowid(table, "min") or 0

    def _rowid(self, table: str, which: str) -> int | None:
        if not self.has(table):
            return None
        query = f"SELECT {'max' if which == 'max' else 'min'}(rowid) AS n FROM {_quoted(table)}"
        try:
            with adbc.connect(self._uri) as conn:
                value = _arrow(conn, query)["n"][0]
        except BACKEND_ERRORS:
            return None
        return opt_int(value.as_py())


def open_export(path: str | os.PathLike[str]) -> Export:
    """Check the export at `path` and probe its tables (opened read-only)."""
    file = check_file(path)
    uri = f"file:{quote(str(file.resolve()))}?mode=ro&immutable=1"
    try:
        with adbc.connect(uri) as conn:
            tables = probe(conn)
    except BACKEND_ERRORS as exc:
        raise _unreadable(file, exc) from None
    names = [t.lower() for t in tables]
    if "stringids" not in names and not any(t.startswith(_NSYS_PREFIXES) for t in names):
        raise NotAnExport(
            f"{file}: an SQLite database but not an Nsight Systems export "
            "(no StringIds, CUPTI_* or NVTX_* tables)"
        )
    return Export(file, uri, tables)


_NSYS_PREFIXES = ("cupti_", "nvtx_")


def _unreadable(file: Path, exc: BaseException) -> NotAnExport:
    detail = " ".join(str(exc).split())[:200]
    return NotAnExport(f"{file}: unreadable SQLite database ({detail})")


def check_file(path: str | os.PathLike[str]) -> Path:
    """`path` as a Path, once its first bytes look like a complete SQLite file."""
    file = regular_file(path, "an nsys .sqlite export")
    try:
        with file.open("rb") as stream:
            header = stream.read(100)
        size = file.stat().st_size
    except OSError as exc:
        raise InputNotFound(f"{file}: cannot read it ({exc.strerror})") from None
    if size == 0:
        raise NotAnExport(f"{file}: empty file, not an SQLite export")
    if not header.startswith(SQLITE_MAGIC):
        raise NotAnExport(
            f"{file}: not an SQLite file (export an nsys report first: "
            "nsys export --type sqlite REPORT.nsys-rep)"
        )
    expected = _expected_size(header)
    if expected is None or size < expected:
        got = f"{size} of {expected} bytes" if expected else "incomplete header"
        raise NotAnExport(f"{file}: truncated SQLite file ({got})")
    return file


def _expected_size(header: bytes) -> int | None:
    """Page size x page count from the header (0: count not valid; None: short header)."""
    if len(header) < 100:
        return None
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    count_valid = header[24:28] == header[92:96]
    return page_size * pages if count_valid else 0


def probe(conn: adbc.Connection) -> dict[str, set[str]]:
    """Every table of the database with its column names."""
    frame = _arrow(conn, PROBE_SQL)
    tables: dict[str, set[str]] = {}
    names = zip(_decode(frame["tbl"]).to_pylist(), _decode(frame["col"]).to_pylist(), strict=True)
    for table, column in names:
        tables.setdefault(table, set()).add(column)
    return tables


def select_sql(spec: TableSpec, present: set[str], *, bounded: bool = False) -> str:
    """The SELECT for `spec` given the columns the table has.

    `bounded` adds `low < rowid <= high` with two parameters.
    """
    parts = []
    folded = {c.lower() for c in present}  # SQLite column names are case-insensitive
    for alias, is_text, candidates in spec.columns():
        column = next((c for c in candidates if c.lower() in folded), None)
        if column is None:
            value = "x''" if is_text else "NULL"
        elif is_text:
            value = f"CAST(coalesce(\"{column}\", x'') AS BLOB)"
        else:
            value = _integer(column) if alias in _GUARDED else f'CAST("{column}" AS INTEGER)'
        parts.append(f'{value} AS "{alias}"')
    where = spec.where
    if bounded:
        where += " AND " if where else " WHERE "
        where += "rowid > ? AND rowid <= ?"
    return f"SELECT {', '.join(parts)} FROM {_quoted(spec.table)}{where}"


# Columns whose values make durations: text there must not read as 0. (Guarding
# every integer column this way costs about a third more CPU in reading; a
# stray text elsewhere reads as 0 and cannot break a total.)
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


def _quoted(identifier: str) -> str:
    """A table name from the probe, quoted (names with a quote are refused)."""
    if '"' in identifier:
        raise NotAnExport(f"unexpected table name {identifier!r}")
    return f'"{identifier}"'


def fetch(
    conn: adbc.Connection,
    spec: TableSpec,
    present: set[str],
    rows: tuple[int, int] | None = None,
    transform: Callable[[pl.DataFrame], pl.DataFrame] | None = None,
) -> pl.DataFrame:
    """The table's columns as a frame: Int64 for integers, String for texts.

    Arrow batches become Polars frames one at a time, so the Arrow copy of a
    large table is never held whole next to the Polars one; `transform`, when
    given, turns each batch into what the caller keeps, so the raw columns
    are never held whole either. The frame keeps one chunk per batch (see
    `rechunked`).
    """
    transform = transform or (lambda frame: frame)
    with conn.cursor() as cur:
        cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
        cur.execute(select_sql(spec, present, bounded=rows is not None), parameters=rows)
        frames = [transform(_frame(spec, batch)) for batch in cur.fetch_record_batch()]
    if not frames:
        return transform(spec.empty_if_none(None))
    return pl.concat(frames, rechunk=False)


def rechunked(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with its integer columns in one chunk each, rechunked one at a time.

    Texts stay in their batches: a rechunk would copy every string.
    """
    for name, dtype in frame.schema.items():
        if dtype.is_integer():
            frame = frame.with_columns(frame[name].rechunk())
    return frame


def _frame(spec: TableSpec, batch: pa.RecordBatch) -> pl.DataFrame:
    columns = {}
    for alias, is_text, _ in spec.columns():
        column = pa.chunked_array([batch.column(alias)])
        if is_text:
            columns[alias] = pl.from_arrow(_decode(column))
        else:
            columns[alias] = pl.from_arrow(column).cast(pl.Int64)
    return pl.DataFrame(columns)


def _arrow(conn: adbc.Connection, sql: str) -> pa.Table:
    with conn.cursor() as cur:
        cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
        cur.execute(sql)
        return cur.fetch_arrow_table()


def _decode(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """UTF-8 bytes to strings; invalid sequences become U+FFFD."""
    if len(column) == 0 or not pa.types.is_binary(column.type):
        return pa.chunked_array([pa.array([None] * len(column), pa.string())])
    try:
        return pc.cast(column, pa.string())
    except pa.ArrowInvalid:
        return _decode_tolerant(column)


def _decode_tolerant(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """The slow path: decode each distinct value once, in Python."""
    encoded = pc.dictionary_encode(column).combine_chunks()
    values = [v.decode("utf-8", "replace") for v in encoded.dictionary.to_pylist()]
    return pa.chunked_array([pc.take(pa.array(values, pa.string()), encoded.indices)])


def process_id(column: str) -> pl.Expr:
    """The process of a serialized globalTid / globalPid: (id >> 24) & 0xFFFFFF."""
    return (pl.col(column) // (1 << 24)) & _ID_MASK


def thread_id(column: str) -> pl.Expr:
    """The thread of a serialized globalTid: id & 0xFFFFFF."""
    return pl.col(column) & _ID_MASK


def text_or_null(text: str | pl.Expr) -> pl.Expr:
    """A text as read (unset reads as '') with '' made null again."""
    text = pl.col(text) if isinstance(text, str) else text
    return pl.when(text != "").then(text)
