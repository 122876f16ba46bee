"""The scans of one process's rows that nsysmap.read.nsys.window_cuts reduces batch by batch.

Runtime calls per stretch between candidate cuts (`call_stretches`), the
batches of GPU work by correlation id (`op_batches`), even cuts for a
process without ranges (`even_cuts`), the threads autograd names, and
`scan`: a table's rows of one process with their rowid, each batch reduced
as it arrives. Extents are kept per CHUNK_ROWS rows, so that a time window
reads only the stretches of a table that hold its rows.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import polars as pl

from nsysmap.read.nsys import nsys_specs as specs
from nsysmap.read.nsys import nsys_sql as sql
from nsysmap.read.nsys.nsys_frames import RANGE_KINDS
from nsysmap.read.nsys.nsys_probe import BACKEND_ERRORS, BATCH_ROWS, Export, unreadable
from nsysmap.read.nsys.rowid_parts import split_rows

CHUNK_ROWS = 1 << 16
END = (1 << 63) - 1  # where a range left open ends
_KINDS = ", ".join(str(kind) for kind in RANGE_KINDS)
# Cuts asked about in one scan (each adds a term to the query's condition).
CUTS_PER_SCAN = 100
# A scan in parts begins each part at a multiple of this many rowids (`scan_parts`).
PART_ROWS = BATCH_ROWS


@dataclass(frozen=True)
class CutRules:
    """The range and thread names a cut must respect: name rules of attribution and
    of the waits, which the caller gives (nsysmap.sources.by_window), so that the
    reader holds none of them. Each is a regular expression."""

    seq: str  # an operator's autograd sequence number (`seq = N`, group 1)
    fsdp_hook: str  # an FSDP hook range (paired into spans across any gap)
    autograd_node: str  # a range naming an autograd node (work inside is backward work)
    sync_range: str  # a range the waits read per window (`.item()`)
    autograd_thread: str  # the name of autograd's threads (their work is backward work)


GPU_WORK = (specs.KERNEL, specs.MEMCPY, specs.MEMSET, specs.GRAPH_TRACE)


# Without ranges, any moment can be cut: this many even cuts over the calls' times.
EVEN_CUTS = 1024


def even_cuts(export: Export, pid: int) -> list[int]:
    """EVEN_CUTS times spread evenly over the process's runtime calls."""
    spec = counted(specs.RUNTIME.table, "start", specs.RUNTIME.process)
    found = sql.read_table(
        export,
        spec,
        batch=lambda b: b.select(lo=pl.col("start").min(), hi=pl.col("start").max()),
        process=pid,
    )
    if found is None or found["lo"].min() is None:
        return []
    lo, hi = int(found["lo"].min()), int(found["hi"].max())  # type: ignore[arg-type]
    return sorted({lo + (hi - lo) * i // EVEN_CUTS for i in range(1, EVEN_CUTS)} - {lo})


def autograd_threads(
    export: Export, pid: int, strings: pl.DataFrame, rules: CutRules
) -> tuple[int, ...]:
    """The process's threads named as autograd's (`rules.autograd_thread`)."""
    names = sql.read_table(export, specs.THREAD_NAMES, process=pid)
    if names is None:
        return ()
    named = names.select(
        tid=specs.thread_id("globalTid"), name=specs.string_value("nameId", strings)
    )
    found = named.filter(pl.col("name").str.contains(rules.autograd_thread))["tid"]
    return tuple(sorted(set(found.to_list())))


def call_stretches(export: Export, pid: int, cuts: list[int]) -> pl.DataFrame:
    """segment, calls, corr_lo, corr_hi per stretch between `cuts` (segment null:
    calls without a start)."""
    bounds = pl.Series(cuts, dtype=pl.Int64)

    def stretch(batch: pl.DataFrame) -> pl.DataFrame:
        at = batch.with_columns(
            segment=pl.when(pl.col("start").is_not_null()).then(
                bounds.search_sorted(batch["start"], side="right")
            )
        )
        return at.group_by("segment").agg(
            calls=pl.len(),
            corr_lo=pl.col("correlationId").min(),
            corr_hi=pl.col("correlationId").max(),
            row_lo=pl.col("rowid").min(),
            row_hi=pl.col("rowid").max(),
        )

    spec = counted(specs.RUNTIME.table, "start correlationId", specs.RUNTIME.process)
    parts = scan(export, spec, stretch, pid)
    assert parts is not None  # _unsupported checked the table
    lows, highs = pl.col("corr_lo", "row_lo").min(), pl.col("corr_hi", "row_hi").max()
    return (
        parts.group_by("segment")
        .agg(pl.col("calls").sum(), lows, highs)
        .sort("segment", nulls_last=True)
    )


def op_batches(export: Export, pid: int) -> dict[str, pl.DataFrame]:
    """Per table of GPU work (kernels, copies, memsets, graph replays) the process
    has rows in, per batch: n, lo, hi (correlation ids) and row_lo, row_hi (rowids)."""

    def extent(batch: pl.DataFrame) -> pl.DataFrame:
        return batch.group_by(pl.col("rowid") // CHUNK_ROWS).agg(
            n=pl.len().cast(pl.Int64),
            lo=pl.col("correlationId").min(),
            hi=pl.col("correlationId").max(),
            row_lo=pl.col("rowid").min(),
            row_hi=pl.col("rowid").max(),
        )

    found = {}
    for spec in GPU_WORK:
        batches = scan(export, counted(spec.table, "correlationId", spec.process), extent, pid)
        if batches is not None:
            found[spec.table] = batches.filter(pl.col("n") > 0)
    return found


def scan(export: Export, spec: specs.TableSpec, batch: sql.Batch, pid: int) -> pl.DataFrame | None:
    """`spec`'s rows of process `pid` with their `rowid`, each batch reduced by `batch`;
    None when the export lacks the table.

    A table of more than SPLIT_ROWS rowids is scanned in READ_THREADS parts at
    once, each on its own connection (the SQLite driver and Polars let go of the
    GIL); the parts' reductions are joined in rowid order. Parts begin at a
    multiple of PART_ROWS rowids (BATCH_ROWS), so that where rowids are dense each part's
    batches are those a single scan would make.
    """
    if export.columns(spec.table) is None:
        return None
    read = partial(sql.read_table, export, spec, batch=batch, process=pid, with_rowid=True)
    parts = scan_parts(export, spec.table)
    if len(parts) == 1:
        return read(parts[0])
    with ThreadPoolExecutor(len(parts)) as pool:
        scanned = list(pool.map(read, parts))
    return pl.concat([part for part in scanned if part is not None], rechunk=False)


def scan_parts(export: Export, table: str) -> list[tuple[int, int] | None]:
    """The rowid ranges (low, high] `scan` reads `table` in: one unbounded part for a
    table of at most SPLIT_ROWS rowids, else READ_THREADS parts whose inner bounds
    are multiples of PART_ROWS (fewer where the table spans fewer batches; one
    unbounded part where its rowids reach the lowest integer: `split_rows`)."""
    last = sql.last_rowid(export, table)
    if last is None or sql.READ_THREADS < 2:
        return [None]
    low = sql.first_rowid(export, table) - 1
    if last - low <= sql.SPLIT_ROWS:
        return [None]
    return split_rows(low, last, sql.READ_THREADS, PART_ROWS)


def counted(table: str, ints: str, process: str) -> specs.TableSpec:
    """A spec reading only `ints` of `table`."""
    return specs.TableSpec(table, ints, process=process)


def height(batch: pl.DataFrame) -> pl.DataFrame:
    return pl.DataFrame({"n": [batch.height]}, schema={"n": pl.Int64})


def carried_rows(export: Export, pid: int, cuts: list[int]) -> list[list[int]]:
    """Per cut of `cuts` (ascending), the rowids of process `pid`'s NVTX ranges open
    across it (start < cut <= end; a range left open: to the end of time). SQLite
    keeps only those rows, in one scan per CUTS_PER_SCAN cuts."""
    present = export.columns(specs.NVTX.table)
    per_cut: list[list[int]] = [[] for _ in cuts]
    if present is None or not cuts:
        return per_cut
    whose = ""
    if sql.has_process_column(specs.NVTX, present):
        whose = f' AND (("{specs.NVTX.process}" >> 24) & {specs.ID_MASK}) = ?'
    found = []
    for first in range(0, len(cuts), CUTS_PER_SCAN):
        chunk = cuts[first : first + CUTS_PER_SCAN]
        crossing = " OR ".join(['("start" < ? AND coalesce("end", ?) >= ?)'] * len(chunk))
        query = (
            f'SELECT rowid AS "rowid", "start" AS "start", "end" AS "end" FROM "{specs.NVTX.table}"'
            f' WHERE "eventType" IN ({_KINDS}){whose} AND ({crossing})'
        )
        values = [*([pid] if whose else []), *(v for cut in chunk for v in (cut, END, cut))]
        try:
            with export.connect() as conn, conn.cursor() as cur:
                cur.execute(query, parameters=values)
                table = pl.from_arrow(cur.fetch_arrow_table())
        except BACKEND_ERRORS as exc:
            raise unreadable(export.file, exc) from None
        assert isinstance(table, pl.DataFrame)
        found.append(table.cast(_ROWS))
    rows = pl.concat([pl.DataFrame(schema=_ROWS), *found])
    bounds = pl.Series(cuts, dtype=pl.Int64)
    rows = rows.with_columns(
        cut=pl.int_ranges(
            bounds.search_sorted(rows["start"], side="right"),
            bounds.search_sorted(rows["end"].fill_null(END), side="right"),
        )
    ).explode("cut")
    for (cut,), at in (
        rows.drop_nulls("cut").sort("rowid").partition_by("cut", as_dict=True).items()
    ):
        per_cut[int(cut)] = at["rowid"].to_list()
    return per_cut


_ROWS = pl.Schema({"rowid": pl.Int64, "start": pl.Int64, "end": pl.Int64})
