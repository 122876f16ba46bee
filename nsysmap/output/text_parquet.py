"""ops.parquet written with its texts dictionary-coded: each distinct text once.

A text column of the operations repeats a few names over millions of rows.
Polars' own Parquet writer copies every row's text while it encodes it (146
rows of a 50 MB kernel name took 7 GB more than the names); this writer casts
each text column to Categorical (the distinct texts held once, the rows
codes) and writes those as Parquet's dictionary encoding through PyArrow,
block by block. The file's columns are the ones Polars writes, read back the
same: the Arrow schema stored in it (`ARROW:schema`) declares each text a
string, never a dictionary, so Polars reads String (each row's view into the
dictionary page, not a copy) and pandas reads `object`, as before. Integer
columns are written in Parquet's delta encoding (DELTA_BINARY_PACKED), which
PyArrow (and so pandas) and Polars read.

With `beside`, each block is encoded and compressed on a thread of its own while
the next block is made: a large profile read whole, attributed
and written chunk by chunk, is written beside its attribution rather than after
each chunk of it (at 10^7 kernels, the write stage's 16 s on the main thread
became 7 s). A profile read apart to fit the memory budget writes its blocks
one after the other (nsysmap.output.ops_sinks.sink_for).
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from nsysmap.core.coded import coded

# zstd level 1: as small as the default level here, and faster to write.
_OPTIONS = {"compression": "zstd", "compression_level": 1, "write_statistics": True}
_ARROW_SCHEMA = b"ARROW:schema"
# Texts nearly every row has its own of (the ranges' names and paths, in the
# operations and in by_range and idle): written as they are, since coding them
# costs more than it saves (1.8 CPU s more per 10^6 operations).
NEARLY_UNIQUE = ("range_name", "range_path")
# PyArrow writes Arrow's string views to Parquet from version 21 on: there, the plain
# texts are handed over as views into Polars' own buffers (no copy: 0.1 s per 10^6 rows
# of the operations' range paths); before, every text is copied into Arrow strings.
VIEWS_WRITABLE = int(pa.__version__.split(".")[0]) >= 21


def write_coded(
    blocks: Iterable[pl.DataFrame],
    schema: pl.Schema,
    path: Path,
    plain: Iterable[str] = NEARLY_UNIQUE,
    *,
    beside: bool = False,
) -> int:
    """Write `blocks` (frames of `schema`) into the Parquet file `path`; their rows.

    Every text column is coded but those of `plain`: texts nearly every row has
    its own of (coding them costs more than it saves), written as they are.
    `beside`: each block is written on a thread of its own while the next one
    is made (one more block held meanwhile); else one after the other, here.
    """
    texts = [n for n, dtype in schema.items() if dtype == pl.String and n not in set(plain)]
    empty = pl.DataFrame(schema=schema)
    stored = empty.to_arrow().schema  # what a reader sees: texts as strings
    written = _writable(_arrow(empty.with_columns(coded(texts))).schema)
    rows = 0
    # Integers delta-coded (times and ids mostly rise row to row): a fifth less time
    # and a third smaller than plain values through zstd (docs/performance.md).
    deltas = {n: "DELTA_BINARY_PACKED" for n, dtype in schema.items() if dtype.is_integer()}
    options = {**_OPTIONS, "use_dictionary": texts, "column_encoding": deltas}
    # `beside`, each block is encoded and compressed on a thread of its own (PyArrow lets
    # go of the GIL) while the next one is made: blocks made as they are written (the
    # operations of a large profile, attributed chunk by chunk) are attributed meanwhile.
    # One block waits at most; the thread is done before the file is closed, error or not.
    with (
        pq.ParquetWriter(path, written, store_schema=False, **options) as writer,
        ThreadPoolExecutor(1) as pool,
    ):
        pending: Future[None] | None = None
        for block in blocks:
            table = _arrow(block.with_columns(coded(texts))).cast(written)
            rows += block.height
            del block  # nothing of it is held while the next block is made but `table`
            if pending is not None:
                pending.result()
            if beside:  # the pool's one thread starts with the first block it is given
                pending = pool.submit(writer.write_table, table)
            else:
                writer.write_table(table)
            del table  # held by the write alone: freed once written
        if pending is not None:
            pending.result()
        writer.add_key_value_metadata({_ARROW_SCHEMA: _serialised(stored)})
    return rows


def _arrow(frame: pl.DataFrame) -> pa.Table:
    """`frame` in Arrow, its texts as views where PyArrow writes them (VIEWS_WRITABLE)."""
    return frame.to_arrow(compat_level=pl.CompatLevel.newest() if VIEWS_WRITABLE else None)


def _writable(schema: pa.Schema) -> pa.Schema:
    """`schema` with each dictionary of string views a dictionary of Arrow strings (the
    writer takes no dictionary of views; the codes stay as they are). The file is the
    same byte for byte as with every text in Arrow strings."""
    fields = []
    for field in schema:
        kind = field.type
        if pa.types.is_dictionary(kind) and pa.types.is_string_view(kind.value_type):
            field = field.with_type(pa.dictionary(kind.index_type, pa.large_string(), kind.ordered))
        fields.append(field)
    return pa.schema(fields, schema.metadata)


def _serialised(schema: pa.Schema) -> bytes:
    """`schema` as Parquet files store it for Arrow readers (base64 of its IPC form)."""
    return base64.b64encode(schema.serialize().to_pybytes())
