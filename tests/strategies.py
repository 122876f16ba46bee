"""Hypothesis strategies: random properly nested interval forests, and crossings."""

from __future__ import annotations

from hypothesis import strategies as st


@st.composite
def forest(draw: st.DrawFn, lo: int = 0, hi: int = 60, max_depth: int = 4) -> list[tuple[int, int]]:
    """Properly nested (start, end) pairs inside [lo, hi]: siblings never overlap.

    Includes equal intervals, shared starts and ends, and zero-length ones.
    """
    out: list[tuple[int, int]] = []
    cursor = lo
    while cursor < hi and draw(st.booleans()):
        start = draw(st.integers(cursor, hi))
        end = draw(st.integers(start, min(hi, start + 30)))
        out.append((start, end))
        if max_depth > 1 and end > start:
            out.extend(draw(forest(lo=start, hi=end, max_depth=max_depth - 1)))
        cursor = end
    return out


@st.composite
def threads_of_ranges(draw: st.DrawFn, n_threads: int = 2) -> list[tuple[int, int, int, int]]:
    """(range_id, tid, start, end) for up to `n_threads` threads of nested ranges."""
    rows = []
    for tid in range(1, n_threads + 1):
        for start, end in draw(forest()):
            rows.append((tid, start, end))
    order = draw(st.permutations(list(range(len(rows)))))
    return [(i, *rows[j]) for i, j in enumerate(order)]


@st.composite
def crossing_intervals(draw: st.DrawFn) -> list[tuple[int, int, int]]:
    """(id, start, end) on one thread, free to cross each other."""
    n = draw(st.integers(0, 12))
    rows = []
    for i in range(n):
        start = draw(st.integers(0, 50))
        rows.append((i, start, draw(st.integers(start, 60))))
    return rows


@st.composite
def distinct_crossing_intervals(draw: st.DrawFn) -> list[tuple[int, int, int]]:
    """(id, start, end) free to cross, with every endpoint distinct (no ties)."""
    points = draw(st.lists(st.integers(0, 200), min_size=0, max_size=24, unique=True))
    points = points[: len(points) // 2 * 2]
    pairs = [sorted(points[i : i + 2]) for i in range(0, len(points), 2)]
    return [(i, a, b) for i, (a, b) in enumerate(pairs)]
