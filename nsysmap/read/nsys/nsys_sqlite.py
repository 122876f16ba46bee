"""Read an Nsight Systems SQLite export into a normalised `Profile`: the reader's top level.

`read_sqlite` runs the reader's stages in one direction, each in its own
module, none calling back into an earlier one:

1. probe (`nsysmap.read.nsys.nsys_probe`): check the file, list its tables and
   columns;
2. query (`nsysmap.read.nsys.nsys_sql`): read each needed table once, column by
   column (what is read: `nsysmap.read.nsys.nsys_specs`);
3. frames (`nsysmap.read.nsys.nsys_frames`, with `nsys_graphs` and `nsys_env`):
   every lookup, decoding and join, in Polars;
4. assemble (here): the Profile and its meta.

Together they are the one place that knows how nsys exports differ across
versions: the reader probes which tables and columns exist, never the
version number. What is read from where and what is ignored is documented
in docs/reading.md.

Ranges come back with `depth` and `parent_id` empty: nesting is a later step
(`nsysmap.attribution.normalise`).
"""

from __future__ import annotations

import os

import polars as pl

from nsysmap.core.errors import NoGpuData
from nsysmap.core.profile import Profile, meta_frame
from nsysmap.read.nsys import nsys_frames as frames
from nsysmap.read.nsys import nsys_specs as specs
from nsysmap.read.nsys import nsys_sql as sql
from nsysmap.read.nsys.nsys_probe import Export, open_export, opened

# What the sources of the flow use (nsysmap.sources): an export opened and probed
# once, then read whole or in parts, and how large a whole read would be.
__all__ = [
    "Export",
    "expected_bytes",
    "gpu_process_rows",
    "gpu_processes",
    "open_export",
    "read_sqlite",
]

GPU_SPECS = (specs.KERNEL, specs.MEMCPY, specs.MEMSET)
# Tables of GPU work: the core ones and CUDA graph replays traced as a whole.
GPU_WORK_SPECS = (*GPU_SPECS, specs.GRAPH_TRACE)
GRAPH_SPECS = (specs.GRAPH_TRACE, specs.GRAPH_NODE_EVENTS, specs.GRAPH_EVENTS)
CORE_TABLES = tuple(s.table for s in (*GPU_SPECS, specs.RUNTIME, specs.NVTX))
# Every table the reader uses, biggest first (so the reading threads finish together).
# Peak resident memory of a whole-export run per row of its GPU activity,
# CUDA API and NVTX tables: 15.4 GB for 49.5 million rows (10^7 kernels,
# 2.9·10^7 ranges, 10^7 API calls) in the benchmark (docs/performance.md).
BYTES_PER_ROW = 310
# The fewest bytes of its file a row of an SQLite table takes: a 2-byte cell
# pointer and a cell of at least a payload size, a rowid and a record header.
MIN_ROW_BYTES = 4
TABLES = (
    specs.NVTX,
    *GPU_SPECS,
    specs.RUNTIME,
    specs.THREAD_NAMES,
    *GRAPH_SPECS,
    specs.GPU_INFO,
    specs.CUDA_GPU_INFO,
    *specs.META_TABLES,
    specs.LAUNCH_ENV,
    specs.MEMCPY_KINDS,
)

# TABLES with the kernels read without their grid and block (`Export.launch_geometry`).
_NO_GEOMETRY = tuple(specs.KERNEL_NO_GEOMETRY if s == specs.KERNEL else s for s in TABLES)


def read_sqlite(
    source: Export | str | os.PathLike[str],
    *,
    require_gpu: bool = True,
    process: int | None = None,
    first_ids: tuple[int, int] = (0, 0),
    window: sql.RowWindow | None = None,
) -> Profile:
    """The export at `source` (a path, or an export already opened) as a Profile of
    normalised frames.

    The kernels' grid and block are null where the export was opened without
    them (`open_export`'s `launch_geometry`: the flow's outputs hold none).
    `process`: only that process's rows (see `gpu_processes`), with op_id and
    range_id counting from `first_ids` (operations, ranges). `window`: only
    the rows of one time window of that process (nsysmap.sources.by_window): its
    runtime calls, the GPU work they launched, its ranges.

    Raises InputNotFound, NotAProfile, or (with require_gpu, when the export
    holds no kernel, memcpy, memset or graph replay) NoGpuData, each with a
    one-line message.
    """
    export = opened(source)
    strings = specs.strings_table(sql.read_table(export, specs.STRINGS))
    if require_gpu and not any(export.has(s.table) for s in GPU_WORK_SPECS):
        _require_ops(export, {specs.RUNTIME.table: sql.read_table(export, specs.RUNTIME)}, strings)
    tables = TABLES if export.launch_geometry else _NO_GEOMETRY
    raw = sql.read_tables(export, tables, frames.batch_builders(strings), process, window)
    if window is not None:
        _keep_launched(raw)
    if require_gpu:
        _require_ops(export, raw, strings)
    missing = ",".join(t for t in CORE_TABLES if raw[t] is None)
    built = frames.build(raw, strings, first_ids)
    facts = {
        "backend": "nsys",
        "source_path": str(export.file),
        "nsys_version": built.export_meta.get("EXPORT_PRODUCT_VERSION"),
        "export_schema_version": built.export_meta.get("EXPORT_SCHEMA_VERSION"),
        "capture_start_ns": built.start_ns,
        "capture_end_ns": built.end_ns,
        "tables_missing": missing,
        **built.counts,
    }
    return Profile(
        ops=built.ops,
        api_calls=built.api_calls,
        ranges=built.ranges,
        threads=built.threads,
        devices=built.devices,
        meta=meta_frame(facts),
        graph_links=built.graph_links,
    ).checked()


