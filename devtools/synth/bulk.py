"""The bulk layer of `devtools.synth`: frames in, an nsys-shaped SQLite file out.

`write_export(path, tables)` writes Polars or Arrow frames into tables with the
names, columns, column types and id encodings of current real exports (nsys
2026.x), fast enough for tens of millions of rows: ADBC bulk ingest inside one
transaction with the journal and fsyncs off. `bulk_tables` generates the frames
of a large training-like export for benchmarks, without a Python loop per row.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import adbc_driver_sqlite.dbapi as adbc
import polars as pl
import pyarrow as pa

# Column lists of current exports: `name:type`, type i/t/r = INTEGER/TEXT/REAL,
# `!` NOT NULL, `*` PRIMARY KEY. From nsys 2026.2 (TARGET_INFO_GPU: 2026.1,
# EXPORT_META_DATA: 2023.1, the last version that wrote it).
_COLUMNS = {
    "StringIds": "id:i!* value:t!",
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start:i! end:i! deviceId:i! contextId:i! greenContextId:i streamId:i! correlationId:i"
        " globalPid:i demangledName:i! shortName:i! mangledName:i launchType:i cacheConfig:i"
        " registersPerThread:i! gridX:i! gridY:i! gridZ:i! blockX:i! blockY:i! blockZ:i!"
        " staticSharedMemory:i! dynamicSharedMemory:i! localMemoryPerThread:i!"
        " localMemoryTotal:i! gridId:i! sharedMemoryExecuted:i graphNodeId:i"
        " sharedMemoryLimitConfig:i qmdBulkReleaseDone:i qmdPreexitDone:i qmdLastCtaDone:i"
        " graphId:i clusterX:i clusterY:i clusterZ:i clusterSchedulingPolicy:i"
        " maxPotentialClusterSize:i maxActiveClusters:i sharedMemoryRequestedPercentage:i"
        " tensorSizeMinusOneElements:t!"
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        "start:i! end:i! eventClass:i! globalTid:i correlationId:i nameId:i! returnValue:i!"
        " callchainId:i"
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start:i! end:i! deviceId:i! contextId:i! greenContextId:i streamId:i! correlationId:i"
        " globalPid:i bytes:i! copyKind:i! deprecatedSrcId:i srcKind:i dstKind:i srcDeviceId:i"
        " srcContextId:i dstDeviceId:i dstContextId:i migrationCause:i graphNodeId:i"
        " virtualAddress:i copyCount:i"
    ),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        "start:i! end:i! deviceId:i! contextId:i! greenContextId:i streamId:i! correlationId:i"
        " globalPid:i value:i! bytes:i! graphNodeId:i memKind:i"
    ),
    "NVTX_EVENTS": (
        "start:i! end:i eventType:i! rangeId:i category:i color:i text:t globalTid:i"
        " endGlobalTid:i textId:i domainId:i uint64Value:i int64Value:i doubleValue:r"
        " uint32Value:i int32Value:i floatValue:r jsonTextId:i jsonText:t binaryData:t"
    ),
    "ThreadNames": "nameId:i! priority:i globalTid:i",
    "TARGET_INFO_GPU": (
        "vmId:i! id:i! name:t busLocation:t isDiscrete:i l2CacheSize:i totalMemory:i"
        " memoryBandwidth:i clockRate:i smCount:i pwGpuId:i uuid:t luid:i chipName:t cuDevice:i"
        " ctxswDevPath:t ctrlDevPath:t revision:i nodeMask:i constantMemory:i maxIPC:i"
        " maxRegistersPerBlock:i maxShmemPerBlock:i maxShmemPerBlockOptin:i maxShmemPerSm:i"
        " maxRegistersPerSm:i threadsPerWarp:i asyncEngines:i maxWarpsPerSm:i maxBlocksPerSm:i"
        " maxThreadsPerBlock:i maxBlockDimX:i maxBlockDimY:i maxBlockDimZ:i maxGridDimX:i"
        " maxGridDimY:i maxGridDimZ:i computeMajor:i computeMinor:i smMajor:i smMinor:i"
    ),
    "META_DATA_EXPORT": "name:t! value:t",
    "META_DATA_CAPTURE": "name:t! value:t",
    "EXPORT_META_DATA": "name:t! value:t",
    "ENUM_NSYS_EVENT_TYPE": "id:i!* name:t label:t",
    "ENUM_CUDA_MEMCPY_OPER": "id:i!* name:t label:t",
    "ANALYSIS_DETAILS": "globalVid:i! duration:i! startTime:i! stopTime:i!",
    # CUDA graphs (the node events table as nsys 2022 to 2023 called it
    # CUDA_GRAPH_EVENTS; write it under that name with `exact_columns`).
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": (
        "start:i! end:i! deviceId:i! contextId:i! greenContextId:i streamId:i! correlationId:i"
        " globalPid:i graphId:i! graphExecId:i!"
    ),
    "CUDA_GRAPH_EVENTS": (
        "start:i! end:i! eventClass:i! globalTid:i nameId:i! graphId:i! originalGraphId:i"
        " graphExecId:i"
    ),
    "CUDA_GRAPH_NODE_EVENTS": (
        "start:i! end:i! eventClass:i! globalTid:i nameId:i! graphNodeId:i! originalGraphNodeId:i"
    ),
}
_SQL_TYPES = {"i": "INTEGER", "t": "TEXT", "r": "REAL"}
# A table's content: a frame, or None for a table with no rows.
Frame: TypeAlias = pl.DataFrame | pa.Table | None
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class Column:
    """One column of a CREATE TABLE statement."""

    name: str
    sql_type: str
    not_null: bool = False
    primary_key: bool = False


def known_columns(table: str) -> list[Column]:
    """The columns of `table` in current real exports ([] for unknown tables)."""
    spec = _COLUMNS.get(table, "")
    columns = []
    for item in spec.split():
        name, flags = item.split(":")
        sql_type = _SQL_TYPES[flags[0]]
        columns.append(Column(name, sql_type, "!" in flags, "*" in flags))
    return columns


def write_export(
    path: str | os.PathLike[str],
    tables: Mapping[str, Frame | Iterable[Frame]],
    *,
    exact_columns: Collection[str] = (),
) -> Path:
    """Write `tables` (name -> Polars DataFrame, Arrow table, or None) as an export.

    A table may also be given as an iterable of such frames (chunks with the
    same columns, appended in order), so that large tables need not be held in
    memory whole.

    Known tables get every column of a current export, in its order and type;
    NOT NULL columns the frame lacks are filled by a DEFAULT of 0 or ''. Columns
    the frame adds (foreign tools do that) are appended. Tables named in
    `exact_columns`, and unknown tables, get only the frame's columns (to mimic
    older layouts). A value of None creates the table with no rows. Binary
    values in TEXT columns are stored as TEXT (invalid UTF-8 included), as some
    exports do. An existing file at `path` is replaced.
    """
    path = Path(path)
    path.unlink(missing_ok=True)
    with adbc.connect(str(path), autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("PRAGMA journal_mode=OFF")
        cur.execute("PRAGMA synchronous=OFF")
        cur.execute("BEGIN")
        for table, content in tables.items():
            parts = _chunks(content)
            data = next(parts)
            columns = _table_columns(table, data, exact=table in exact_columns)
            cur.execute(_create_sql(table, columns, data))
            binary: set[str] = set()
            for part in itertools.chain([data], parts):
                if part is not None and part.num_rows:
                    cur.adbc_ingest(table, part, mode="append")
                    binary.update(_binary_text_columns(part, columns))
            for name in sorted(binary):
                cur.execute(_to_text_sql(table, name))
        cur.execute("COMMIT")
    return path


def _chunks(content: Frame | Iterable[Frame]) -> Iterator[pa.Table | None]:
    """A table's content as Arrow chunks (one, possibly None, for a single frame)."""
    if content is None or isinstance(content, pl.DataFrame | pa.Table):
        yield _arrow(content)
        return
    empty = True
    for part in content:
        empty = False
        yield _arrow(part)
    if empty:
        yield None


