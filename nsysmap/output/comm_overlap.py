"""Communication overlap: how much of the communication kernels' time compute hid.

For each communication kernel (category `communication`), the part of its
interval during which a compute operation (any other kernel, or a CUDA graph
replay) ran on another stream of the same device::

    stream 20 (nccl)     |====== allreduce ======|
    stream 7  (compute)  |---- a ----|      |-- b --|
    stream 8  (compute)       |-- c --|
    covered                   ^^^^^^^^^^    ^^^^^      union of a, c, b: nothing twice
    exposed                          ^^^^^^

Compute intervals are merged into their union first (per device and
communication stream, leaving that stream out), so compute that overlaps
itself counts once. Then each kernel's covered time is read off running
totals of the union: covered(t) is the union's length before t, and a kernel
[s, e) is covered for covered(e) - covered(s). Everything is sorts, as-of
joins and group-bys; no loop over kernels. Summed per device and step in
`overlap_table`; `overlap_line` is the terminal summary's line.
"""

from __future__ import annotations

import polars as pl

from nsysmap import schemas

COMM = (pl.col("kind") == "kernel") & (pl.col("category") == "communication")
COMPUTE = pl.col("kind").is_in(["kernel", "graph"]) & (pl.col("category") != "communication")
_KEY = ["device_id", "comm_stream"]
_COLUMNS = ["kind", "category", "device_id", "stream_id", "start_ns", "end_ns", "dur_ns", "step"]


def overlap_table(ops: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """OVERLAP rows per device and step (null step kept) for an OPS frame."""
    frame = ops.lazy().select(_COLUMNS)
    comm = frame.filter(COMM).collect().with_columns(comm_stream="stream_id")
    if comm.is_empty():  # the common case: nothing more is read
        return schemas.empty(schemas.OVERLAP)
    devices = comm["device_id"].unique().implode()
    compute = frame.filter(COMPUTE, pl.col("device_id").is_in(devices)).collect()
    union = _compute_union(compute, comm)
    covered = _covered(comm, union)
    per_step = covered.group_by("device_id", "step").agg(
        comm_ops=pl.len().cast(pl.Int64),
        comm_ns=pl.col("dur_ns").sum(),
        overlapped_ns=pl.col("covered_ns").sum(),
    )
    out = per_step.with_columns(exposed_ns=pl.col("comm_ns") - pl.col("overlapped_ns"))
    out = out.with_columns(
        overlapped_share=_share("overlapped_ns"), exposed_share=_share("exposed_ns")
    ).sort("device_id", "step", nulls_last=True)
    return schemas.conform(out, schemas.OVERLAP, "overlap")


def _share(column: str) -> pl.Expr:
    """`column` as a share of the communication time (0 when there is none)."""
    return pl.when(pl.col("comm_ns") > 0).then(pl.col(column) / pl.col("comm_ns")).otherwise(0.0)


def _compute_union(compute: pl.DataFrame, comm: pl.DataFrame) -> pl.DataFrame:
    """Disjoint intervals covering the compute on streams other than each communication
    stream: device_id, comm_stream, start_ns, end_ns, before_ns (union length before start).
    """
    streams = comm.select(_KEY).unique()
    pieces = (
        compute.join(streams, on="device_id")
        .filter(pl.col("stream_id") != pl.col("comm_stream"), pl.col("end_ns") > pl.col("start_ns"))
        .select(*_KEY, "start_ns", "end_ns")
        .sort(*_KEY, "start_ns")
    )
    reach = pl.col("end_ns").cum_max().shift(1).over(_KEY)  # furthest end so far
    opens = reach.is_null() | (pl.col("start_ns") > reach)
    merged = (
        pieces.with_columns(segment=opens.cum_sum())
        .group_by(*_KEY, "segment")
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .sort(*_KEY, "start_ns")
    )
    length = pl.col("end_ns") - pl.col("start_ns")
    before = length.cum_sum().shift(1, fill_value=0).over(_KEY)
    return merged.select(*_KEY, "start_ns", "end_ns", before_ns=before)


def _covered(comm: pl.DataFrame, union: pl.DataFrame) -> pl.DataFrame:
    """`comm` with covered_ns: the length of `union` (same device, stream) inside each kernel."""
    segments = union.select(
        *_KEY, t="start_ns", seg_start="start_ns", seg_end="end_ns", before_ns="before_ns"
    ).sort("t")
    rows = comm.with_row_index("_row")
    inside = pl.min_horizontal("t", "seg_end") - pl.col("seg_start")
    covered_before = pl.coalesce(pl.col("before_ns") + inside, pl.lit(0, pl.Int64))
    edges = {}
    for edge in ("start_ns", "end_ns"):  # covered(t) at both ends of every kernel (sorted by t)
        at = rows.select("_row", *_KEY, t=edge).sort("t")
        hit = at.join_asof(segments, on="t", by=_KEY, check_sortedness=False)
        edges[edge] = hit.sort("_row").select(covered_before)
    return rows.with_columns(covered_ns=edges["end_ns"].to_series() - edges["start_ns"].to_series())


def overlap_line(overlap: pl.DataFrame) -> str:
    """One line: communication time, how much compute on other streams hid, what was exposed.

    Empty when the report has no communication kernels.
    """
    comm = int(overlap["comm_ns"].sum())
    if comm == 0:
        return ""
    hidden, exposed = int(overlap["overlapped_ns"].sum()), int(overlap["exposed_ns"].sum())
    line = (
        f"Communication {comm / 1e6:,.3f} ms: {hidden / 1e6:,.3f} ms ({100 * hidden / comm:.1f}%)"
        f" overlapped by compute on other streams, {exposed / 1e6:,.3f} ms"
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
