"""How much of each interval other intervals hide: the one interval measure of hidden time.

`hidden_ns(targets, hiding, by)`: for each row of `targets` (the `by`
columns, stream_id, start_ns, end_ns), the length of its interval during
which at least one interval of `hiding` runs with the same `by` values (the
same device, say) on another stream::

    stream 20 (target)   |====== allreduce ======|
    stream 7  (hiding)   |---- a ----|      |-- b --|
    stream 8  (hiding)        |-- c --|
    hidden               ^^^^^^^^^^^^^^^    ^^^^^      union of a, c, b: nothing twice
    exposed                             ^^^^

The hiding intervals are merged into their union first (per `by` group
and target stream, leaving that stream out), so hiding work that overlaps itself
counts once; each target counts its own time, so two targets that overlap
each other are each measured whole. A target [s, e) is then hidden for
covered(e) - covered(s), where covered(t) is the union's length before t,
read off running totals with as-of joins. Sorts, joins and group-bys only;
no loop over rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from nsysmap.core.scalars import opt_int

# Bits of the Int64 sort key of `_union` (pair index and time).
PACK_BITS = 62
INTERVAL = ["stream_id", "start_ns", "end_ns"]


def hidden_ns(
    targets: pl.DataFrame, hiding: pl.DataFrame, by: Sequence[str] = ("device_id",)
) -> pl.Series:
    """Int64 `hidden_ns`, one value per row of `targets`, in their order (see the module)."""
    key = ["group", "target_stream"]
    if targets.is_empty():
        return pl.Series("hidden_ns", [], pl.Int64)
    # One id per `by` group (null values a group like any other).
    groups = targets.select(by).unique(maintain_order=True).with_row_index("group")
    targets = targets.join(groups, on=list(by), how="left", nulls_equal=True, maintain_order="left")
    targets = targets.select("group", *INTERVAL).with_columns(target_stream="stream_id")
    hiding = hiding.join(groups, on=list(by), nulls_equal=True).select("group", *INTERVAL)
    union = _union(hiding, targets, key)
    return _covered(targets, union, key).rename("hidden_ns")


def _union(hiding: pl.DataFrame, targets: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    """Disjoint intervals covering the hiding work on streams other than each target
    stream: the `key` columns, start_ns, end_ns, before_ns (union length before start).

    The pieces of each (device, target stream) are sorted by one Int64 key, the
    pair's index above the time since the first start, so that running maxima
    of the packed ends need no window per pair: a pair's packed times all lie
    above the previous pair's.
    """
    streams = targets.select(key).unique().sort(key).with_row_index("pair")
    pieces = (
        hiding.join(streams, on=key[:-1])
        .filter(
            pl.col("stream_id") != pl.col("target_stream"), pl.col("end_ns") > pl.col("start_ns")
        )
        .select("pair", "start_ns", "end_ns")
    )
    t0, t1 = opt_int(pieces["start_ns"].min()), opt_int(pieces["end_ns"].max())
    if t0 is None or t1 is None:
        return _merged_by_windows(pieces.join(streams, on="pair"), key)
    t_bits = (t1 - t0).bit_length()
    if t_bits + max(1, (streams.height - 1).bit_length()) > PACK_BITS:
        return _merged_by_windows(pieces.join(streams, on="pair"), key)
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
    return _with_before(merged.join(streams, on="pair", maintain_order="left"), key)


def _merged_by_windows(pieces: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    """`_union` for times too wide to pack: windows per `key` (group, target stream)."""
    pieces = pieces.select(*key, "start_ns", "end_ns").sort(*key, "start_ns")
    reach = pl.col("end_ns").cum_max().shift(1).over(key)  # furthest end so far
    opens = reach.is_null() | (pl.col("start_ns") > reach)
    merged = (
        pieces.with_columns(segment=opens.cum_sum())
        .group_by(*key, "segment")
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .sort(*key, "start_ns")
    )
    return _with_before(merged, key)


def _with_before(merged: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    """Disjoint intervals sorted by (`key`, start) with before_ns."""
    length = pl.col("end_ns") - pl.col("start_ns")
    before = length.cum_sum().shift(1, fill_value=0).over(key)
    return merged.select(*key, "start_ns", "end_ns", before_ns=before)


def _covered(targets: pl.DataFrame, union: pl.DataFrame, key: list[str]) -> pl.Series:
    """The length of `union` (same `key`) inside each target, in their order."""
    segments = union.select(
        *key, t="start_ns", seg_start="start_ns", seg_end="end_ns", before_ns="before_ns"
    ).sort("t")
    rows = targets.with_row_index("_row")
    inside = pl.min_horizontal("t", "seg_end") - pl.col("seg_start")
    covered_before = pl.coalesce(pl.col("before_ns") + inside, pl.lit(0, pl.Int64))
    edges = {}
    for edge in ("start_ns", "end_ns"):  # covered(t) at both ends of every target (sorted by t)
        at = rows.select("_row", *key, t=edge).sort("t")
        hit = at.join_asof(segments, on="t", by=key, check_sortedness=False)
        edges[edge] = hit.sort("_row").select(covered_before).to_series()
    return edges["end_ns"] - edges["start_ns"]
