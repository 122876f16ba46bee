"""Range paths (nsysmap.attribution.paths.range_paths) against a climb per operation.

The paths are joined from per-level names and, above the first level whose
ranges many operations share, from chains built once per shared range: for
any forest, null names and null hits, each path must be the names from the
outermost range down to the hit, joined by " > ".
"""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from nsysmap.attribution.paths import PATH_SEPARATOR, SHARED, range_paths


def _climbed(parent: list[int | None], names: list[str | None], hit: int | None) -> str | None:
    if hit is None:
        return None
    chain: list[str] = []
    at: int | None = hit
    while at is not None:
        chain.append(names[at] or "")
        at = parent[at]
    return PATH_SEPARATOR.join(reversed(chain))


@st.composite
def forests(draw: st.DrawFn) -> tuple[list[int | None], list[str | None], list[int | None]]:
    """A forest of up to 60 ranges (each one's parent an earlier one, or none), names
    from a few shared ones, own ones and nulls, and hits (some null, some repeated)."""
    n = draw(st.integers(1, 60))
    parent: list[int | None] = [None]
    for i in range(1, n):
        parent.append(draw(st.one_of(st.none(), st.integers(0, i - 1))))
    name = st.one_of(st.none(), st.sampled_from(["a", "b", "aten::mm, seq = 1", "é ü"]))
    names = [draw(st.one_of(name, st.just(f"call {i}"))) for i in range(n)]
    hits = draw(st.lists(st.one_of(st.none(), st.integers(0, n - 1)), min_size=1, max_size=80))
    return parent, names, hits


def _depths(parent: list[int | None]) -> list[int]:
    depth: list[int] = []
    for p in parent:
        depth.append(1 if p is None else depth[p] + 1)
    return depth


def _paths(parent: list[int | None], names: list[str | None], hits: list[int | None]) -> list:
    return range_paths(
        pl.Series(parent, dtype=pl.UInt32),
        pl.Series(names, dtype=pl.String),
        pl.Series(_depths(parent), dtype=pl.Int32),
        pl.Series(hits, dtype=pl.UInt32),
    ).to_list()


@settings(max_examples=300, deadline=None)
@given(forests())
def test_every_path_is_the_climb_from_its_hit(forest):
    parent, names, hits = forest
    assert _paths(parent, names, hits) == [_climbed(parent, names, h) for h in hits]


def test_shared_and_own_levels_both_join_whole():
    """Module ranges many operators share above operator ranges of their own: the
    shared level's chains are built once, the own levels gathered per hit."""
    parent: list[int | None] = [None, 0]  # step > module
    names: list[str | None] = ["step 1", None]
    for i in range(4 * SHARED):  # each operator with a range of its own inside it
        parent += [1, len(parent)]
        names += [f"aten::mm, seq = {i}", f"aten::copy_, op_id = {i}"]
    hits: list[int | None] = [*range(3, len(parent), 2), None, 1]
    got = _paths(parent, names, hits)
    assert got[0] == "step 1 >  > aten::mm, seq = 0 > aten::copy_, op_id = 0"
    assert got[-2:] == [None, "step 1 > "]
    assert got == [_climbed(parent, names, h) for h in hits]
