"""Declared schemas of every table nsysmap passes between stages or writes.

Column names carry their unit (`_ns` nanoseconds, `_bytes`, `_flop`); ids are
Int64 so that joins never need casts. The normalised tables are the internal
contract between the readers (nsys SQLite, torch.profiler traces) and the
attribution engine; the output tables are the public Parquet format documented
in docs/outputs.md and versioned by `OUTPUT_SCHEMA_VERSION`.
"""

from __future__ import annotations

import polars as pl

OUTPUT_SCHEMA_VERSION = "1.0"

OP_KINDS = ("kernel", "memcpy", "memset", "cpu_op")
RANGE_KINDS = ("push_pop", "start_end", "synthetic")
DIRECTIONS = ("forward", "backward")
# How far attribution got for one operation (see docs/outputs.md).
ATTRIBUTION = ("range", "window", "no_range", "no_launch")

OpKind = pl.Enum(OP_KINDS)
RangeKind = pl.Enum(RANGE_KINDS)
Direction = pl.Enum(DIRECTIONS)
Attribution = pl.Enum(ATTRIBUTION)

# ---------------------------------------------------------------- normalised
# One row per GPU operation (kernel, memcpy, memset) or, for the
# torch.profiler CPU backend, per CPU operator (dur_ns is then its self time).
GPU_OPS = pl.Schema(
    {
        "op_id": pl.Int64,  # unique within the report
        "kind": OpKind,
        "device_id": pl.Int64,  # -1 for CPU operators
        "stream_id": pl.Int64,
        "pid": pl.Int64,
        "correlation_id": pl.Int64,  # joins with api_calls within one pid
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "dur_ns": pl.Int64,
        "name": pl.String,  # full identity: demangled kernel name, copy kind, aten op
        "short_name": pl.String,
        "grid_x": pl.Int64,
        "grid_y": pl.Int64,
        "grid_z": pl.Int64,
        "block_x": pl.Int64,
        "block_y": pl.Int64,
        "block_z": pl.Int64,
        "bytes": pl.Int64,  # memcpy / memset size
        "input_shapes": pl.String,  # e.g. "[[8, 128, 768], [768]]" when recorded
    }
)

# CPU-side calls that launch GPU work (CUDA runtime / driver API), one row per
# call after removing backtrace twins. For the CPU backend, one row per
# operator: the operator "launches" itself on its own thread.
API_CALLS = pl.Schema(
    {
        "pid": pl.Int64,
        "tid": pl.Int64,
        "correlation_id": pl.Int64,
        "api_name": pl.String,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
    }
)

# Annotation ranges (NVTX, or torch.profiler user annotations). depth is 1 for
# a range with no enclosing range on its thread; parent_id is then null.
RANGES = pl.Schema(
    {
        "range_id": pl.Int64,
        "pid": pl.Int64,
        "tid": pl.Int64,
        "domain": pl.String,
        "name": pl.String,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "kind": RangeKind,
        "depth": pl.Int32,
        "parent_id": pl.Int64,
    }
)

THREADS = pl.Schema({"pid": pl.Int64, "tid": pl.Int64, "thread_name": pl.String})

DEVICES = pl.Schema(
    {
        "device_id": pl.Int64,
        "name": pl.String,
        "sm_count": pl.Int64,
        "memory_bytes": pl.Int64,
        "compute_capability": pl.String,
    }
)

META = pl.Schema({"key": pl.String, "value": pl.String})

# ------------------------------------------------------------------- outputs
OPS = pl.Schema(
    {
        "op_id": pl.Int64,
        "kind": OpKind,
        "category": pl.String,
        "device_id": pl.Int64,
        "stream_id": pl.Int64,
        "pid": pl.Int64,
        "tid": pl.Int64,  # launching thread; null without a launch record
        "correlation_id": pl.Int64,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "dur_ns": pl.Int64,
        "name": pl.String,
        "short_name": pl.String,
        "launch_api": pl.String,
        "launch_start_ns": pl.Int64,
        "attribution": Attribution,
        "range_id": pl.Int64,  # innermost range on the launching thread
        "range_name": pl.String,
        "range_path": pl.String,  # outermost to innermost, joined by " > "
        "range_depth": pl.Int32,
        "step": pl.Int64,
        "phase": pl.String,
        "module": pl.String,  # fully qualified module path, "" for the root module
        "module_class": pl.String,
        "direction": Direction,
        "aten_op": pl.String,
        "input_shapes": pl.String,
    }
)

_SUMMARY_TAIL = {"ops": pl.Int64, "time_ns": pl.Int64, "time_share": pl.Float64}

BY_PHASE = pl.Schema({"device_id": pl.Int64, "phase": pl.String, **_SUMMARY_TAIL})
BY_CATEGORY = pl.Schema({"device_id": pl.Int64, "category": pl.String, **_SUMMARY_TAIL})
BY_STEP = pl.Schema(
    {
        "device_id": pl.Int64,
        "step": pl.Int64,
        **_SUMMARY_TAIL,
        "first_start_ns": pl.Int64,
        "last_end_ns": pl.Int64,
    }
)
BY_MODULE = pl.Schema(
    {
        "device_id": pl.Int64,
        "module": pl.String,
        "module_class": pl.String,
        **_SUMMARY_TAIL,
        "forward_ns": pl.Int64,
        "backward_ns": pl.Int64,
        "inclusive_ns": pl.Int64,  # this module and every module below it
    }
)
BY_MODULE_PHASE = pl.Schema(
    {
        "device_id": pl.Int64,
        "module": pl.String,
        "module_class": pl.String,
        "phase": pl.String,
        **_SUMMARY_TAIL,
    }
)
BY_KERNEL = pl.Schema(
    {
        "device_id": pl.Int64,
        "kind": OpKind,
        "name": pl.String,
        "short_name": pl.String,
        "category": pl.String,
        **_SUMMARY_TAIL,
        "mean_ns": pl.Float64,
        "min_ns": pl.Int64,
        "max_ns": pl.Int64,
    }
)


class SchemaMismatch(Exception):
    """A table does not match its declared schema: a bug, not a user error."""


def conform(df: pl.DataFrame, schema: pl.Schema, table: str) -> pl.DataFrame:
    """Return `df` with exactly `schema`'s columns, in order and of its types.

    Missing columns are an error (the producer forgot one); extra columns are
    an error too, so that nothing leaves a stage undeclared.
    """
    missing = [c for c in schema.names() if c not in df.columns]
    extra = [c for c in df.columns if c not in schema]
    if missing or extra:
        raise SchemaMismatch(f"{table}: missing columns {missing}, undeclared columns {extra}")
    try:
        return df.select(pl.col(name).cast(dtype) for name, dtype in schema.items())
    except pl.exceptions.PolarsError as exc:
        raise SchemaMismatch(f"{table}: {exc}") from exc


def empty(schema: pl.Schema) -> pl.DataFrame:
    """An empty frame of the given schema."""
    return pl.DataFrame(schema=schema)
