"""Range instances by position: nesting pre-order, and sums over the ranges inside each.

The positional half of `nsysmap.summaries.by_range` (pure). Ranges sorted by
(thread, start, -end, id) are in nesting pre-order, so the ranges inside the
one at `pos` are the slice pos + 1 .. stop - 1 after it::

    thread 1   |------------- A (pos 0) --------------|      A: stop 4
                 |- B (1) -|  |---- C (2) ----|              B: stop 2
                                 |- D (3) -|                 C: stop 4, D: stop 4
    thread 2   |-- E (4) --|                                 E: stop 5

Operations summed per (device, innermost range) are placed at their range's
position; a range's inclusive sums are then prefix-sum differences over the
slice, and the first GPU start and last GPU end come from a sparse table.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from nsysmap.core.scalars import opt_int, to_int
from nsysmap.intervals.forest import group_index, group_order, sorted_order
from nsysmap.intervals.preorder import Preorder

_END_OF_TIME = (1 << 63) - 1
_NEVER_WINS = -(1 << 63)  # a null's stand-in in a maximum (`window_extrema`)


def preorder(ranges: pl.DataFrame) -> pl.DataFrame:
    """Ranges in nesting pre-order: pos, row (in `ranges`), thread code g, depth, parent, stop.

    The ranges inside the one at `pos` are those at pos + 1 .. stop - 1: the
    following ones on its thread that start before it ends. Ranges without a
    thread cannot hold an operation and are left out; one without a start
    counts from the first instant of the profile, one without an end to the last.
    """
    columns = ["range_id", "pid", "tid", "start_ns", "end_ns", "depth", "parent_id"]
    usable = ranges.select(columns).with_row_index("row").drop_nulls(["pid", "tid"])
    usable = usable.with_columns(pl.col("start_ns").fill_null(pl.col("start_ns").min()))
    codes = group_index(usable, ["pid", "tid"])
    g, n_groups = codes if codes is not None else (pl.Series("g", [], pl.UInt32), 0)
    last = max(opt_int(usable["start_ns"].max()) or 0, opt_int(usable["end_ns"].max()) or 0)
    frame = usable.select("row", "range_id", "start_ns", "depth", "parent_id", g=g).with_columns(
        end=usable["end_ns"].fill_null(last + 1 if last < _END_OF_TIME else last)
    )
    ordered = _packed_preorder(frame, n_groups)
    ordered = ordered if ordered is not None else _sorted_preorder(frame)
    parent = _parent_positions(ordered, ranges["range_id"])
    return ordered.with_columns(parent=parent).select(
        "pos", "row", "range_id", "g", "depth", "parent", "stop"
    )


def from_preorder(pre: Preorder, ids: pl.Series) -> pl.DataFrame:
    """`preorder`'s frame from the ranges' pre-order attribution found (every range has
    a thread, a start and an end there): the same rows, no sort. `ids`: the ranges'
    range ids, row by row."""
    order = pl.Series(pre.order, dtype=pl.UInt32)
    pos_of_row = np.empty(pre.n + 1, dtype=np.int64)
    pos_of_row[pre.order] = np.arange(pre.n)
    pos_of_row[pre.n] = pre.n
    parent = pre.rows(pos_of_row[pre.parent[pre.order]])
    return pl.DataFrame(
        {
            "pos": pl.int_range(pre.n, dtype=pl.UInt32, eager=True),
            "row": order,
            "range_id": ids.gather(order),
            "g": pl.Series(pre.thread[pre.order], dtype=pl.UInt32),
            "depth": pl.Series(pre.depth[pre.order], dtype=pl.Int32),
            "parent": parent,
            "stop": pl.Series(pre.stops(), dtype=pl.UInt32),
        }
    )


def _parent_positions(ordered: pl.DataFrame, ids: pl.Series) -> pl.Series:
    """The pos of each range's parent (null: none, or a parent left out), by gathers
    where `positions_of` can, else by a join."""
    parent = positions_of(ordered, ids, ordered["parent_id"])
    if parent is not None:
        return parent.alias("parent")
    parents = ordered.select(parent_id="range_id", parent="pos")
    joined = ordered.join(parents, on="parent_id", how="left", maintain_order="left")
    return joined["parent"]


def positions_of(forest: pl.DataFrame, ids: pl.Series, refs: pl.Series) -> pl.Series | None:
    """The pos in `forest` (a `preorder`) of each range id in `refs`; null: null, not
    among the profile's ranges, or left out of the forest.

    `ids` are the profile's range ids, row by row (`forest["row"]`). When they
    increase (as `nest_ranges` leaves them) a ref's row is its offset from
    the first id (ids without gaps) or a binary search, and its pos a gather
    of the inverse pre-order; None when they do not (callers join instead).
    """
    if forest.is_empty() or ids.null_count() or not bool((ids.diff().drop_nulls() > 0).all()):
        return None
    first = to_int(ids[0])
    if to_int(ids[-1]) - first == ids.len() - 1:  # ids first .. first + n - 1: row = id - first
        at = (refs.fill_null(first).cast(pl.Int64) - first).clip(0, ids.len() - 1)
    else:
        at = ids.search_sorted(refs.fill_null(0)).clip(0, ids.len() - 1)
    found = refs.is_not_null() & (ids.gather(at) == refs).fill_null(False)
    pos_of_row = pl.repeat(None, ids.len(), dtype=pl.UInt32, eager=True)
    pos_of_row = pos_of_row.scatter(forest["row"], forest["pos"])
    return pl.select(pl.when(found).then(pos_of_row.gather(at))).to_series().alias("pos")


def _packed_preorder(frame: pl.DataFrame, n_groups: int) -> pl.DataFrame | None:
    """Pre-order by one sort of (thread, start) packed into an Int64; stop by a binary search.

    None when thread codes and times do not fit in 62 bits.
    """
    if frame.is_empty():
        return frame.with_row_index("pos").with_columns(stop=pl.col("pos"))
    if frame["start_ns"].null_count():
        return None
    t0 = to_int(frame["start_ns"].min())
    t_bits = (to_int(frame["end"].max()) - t0).bit_length()
    if max(1, (n_groups - 1).bit_length()) + t_bits > 62:
        return None
    end = frame["end"]

    def packed(t: str) -> pl.Series:
        thread = pl.col("g").cast(pl.Int64) * (1 << t_bits)
        return frame.select(thread + (pl.col(t) - t0)).to_series()

    starts = packed("start_ns")
    order = sorted_order(
        starts,
        lambda at: pl.DataFrame({"k1": -end.gather(at), "k2": frame["range_id"].gather(at)}),
        group_order(frame["g"], n_groups, frame["start_ns"]),  # starts in time order: no sort
    )
    # numpy's binary search: half the CPU time of Series.search_sorted at 2.9 million
    ends = np.searchsorted(starts.gather(order).to_numpy(), packed("end").gather(order).to_numpy())
    stop = pl.Series(ends, dtype=pl.get_index_type())
    kept = frame.select("row", "range_id", "g", "depth", "parent_id")  # not the times
    ordered = kept[order].with_row_index("pos")
    return ordered.with_columns(stop=pl.max_horizontal("pos", stop))


def _sorted_preorder(frame: pl.DataFrame) -> pl.DataFrame:
    """Pre-order by a sort on (thread, start, -end, id); stop by an as-of join per thread."""
    ordered = frame.sort(
        ["g", "start_ns", "end", "range_id"], descending=[False, False, True, False]
    ).with_row_index("pos")
    firsts = ordered.group_by("g", "start_ns").agg(pl.col("pos").min().alias("next"))
    after = ordered.select("pos", "g", "end").sort("end")
    after = after.join_asof(
        firsts.sort("start_ns"),
        left_on="end",
        right_on="start_ns",
        by="g",
        strategy="forward",
        check_sortedness=False,
    )
    group_end = (pl.col("pos").max().over("g") + 1).alias("group_end")
    ordered = ordered.with_columns(group_end).join(after.select("pos", "next"), on="pos")
    stop = pl.max_horizontal("pos", pl.coalesce("next", "group_end")).alias("stop")
    return ordered.sort("pos").with_columns(stop).drop("next", "group_end")


def instances(placed: pl.DataFrame, forest: pl.DataFrame, max_depth: int) -> pl.DataFrame:
    """Per (device, range at most `max_depth` deep) with operations inside it:
    inclusive ops and time, and the GPU span of those operations.

    `placed`: operations summed per (device, innermost range) with its `pos`
    and thread code `g` (RANGE_LEAVES of nsysmap.summaries.by_range, placed).
    Each range's leaves are a window [lo, hi) of them in order: by position
    when every thread launches on one device (`_windows_by_position`), else
    by (device, position) (`_windows_by_key`).
    """
    inner = placed.filter(pl.col("pos").is_not_null())
    shallow = forest.filter(pl.col("depth") <= max_depth).select("pos", "g", "stop")
    pairs = inner.select("device_id", "g").unique()
    if pairs.is_empty() or not pairs["g"].is_unique().all():
        inner, asked = _windows_by_key(inner, pairs, shallow, forest.height)
    else:
        inner, asked = _windows_by_position(inner, pairs, shallow, forest.height)
    asked = asked.filter(pl.col("hi") > pl.col("lo"))
    lo, hi = asked["lo"], asked["hi"]
    first, last = window_extrema(inner["first_start_ns"], inner["last_end_ns"], lo, hi)
    return asked.select(
        "device_id",
        "pos",
        inclusive_ops=window_sum(inner["ops"], lo, hi),
        inclusive_ns=window_sum(inner["time_ns"], lo, hi),
        span_ns=last - first,
    )


_SUMMED = ("ops", "time_ns", "first_start_ns", "last_end_ns")


def _windows_by_position(
    inner: pl.DataFrame, pairs: pl.DataFrame, shallow: pl.DataFrame, n_ranges: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(leaves by position; ranges with device, lo, hi) when each thread has one device.

    The ranges inside one are a slice of its thread, so the leaves at
    positions pos .. stop - 1 are all of the thread's device: the window's
    ends are counts of leaves below pos and below stop (a prefix sum of the
    leaves per position), not binary searches.
    """
    inner = inner.select("pos", *_SUMMED)
    if not inner["pos"].is_sorted():
        inner = inner[inner["pos"].arg_sort()]
    runs = inner["pos"].rle().struct.unnest()  # positions ascending, each once
    below = pl.repeat(0, n_ranges + 2, dtype=pl.Int64, eager=True)
    below = below.scatter(runs["value"].cast(pl.Int64) + 1, runs["len"].cast(pl.Int64))
    below = below.cum_sum().cast(pl.get_index_type())
    asked = _asked(pairs, shallow)
    return inner, asked.with_columns(lo=below.gather(asked["pos"]), hi=below.gather(asked["stop"]))


