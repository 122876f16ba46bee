"""Ranges left open, and nesting thousands deep: closed in one pass, paths in linear work."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nsysmap.intervals.forest as forest_module
from nsysmap.attribution.attribute import attribute
from nsysmap.attribution.paths import PATH_HEAD, PATH_TAIL
from nsysmap.intervals.forest import Forest
from nsysmap.intervals.nesting import nest_intervals
from nsysmap.summaries.summarise import summarise
from nsysmap.summaries.summary_text import render_summary
from tests import reference as ref
from tests.frames import MS, Frames
from tests.strategies import threads_of_ranges

MAIN, OTHER = 1, 2


def _open(f: Frames, tid: int, name: str, start: int) -> int:
    """A range that was never closed (end NULL, as a reader returns it)."""
    rid = f.range(tid, name, start, start)
    f.ranges[rid]["end_ns"] = None
    return rid


def _ends(report) -> dict[str, int]:
    return {n: e // MS for n, e in report.ranges.select("name", "end_ns").iter_rows()}


def test_open_ranges_end_with_their_container_or_their_threads_last_event():
    """ms  0    2  3       10  12          20
    P      |---------------|                       closed
    A           |- - - - ->|                       open inside P: ends with P
    B              |- - - >|                       open inside A: ends with P too
    C                          |- - - - - ->|      no container: the thread's last event
    launch (thread 1)                       ^ 20
    D (thread 2) |- - ->|                   thread 2's last event is its own start + 0
    """
    f = Frames()
    f.range(MAIN, "P", 0, 10)
    _open(f, MAIN, "A", 2)
    _open(f, MAIN, "B", 3)
    _open(f, MAIN, "C", 12)
    f.range(OTHER, "Q", 0, 5)
    _open(f, OTHER, "D", 1)
    f.kernel(MAIN, 20)
    report = f.profile()
    assert _ends(report) == {"P": 10, "A": 10, "B": 10, "C": 20, "Q": 5, "D": 5}
    parents = dict(report.ranges.select("range_id", "parent_id").iter_rows())
    assert parents[2] == 1 and parents[1] == 0  # B inside A inside P
    assert report.meta_value("ranges_open_at_end") == "4"
    assert report.meta_value("ranges_clipped_to_parent") == "0"


def test_the_summary_says_how_many_ranges_were_closed():
    f = Frames()
    f.range(MAIN, "P", 0, 10)
    _open(f, MAIN, "A", 2)
    f.kernel(MAIN, 3)
    report = f.profile()
    meta = dict(report.meta.iter_rows())
    text = render_summary(summarise(attribute(report)), meta)
    assert "1 range had no end" in text


class _GatherBudget:
    """Counts Series.gather calls and fails past a budget: a measure of work, not of time."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, budget: int) -> None:
        self.calls, self.budget = 0, budget
        original = pl.Series.gather

        def counted(series: pl.Series, *args: object, **kwargs: object) -> pl.Series:
            self.calls += 1
            if self.calls > self.budget:
                raise AssertionError(f"more than {self.budget} gathers: work grows with depth")
            return original(series, *args, **kwargs)

        monkeypatch.setattr(pl.Series, "gather", counted)


def _open_chain(depth: int) -> Frames:
    """`depth` ranges r0, r1, ... each opened 1 ms after the previous and never closed,
    a kernel launched just after each of the first and last few opened."""
    f = Frames()
    for i in range(depth):
        _open(f, MAIN, f"r{i}", i)
    for i in (0, 1, 70, depth - 2):
        f.kernel(MAIN, i)  # launched at r_i's start: r_i is innermost
    return f


