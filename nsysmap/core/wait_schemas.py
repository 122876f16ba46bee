"""Declared schemas of the waits' tables: where the GPU waits (nsysmap.waits, docs/waits.md)."""

from __future__ import annotations

import polars as pl

from nsysmap.core.schemas import ColumnType, declare

# The kinds of idle gap (docs/waits.md): between two operations, then the window's edges.
WAIT_INTERIOR = ("sync", "launch", "other_stream", "latency", "unknown")
WAIT_EDGES = ("before_first", "after_last")
WAIT_KINDS = (*WAIT_INTERIOR, *WAIT_EDGES)
WaitKind = pl.Enum(WAIT_KINDS)
# A `launch` gap up to this long is launch overhead; a longer one is other host work between
# launches (the findings' `max_launch_gap_ns`; the report's waits tell the two apart).
LAUNCH_OVERHEAD_NS = 250_000
# A gap whose operation was launched in time, with nothing else running on the device,
# is the GPU's own latency up to this long (a few microseconds each, tens on older
# GPUs); a longer one has no cause the profile shows: `unknown` (docs/waits.md).
LATENCY_MAX_NS = 250_000


def idle_by_kind(kinds: tuple[str, ...]) -> dict[str, ColumnType]:
    """An Int64 column `idle_<kind>_ns` for each of `kinds`."""
    return {f"idle_{kind}_ns": pl.Int64 for kind in kinds}


_STREAM_STEP = {"device_id": pl.Int64, "stream_id": pl.Int64, "step": pl.Int64}
# One row per idle gap of a stream in a step, given to the operation that ends it.
IDLE = declare(
    {
        **_STREAM_STEP,
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "dur_ns": pl.Int64,
        "kind": WaitKind,
        "next_op_id": pl.Int64,  # the operation that ends the gap (null: after_last)
        "range_path": pl.String,  # ... its range path, phase and module
        "phase": pl.String,
        "module": pl.String,
    }
)
# Per device, stream and step: the step's wall time as busy + idle, idle split by kind.
STREAM_IDLE = declare(
    {
        **_STREAM_STEP,
        "wall_start_ns": pl.Int64,  # the device's first operation of the step (any stream)
        "wall_end_ns": pl.Int64,  # ... and its last end
        "wall_ns": pl.Int64,
        "ops": pl.Int64,
        "busy_ns": pl.Int64,  # union of the stream's operations
        "idle_ns": pl.Int64,  # wall_ns - busy_ns: the gaps of idle.parquet, summed
        "gaps": pl.Int64,
        **idle_by_kind(WAIT_KINDS),
    }
)
# Per device, step, phase and module: GPU time, the idle time before it, its launches.
LAUNCH_COST = declare(
    {
        "device_id": pl.Int64,
        "step": pl.Int64,
        "phase": pl.String,
        "module": pl.String,
        "ops": pl.Int64,  # GPU operations
        "busy_ns": pl.Int64,  # their summed durations
        "launches": pl.Int64,  # ... of them with a launch call
        "launch_cpu_ns": pl.Int64,  # the launch calls' summed durations (host time)
        "shorter_than_launch": pl.Int64,  # operations shorter than their launch call
        "idle_before_ns": pl.Int64,  # gaps these operations ended (all but after_last)
        **idle_by_kind(WAIT_INTERIOR),
        "launch_bound_share": pl.Float64,  # idle_launch_ns / (busy_ns + idle_before_ns)
    }
)