def _arrow(frame: Frame) -> pa.Table | None:
    """An Arrow table with the plain (non-view) types the ADBC ingest binds."""
    if frame is None:
        return None
    table = frame if isinstance(frame, pa.Table) else frame.to_arrow()
    fields = []
    for field in table.schema:
        if pa.types.is_string_view(field.type) or pa.types.is_large_string(field.type):
            field = field.with_type(pa.string())
        elif pa.types.is_binary_view(field.type) or pa.types.is_large_binary(field.type):
            field = field.with_type(pa.binary())
        fields.append(field)
    return table.cast(pa.schema(fields))


def _table_columns(table: str, data: pa.Table | None, *, exact: bool) -> list[Column]:
    known = {c.name: c for c in known_columns(table)}
    if data is None:
        return [] if exact else list(known.values())
    names = data.column_names
    if not exact and known:
        extra = [n for n in names if n not in known]
        return [*known.values(), *(_inferred(n, data.schema.field(n).type) for n in extra)]
    return [known.get(n) or _inferred(n, data.schema.field(n).type) for n in names]


def _inferred(name: str, dtype: pa.DataType) -> Column:
    if pa.types.is_integer(dtype) or pa.types.is_boolean(dtype):
        return Column(name, "INTEGER")
    if pa.types.is_floating(dtype):
        return Column(name, "REAL")
    return Column(name, "TEXT")


def _quoted(identifier: str) -> str:
    if not _IDENTIFIER.match(identifier):
        raise ValueError(f"not a plain SQL identifier: {identifier!r}")
    return f'"{identifier}"'


def _create_sql(table: str, columns: list[Column], data: pa.Table | None) -> str:
    given = set() if data is None else set(data.column_names)
    parts = []
    for col in columns:
        part = f"{_quoted(col.name)} {col.sql_type}"
        if col.not_null:
            part += " NOT NULL"
            if col.name not in given:
                part += " DEFAULT " + ("''" if col.sql_type == "TEXT" else "0")
        if col.primary_key:
            part += " PRIMARY KEY"
        parts.append(part)
    return f"CREATE TABLE {_quoted(table)} ({', '.join(parts)})"