def gpu_processes(source: Export | str | os.PathLike[str]) -> list[int] | None:
    """The processes that ran GPU work, ascending, when every row of the export
    can be read one process at a time; None when some cannot (a table that
    does not say whose its rows are, or a row of GPU work without a process).

    One scan of each GPU activity table (`gpu_process_rows`).
    """
    rows = gpu_process_rows(source)
    return None if rows is None else sorted(rows)


def gpu_process_rows(source: Export | str | os.PathLike[str]) -> dict[int, int] | None:
    """The rows of GPU work of each process that ran some, when every row of the
    export can be read one process at a time (else None, as `gpu_processes`)."""
    export = opened(source)
    for spec in TABLES:
        present = export.columns(spec.table)
        if spec.process and present is not None and not sql.has_process_column(spec, present):
            return None
    found: dict[int | None, int] = {}
    for spec in GPU_WORK_SPECS:
        for pid, n in sql.process_rows(export, spec).items():
            found[pid] = found.get(pid, 0) + n
    if None in found:
        return None
    return {pid: n for pid, n in found.items() if pid is not None}


def expected_bytes(source: Export | str | os.PathLike[str], budget: float | None = None) -> int:
    """About the peak memory of reading the export whole: BYTES_PER_ROW per row.

    The rows are bounded first by the tables' smallest and largest rowids (no
    scan); where that bound is within `budget`, it is the answer. Rowids need
    be neither dense nor positive: a table of two rows, at rowid -5 and 2^40,
    would look like 10^12 rows and be cut into thousands of windows. So over
    the budget, a table's bound that its file could not hold (more rows than
    the file's bytes over MIN_ROW_BYTES) is replaced by its count; a bound the
    file could hold stands (every nsys export's rowids are dense: the bound is
    the count, and counting the rows of a large export took seconds). Without
    a budget, every table is counted.
    """
    export = opened(source)
    tables = [spec.table for spec in (*GPU_WORK_SPECS, specs.RUNTIME, specs.NVTX)]
    bounds = {table: sql.row_bound(export, table) for table in tables}
    bound = BYTES_PER_ROW * sum(bounds.values())
    if budget is not None and bound <= budget:
        return bound
    most = -1 if budget is None else _file_bytes(export) // MIN_ROW_BYTES
    rows = (n if n <= most else sql.row_count(export, table) for table, n in bounds.items())
    return BYTES_PER_ROW * sum(rows)


def _file_bytes(export: Export) -> int:
    """The export file's size in bytes (0 where it cannot be read: every bound is counted)."""
    try:
        return export.file.stat().st_size
    except OSError:
        return 0


def _keep_launched(raw: frames.Raw) -> None:
    """Keep the GPU work launched by the runtime calls read (a window's own): the
    work of other windows' calls read by correlation id is theirs."""
    calls = raw[specs.RUNTIME.table]
    ids = pl.Series(dtype=pl.Int64) if calls is None else calls["correlationId"].unique()
    for spec in GPU_WORK_SPECS:
        frame = raw.get(spec.table)
        if frame is not None:
            column = "correlation_id" if "correlation_id" in frame.columns else "correlationId"
            raw[spec.table] = frame.filter(pl.col(column).is_in(ids.implode()))


def _require_ops(export: Export, raw: frames.Raw, strings: pl.DataFrame) -> None:
    """Raise NoGpuData when no kernel, memcpy, memset or graph replay was recorded."""
    if sum(frame.height for s in GPU_WORK_SPECS if (frame := raw.get(s.table)) is not None):
        return
    missing = "/".join(s.table.split("_KIND_")[1] for s in GPU_SPECS if not export.has(s.table))
    what = f"CUPTI_ACTIVITY_KIND_{missing} absent" if missing else "GPU activity tables empty"
    runtime = raw[specs.RUNTIME.table]
    if runtime is None or runtime.is_empty():
        raise NoGpuData(
            f"{export.file}: no GPU activity ({what}) and no CUDA API calls: CUDA was not "
            "traced; profile with `nsys profile --trace=cuda,nvtx`"
        )
    calls = frames.api_calls_frame(runtime, strings)[0]
    launches = calls.filter(pl.col("api_name").str.contains(frames.LAUNCH_API)).height
    raise NoGpuData(
        f"{export.file}: no GPU activity ({what}) although it records {launches} CUDA "
        "kernel launches: GPU activity was not collected (as under WSL2); profile on a "
        "host where `nsys profile --trace=cuda` records kernels"
    )
