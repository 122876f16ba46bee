"""Read an Nsight Systems SQLite export into a normalised `Report`.

Together with `nsysmap.read.nsys_sql` (file checks, SQL, fetching; the tables
and columns in `nsysmap.read.nsys_specs`) and `nsysmap.read.nsys_frames` (building
gpu_ops and ranges), the one place that knows how nsys exports differ across
versions: it probes which
tables and columns exist (never the version number), reads each needed table
once, column by column, and does every lookup and join here, in Polars. What
is read from where and what is ignored is documented in docs/reading.md.

Ranges come back with `depth` and `parent_id` empty: nesting is a later step.
"""

from __future__ import annotations

import itertools
import os
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import polars as pl

from nsysmap.errors import NoGpuData
from nsysmap.launch_keys import first_calls
from nsysmap.model import Report, meta_frame
from nsysmap.read import nsys_sql as sql
from nsysmap.read.nsys_env import rank_facts
from nsysmap.read.nsys_frames import (
    RANGE_KINDS,
    gpu_ops_frame,
    kernels_batch,
    nvtx_batch,
    ranges_frame,
    string_value,
    strings_table,
)
from nsysmap.read.nsys_graphs import split_graphs
from nsysmap.read.nsys_specs import LAUNCH_ENV

GPU_SPECS = (sql.KERNEL, sql.MEMCPY, sql.MEMSET)
# Tables of GPU work: the core ones and CUDA graph replays traced as a whole.
GPU_WORK_SPECS = (*GPU_SPECS, sql.GRAPH_TRACE)
GRAPH_SPECS = (sql.GRAPH_TRACE, sql.GRAPH_NODE_EVENTS, sql.GRAPH_EVENTS)
CORE_TABLES = tuple(s.table for s in (*GPU_SPECS, sql.RUNTIME, sql.NVTX))
TWIN_EVENT_CLASS = 67  # the backtrace twin nsys writes next to a CUDA API row
LAUNCH_API = r"^cu(da)?(Graph)?Launch"  # cudaLaunchKernel_v7000, cuLaunchKernelEx, ...
# Tables are read in this many threads (the SQLite driver releases the GIL).
READ_THREADS = min(3, os.cpu_count() or 1)
# Tables with more rows than this are read in READ_THREADS parts, by rowid.
SPLIT_ROWS = 1 << 20
SPLIT_SPECS = (sql.NVTX, sql.KERNEL, sql.RUNTIME)
Raw = dict[str, pl.DataFrame | None]


def read_sqlite(path: str | os.PathLike[str], *, require_gpu: bool = True) -> Report:
    """The export at `path` as a Report of normalised frames.

    Raises InputNotFound, NotAnExport, or (with require_gpu, when the export
    holds no kernel, memcpy, memset or graph replay) NoGpuData, each with a
    one-line message.
    """
    export = sql.open_export(path)
    if require_gpu and not any(export.has(s.table) for s in GPU_WORK_SPECS):
        runtime, strings = export.read(sql.RUNTIME), export.read(sql.STRINGS)
        _require_gpu_ops(export, {sql.RUNTIME.table: runtime, "StringIds": strings})
    raw = _read_all(export)
    if require_gpu:
        _require_gpu_ops(export, raw)
    return _normalise(raw, str(export.file))


def _read_all(export: sql.Export) -> Raw:
    """Every table the report uses, read in parallel threads, biggest first.

    Large tables are read in READ_THREADS parts (by rowid), so that the
    threads finish together.
    """
    strings = strings_table(export.read(sql.STRINGS))
    # Batches of the big tables become what the report keeps as they arrive.
    transforms = {
        sql.NVTX.table: partial(nvtx_batch, strings=strings),
        sql.KERNEL.table: partial(kernels_batch, strings=strings),
    }
    specs = [sql.NVTX, *GPU_SPECS, sql.RUNTIME, sql.THREAD_NAMES, *GRAPH_SPECS]
    specs += [sql.GPU_INFO, sql.CUDA_GPU_INFO, *sql.META_TABLES, LAUNCH_ENV]
    with ThreadPoolExecutor(READ_THREADS) as pool:
        futures = {
            spec.table: [
                pool.submit(export.read, spec, rows, transforms.get(spec.table))
                for rows in _parts(export, spec)
            ]
            for spec in specs
        }
        futures["memcpy_kinds"] = [pool.submit(export.read, sql.MEMCPY_KINDS)]
        raw = {name: _joined([f.result() for f in parts]) for name, parts in futures.items()}
    metas = [raw.pop(spec.table) for spec in sql.META_TABLES]
    raw["meta"] = next((m for m in metas if m is not None), None)
    raw["StringIds"] = strings
    return raw