@pytest.mark.slow
@pytest.mark.parametrize("depth", [500, 5000])
def test_paths_of_a_chain_thousands_deep_take_work_independent_of_depth(monkeypatch, depth):
    report = _open_chain(depth).profile()
    assert report.meta_value("ranges_open_at_end") == str(depth)
    budget = _GatherBudget(monkeypatch, 2_000)
    ops = attribute(report).sort("op_id")
    assert ops["range_name"].to_list() == ["r0", "r1", "r70", f"r{depth - 2}"]
    assert ops["range_depth"].to_list() == [1, 2, 71, depth - 1]
    paths = ops["range_path"].to_list()
    assert paths[0] == "r0" and paths[1] == "r0 > r1"
    kept = PATH_HEAD + PATH_TAIL
    # Deeper than the kept names: the outermost and innermost, and how many are left out.
    head = " > ".join(f"r{i}" for i in range(PATH_HEAD))
    tail = lambda last: " > ".join(f"r{i}" for i in range(last - PATH_TAIL + 1, last + 1))  # noqa: E731
    assert paths[2] == f"{head} > … {71 - kept} ranges … > {tail(70)}"
    assert paths[3] == f"{head} > … {depth - 1 - kept} ranges … > {tail(depth - 2)}"
    assert budget.calls < 2_000


@pytest.mark.slow
def test_climbs_through_a_deep_closed_chain_take_work_independent_of_depth(monkeypatch):
    """5,000 nested closed ranges; kernels launched while they close again, where the
    last range to start is closed and the innermost open one is far above it."""
    n = 5000
    f = Frames()
    for i in range(n):
        f.range(MAIN, f"nsysmap:fwd:Linear:m{i}" if i % 2 else f"r{i}", i, 2 * n - i)
    for k in (1, 2, 1000, 4000):
        f.kernel(MAIN, 2 * n - k)  # inside range k-1 only: 1 <= depth
    report = f.profile()
    budget = _GatherBudget(monkeypatch, 3_000)
    ops = attribute(report).sort("op_id")
    assert ops["range_name"].to_list() == [
        "r0",
        "nsysmap:fwd:Linear:m1",
        "nsysmap:fwd:Linear:m999",
        "nsysmap:fwd:Linear:m3999",
    ]
    assert ops["module"].to_list() == [None, "m1", "m999", "m3999"]
    assert budget.calls < 3_000


def _reference_innermost(rows, member, queries):
    kept = [ref.Iv(i, (1, tid), s, e) for i, tid, s, e in rows if member[i]]
    finder = ref.Innermost(ref.nest(kept))
    return [finder.at((1, tid), t) for tid, t in queries]


@pytest.mark.slow  # a property test against the reference: seconds
@settings(max_examples=150, deadline=None)
@given(
    threads_of_ranges(),
    st.lists(st.tuples(st.integers(1, 2), st.integers(-1, 62)), min_size=1, max_size=25),
    st.data(),
)
def test_innermost_by_binary_lifting_matches_the_reference(rows, queries, data):
    forest_module.CLIMB_ROUNDS, saved = 0, forest_module.CLIMB_ROUNDS  # every climb lifts
    try:
        columns = ["range_id", "tid", "start_ns", "end_ns"]
        df = pl.DataFrame(rows, schema=dict.fromkeys(columns, pl.Int64), orient="row")
        df = df.with_columns(pid=pl.lit(1, pl.Int64))
        nested = nest_intervals(df, by=["pid", "tid"], id_col="range_id").sort("range_id")
        flags = {i: data.draw(st.booleans()) for i, *_ in rows}
        member = pl.Series([flags[i] for i in nested["range_id"]], dtype=pl.Boolean)
        tree = Forest.of(nested, nested["tid"], "range_id")
        q = pl.DataFrame(queries, schema={"tid": pl.Int64, "t": pl.Int64}, orient="row")
        q = q.with_row_index("row")
        q = q.sort("t")
        ids = nested["range_id"]
        for mask, keep in ((None, dict.fromkeys(flags, True)), (member, flags)):
            hits = tree.innermost(q["tid"], q["t"], mask)
            found = dict(zip(q["row"], hits, strict=True))
            got = [None if found[r] is None else ids[found[r]] for r in range(len(queries))]
            assert got == _reference_innermost(rows, keep, queries)
    finally:
        forest_module.CLIMB_ROUNDS = saved
