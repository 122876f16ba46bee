"""Communication hidden behind compute: the one definition nsysmap uses everywhere.

A communication operation is a kernel of category `communication` (NCCL and
the like). Compute is every other kernel and every CUDA graph replay (a
replay is one interval, whatever it holds); copies and memsets are not
compute. A communication kernel's *hidden* time is the part of its interval
during which compute of the same process runs on another stream of the
same device (compute
merged first, so compute overlapping compute counts once;
nsysmap.intervals.hiding); its *exposed* time is the rest. Each kernel
counts its own time, so hidden + exposed is the kernels' summed `dur_ns`,
the `communication` time of `by_category`.

`hidden_communication` gives that per kernel; `overlap.parquet`
(`overlap_table`, per device and step), `rank_comm.parquet`
(nsysmap.many.rank_overlap, per process) and the report's communication
answer (nsysmap.report.communication, per collective and phase) all sum it.
`overlap_line` is the terminal summary's line.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from nsysmap.core import schemas
from nsysmap.intervals.hiding import hidden_ns

COMMUNICATION = "communication"  # the category of collective kernels (NCCL, RCCL, ...)
COMM = (pl.col("kind") == "kernel") & (pl.col("category") == COMMUNICATION)
COMPUTE = pl.col("kind").is_in(["kernel", "graph"]) & (pl.col("category") != COMMUNICATION)
# Who can hide whose communication: the same process on the same device (another stream);
# in the operations of several reports, of the same rank too (`rank`, when there is one).
SAME = ("rank", "pid", "device_id")
INTERVAL = ["stream_id", "start_ns", "end_ns"]


def same_keys(ops: pl.DataFrame | pl.LazyFrame) -> list[str]:
    """The columns of SAME that `ops` has (every one but `rank` is required)."""
    names = ops.lazy().collect_schema().names()
    return [c for c in SAME if c != "rank" or c in names]


def hidden_communication(
    ops: pl.DataFrame | pl.LazyFrame, keep: Sequence[str] = ()
) -> pl.DataFrame:
    """One row per communication kernel of an OPS frame: the `keep` columns, (rank,)
    pid, device_id, stream_id, start_ns, end_ns, dur_ns, hidden_ns and exposed_ns
    (= dur_ns - hidden_ns)."""
    frame = ops.lazy()
    same = same_keys(frame)
    columns = [*same, *INTERVAL]
    wanted = [*(c for c in keep if c not in columns and c != "dur_ns"), *columns, "dur_ns"]
    comm = frame.filter(COMM).select(wanted).collect()
    if comm.is_empty():  # the common case: nothing more is read
        return comm.with_columns(hidden_ns=pl.lit(0, pl.Int64), exposed_ns=pl.lit(0, pl.Int64))
    devices = comm["device_id"].unique().implode()
    compute = frame.filter(COMPUTE, pl.col("device_id").is_in(devices)).select(columns).collect()
    hidden = hidden_ns(comm, compute, by=same)
    return comm.with_columns(hidden_ns=hidden, exposed_ns=pl.col("dur_ns") - hidden)


def overlap_table(ops: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """OVERLAP rows per device and step (null step kept) for an OPS frame."""
    comm = hidden_communication(ops, keep=["step"])
    if comm.is_empty():
        return schemas.empty(schemas.OVERLAP)
    per_step = comm.group_by("device_id", "step").agg(
        comm_ops=pl.len().cast(pl.Int64),
        comm_ns=pl.col("dur_ns").sum(),
        overlapped_ns=pl.col("hidden_ns").sum(),
        exposed_ns=pl.col("exposed_ns").sum(),
    )
    out = per_step.with_columns(
        overlapped_share=_share("overlapped_ns"), exposed_share=_share("exposed_ns")
    ).sort("device_id", "step", nulls_last=True)
    return schemas.conform(out, schemas.OVERLAP, "overlap")


def _share(column: str) -> pl.Expr:
    """`column` as a share of the communication time (0 when there is none)."""
    return pl.when(pl.col("comm_ns") > 0).then(pl.col(column) / pl.col("comm_ns")).otherwise(0.0)


def overlap_line(overlap: pl.DataFrame) -> str:
    """One line: communication time, how much of it was hidden behind compute on other
    streams (the report's word and definition: `hidden_communication`), what was exposed.

    Empty when the profile has no communication kernels.
    """
    comm = int(overlap["comm_ns"].sum())
    if comm == 0:
        return ""
    hidden, exposed = int(overlap["overlapped_ns"].sum()), int(overlap["exposed_ns"].sum())
    line = (
        f"Communication {comm / 1e6:,.3f} ms: {hidden / 1e6:,.3f} ms ({100 * hidden / comm:.1f}%)"
        f" hidden behind compute on other streams, {exposed / 1e6:,.3f} ms"
        f" ({100 * exposed / comm:.1f}%) exposed"
    )
    devices = overlap.group_by("device_id").agg(pl.col("comm_ns", "exposed_ns").sum())
    if devices.height > 1:
        shares = [
            f"device {d} {100 * e / c:.1f}%"
            for d, c, e in devices.sort("device_id").iter_rows()
            if c
        ]
        line += " (exposed: " + ", ".join(shares) + ")"
    return line + "."
