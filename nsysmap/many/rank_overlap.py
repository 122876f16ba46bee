"""How much of a rank's communication is hidden behind compute, and how much is exposed.

Hidden and exposed time are nsysmap's one definition
(nsysmap.summaries.comm_overlap.hidden_communication, the same as
`overlap.parquet`): per communication kernel, the part during which compute
runs on another stream of the same device, summed here per process over its
kernels not marked warm-up (as every cross-rank table: nsysmap.many.measured),
so that `overlapped_ns + exposed_ns` is the process's communication time
(`comm_ns`) and `overlapped_ns` is the sum of `overlap.parquet`'s over the
process's devices, less its warm-up kernels'.

`comm_busy_ns` is a different measure with its own name: the wall time,
per device and summed, during which at least one communication operation
runs (communication overlapping communication counted once). One sort of
start and end events per device; no loop over rows.
"""

from __future__ import annotations

import polars as pl

from nsysmap.many.measured import MEASURED
from nsysmap.summaries.comm_overlap import COMM, hidden_communication

COMMUNICATION = "communication"
# The exposed_comm table, per process: not `schemas.OVERLAP` (overlap.parquet, per device
# and step), from which its overlapped_ns and exposed_ns add up.
EXPOSED_COMM = pl.Schema(
    {
        "pid": pl.Int64,
        "comm_busy_ns": pl.Int64,
        "overlapped_ns": pl.Int64,
        "exposed_ns": pl.Int64,
    }
)


def exposed_communication(ops: pl.LazyFrame) -> pl.DataFrame:
    """Per process with measured communication kernels: busy time, the hidden
    (overlapped) and exposed parts of its communication kernels' time.

    Kernels marked warm-up are left out (nsysmap.many.measured); each other
    kernel's hidden time is what `overlap.parquet` gives it (any compute of the
    process hides it, warm-up or not). `ops` needs pid, kind, category,
    device_id, stream_id, start_ns, end_ns, dur_ns and warmup (the OPS columns).
    """
    hidden = (
        hidden_communication(ops, keep=["pid", "warmup"])
        .filter(MEASURED)
        .group_by("pid")
        .agg(overlapped_ns=pl.col("hidden_ns").sum(), exposed_ns=pl.col("exposed_ns").sum())
    )
    out = _busy(ops.filter(MEASURED)).join(hidden, on="pid", how="inner")
    return out.select(EXPOSED_COMM.names()).cast(EXPOSED_COMM).sort("pid")


def _busy(ops: pl.LazyFrame) -> pl.DataFrame:
    """Per process: time with at least one communication kernel running, per device, summed."""
    keys = ["pid", "device_id"]
    comm = ops.filter(COMM)
    starts = comm.select(*keys, t="start_ns", open=pl.lit(1, pl.Int64))
    ends = comm.select(*keys, t="end_ns", open=pl.lit(-1, pl.Int64))
    swept = (
        pl.concat([starts, ends])
        .sort([*keys, "t"])
        .with_columns(
            pl.col("open").cum_sum().over(keys).alias("running"),
            (pl.col("t").shift(-1).over(keys) - pl.col("t")).fill_null(0).alias("seg"),
        )
    )
    busy = pl.col("seg").filter(pl.col("running") > 0).sum().alias("comm_busy_ns")
    return swept.group_by("pid").agg(busy).collect()
