"""The structure table (STRUCTURE, structure.parquet) and which operations each row holds.

One row per region, step and pass of each device and process. A row holds
the operations of its device and process launched within its span (the
launch call's start, or the operation's own start without a launch call)
that carry its labels where it names any (`step`, `phase`)::

    host    |-- setup --|------ warmup ------|--------- measured ---------|
    launch     c c c c     k k k k k k          k k k k   k k k k   k k k k
    passes                 [ forward 0 ]        [ fwd 1 ] [ fwd 2 ] [ fwd 3 ]

Operations the GPU ran from before the capture (no launch call, in a process
whose other operations have one) are in no row. Regions of a process never
overlap and cover all its other operations; passes of one direction never
overlap, nor do steps.
"""

from __future__ import annotations

import polars as pl

REGIONS = ("setup", "warmup", "measured", "tail")
KINDS = ("region", "step", "pass")
DIRECTIONS = ("forward", "backward", "optimizer")
# Where a row's evidence comes from (the `evidence` column: one or more, joined by ", ").
EVIDENCE = (
    "range",  # a range names or holds it
    "records",  # PyTorch's records (autograd's thread, optimizer work)
    "module_calls",  # the outermost module's calls (torch.profiler's module records)
    "repeated_ranges",  # the same ranges repeat, as often in each pass
    "kernel_sequence",  # found in the repeating kernel sequence (nsysmap.infer)
    "position",  # where it lies: before the first pass, between passes, after
    "duration",  # a first pass launched many times slower than the passes after it
    "rule",  # the user's --measure rule
)
STRUCTURE = pl.Schema(
    {
        "device_id": pl.Int64,
        "pid": pl.Int64,
        "kind": pl.String,  # region, step, pass
        "index": pl.Int64,  # 0, 1, ... per device, process and kind, in time order
        "region": pl.String,  # the region it is (kind region) or lies in
        "direction": pl.String,  # a pass's: forward, backward, optimizer; else null
        "step_index": pl.Int64,  # a pass's step (its index), null: none
        "start_ns": pl.Int64,  # span on the host clock (launch calls), both ends included
        "end_ns": pl.Int64,
        "step": pl.Int64,  # the operations' step label it requires (null: any)
        "phase": pl.String,  # the operations' phase label it requires (null: any)
        "ops": pl.Int64,
        "time_ns": pl.Int64,  # summed duration of its operations
        "gpu_start_ns": pl.Int64,  # first start and last end of its operations on the GPU
        "gpu_end_ns": pl.Int64,
        "name": pl.String,  # the range that names or holds it, null: none
        "evidence": pl.String,  # EVIDENCE values joined by ", "
        "confidence": pl.Float64,  # 0..1
    }
)
# The columns `assign` adds to each operation.
ASSIGNED = pl.Schema(
    {
        "s_region": pl.String,
        "s_step": pl.Int64,  # index of its step row
        "s_step_region": pl.String,
        "s_pass": pl.Int64,  # index of its pass row
        "s_direction": pl.String,
        "s_pass_region": pl.String,
    }
)
_NO_DEVICE = -(2**62)  # stands for a null device id in the joins


def launched_at() -> pl.Expr:
    """When an operation was launched: its launch call's start, else its own start."""
    return pl.coalesce("launch_start_ns", "start_ns")


def before_capture() -> pl.Expr:
    """Operations without a launch call in a process whose other operations have one: the
    GPU ran them from before the capture began."""
    launched = pl.col("launch_start_ns").is_not_null()
    return ~launched & launched.any().over("pid")


def assign(ops: pl.DataFrame, structure: pl.DataFrame) -> pl.DataFrame:
    """`ops` with the ASSIGNED columns: each operation's region, step and pass (null:
    none), in `ops`' row order."""
    at = held_rows(ops, structure)
    region, step, pass_ = at["region"], at["step"], at["pass"]
    placed = pl.DataFrame(
        {
            "s_region": structure["region"].gather(region),
            "s_step": structure["index"].gather(step),
            "s_step_region": structure["region"].gather(step),
            "s_pass": structure["index"].gather(pass_),
            "s_direction": structure["direction"].gather(pass_),
            "s_pass_region": structure["region"].gather(pass_),
        }
    )
    return pl.concat([ops, placed.cast(ASSIGNED)], how="horizontal")


def held_rows(ops: pl.DataFrame, structure: pl.DataFrame) -> pl.DataFrame:
    """Per operation of `ops` (device_id, pid, launch_start_ns, start_ns, step, phase),
    in their order, the positions in `structure` of the region, step and pass rows
    that hold it: `region`, `step`, `pass` (UInt32, null: none). Positions, not the
    rows' columns: at 10^7 operations a text per operation and row kind is gigabytes."""
    lanes = ops.select(
        pl.int_range(pl.len(), dtype=pl.UInt32).alias("_row"),
        pl.col("device_id").fill_null(_NO_DEVICE).alias("_dev"),
        pl.col("pid").fill_null(_NO_DEVICE).alias("_pid"),
        launched_at().alias("_at"),
        before_capture().fill_null(False).alias("_early"),
        "step",
        "phase",
    ).sort("_at")
    rows = structure.with_columns(
        pl.col("device_id").fill_null(_NO_DEVICE).alias("_dev"),
        pl.col("pid").fill_null(_NO_DEVICE).alias("_pid"),
        pl.int_range(pl.len(), dtype=pl.UInt32).alias("_pos"),
    )
    kind = pl.col("kind")
    passes = [
        _within(lanes, rows.filter((kind == "pass") & (pl.col("direction") == d)))
        for d in DIRECTIONS
    ]
    found = {
        "region": _within(lanes, rows.filter(kind == "region")),
        "step": _within(lanes, rows.filter(kind == "step")),
        "pass": pl.select(pl.coalesce(passes)).to_series(),  # the first direction's
    }
    order = lanes["_row"]
    return pl.DataFrame(
        {
            k: pl.repeat(None, ops.height, dtype=pl.UInt32, eager=True).scatter(order, v)
            for k, v in found.items()
        }
    )


def _within(lanes: pl.DataFrame, rows: pl.DataFrame) -> pl.Series:
    """Per operation (in `lanes`' order), the position (`_pos`) of the row of `rows`
    (none overlapping) whose span holds its launch and whose labels it has (null: none)."""
    if rows.is_empty():
        return pl.repeat(None, lanes.height, dtype=pl.UInt32, eager=True)
    picked = rows.select("_dev", "_pid", "start_ns", "end_ns", "step", "phase", "_pos")
    joined = lanes.join_asof(
        picked.rename({"step": "_step", "phase": "_phase"}).sort("start_ns"),
        left_on="_at",
        right_on="start_ns",
        by=["_dev", "_pid"],
        strategy="backward",
        check_sortedness=False,
    )
    inside = (
        (pl.col("_at") <= pl.col("end_ns"))
        & ~pl.col("_early")
        & (pl.col("_step").is_null() | (pl.col("_step") == pl.col("step")))
        & (pl.col("_phase").is_null() | (pl.col("_phase") == pl.col("phase")))
    ).fill_null(False)
    return joined.select(pl.when(inside).then("_pos").alias("_pos")).to_series()
