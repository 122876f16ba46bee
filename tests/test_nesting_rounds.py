"""Repair rounds that re-nest only the clusters they clip give what whole-group rounds give.

`_whole_group_rounds` is the repair as it was before rounds were limited to
clusters: every round nests each group with a crossing again. The two must
agree row for row, the cap on rounds (MAX_REPAIR_ROUNDS) included, since a
crossing left past the cap is clipped differently.
"""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nsysmap.intervals.nesting as nesting
from nsysmap.intervals.nesting import nest_intervals, nest_repaired


def _whole_group_rounds(
    nested: pl.DataFrame, by: list[str], id_col: str, prio: str
) -> tuple[pl.DataFrame, int]:
    clipped: set[int] = set()
    for round_no in range(nesting.MAX_REPAIR_ROUNDS + 1):
        if not nested["crossing"].any():
            break
        nested = nested.sort([*by, "start_ns", -pl.col("end_ns"), id_col])
        first = pl.col("crossing").cast(pl.Int32).cum_sum().over(by) == 1
        every = round_no == nesting.MAX_REPAIR_ROUNDS
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
        clipped.update(cuts[id_col].to_list())
        fixed = (
            nested.drop("p_end", "p_prio", "crossing")
            .join(cuts, on=id_col, how="left")
            .with_columns(pl.coalesce("new_end", "end_ns").alias("end_ns"))
            .drop("new_end")
        )
        nested = nesting._with_crossing(nest_intervals(fixed, by=by, id_col=id_col), id_col, prio)
    return nested.drop("p_end", "p_prio", "crossing"), len(clipped)


def _both(
    df: pl.DataFrame, rounds: int, priority: str | None
) -> tuple[tuple[pl.DataFrame, int], tuple[pl.DataFrame, int]]:
    by = ("pid", "tid")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nesting, "MAX_REPAIR_ROUNDS", rounds)
        new = nest_repaired(df, by=by, id_col="range_id", priority=priority)
        patch.setattr(nesting, "_clip_rounds", _whole_group_rounds)
        old = nest_repaired(df, by=by, id_col="range_id", priority=priority)
    return new, old


@st.composite
def crossing_groups(draw: st.DrawFn) -> pl.DataFrame:
    """Intervals on a few threads, crossing freely, with ties, zero lengths and ranks."""
    n = draw(st.integers(1, 40))
    rows = []
    for i in range(n):
        start = draw(st.integers(0, 300))
        end = draw(st.integers(start, start + draw(st.sampled_from([0, 3, 10, 40]))))
        rows.append((i, draw(st.integers(0, 1)), draw(st.integers(0, 2)), start, end))
    rows.append((n, 0, 0, 0, 0))  # the schema wants a row
    return pl.DataFrame(
        rows,
        schema=["range_id", "pid", "tid", "start_ns", "end_ns"],
        orient="row",
    ).with_columns(rank=(pl.col("range_id") * 7 % 3 == 0).cast(pl.Int8))


@pytest.mark.slow  # a property test: seconds
@settings(max_examples=80, deadline=None)
@given(crossing_groups(), st.sampled_from([0, 1, 2, 3, 5, 32]), st.booleans())
def test_cluster_rounds_match_whole_group_rounds(df, rounds, ranked):
    (new, n_new), (old, n_old) = _both(df, rounds, "rank" if ranked else None)
    assert new.equals(old)
    assert n_new == n_old


def test_many_crossings_past_the_cap_match():
    # Ranges of three threads nested as one process (as the phase lookup of
    # attribution does), in 40 separate clusters of chained crossings: B
    # crosses A, and C crosses B until B is clipped. Resolved one at a time,
    # the cap on rounds is reached in cluster 17; past it every crossing left
    # is clipped at once, which leaves C crossing B in later clusters.
    shape = [(1, 0, 100), (2, 50, 150), (3, 60, 200)]
    rows = [
        (3 * k + i, 1, tid, 300 * k + s, 300 * k + e)
        for k in range(40)
        for i, (tid, s, e) in enumerate(shape)
    ]
    df = pl.DataFrame(rows, schema=["range_id", "pid", "tid", "start_ns", "end_ns"], orient="row")
    by = ("pid",)
    new = nest_repaired(df, by=by, id_col="range_id")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nesting, "_clip_rounds", _whole_group_rounds)
        old = nest_repaired(df, by=by, id_col="range_id")
    ends = old[0].sort("range_id")["end_ns"].to_list()
    assert ends[3 * 2 + 2] == 300 * 2 + 100  # C clipped to B's new end, one at a time
    assert ends[3 * 39 + 2] == 300 * 39 + 150  # C clipped to B's old end, all at once
    assert new[0].equals(old[0])
    assert new[1] == old[1]


def test_rows_come_in_the_order_of_the_last_round():
    # Thread 1 is repaired in one round (X clipped to A's end, then equal to
    # Y), thread 2 in two: X was last sorted in round two, by its clipped end.
    rows = [(0, 1, 0, 100), (1, 1, 50, 100), (2, 1, 50, 150)]
    rows += [(3, 2, 0, 100), (4, 2, 50, 150), (5, 2, 60, 200)]
    df = pl.DataFrame(
        [(i, 1, tid, s, e) for i, tid, s, e in rows],
        schema=["range_id", "pid", "tid", "start_ns", "end_ns"],
        orient="row",
    )
    (new, _), (old, _) = _both(df, nesting.MAX_REPAIR_ROUNDS, None)
    assert old["range_id"].to_list()[:3] == [0, 1, 2]
    assert new.equals(old)
