"""Nesting of intervals per thread: depth, parent, and repair of crossing intervals.

Ranges on one thread form a forest. Everything here is a sort plus cumulative
sums and as-of joins; no Python loop runs over intervals.

    thread 7:  |------------- A -------------|
                   |---- B ----|   |- C -|
    events:    A+  B+          B-  C+    C-  A-
    depth:     1   2           1   2     1   0
    innermost: A   B           A   C     A   -

(The innermost interval at a time t is looked up in `forest.Forest`.)
Intervals are half-open, [start, end): a query at exactly `start` is inside, a
query at exactly `end` is outside, and a zero-length interval contains nothing.
Ties in start time put the longer interval outside; equal intervals nest in
id order (lower id outside).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from nsysmap.core.range_names import PREFIX as NSYSMAP_PREFIX
from nsysmap.intervals.forest import Forest, group_index, nest_positions

MAX_REPAIR_ROUNDS = 32


def nest_intervals(
    df: pl.DataFrame,
    *,
    by: Sequence[str],
    id_col: str,
    start_col: str = "start_ns",
    end_col: str = "end_ns",
) -> pl.DataFrame:
    """Return `df` with `depth` (Int32, 1 = outermost) and `parent_id` (Int64 or null).

    The input must be properly nested within each `by` group (true of NVTX
    push/pop ranges and of operators on one thread); see `nest_repaired` for
    data that may cross.
    """
    by = list(by)
    if df.is_empty():
        return df.with_columns(pl.lit(None, pl.Int32).alias("depth"), _null_parent())
    fast = _nest_fast(df, by, id_col, start_col, end_col)
    if fast is not None:
        depth, parent = fast
        return df.with_columns(depth=depth, parent_id=df[id_col].gather(parent).cast(pl.Int64))
    events = _ordered_events(df, by, id_col, start_col, end_col)
    starts = (
        events.with_columns(pl.col("delta").cum_sum().over(by).cast(pl.Int32).alias("depth"))
        .filter(pl.col("delta") == 1)
        .select([*by, "seq", "iv_id", "depth"])
    )
    parents = starts.select(
        [*by, "seq", pl.col("iv_id").alias("parent_id"), (pl.col("depth") + 1).alias("depth")]
    )
    linked = starts.join_asof(
        parents,
        on="seq",
        by=[*by, "depth"],
        strategy="backward",
        allow_exact_matches=False,
        check_sortedness=False,
    )
    found = linked.select(
        pl.col("iv_id").alias(id_col), "depth", pl.col("parent_id").cast(pl.Int64)
    )
    return df.drop("depth", "parent_id", strict=False).join(found, on=id_col, how="left")


def _nest_fast(
    df: pl.DataFrame, by: list[str], id_col: str, start_col: str, end_col: str
) -> tuple[pl.Series, pl.Series] | None:
    """Depth and parent position by one packed sort (None: take the general path)."""
    groups = group_index(df, by)
    if groups is None:
        return None
    return nest_positions(*groups, df[start_col], df[end_col], df[id_col])


def _null_parent() -> pl.Expr:
    return pl.lit(None, pl.Int64).alias("parent_id")


def _ordered_events(
    df: pl.DataFrame, by: list[str], id_col: str, start_col: str, end_col: str
) -> pl.DataFrame:
    """Start and end events of every interval in nesting order, numbered by `seq`.

    At one instant: ends of intervals that began earlier, then starts (longest
    first), then ends of zero-length intervals (innermost first).
    """
    base = df.select(
        [
            *by,
            pl.col(id_col).alias("iv_id"),
            pl.col(start_col).alias("s"),
            pl.col(end_col).alias("e"),
        ]
    )
    zero = pl.col("e") == pl.col("s")
    start_ev = base.select(
        [
            *by,
            "iv_id",
            pl.col("s").alias("t"),
            pl.lit(1, pl.Int8).alias("cls"),
            (-pl.col("e")).alias("k1"),
            pl.col("iv_id").alias("k2"),
            pl.lit(1, pl.Int32).alias("delta"),
        ]
    )
    end_ev = base.select(
        [
            *by,
            "iv_id",
            pl.col("e").alias("t"),
            pl.when(zero).then(pl.lit(2, pl.Int8)).otherwise(pl.lit(0, pl.Int8)).alias("cls"),
            (-pl.col("s")).alias("k1"),
            (-pl.col("iv_id")).alias("k2"),
            pl.lit(-1, pl.Int32).alias("delta"),
        ]
    )
    return pl.concat([start_ev, end_ev]).sort([*by, "t", "cls", "k1", "k2"]).with_row_index("seq")


def nest_repaired(
    df: pl.DataFrame, *, by: Sequence[str], id_col: str, priority: str | None = None
) -> tuple[pl.DataFrame, int]:
    """Nest intervals that may cross, clipping one of each crossing pair.

    A start/end range can outlive the range it started in, and ranges of
    different NVTX domains or profilers keep separate stacks:

        A |--------|          A |--------|
        B      |-------|  ->  B      |---|      (B clipped to A's end)

    The parent is the innermost interval still open at the start, with
    earlier crossings already resolved. Normally the child is clipped to its
    parent's end; when the optional `priority` column ranks the child above
    its parent, the parent is clipped to end where the child starts instead
    (nsysmap's module ranges opened by a hook inside an operator keep their
    extent). Returns the nested frame (`end_ns` clipped) and how many
    intervals were clipped. Data without crossings costs one nesting pass.
    """
    by = list(by)
    fast = _nest_fast(df, by, id_col, "start_ns", "end_ns") if df.height else None
    if fast is not None:
        depth, parent = fast
        parent_end = df["end_ns"].gather(parent)
        crossing = (df["end_ns"] > parent_end) & (df["start_ns"] < parent_end)
        if not crossing.fill_null(False).any():
            parent_id = df[id_col].gather(parent).cast(pl.Int64)
            return df.with_columns(depth=depth, parent_id=parent_id), 0
    work = df if priority else df.with_columns(pl.lit(0, pl.Int8).alias("_prio"))
    prio = priority or "_prio"
    out = _with_crossing(nest_intervals(work, by=by, id_col=id_col), id_col, prio)
    if not out["crossing"].any():
        return out.drop("crossing", "p_end", "p_prio", "_prio", strict=False), 0
    # Only groups with a crossing are nested again, as often as needed.
    bad_groups = out.filter("crossing").select(by).unique()
    todo = out.join(bad_groups, on=by, how="semi")
    done = out.join(bad_groups, on=by, how="anti").drop("p_end", "p_prio", "crossing")
    todo, n_clipped = _clip_rounds(todo, by, id_col, prio)
    merged = pl.concat([done, todo.select(done.columns)])
    return merged.drop("_prio", strict=False), n_clipped


def _with_crossing(nested: pl.DataFrame, id_col: str, prio: str) -> pl.DataFrame:
    """Add `crossing` (starts inside its parent but ends after it), `p_end`, `p_prio`."""
    parent = nested.select(
        pl.col(id_col).alias("parent_id"),
        pl.col("end_ns").alias("p_end"),
        pl.col(prio).alias("p_prio"),
    )
    checked = nested.join(parent, on="parent_id", how="left")
    crossing = (pl.col("end_ns") > pl.col("p_end")) & (pl.col("start_ns") < pl.col("p_end"))
    return checked.with_columns(crossing.fill_null(False).alias("crossing"))


def _clip_rounds(
    nested: pl.DataFrame, by: list[str], id_col: str, prio: str
) -> tuple[pl.DataFrame, int]:
    """Resolve the earliest crossing of each group, re-nest, repeat.

    Only the earliest crossing (in nesting order) is certain to sit under its
    true parent: a later one may look crossing only because of it. After
    MAX_REPAIR_ROUNDS rounds every remaining crossing is resolved at once.

    Clusters (intervals linked by overlap) nest independently: a clip moves
    an end within its cluster. A group's rounds resolve its clusters one after
    the other; here the clusters those rounds reach take their rounds side by
    side, and each keeps the state its share of the group's rounds leaves.
    """
    nested = nested.with_columns(_cluster=_clusters(nested, by))
    hot = nested.filter("crossing").select(*by, "_cluster").unique().sort("_cluster")
    hot = hot.with_columns(_nth=pl.int_range(pl.len()).over(by))
    calm = nested.join(hot, on="_cluster", how="anti")  # clusters no round touches
    reached = hot.filter(pl.col("_nth") < MAX_REPAIR_ROUNDS).select("_cluster")
    states, cuts = _side_by_side(nested.join(reached, on="_cluster", how="semi"), by, id_col, prio)
    share = _shares(states, hot, by)
    kept = states.join(share, on=["_cluster", "_after"], how="semi").drop("_after")
    unreached = nested.join(reached, on="_cluster", how="anti").join(hot, on="_cluster", how="semi")
    cuts = cuts.join(share, on="_cluster").filter(pl.col("_round") <= pl.col("_after"))
    clipped = set(cuts[id_col].to_list())
    left = pl.concat([kept, unreached.select(kept.columns)])
    if left["crossing"].any():  # the rounds ran out: every crossing left at once
        left, last = _clip_round(left, by, id_col, prio, every=True)
        clipped.update(last[id_col].to_list())
    else:  # the last round: each group's last clip, in groups that took the most rounds
        last = cuts.filter(pl.col("_last") & (pl.col("_round") == pl.col("_after")))
    nested = pl.concat([calm, left.select(calm.columns)])
    # In the order a round over the whole group leaves: sorted by the ends before its clips.
    key = nested.join(last, on=id_col, how="left").select(pl.coalesce("old_end", "end_ns"))
    nested = nested.with_columns(_k=key.to_series()).sort([*by, "start_ns", -pl.col("_k"), id_col])
    return nested.drop("p_end", "p_prio", "crossing", "_cluster", "_k"), len(clipped)


def _side_by_side(
    nested: pl.DataFrame, by: list[str], id_col: str, prio: str
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Up to MAX_REPAIR_ROUNDS rounds per cluster, each cluster on its own.

    Returns every cluster's state after each of its rounds (`_after`, 0:
    before any) and the clips (`id_col`, `old_end`, `_cluster`, `_round`).
    """
    states = [nested.with_columns(_after=pl.lit(0, pl.Int32))]
    cuts = []
    live = nested
    for round_no in range(1, MAX_REPAIR_ROUNDS + 1):
        live = live.join(live.filter("crossing").select("_cluster"), on="_cluster", how="semi")
        if live.is_empty():
            break
        live, cut = _clip_round(live, [*by, "_cluster"], id_col, prio, every=False)
        states.append(live.with_columns(_after=pl.lit(round_no, pl.Int32)))
        cut = cut.join(live.select(id_col, "_cluster"), on=id_col)
        cuts.append(cut.with_columns(_round=pl.lit(round_no, pl.Int32)))
    schema = {id_col: nested[id_col].dtype, "old_end": nested["end_ns"].dtype}
    empty = pl.DataFrame(schema={**schema, "_cluster": pl.UInt32, "_round": pl.Int32})
    columns = states[0].columns
    return pl.concat([f.select(columns) for f in states]), pl.concat([empty, *cuts])


def _shares(states: pl.DataFrame, hot: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Per reached cluster: `_after`, how many of its group's rounds it gets
    (clusters in order, until MAX_REPAIR_ROUNDS are spent), and `_last`, whether
    it took the last round of all, when no crossing is left after it.
    """
    done = states.group_by("_cluster").agg(
        rounds=pl.col("_after").max(),
        left=(pl.col("crossing") & (pl.col("_after") == pl.col("_after").max())).any(),
    )
    need = hot.join(done, on="_cluster", how="left").sort("_cluster")
    need = need.with_columns(  # a cluster still crossing after its rounds needs more
        rounds=pl.col("rounds").fill_null(0) + pl.col("left").fill_null(True).cast(pl.Int32)
    )
    cap = MAX_REPAIR_ROUNDS
    spent = pl.col("rounds").cum_sum().over(by).clip(upper_bound=cap)
    need = need.with_columns(_after=(spent - spent.shift(1, fill_value=0).over(by)).cast(pl.Int32))
    total = need.group_by(by).agg(t=pl.col("rounds").sum())
    need = need.join(total, on=by, how="left", nulls_equal=True)
    final = pl.col("t") == pl.col("t").max()
    last = (pl.col("_after") > 0) & (
        pl.col("_cluster") == pl.col("_cluster").filter(pl.col("_after") > 0).max().over(by)
    )
    return need.select("_cluster", "_after", _last=final & last)


def _clusters(nested: pl.DataFrame, by: list[str]) -> pl.Series:
    """A code per cluster (UInt32): intervals of one group linked by overlap.

    A cluster begins where an interval starts after every earlier one of its
    group ended: nothing is open there, so no nesting reaches across. Null
    times give one cluster per group.
    """
    order = nested.select(*by, "start_ns", "end_ns").with_row_index("_row")
    order = order.sort([*by, "start_ns", -pl.col("end_ns")])
    if nested["start_ns"].null_count() or nested["end_ns"].null_count():
        begins = pl.lit(False)
    else:
        reach = pl.col("end_ns").cum_max().shift(1).over(by)
        begins = (pl.col("start_ns") > reach).fill_null(False)
    codes = order.select("_row", *by, c=begins.cum_sum().over(by))
    return codes.sort("_row").select(pl.struct(*by, "c").rank("dense").alias("c"))["c"]


def _clip_round(
    nested: pl.DataFrame, by: list[str], id_col: str, prio: str, *, every: bool
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Clip the earliest crossing of each group (`every`: all crossings), re-nest.

    Returns the re-nested frame and the clipped intervals (`id_col`, `old_end`).
    """
    nested = nested.sort([*by, "start_ns", -pl.col("end_ns"), id_col])
    first = pl.col("crossing").cast(pl.Int32).cum_sum().over(by) == 1
    chosen = nested.filter(pl.col("crossing") if every else pl.col("crossing") & first)
    outranks = chosen[prio] > chosen["p_prio"]
    cut_self = chosen.filter(~outranks).select(id_col, pl.col("p_end").alias("new_end"))
    cut_parent = (
        chosen.filter(outranks)
        .group_by("parent_id")
        .agg(pl.col("start_ns").min().alias("new_end"))
        .rename({"parent_id": id_col})
    )
    cuts = pl.concat([cut_self, cut_parent]).group_by(id_col).agg(pl.col("new_end").min())
    fixed = nested.drop("p_end", "p_prio", "crossing").join(cuts, on=id_col, how="left")
    clipped = fixed.filter(pl.col("new_end").is_not_null()).select(id_col, old_end="end_ns")
    fixed = fixed.with_columns(pl.coalesce("new_end", "end_ns").alias("end_ns")).drop("new_end")
    return _with_crossing(nest_intervals(fixed, by=by, id_col=id_col), id_col, prio), clipped


def nest_ranges(ranges: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Fill `depth` and `parent_id` of a RANGES frame, per (pid, tid).

    nsysmap's own ranges outrank others where two cross (see `nest_repaired`).
    Returns the frame (columns in their original order) and the number of
    ranges clipped because they crossed.
    """
    ranked = ranges.with_columns(
        pl.col("name").str.starts_with(NSYSMAP_PREFIX).fill_null(False).cast(pl.Int8).alias("_rank")
    )
    nested, n_clipped = nest_repaired(
        ranked, by=("pid", "tid"), id_col="range_id", priority="_rank"
    )
    nested = nested.select(ranges.columns)
    return (nested if nested["range_id"].is_sorted() else nested.sort("range_id")), n_clipped


def close_open_ranges(ranges: pl.DataFrame, api_calls: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """Give every range without an end (`end_ns` null) one, in one pass.

    A range left open (an exception inside it, a capture that stopped
    mid-range) ends where the innermost closed range around its start ends,
    else at its thread's last event (range or API call on that thread)::

        closed P  |------------|            thread's last event  v
        open   A      |- - - - ->|          A ends with P         |
        open   B                     |- - - - - - - - - - - - - ->|

    Ranges left open inside each other then nest, each ending with its
    closed container, whatever their number. Returns the ranges (same rows,
    same order) and how many were closed.
    """
    is_open = ranges["end_ns"].is_null()
    n_open = int(is_open.sum())
    if not n_open:
        return ranges, 0
    closed, _ = nest_ranges(ranges.filter(~is_open))
    opened = ranges.filter(is_open).with_row_index("_row").sort("start_ns", "range_id")
    codes = group_index(
        pl.concat([closed.select("pid", "tid"), opened.select("pid", "tid")]),
        [
            "pid",
            "tid",
        ],
    )
    if codes is None:  # unknown threads: only the thread's own last event can bound it
        container = pl.repeat(None, opened.height, dtype=pl.Int64, eager=True)
    else:
        code = codes[0]
        forest = Forest.of(closed, code.slice(0, closed.height), "range_id")
        around = forest.innermost(code.slice(closed.height), opened["start_ns"])
        container = closed["end_ns"].gather(around)
    last = _thread_last_event(ranges, api_calls)
    ends = (
        opened.with_columns(_container=container)
        .join(last, on=["pid", "tid"], how="left", nulls_equal=True)
        .select(
            "_row",
            end=pl.coalesce("_container", pl.max_horizontal("_last", "start_ns")),
        )
        .sort("_row")["end"]
    )
    filled = ranges["end_ns"].scatter(is_open.arg_true(), ends)
    return ranges.with_columns(end_ns=filled), n_open


def _thread_last_event(ranges: pl.DataFrame, api_calls: pl.DataFrame) -> pl.DataFrame:
    """pid, tid, `_last`: the latest start or end of a range or API call on each thread."""
    times = [
        frame.select("pid", "tid", t=pl.max_horizontal("start_ns", "end_ns"))
        for frame in (ranges, api_calls)
    ]
    return pl.concat(times).group_by("pid", "tid").agg(_last=pl.col("t").max())
