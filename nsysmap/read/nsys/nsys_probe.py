"""Stage 1 of the nsys reader: check the file and probe what the export holds.

`open_export(path)` checks the file (a regular file, the SQLite header, its
size), opens it read-only (`file:...?mode=ro&immutable=1`, so nothing is
written next to it) and lists every table with its columns in one query over
`sqlite_master` and `pragma_table_info`. The result, an `Export`, is what the
queries (`nsysmap.read.nsys.nsys_sql`) are built from: a column the file lacks is
read as NULL there, and the nsys version number is never consulted.

Also defined here, once, for the probe and the queries alike: the storage
errors that mean "not a readable export" (`BACKEND_ERRORS`, turned into
NotAProfile by `unreadable`), and how a statement's rows come back (`arrow`)
and how SQLite text arrives (`decode`: UTF-8 bytes to strings, invalid
sequences replaced).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

import adbc_driver_manager
import adbc_driver_sqlite.dbapi as adbc
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from nsysmap.core.errors import InputNotFound, NotAProfile
from nsysmap.read.regular_file import regular_file

SQLITE_MAGIC = b"SQLite format 3\x00"

# Rows per Arrow batch. Larger batches cut per-batch overhead (measured in
# docs/reading.md) and give fewer chunks (text columns keep one chunk per
# batch, and gathers across many chunks are slower). What is read does not
# depend on it; how soon a value of another type sends a table to its second
# read does (nsysmap.read.nsys.nsys_sql.fetch).
BATCH_ROWS = 1 << 20

# Errors the storage stack raises for bad input; the reader turns them into
# NotAProfile. (The driver reports some type problems as OSError.)
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
_NSYS_PREFIXES = ("cupti_", "nvtx_")


class Export:
    """A checked export: where it is, and its tables with their columns.

    Every query opens its own read-only connection (`connect`), so queries
    may run in threads. `launch_geometry`: are the kernels' grid and block read
    (nsysmap.read.nsys.nsys_sqlite)?
    """

    def __init__(
        self, file: Path, uri: str, tables: dict[str, set[str]], launch_geometry: bool = True
    ) -> None:
        self.file = file
        self.launch_geometry = launch_geometry
        # SQLite names are case-insensitive: tables are found whatever their letter case.
        self.tables = {name.lower(): columns for name, columns in tables.items()}
        self.uri = uri

    def has(self, table: str) -> bool:
        return table.lower() in self.tables

    def columns(self, table: str) -> set[str] | None:
        """The table's columns, or None when the export lacks it."""
        return self.tables.get(table.lower())

    def connect(self) -> adbc.Connection:
        """A new read-only connection (a context manager)."""
        return adbc.connect(self.uri)


def open_export(
    path: str | os.PathLike[str], *, checked: bool = False, launch_geometry: bool = True
) -> Export:
    """Check the export at `path` and probe its tables (opened read-only).

    `checked`: `path` already passed `regular_file` (it is not checked again).
    `launch_geometry`: read the kernels' grid and block (else they are null)."""
    file = check_file(path, checked=checked)
    uri = f"file:{quote(str(file.resolve()))}?mode=ro&immutable=1"
    try:
        with adbc.connect(uri) as conn:
            tables = probe(conn)
    except BACKEND_ERRORS as exc:
        raise unreadable(file, exc) from None
    names = [t.lower() for t in tables]
    if "stringids" not in names and not any(t.startswith(_NSYS_PREFIXES) for t in names):
        raise NotAProfile(
            f"{file}: an SQLite database but not an Nsight Systems export "
            "(no StringIds, CUPTI_* or NVTX_* tables)"
        )
    return Export(file, uri, tables, launch_geometry)


def unreadable(file: Path, exc: BaseException) -> NotAProfile:
    """The one-line error for a storage failure on `file`."""
    detail = " ".join(str(exc).split())[:200]
    return NotAProfile(f"{file}: unreadable SQLite database ({detail})")


def opened(source: Export | str | os.PathLike[str]) -> Export:
    """`source` itself when already opened and probed, else the export at that path."""
    return source if isinstance(source, Export) else open_export(source)


def check_file(path: str | os.PathLike[str], *, checked: bool = False) -> Path:
    """`path` as a Path, once its first bytes look like a complete SQLite file
    (`checked`: it already passed `regular_file`)."""
    file = Path(path) if checked else regular_file(path, "an nsys .sqlite export")
    try:
        with file.open("rb") as stream:
            header = stream.read(100)
        size = file.stat().st_size
    except OSError as exc:
        raise InputNotFound(f"{file}: cannot read it ({exc.strerror})") from None
    if size == 0:
        raise NotAProfile(f"{file}: empty file, not an SQLite export")
    if not header.startswith(SQLITE_MAGIC):
        raise NotAProfile(
            f"{file}: not an SQLite file (export an nsys report first: "
            "nsys export --type sqlite REPORT.nsys-rep)"
        )
    expected = _expected_size(header)
    if expected is None or size < expected:
        got = f"{size} of {expected} bytes" if expected else "incomplete header"
        raise NotAProfile(f"{file}: truncated SQLite file ({got})")
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
    frame = arrow(conn, PROBE_SQL)
    tables: dict[str, set[str]] = {}
    names = zip(decode(frame["tbl"]).to_pylist(), decode(frame["col"]).to_pylist(), strict=True)
    for table, column in names:
        tables.setdefault(table, set()).add(column)
    return tables


def arrow(conn: adbc.Connection, sql: str) -> pa.Table:
    """The rows of a statement without parameters, as one Arrow table."""
    with conn.cursor() as cur:
        cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
        cur.execute(sql)
        return cur.fetch_arrow_table()


def decode(column: pa.ChunkedArray) -> pa.ChunkedArray:
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