def _binary_text_columns(data: pa.Table, columns: list[Column]) -> list[str]:
    text = {c.name for c in columns if c.sql_type == "TEXT"}
    return [f.name for f in data.schema if pa.types.is_binary(f.type) and f.name in text]


def _to_text_sql(table: str, column: str) -> str:
    col = _quoted(column)
    return f"UPDATE {_quoted(table)} SET {col} = CAST({col} AS TEXT) WHERE typeof({col}) = 'blob'"


NS_PER_MS = 1_000_000
_VM = 1 << 48  # the high bits of process and thread ids in current exports


def global_pid(pid: int) -> int:
    """nsys's serialized process id (the `globalPid` column)."""
    return _VM | (pid << 24)


def global_tid(pid: int, tid: int) -> int:
    """nsys's serialized thread id (the `globalTid` column)."""
    return _VM | (pid << 24) | tid


_PERIOD_NS = 2_000
_KERNEL_NAMES = 64


def bulk_tables(
    n_kernels: int, *, ranges_per_kernel: int = 3, pid: int = 100
) -> dict[str, pl.DataFrame]:
    """Frames of a large training-like export: one thread, one GPU, one stream.

    Launch i (a cudaLaunchKernel row) starts kernel i (correlation id i + 1);
    `ranges_per_kernel` nested push/pop ranges enclose each launch, named
    inline ("aten::op_1, seq = 42") for even i and by registered string for
    odd i. Per 2 µs period::

        range 0   |--------------------------------|   +0     .. +1990 ns
        range 1    |------------------------------|    +10    .. +1980
        launch          |---|                          +300   .. +700
        kernel               |---------------|         +800   .. +1800
    """
    api_id = 2 * _KERNEL_NAMES  # StringIds: demangled names, short names, then these
    strings = [f"void kernel_{k}<float>(float *, int)" for k in range(_KERNEL_NAMES)]
    strings += [f"kernel_{k}" for k in range(_KERNEL_NAMES)]
    strings += ["cudaLaunchKernel_v7000", "python"]
    strings += [f"nccl:op_{j}" for j in range(ranges_per_kernel)]
    thread = global_tid(pid, pid)
    return {
        "StringIds": pl.DataFrame({"id": range(len(strings)), "value": strings}),
        "CUPTI_ACTIVITY_KIND_KERNEL": _bulk_kernels(n_kernels, pid),
        "CUPTI_ACTIVITY_KIND_RUNTIME": _bulk_launches(n_kernels, thread, api_id),
        "NVTX_EVENTS": _bulk_ranges(n_kernels, ranges_per_kernel, thread, api_id + 2),
        "ThreadNames": pl.DataFrame({"nameId": [api_id + 1], "globalTid": [thread]}),
        "META_DATA_EXPORT": pl.DataFrame(
            {"name": ["EXPORT_PRODUCT_VERSION", "EXPORT_SCHEMA_VERSION"]}
        ).with_columns(value=pl.Series(["2026.2.1.210", "3.25.0"])),
    }


def _bulk_kernels(n_kernels: int, pid: int) -> pl.DataFrame:
    i = pl.int_range(0, n_kernels, dtype=pl.Int64)
    names = i % _KERNEL_NAMES
    frame = pl.select(
        start=i * _PERIOD_NS + 800,
        end=i * _PERIOD_NS + 1800,
        deviceId=0,
        contextId=1,
        streamId=7,
        correlationId=i + 1,
        globalPid=global_pid(pid),
        demangledName=names,
        shortName=names + _KERNEL_NAMES,
        gridX=i % 1024 + 1,
        gridY=1,
        gridZ=1,
        blockY=1,
        blockZ=1,
        blockX=256,
    )
    return frame.cast(pl.Int64)


def _bulk_launches(n_kernels: int, thread: int, name_id: int) -> pl.DataFrame:
    i = pl.int_range(0, n_kernels, dtype=pl.Int64)
    frame = pl.select(
        start=i * _PERIOD_NS + 300,
        end=i * _PERIOD_NS + 700,
        eventClass=0,
        globalTid=thread,
        correlationId=i + 1,
        nameId=name_id,
    )
    return frame.cast(pl.Int64)


def _bulk_ranges(n_kernels: int, per_kernel: int, thread: int, first_text_id: int) -> pl.DataFrame:
    i = pl.int_range(0, n_kernels * per_kernel, dtype=pl.Int64)
    kernel, depth = i // per_kernel, i % per_kernel
    inline = kernel % 2 == 0
    frame = pl.select(
        start=kernel * _PERIOD_NS + 10 * depth,
        end=kernel * _PERIOD_NS + _PERIOD_NS - 10 - 10 * depth,
        eventType=59,
        text=pl.when(inline).then(pl.format("aten::op_{}, seq = {}", depth, kernel)),
        globalTid=thread,
        textId=pl.when(~inline).then(depth + first_text_id),
        domainId=0,
    )
    return frame.cast({"eventType": pl.Int64, "globalTid": pl.Int64, "domainId": pl.Int64})
