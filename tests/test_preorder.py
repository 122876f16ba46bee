"""The ranges' pre-order (nsysmap.intervals.preorder) against `Forest`'s lookups.

Where both apply (a proper forest), the pre-order's innermost range, the
innermost range of a family and the climb to a named range must be those of
the as-of joins and climbs of `nsysmap.intervals.forest.Forest`, on random
forests with shared starts, equal and zero-length ranges; and attribution
must write the same OPS rows by either (the pre-order turned off).
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import nsysmap.attribution.scope as scope
from devtools.synth.bulk import write_export
from devtools.synth.tile import gpt_tables
from nsysmap.attribution.attribute import attribute
from nsysmap.intervals.forest import CLIMB_ROUNDS, Forest, positions
from nsysmap.intervals.nesting import nest_repaired
from nsysmap.intervals.preorder import Preorder
from nsysmap.sources.reading import load_profile
from nsysmap.summaries.range_tree import from_preorder, preorder
from tests.strategies import crossing_intervals, threads_of_ranges


def _nested(rows: list[tuple[int, int, int, int]]) -> pl.DataFrame:
    frame = pl.DataFrame(
        rows,
        schema={"range_id": pl.Int64, "tid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64},
        orient="row",
    ).with_columns(pid=pl.lit(1, pl.Int64))
    nested, _ = nest_repaired(frame, by=("pid", "tid"), id_col="range_id")
    return nested.sort("range_id")


def _both(nested: pl.DataFrame) -> tuple[Preorder | None, Forest]:
    thread = nested["tid"].cast(pl.UInt32)
    parent = positions(nested["range_id"], nested["parent_id"])
    found = Preorder.of(
        thread,
        int(thread.max() or 0) + 1,
        nested["start_ns"],
        nested["end_ns"],
        nested["range_id"],
        parent,
        nested["depth"],
    )
    return found, Forest.of(nested, thread, "range_id")


def _queries(nested: pl.DataFrame, ts: list[int]) -> tuple[pl.Series, pl.Series]:
    """Every (thread, t) of `ts` on each thread of `nested` (and one without ranges),
    sorted by t as `Forest.innermost` takes them."""
    tids = [*sorted(set(nested["tid"].to_list())), 9]
    pairs = sorted((t, tid) for t in ts for tid in tids)
    return (
        pl.Series([tid for _, tid in pairs], dtype=pl.UInt32),
        pl.Series([t for t, _ in pairs], dtype=pl.Int64),
    )


def _rows(pre: Preorder, found: np.ndarray) -> list[int | None]:
    return pre.rows(found).to_list()


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(threads_of_ranges(n_threads=3), st.data())
def test_innermost_and_families_are_the_forests(rows, data):
    nested = _nested(rows)
    if nested.is_empty():
        return
    pre, forest = _both(nested)
    assert pre is not None  # random forests nest without crossings
    thread, t = _queries(nested, list(range(-1, 62)))
    inner = pre.innermost(thread.cast(pl.Int64).to_numpy(), t.to_numpy())
    assert _rows(pre, inner) == forest.innermost(thread, t).to_list()
    flags = data.draw(st.lists(st.integers(0, 3), min_size=nested.height, max_size=nested.height))
    bits = np.array(flags, dtype=np.uint8)
    families = pre.around(inner, bits, 2)
    for family in range(2):
        member = pl.Series([bool(b >> family & 1) for b in flags])
        assert _rows(pre, families[family]) == forest.innermost(thread, t, member).to_list()
    named = pl.Series([bool(b & 1) for b in flags])
    climbed = pre.climb(inner, lambda at: named.to_numpy()[at])
    expected = forest.climb(forest.innermost(thread, t), t, named.gather)
    assert _rows(pre, climbed) == expected.to_list()


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(crossing_intervals())
def test_repaired_crossings_agree_or_refuse(rows):
    nested = _nested([(i, 1, s, e) for i, s, e in rows])
    if nested.is_empty():
        return
    pre, forest = _both(nested)
    parent_end = nested["end_ns"].gather(positions(nested["range_id"], nested["parent_id"]))
    crossing = bool((nested["end_ns"] > parent_end).fill_null(False).any())
    assert (pre is None) == crossing
    if pre is not None:
        thread, t = _queries(nested, list(range(-1, 62)))
        inner = pre.innermost(thread.cast(pl.Int64).to_numpy(), t.to_numpy())
        assert _rows(pre, inner) == forest.innermost(thread, t).to_list()


def test_a_crossing_left_is_refused():
    # B crosses A's end, as a forest no repair has touched would keep it
    nested = pl.DataFrame(
        {
            "range_id": [0, 1],
            "tid": [1, 1],
            "start_ns": [0, 5],
            "end_ns": [10, 15],
            "depth": [1, 2],
            "parent_id": [None, 0],
        },
        schema_overrides={"depth": pl.Int32, "parent_id": pl.Int64},
    )
    pre, _ = _both(nested)
    assert pre is None


def test_deep_chains_climb_past_the_rounds():
    depth = 3 * CLIMB_ROUNDS
    rows = [(i, 1, i, 2 * depth - i) for i in range(depth)]  # each inside the one before
    rows += [(depth, 1, 2 * depth + 5, 2 * depth + 6)]  # a leaf of its own, later
    nested = _nested(rows)
    pre, forest = _both(nested)
    assert pre is not None
    ts = [0, depth - 1, depth + 3, 2 * depth - 1, 2 * depth + 5]
    thread, t = _queries(nested, ts)
    inner = pre.innermost(thread.cast(pl.Int64).to_numpy(), t.to_numpy())
    assert _rows(pre, inner) == forest.innermost(thread, t).to_list()
    # query inside the innermost at a time only the outermost still covers
    late = pre.open_at(np.full(1, depth - 1), np.full(1, 2 * depth - 1))
    assert _rows(pre, late) == [0]
    outermost = np.zeros(pre.n, dtype=bool)
    outermost[0] = True
    assert _rows(pre, pre.climb(np.full(1, depth - 1), lambda at: outermost[at])) == [0]


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(threads_of_ranges(n_threads=3))
def test_by_range_reads_the_same_preorder(rows):
    nested = _nested(rows)
    if nested.is_empty():
        return
    pre, _ = _both(nested)
    assert pre is not None
    ranges = nested.with_columns(pid=pl.lit(1, pl.Int64))
    expected = preorder(ranges).drop("g")
    assert_frame_equal(from_preorder(pre, ranges["range_id"]).drop("g"), expected)


@pytest.fixture(scope="module")
def gpt_profile(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("gpt") / "gpt.sqlite"
    write_export(path, gpt_tables(3000, seed=2, processes=2))
    return load_profile(path)


def test_attribution_is_the_same_without_the_preorder(gpt_profile, monkeypatch):
    fast = attribute(gpt_profile)
    monkeypatch.setattr(scope, "preorder_of", lambda ranges, thread: None)
    slow = attribute(gpt_profile)
    assert fast["range_id"].is_not_null().sum() > 0.9 * fast.height
    assert_frame_equal(fast, slow, check_exact=True)


def _searched_stops(pre: Preorder) -> np.ndarray:
    """`Preorder.stops` by its definition: a binary search of every interval's end."""
    thread = pre.thread[pre.order].astype(np.int64)
    ends = thread * (1 << pre.t_bits) + (pre.end[pre.order] - pre.t0)
    return np.maximum(np.searchsorted(pre.keys, ends, side="left"), np.arange(pre.n))


@settings(max_examples=200, deadline=None)
@given(threads_of_ranges(n_threads=3))
def test_stops_are_the_binary_searches(rows):
    """Searched only where the next interval starts before the end: the same stops."""
    nested = _nested(rows)
    pre = _both(nested)[0] if not nested.is_empty() else None
    if pre is not None:
        assert np.array_equal(pre.stops(), _searched_stops(pre))


def test_stops_of_zero_length_and_shared_starts():
    """Zero-length intervals hold nothing (stop is their pos), also where several start
    at one time; an interval ending where the next starts does not hold it."""
    rows = [(1, 1, 0, 10), (2, 1, 5, 5), (3, 1, 5, 5), (4, 1, 5, 8), (5, 1, 10, 12), (6, 2, 3, 3)]
    pre, _ = _both(_nested(rows))
    assert pre is not None
    stops = pre.stops()
    assert np.array_equal(stops, _searched_stops(pre))
    by_id = {int(pre.order[p]) + 1: int(stops[p]) - p for p in range(pre.n)}  # ranges inside + 1
    assert by_id == {1: 4, 2: 0, 3: 0, 4: 3, 5: 1, 6: 0}  # 4 (5..8) sorts before 2, 3