def _parts(export: sql.Export, spec: sql.TableSpec) -> list[tuple[int, int] | None]:
    """Rowid ranges to read `spec` in (one unbounded part for small tables)."""
    if spec not in SPLIT_SPECS or READ_THREADS < 2:
        return [None]
    last = export.last_rowid(spec.table)
    if last is None or last < SPLIT_ROWS:
        return [None]
    bounds = [last * i // READ_THREADS for i in range(READ_THREADS + 1)]
    bounds[0] = export.first_rowid(spec.table) - 1
    return list(itertools.pairwise(bounds))


def _joined(parts: list[pl.DataFrame | None]) -> pl.DataFrame | None:
    """The parts of one table, in rowid order, integers in one chunk."""
    frames = [part for part in parts if part is not None]
    if not frames:
        return None
    return sql.rechunked(pl.concat(frames, rechunk=False))


def _require_gpu_ops(export: sql.Export, raw: Raw) -> None:
    """Raise NoGpuData when no kernel, memcpy, memset or graph replay was recorded."""
    if sum(frame.height for s in GPU_WORK_SPECS if (frame := raw.get(s.table)) is not None):
        return
    missing = "/".join(s.table.split("_KIND_")[1] for s in GPU_SPECS if not export.has(s.table))
    what = f"CUPTI_ACTIVITY_KIND_{missing} absent" if missing else "GPU activity tables empty"
    runtime = raw[sql.RUNTIME.table]
    if runtime is None or runtime.is_empty():
        raise NoGpuData(
            f"{export.file}: no GPU activity ({what}) and no CUDA API calls: CUDA was not "
            "traced; profile with `nsys profile --trace=cuda,nvtx`"
        )
    calls = _api_calls(runtime, strings_table(raw["StringIds"]))[0]
    launches = calls.filter(pl.col("api_name").str.contains(LAUNCH_API)).height
    raise NoGpuData(
        f"{export.file}: no GPU activity ({what}) although it records {launches} CUDA "
        "kernel launches: GPU activity was not collected (as under WSL2); profile on a "
        "host where `nsys profile --trace=cuda` records kernels"
    )


def _normalise(raw: Raw, source: str) -> Report:
    """The report from the raw tables; each raw table is dropped once used (lower peak)."""
    missing = ",".join(t for t in CORE_TABLES if raw[t] is None)
    strings = strings_table(raw.pop("StringIds"))
    gpu_ops = gpu_ops_frame(raw, strings)
    gpu_ops, graph_links, graph_facts = split_graphs(
        gpu_ops, raw.pop(sql.GRAPH_NODE_EVENTS.table), raw.pop(sql.GRAPH_EVENTS.table)
    )
    api_calls, twins, duplicates = _api_calls(raw.pop(sql.RUNTIME.table), strings)
    nvtx = raw.pop(sql.NVTX.table)
    nvtx = nvtx_batch(sql.NVTX.empty_if_none(None), strings) if nvtx is None else nvtx
    in_ranges = nvtx.lazy().filter(pl.col("eventType").is_in(RANGE_KINDS))
    start, end = _extent(_timed(gpu_ops), api_calls, in_ranges.select("start_ns", end_ns="end"))
    ranges = ranges_frame(nvtx)
    del nvtx
    meta = _meta(raw["meta"])
    facts = {
        "backend": "nsys",
        "source_path": source,
        "nsys_version": meta.get("EXPORT_PRODUCT_VERSION"),
        "export_schema_version": meta.get("EXPORT_SCHEMA_VERSION"),
        "capture_start_ns": start,
        "capture_end_ns": end,
        "tables_missing": missing,
        "cuda_launch_calls": api_calls["api_name"].str.contains(LAUNCH_API).sum(),
        "backtrace_twin_rows": twins,
        "duplicate_launch_rows": duplicates,
        "ranges_open_at_end": (~ranges["_closed"]).sum(),
        **graph_facts,
        **rank_facts(raw.pop(LAUNCH_ENV.table)),
    }
    return Report(
        gpu_ops=gpu_ops,
        api_calls=api_calls,
        ranges=ranges.drop("_closed"),
        threads=_threads(raw[sql.THREAD_NAMES.table], strings),
        devices=_devices(raw[sql.GPU_INFO.table], raw[sql.CUDA_GPU_INFO.table]),
        meta=meta_frame(facts),
        graph_links=graph_links,
    ).checked()


def _api_calls(
    runtime: pl.DataFrame | None, strings: pl.DataFrame
) -> tuple[pl.DataFrame, int, int]:
    """API calls without backtrace twins; also (twins dropped, duplicates dropped).

    A twin (eventClass 67) is dropped when a real row has its (pid,
    correlation id); of real rows sharing one, the one that `first_calls`
    (nsysmap/launch_keys.py) keeps. Rows without a correlation id are all kept.
    """
    calls = sql.RUNTIME.empty_if_none(runtime).with_columns(pid=sql.process_id("globalTid"))
    twin = calls["eventClass"].eq(TWIN_EVENT_CLASS).fill_null(False)
    twins, real = _split(calls, twin)
    key = ["pid", "correlationId"]
    kept, _ = _split(real, _first_calls(real))
    duplicates = real.height - kept.height
    if not twins.is_empty():  # keep a twin only when its real row is missing
        orphans = twins.join(real, on=key, how="anti")
        kept = pl.concat([kept, orphans.filter(_first_calls(orphans))])
    twins_dropped = calls.height - kept.height - duplicates
    frame = kept.select(
        "pid",
        tid=sql.thread_id("globalTid"),
        correlation_id="correlationId",
        api_name=string_value("nameId", strings),
        start_ns="start",
        end_ns="end",
    )
    return frame, twins_dropped, duplicates


def _first_calls(calls: pl.DataFrame) -> pl.Series:
    """The rows that win their (pid, correlation id), on the raw runtime columns."""
    return first_calls(calls, corr="correlationId", start="start", tid="globalTid")


def _split(frame: pl.DataFrame, mask: pl.Series) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(rows where mask holds, the others), without copying when one side is empty."""
    if mask.all():
        return frame, frame.clear()
    if not mask.any():
        return frame.clear(), frame
    return frame.filter(mask), frame.filter(~mask)


def _timed(gpu_ops: pl.DataFrame) -> pl.LazyFrame:
    """The ops with a time: CUPTI writes start = end = 0 for a graph replay it could not time."""
    untimed = (pl.col("kind") == "graph") & (pl.col("start_ns") == 0) & (pl.col("end_ns") == 0)
    return gpu_ops.lazy().filter(~untimed)


def _extent(*frames: pl.DataFrame | pl.LazyFrame) -> tuple[int | None, int | None]:
    """The first start, and the last end or start (an open range has only a start)."""
    bounds = [
        f.lazy()
        .select(
            pl.col("start_ns").min().alias("first"),
            pl.max_horizontal(pl.col("end_ns").max(), pl.col("start_ns").max()).alias("last"),
        )
        .collect()
        .row(0)
        for f in frames
    ]
    firsts = [first for first, _ in bounds]
    lasts = [last for _, last in bounds]
    firsts, lasts = [v for v in firsts if v is not None], [v for v in lasts if v is not None]
    return (min(firsts) if firsts else None, max(lasts) if lasts else None)


def _threads(names: pl.DataFrame | None, strings: pl.DataFrame) -> pl.DataFrame:
    """Thread names; a thread named twice keeps its last name."""
    threads = sql.THREAD_NAMES.empty_if_none(names).select(
        pid=sql.process_id("globalTid"),
        tid=sql.thread_id("globalTid"),
        thread_name=string_value("nameId", strings),
    )
    return threads.unique(["pid", "tid"], keep="last", maintain_order=True)


def _devices(gpu: pl.DataFrame | None, cuda_gpu: pl.DataFrame | None) -> pl.DataFrame:
    """GPUs as the export lists them (not necessarily the ones used)."""
    info = sql.GPU_INFO.empty_if_none(gpu if gpu is not None else cuda_gpu)
    known = pl.col("major").fill_null(0) > 0  # other adapters are listed with zeros
    devices = info.select(
        "device_id",
        name=sql.text_or_null("name"),
        sm_count="sm_count",
        memory_bytes="memory",
        compute_capability=pl.when(known).then(pl.format("{}.{}", "major", "minor")),
    )
    return devices.unique("device_id", keep="first", maintain_order=True)


def _meta(frame: pl.DataFrame | None) -> dict[str, str]:
    """The export's own metadata (the few keys the reader reads)."""
    if frame is None:
        return {}
    rows = frame.unique("name", keep="first", maintain_order=True).rows()
    return dict(rows)
