"""`nsysmap report`: where the GPU waits, per stream and phase, and what to fuse (pure).

`read_waits(run_dir, manifest)` reads the waits tables an output directory
holds (None before output schema 1.6); `waits_answer(tables)` gives a
JSON-able answer from them, which nsysmap.report.waits_text renders as
Markdown. Definitions: docs/waits.md (nsysmap.waits).

The answer covers the steps (every row with a step) when the run has any,
else the measured region its structure found, where that leaves out part of
the capture (set-up, warm-up), else the whole capture as one window. Times
are summed over the steps; `steps` says how many (device, step) windows that
is. The measured region's streams are worked out from its operations and the
capture's gaps (nsysmap.waits.tables.window_waits); its phases, modules
and launch calls stay those of the capture (`cost_scope`): their tables show
the launch calls' host time beside the idle time, and the outputs keep no
launch call's duration per operation.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap.core.wait_schemas import LAUNCH_OVERHEAD_NS, WAIT_INTERIOR, WAIT_KINDS
from nsysmap.waits.gaps import windows_overlap
from nsysmap.waits.tables import SCHEMAS, is_sync_copy, long_gaps, window_waits
from nsysmap.waits.text import busiest, stream_work

ID = "waits"
QUESTION = (
    "How much of each step's wall time does the GPU spend idle, waiting for what, "
    "and which phase and module keep it waiting?"
)
NO_TABLES = (
    "the outputs hold no waits tables (written from output schema 1.6 on): "
    "attribute the profile again"
)
NO_OPS = "the run has no GPU operations"
MODULE_ROWS = 10  # modules listed, by idle time before them
STREAM_ROWS = 8  # streams listed, busiest first
LEAD_DEVICES = 4  # devices whose busiest stream the first sentence names
# The kinds as the answer groups them, and how the section names them.
KIND_NAMES = {
    "launch": "launch-bound",
    "sync": "synchronisation",
    "other_stream": "other stream / communication",
    "latency": "GPU latency",
    "unknown": "unknown",
    "before_first": "before the stream's first",
    "after_last": "after the stream's last",
}
# The other kinds, as the first sentence names the largest when it outweighs those two.
LEAD_KINDS = {
    "other_stream": "was waiting on other streams or communication",
    "latency": "was GPU latency",
    "unknown": "has no known cause",
    "before_first": "came before the stream's first operation",
    "after_last": "came after the stream's last operation",
}
# The other kinds the sentence names too, when one holds this share of the idle time
# (at most REST_KINDS of them, largest first): else its parts would not add up.
REST = 0.05
REST_KINDS = 2
IDLE = [f"idle_{kind}_ns" for kind in WAIT_KINDS]
IDLE_BEFORE = [f"idle_{kind}_ns" for kind in WAIT_INTERIOR]
COST = ["ops", "launches", "launch_cpu_ns", "shorter_than_launch", "busy_ns", "idle_before_ns"]


def read_waits(run_dir: str | Path, manifest: Mapping[str, Any]) -> dict[str, pl.DataFrame] | None:
    """The waits tables of an output directory (None when its manifest lists none)."""
    listed = manifest.get("tables") or {}
    if not all(name in listed for name in SCHEMAS):
        return None
    return {
        name: pl.read_parquet(Path(run_dir) / listed[name]["file"]).cast(schema)
        for name, schema in SCHEMAS.items()
    }


def waits_answer(
    tables: Mapping[str, pl.DataFrame] | None,
    ops: pl.DataFrame | None = None,
    measured: list[int] | None = None,
    region: pl.DataFrame | None = None,
) -> dict[str, Any]:
    """The waits answer from the tables `read_waits` gives (see the module); `ops`, the
    run's operations, tell which launch calls were synchronous copies; `measured`: the
    step labels of the measured steps (nsysmap.structure), None to take every step;
    `region`: the operations of the measured region, the streams' scope where the
    tables have no steps (None: the whole capture)."""
    if tables is None:
        return _answer(NO_TABLES)
    streams = _scoped(tables["stream_idle"], measured)
    cost = _scoped(tables["launch_cost"], measured)
    if streams.is_empty():
        return _answer(NO_OPS)
    in_steps = streams["step"].is_not_null().any()
    gaps = _scoped(tables["idle"], measured)
    if in_steps:  # the gaps of the streams' steps, never a fallback of their own
        held = streams.select("device_id", "stream_id", "step").unique()
        gaps = gaps.join(held, on=["device_id", "stream_id", "step"], how="semi")
    cost_scope = scope = "steps" if in_steps else "whole capture"
    outside: list[int] = []
    if not in_steps and region is not None:
        found, found_gaps = window_waits(region, tables["idle"])
        if not found.is_empty():
            outside = _devices_left_out(streams, found)
            streams, gaps, scope = found, found_gaps, "measured region"
    per_stream = _with_overlap(_per_stream(streams, gaps), streams if in_steps else None)
    phases = _cost_rows(cost, ["phase"]).sort("idle_before_ns", "busy_ns", descending=True)
    modules = _cost_rows(cost, ["module", "phase"]).filter(
        pl.col("module").is_not_null(), pl.col("idle_before_ns") > 0
    )
    modules = modules.sort(["idle_before_ns", "module"], descending=[True, False])
    windows = streams.select("device_id", "step").unique().height
    busiest = _busiest(per_stream, ops)
    return _answer(
        None,
        scope=scope,
        cost_scope=cost_scope,
        steps=windows,
        step_count=streams["step"].drop_nulls().n_unique(),
        devices=busiest.height,
        devices_outside=outside,
        busiest=busiest.head(LEAD_DEVICES).to_dicts(),
        streams=per_stream.head(STREAM_ROWS).to_dicts(),
        streams_left_out=max(per_stream.height - STREAM_ROWS, 0),
        phases=phases.to_dicts(),
        modules=modules.head(MODULE_ROWS).to_dicts(),
        module_rows=MODULE_ROWS,
        totals=_totals(cost, _sync_copies(ops, in_steps=bool(in_steps))),
        launch_gap_ns=LAUNCH_OVERHEAD_NS,
    )


def _busiest(per_stream: pl.DataFrame, ops: pl.DataFrame | None) -> pl.DataFrame:
    """Per device, its busiest stream as the findings name it (nsysmap.waits.text.busiest)."""
    work = None
    if ops is not None and "category" in ops.columns:
        work = stream_work(ops.lazy())
    return busiest(per_stream, work)


def _per_stream(streams: pl.DataFrame, gaps: pl.DataFrame) -> pl.DataFrame:
    """STREAM_IDLE rows summed per stream, busiest first, with shares of wall time and the
    launch gaps longer than a launch (`long_launch_ns`: host work between launches)."""
    per_stream = (
        streams.group_by("device_id", "stream_id")
        .agg(
            pl.len().cast(pl.Int64).alias("steps"),
            *(pl.col(c).sum() for c in ["wall_ns", "busy_ns", "idle_ns", *IDLE]),
        )
        .sort(["busy_ns", "device_id", "stream_id"], descending=[True, False, False])
    )
    # launch gaps longer than a launch takes: host work between launches (`long_launch_ns`)
    long = long_gaps(gaps, "launch", LAUNCH_OVERHEAD_NS).rename({"long_ns": "long_launch_ns"})
    per_stream = per_stream.join(
        long, on=["device_id", "stream_id"], how="left", maintain_order="left"
    )
    per_stream = per_stream.with_columns(pl.col("long_launch_ns").fill_null(0))
    wall = pl.when(pl.col("wall_ns") > 0).then(pl.col("wall_ns"))
    shared = ["busy_ns", *IDLE, "long_launch_ns"]
    per_stream = per_stream.with_columns(
        (pl.col(c) / wall).alias(c.removesuffix("_ns") + "_share") for c in shared
    )
    return per_stream


def _with_overlap(per_stream: pl.DataFrame, stepped: pl.DataFrame | None) -> pl.DataFrame:
    """`per_stream` with `steps_overlap_ns`: how much its device's step windows overlap
    (nsysmap.waits.gaps.windows_overlap; 0 without steps)."""
    if stepped is None:
        return per_stream.with_columns(steps_overlap_ns=pl.lit(0, pl.Int64))
    overlap = windows_overlap(stepped).rename({"overlap_ns": "steps_overlap_ns"})
    joined = per_stream.join(overlap, on="device_id", how="left", maintain_order="left")
    return joined.with_columns(pl.col("steps_overlap_ns").fill_null(0))


def _devices_left_out(capture: pl.DataFrame, part: pl.DataFrame) -> list[int]:
    """The devices with streams in the capture but no operation in the part, ascending."""
    left = capture.select("device_id").unique().join(part, on="device_id", how="anti")
    return sorted(int(d) for d in left["device_id"].drop_nulls())


def _scoped(frame: pl.DataFrame, measured: list[int] | None = None) -> pl.DataFrame:
    """The rows of the (measured) steps, or every row when there are none."""
    stepped = frame.filter(pl.col("step").is_not_null())
    if measured is not None:
        stepped = stepped.filter(pl.col("step").is_in(measured))
    if stepped.height:
        return stepped
    return frame.with_columns(pl.lit(None, pl.Int64).alias("step"))  # the whole capture


def _cost_rows(cost: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """launch_cost summed over devices and steps per `keys`, with its launch-bound share."""
    rows = cost.group_by(keys).agg(pl.col([*COST, *IDLE_BEFORE]).sum())
    whole = pl.col("busy_ns") + pl.col("idle_before_ns")
    share = pl.when(whole > 0).then(pl.col("idle_launch_ns") / whole).otherwise(0.0)
    return rows.with_columns(launch_bound_share=share)


def _totals(cost: pl.DataFrame, sync_copies: int) -> dict[str, int]:
    """The launches over the scope: counts and the host time spent in launch calls, and
    how many of those calls were synchronous copies or sets."""
    sums = cost.select(pl.col("ops", "launches", "launch_cpu_ns", "shorter_than_launch").sum())
    totals = {k: int(v or 0) for k, v in sums.row(0, named=True).items()}
    return {**totals, "sync_copy_calls": sync_copies}


def _sync_copies(ops: pl.DataFrame | None, *, in_steps: bool) -> int:
    """The operations of the scope launched by a synchronous copy or set call (cudaMemcpy,
    not Async): each its own call, whose host time includes waiting for the copy."""
    if ops is None or "launch_api" not in ops.columns:
        return 0
    scoped = ops.filter(pl.col("step").is_not_null()) if in_steps else ops
    return int(scoped.select(is_sync_copy(pl.col("launch_api")).sum()).item())


def _answer(unknown: str | None, **found: Any) -> dict[str, Any]:
    empty: dict[str, Any] = {
        "scope": None,
        "cost_scope": None,
        "steps": 0,
        "step_count": 0,
        "devices": 0,
        "devices_outside": [],
        "busiest": [],
        "streams": [],
        "streams_left_out": 0,
        "phases": [],
        "modules": [],
        "module_rows": MODULE_ROWS,
        "totals": {},
    }
    return {"id": ID, "question": QUESTION, "unknown": unknown, **empty, **found}
