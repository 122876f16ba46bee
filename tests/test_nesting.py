"""Nesting and innermost lookup against the loop-based reference."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsysmap.intervals.forest import Forest
from nsysmap.intervals.nesting import nest_intervals, nest_ranges, nest_repaired
from tests import reference as ref
from tests.strategies import crossing_intervals, distinct_crossing_intervals, threads_of_ranges


def _frame(rows: list[tuple[int, int, int, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema={"range_id": pl.Int64, "tid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64},
        orient="row",
    ).with_columns(pl.lit(1, pl.Int64).alias("pid"))


def _innermost(nested: pl.DataFrame, tids: list[int], ts: list[int]) -> list[int | None]:
    """Range id of the innermost range open at each (tid, t), through `Forest`."""
    if nested.is_empty():
        return [None] * len(ts)
    nested = nested.sort("range_id")
    forest = Forest.of(nested, nested["tid"], "range_id")
    q = pl.DataFrame({"tid": tids, "t": ts}, schema={"tid": pl.Int64, "t": pl.Int64})
    q = q.with_row_index("row").sort("t")
    hits = forest.innermost(q["tid"], q["t"]).to_list()
    found = dict(zip(q["row"], hits, strict=True))
    ids = nested["range_id"].to_list()
    return [None if found[row] is None else ids[found[row]] for row in range(len(ts))]


def test_small_timeline_by_hand():
    # tid 7: A[0,10) > B[2,5), A > C[6,9); tid 8: D[0,3)
    df = _frame([(1, 7, 0, 10), (2, 7, 2, 5), (3, 7, 6, 9), (4, 8, 0, 3)])
    nested = nest_intervals(df, by=["pid", "tid"], id_col="range_id").sort("range_id")
    assert nested["depth"].to_list() == [1, 2, 2, 1]
    assert nested["parent_id"].to_list() == [None, 1, 1, None]
    got = _innermost(nested, [7, 7, 7, 7, 7, 7, 8, 8], [0, 2, 4, 5, 6, 10, 2, 3])
    assert got == [1, 2, 2, 1, 3, None, 4, None]


def test_ties_longer_outside_equal_by_id_and_zero_length_contains_nothing():
    df = _frame([(5, 1, 0, 10), (3, 1, 0, 10), (4, 1, 0, 4), (6, 1, 4, 4)])
    nested = nest_intervals(df, by=["pid", "tid"], id_col="range_id").sort("range_id")
    assert dict(zip(nested["range_id"], nested["parent_id"], strict=True)) == {
        3: None,
        4: 5,
        5: 3,
        6: 5,
    }
    assert _innermost(nested, [1, 1, 1], [0, 4, 9]) == [4, 5, 5]


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(
    threads_of_ranges(), st.lists(st.tuples(st.integers(1, 2), st.integers(-1, 62)), max_size=25)
)
def test_nesting_and_innermost_match_reference(rows, queries):
    df = _frame(rows)
    nested = nest_intervals(df, by=["pid", "tid"], id_col="range_id")
    expected = ref.nest([ref.Iv(i, (1, tid), s, e) for i, tid, s, e in rows])
    for r in nested.iter_rows(named=True):
        assert r["parent_id"] == expected[r["range_id"]].parent
        assert r["depth"] == expected[r["range_id"]].depth
    got = _innermost(nested, [tid for tid, _ in queries], [t for _, t in queries])
    finder = ref.Innermost(expected)
    assert got == [finder.at((1, tid), t) for tid, t in queries]


@pytest.mark.slow  # a property test against the reference: seconds
@settings(max_examples=150, deadline=None)
@given(st.integers(1, 3).flatmap(lambda n: threads_of_ranges(n_threads=n)))
def test_nesting_of_rows_in_start_order_matches_reference(rows):
    # Readers leave ranges in start order (ids in any order among equal starts): the
    # starts are then put in thread order without a sort (one thread: none at all).
    in_order = sorted(rows, key=lambda row: row[2])
    nested = nest_intervals(_frame(in_order), by=["pid", "tid"], id_col="range_id")
    expected = ref.nest([ref.Iv(i, (1, tid), s, e) for i, tid, s, e in rows])
    got = {r["range_id"]: (r["parent_id"], r["depth"]) for r in nested.iter_rows(named=True)}
    assert got == {i: (iv.parent, iv.depth) for i, iv in expected.items()}


@pytest.mark.slow  # a property test against the reference: seconds
@settings(max_examples=150, deadline=None)
@given(crossing_intervals())
def test_repair_clips_crossings_into_a_proper_forest(rows):
    df = _frame([(i, 1, s, e) for i, s, e in rows])
    repaired, n_clipped = nest_repaired(df, by=["pid", "tid"], id_col="range_id")
    expected = ref.nest_repaired([ref.Iv(i, (1, 1), s, e) for i, s, e in rows])
    ends = dict(zip(repaired["range_id"], repaired["end_ns"], strict=True))
    for r in repaired.iter_rows(named=True):
        assert r["parent_id"] == expected[r["range_id"]].parent
        assert r["end_ns"] == expected[r["range_id"]].end
        if r["parent_id"] is not None:
            assert r["end_ns"] <= ends[r["parent_id"]]
    original = {i: e for i, _, e in rows}
    assert n_clipped == sum(1 for i, e in ends.items() if e != original[i])


def test_repair_fallback_still_gives_a_proper_forest(monkeypatch):
    import nsysmap.intervals.nesting as nesting

    monkeypatch.setattr(nesting, "MAX_REPAIR_ROUNDS", 0)
    rows = [(0, 0, 10), (1, 5, 15), (2, 12, 20), (3, 14, 30)]
    repaired, n_clipped = nest_repaired(
        _frame([(i, 1, s, e) for i, s, e in rows]), by=["pid", "tid"], id_col="range_id"
    )
    ends = dict(zip(repaired["range_id"], repaired["end_ns"], strict=True))
    assert n_clipped >= 1
    for r in repaired.iter_rows(named=True):
        if r["parent_id"] is not None:
            assert r["end_ns"] <= ends[r["parent_id"]]


@pytest.mark.slow  # a property test against the reference: seconds
@settings(max_examples=150, deadline=None)
@given(distinct_crossing_intervals(), st.data())
def test_repair_with_priority_cuts_the_lower_ranked_interval(rows, data):
    # Without ties: with equal intervals the order of clipping decides which
    # of two identical spans ends up outside, and no order is more right.
    ranks = {i: data.draw(st.integers(0, 1)) for i, _, _ in rows}
    df = _frame([(i, 1, s, e) for i, s, e in rows]).with_columns(
        pl.col("range_id").replace_strict(ranks, return_dtype=pl.Int8).alias("rank")
    )
    repaired, _ = nest_repaired(df, by=["pid", "tid"], id_col="range_id", priority="rank")
    expected = ref.nest_repaired([ref.Iv(i, (1, 1), s, e) for i, s, e in rows], ranks)
    for r in repaired.iter_rows(named=True):
        assert (r["end_ns"], r["parent_id"]) == (
            expected[r["range_id"]].end,
            expected[r["range_id"]].parent,
        ), r["range_id"]


def test_nsysmap_range_opened_inside_an_operator_keeps_its_extent():
    # An autograd node (op) starts, the module's backward hook opens the
    # module range inside it, the node ends, the module's work follows.
    rows = [(0, 1, 0, 10), (1, 1, 5, 50), (2, 1, 20, 30)]
    df = _frame(rows).with_columns(
        pl.Series("name", ["NativeLayerNormBackward0", "nsysmap:bwd:LayerNorm:ln_1", "aten::mm"]),
    )
    nested, n_clipped = nest_ranges(
        df.with_columns(
            pl.lit(None, pl.String).alias("domain"),
            pl.lit("push_pop").alias("kind"),
            pl.lit(None, pl.Int32).alias("depth"),
            pl.lit(None, pl.Int64).alias("parent_id"),
        )
    )
    got = {
        r["name"]: (r["start_ns"], r["end_ns"], r["parent_id"])
        for r in nested.iter_rows(named=True)
    }
    assert got == {
        "NativeLayerNormBackward0": (0, 5, None),
        "nsysmap:bwd:LayerNorm:ln_1": (5, 50, None),
        "aten::mm": (20, 30, 1),
    }
    assert n_clipped == 1
