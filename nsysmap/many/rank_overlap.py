"""How much of a rank's communication is hidden behind other GPU work, and how much is exposed.

A simple interval measure over the attributed operations, per process and
device: the time during which at least one communication operation runs
(`comm_busy_ns`), the part of it during which some other operation also runs
on the same device (`overlapped_ns`), and the rest (`exposed_ns`: the device
does nothing but communicate). One sort of the operations' start and end
events per device; no loop over rows.

`exposed_communication` is the one function nsysmap.many calls for this, so
that it can be replaced by a single-report overlap table computed during
attribution, should one exist, without changing the cross-rank tables.
"""

from __future__ import annotations

import polars as pl

COMMUNICATION = "communication"
OVERLAP = pl.Schema(
    {
        "pid": pl.Int64,
        "comm_busy_ns": pl.Int64,
        "overlapped_ns": pl.Int64,
        "exposed_ns": pl.Int64,
    }
)


def exposed_communication(ops: pl.LazyFrame) -> pl.DataFrame:
    """Per process: communication busy time, its overlapped part and its exposed part.

    `ops` needs pid, device_id, start_ns, end_ns and category (the OPS
    columns). Busy time counts overlapping communication operations once.
    """
    is_comm = (pl.col("category") == COMMUNICATION).fill_null(False).cast(pl.Int64)
    is_other = 1 - is_comm
    keys = ["pid", "device_id"]
    starts = ops.select(*keys, t="start_ns", comm=is_comm, other=is_other)
    ends = ops.select(*keys, t="end_ns", comm=-is_comm, other=-is_other)
    swept = (
        pl.concat([starts, ends])
        .sort([*keys, "t"])
        .with_columns(
            pl.col("comm").cum_sum().over(keys).alias("open_comm"),
            pl.col("other").cum_sum().over(keys).alias("open_other"),
            (pl.col("t").shift(-1).over(keys) - pl.col("t")).fill_null(0).alias("seg"),
        )
    )
    busy = pl.col("open_comm") > 0
    alone = busy & (pl.col("open_other") == 0)
    per_pid = swept.group_by("pid").agg(
        pl.col("seg").filter(busy).sum().alias("comm_busy_ns"),
        pl.col("seg").filter(alone).sum().alias("exposed_ns"),
    )
    out = per_pid.with_columns(
        (pl.col("comm_busy_ns") - pl.col("exposed_ns")).alias("overlapped_ns")
    ).collect()
    return out.select(OVERLAP.names()).cast(OVERLAP).sort("pid")
