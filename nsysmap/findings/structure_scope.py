"""Where the structure narrows what findings measure (pure): its measured steps that
ranges mark, where no operation has a step label, and else its measured region
(nsysmap.findings.inputs)::

    structure   |-- setup --|-- warmup --|------------ measured ------------|
    steps                                  [ step 0 ]  [ step 1 ]  [ step 2 ]
    ops            c c c c    k k k k      k k k k k   k k k k k   k k k k k
    measured_steps                         0 0 0 0 0   1 1 1 1 1   2 2 2 2 2
    measured_region                        every k of the measured region

Each operation is placed by nsysmap.structure.table.assign: the rows of its
device and process whose span holds its launch.
"""

from __future__ import annotations

import polars as pl

from nsysmap.structure.table import assign

# The OPS columns the structure's rows are assigned by (nsysmap.structure.table.assign).
REGION_COLUMNS = ("op_id", "device_id", "pid", "launch_start_ns", "start_ns", "step", "phase")


def measured_steps(ops: pl.LazyFrame, structure: pl.DataFrame) -> pl.DataFrame | None:
    """Per operation of `ops`, in their order: `op_id` and `step`, the index of the step
    row of the structure's measured region that holds it (null: none). Only steps a range
    marks (a range holding one forward and one backward pass), and only where every
    device and process with operations has some: else None (no work is left out for
    want of a step the structure could not find, nor measured by a guessed one)."""
    measured = (
        (pl.col("kind") == "step")
        & (pl.col("region") == "measured")
        & pl.col("evidence").str.split(", ").list.contains("range")
    )
    steps = structure.filter(measured)
    if steps.is_empty():
        return None
    read = ops.select(REGION_COLUMNS).collect()  # once: the lanes, then the steps
    lanes = read.select("device_id", "pid").unique()
    held = steps.select("device_id", "pid").unique()
    if lanes.join(held, on=["device_id", "pid"], how="anti", nulls_equal=True).height:
        return None
    return assign(read, steps).select("op_id", step="s_step")


def measured_region(ops: pl.LazyFrame, structure: pl.DataFrame) -> pl.DataFrame | None:
    """The `op_id` of each of `ops` in the structure's measured region, where the
    structure leaves other work out (set-up, warm-up, tail, what the GPU ran from before
    the capture); else None: every operation is measured. A device of a process the
    structure has no region for is kept whole."""
    regions = structure.filter(pl.col("kind") == "region")
    if not (regions["region"] == "measured").any():
        return None
    placed = assign(ops.select(REGION_COLUMNS).collect(), regions)
    lanes = regions.select("device_id", "pid").unique()
    unplaced = placed.join(lanes, on=["device_id", "pid"], how="anti", nulls_equal=True)
    kept = (pl.col("s_region") == "measured").fill_null(False) | pl.col("op_id").is_in(
        unplaced["op_id"].implode()
    )
    if placed.select(kept.all()).item():
        return None
    return placed.filter(kept).select("op_id")
