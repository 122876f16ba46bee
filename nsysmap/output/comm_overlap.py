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
from nsysmap.scalars import opt_int

COMM = (pl.col("kind") == "kernel") & (pl.col("category") == "communication")
COMPUTE = pl.col("kind").is_in(["kernel", "graph"]) & (pl.col("category") != "communication")
_KEY = ["device_id", "comm_stream"]
# Bits of the Int64 sort key of `_compute_union` (pair index and time).
PACK_BITS = 62
_COLUMNS = ["kind", "category", "device_id", "stream_id", "start_ns", "end_ns", "dur_ns", "step"]


def overlap_table(ops: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame:
    """OVERLAP rows per device and step (null step kept) for an OPS frame."""
    frame = ops.lazy().select(_COLUMNS)
    comm = frame.filter(COMM).collect().with_columns(comm_stream="stream_id")
    if comm.is_empty():  # the common case: nothing more is read
        return schemas.empty(schemas.OVERLAP)
    devices = comm["device_id"].unique().implode()
    wanted = frame.filter(COMPUTE, pl.col("device_id").is_in(devices))
    compute = wanted.select("device_id", "stream_id", "start_ns", "end_ns").collect()
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

    The pieces of each (device, communication stream) are sorted by one Int64
    key, the pair's index above the time since the first start, so that
    running maxima of the packed ends need no window per pair: a pair's
    packed times all lie above the previous pair's.
    """
    streams = comm.select(_KEY).unique().sort(_KEY).with_row_index("pair")
    pieces = (
        compute.join(streams, on="device_id")
        .filter(pl.col("stream_id") != pl.col("comm_stream"), pl.col("end_ns") > pl.col("start_ns"))
        .select("pair", "start_ns", "end_ns")
    )
    t0, t1 = opt_int(pieces["start_ns"].min()), opt_int(pieces["end_ns"].max())
    if t0 is None or t1 is None:
        return _merged_by_windows(pieces.join(streams, on="pair"))
    t_bits = (t1 - t0).bit_length()
    if t_bits + max(1, (streams.height - 1).bit_length()) > PACK_BITS:
        return _merged_by_windows(pieces.join(streams, on="pair"))
    base = pl.col("pair").cast(pl.Int64) * (1 << t_bits) - t0
    packed = pieces.select(s=base + pl.col("start_ns"), e=base + pl.col("end_ns")).sort("s")
    reach = pl.col("e").cum_max()  # furthest packed end so far, this piece included
    opens = (pl.col("s") > reach.shift(1)).fill_null(True)
    closes = opens.shift(-1).fill_null(True)
    marked = packed.select("s", reach=reach, opens=opens, closes=closes)
    first = marked.filter("opens")["s"]
    last = marked.filter("closes")["reach"]
    pair = first // (1 << t_bits)
    merged = pl.DataFrame({"pair": pair.cast(pl.UInt32), "start_ns": first, "end_ns": last})
    merged = merged.with_columns(
        pl.col("start_ns", "end_ns") - pl.col("pair").cast(pl.Int64) * (1 << t_bits) + t0
    )
    return _with_before(merged.join(streams, on="pair", maintain_order="left"))


def _merged_by_windows(pieces: pl.DataFrame) -> pl.DataFrame:
    """`_compute_union` for times too wide to pack: windows per (device, stream)."""
    pieces = pieces.select(*_KEY, "start_ns", "end_ns").sort(*_KEY, "start_ns")
    reach = pl.col("end_ns").cum_max().shift(1).over(_KEY)  # furthest end so far
    opens = reach.is_null() | (pl.col("start_ns") > reach)
    merged = (
        pieces.with_columns(segment=opens.cum_sum())
        .group_by(*_KEY, "segment")
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .sort(*_KEY, "start_ns")
    )
    return _with_before(merged)


def _with_before(merged: pl.DataFrame) -> pl.DataFrame:
    """Disjoint intervals sorted by (device, stream, start) with before_ns."""
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

    Empty when the profile has no communication kernels.
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