def _windows_by_key(
    inner: pl.DataFrame, pairs: pl.DataFrame, shallow: pl.DataFrame, n_ranges: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(leaves by device and position; ranges with device, lo, hi): the general case,
    by binary searches of a (device, position) key."""
    devices = pairs.select("device_id").unique().sort("device_id").with_row_index("dev")
    base = (pl.col("dev").cast(pl.Int64) * (n_ranges + 1)).alias("base")
    inner = inner.join(devices, on="device_id", nulls_equal=True).with_columns(base)
    inner = inner.with_columns(key=pl.col("base") + pl.col("pos")).sort("key")
    asked = _asked(inner.select("device_id", "base", "g").unique(), shallow)
    keys = inner["key"]
    lo = keys.search_sorted(asked["base"] + asked["pos"], side="left")
    hi = keys.search_sorted(asked["base"] + asked["stop"], side="left")
    return inner, asked.with_columns(lo=lo, hi=hi)


def _asked(pairs: pl.DataFrame, shallow: pl.DataFrame) -> pl.DataFrame:
    """Each range of `shallow` once per device whose operations its thread launched,
    with the other columns of `pairs` (device and thread code g, and more).

    Usually a thread launches on one device only: then a range's device is
    gathered by its thread code, and the ranges stay in pre-order (the
    lookups that follow then walk the leaves in order), instead of a join of
    every range on the thread code.
    """
    if pairs.is_empty() or not pairs["g"].is_unique().all():
        return pairs.join(shallow, on="g")
    size = max(to_int(pairs["g"].max()), to_int(shallow["g"].max() or 0)) + 1
    at = pl.repeat(None, size, dtype=pl.UInt32, eager=True)
    at = at.scatter(pairs["g"], pl.int_range(pairs.height, dtype=pl.UInt32, eager=True))
    found = at.gather(shallow["g"])
    hit = found.is_not_null()
    mine = pairs.drop("g")[found.filter(hit)]
    return pl.concat([mine, shallow.filter(hit)], how="horizontal")


def window_sum(values: pl.Series, lo: pl.Series, hi: pl.Series) -> pl.Series:
    """Sum of `values` over each window [lo, hi), by prefix sums."""
    prefix = pl.concat([pl.Series([0], dtype=pl.Int64), values.cast(pl.Int64).cum_sum()])
    return prefix.gather(hi) - prefix.gather(lo)


def window_extrema(
    first: pl.Series, last: pl.Series, lo: pl.Series, hi: pl.Series
) -> tuple[pl.Series, pl.Series]:
    """Minimum of `first` and maximum of `last` over each window [lo, hi), hi > lo; a
    null value is passed over (null where a window holds no value).

    A sparse table built one level at a time: at level j, low[i] is the
    minimum of first[i : i + 2^j]; a window of width w (2^j <= w < 2^(j+1)) is
    covered by the two blocks starting at lo and at hi - 2^j. A window of
    width 1 (most: ranges with one leaf) is its leaf's own values. In NumPy,
    each level a pass over arrays that shrink by its block's width (a third
    of the time of Polars' shifted columns at 10^6 leaves); a null stands in
    as the value that never wins (the largest integer for the minimum).
    """
    starts, stops = lo.cast(pl.Int64).to_numpy(), hi.cast(pl.Int64).to_numpy()
    low = first.cast(pl.Int64).fill_null(_END_OF_TIME).to_numpy()
    high = last.cast(pl.Int64).fill_null(_NEVER_WINS).to_numpy()
    width = stops - starts
    low_out, high_out = low[starts], high[starts]
    # Each window's level: the largest j with 2^j <= width (0 for width 1); exact, as
    # frexp is for integers below 2^53.
    level = np.frexp(width.astype(np.float64))[1].astype(np.int64) - 1
    for j in range(1, int(level.max()) + 1 if width.size else 0):
        step = 1 << (j - 1)
        low = np.minimum(low[:-step], low[step:])  # now blocks of 2^j
        high = np.maximum(high[:-step], high[step:])
        rows = np.flatnonzero(level == j)
        if rows.size:
            a, b = starts[rows], stops[rows] - (1 << j)
            low_out[rows] = np.minimum(low[a], low[b])
            high_out[rows] = np.maximum(high[a], high[b])
    low_s, high_s = pl.Series(low_out, dtype=pl.Int64), pl.Series(high_out, dtype=pl.Int64)
    if first.null_count():  # a window of nulls only: null, not the stand-in
        low_s = low_s.replace(_END_OF_TIME, None)
    if last.null_count():
        high_s = high_s.replace(_NEVER_WINS, None)
    return low_s, high_s
