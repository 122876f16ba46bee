"""Ranges open across a time window's edge, carried into every window they overlap.

A cut of nsysmap.sources.by_window need not fall where no range is open: a range
open across it (a profiling range around the run, an epoch, the step the
cut falls in) is read into each window it overlaps, with one range id::

    range R  |-------------------------------------|        R: read in both windows, id 7
    cut                        |                            in each, R nests, labels and
    window 1 [ calls ......... )                            gives steps as in a whole read
    window 2                   [ calls ............ )

* planning (the reader's: nsysmap.read.nsys.window_scans.carried_rows): per
  cut, the rowids of the ranges open across it, read into the window after
  the cut with its own rows.
* `Carry` (reading): gives a carried range, in the window after the cut,
  the id it had in the window before (ranges are matched by thread, times,
  name, kind and domain: identical ones are interchangeable), and says why
  not where the two windows disagree: a range open across the edge missing
  on one side, or nested, clipped or closed differently (a window's rows
  would then differ from a whole read's).
* `inside` and `path_rows`: each carried range's subtree in a window (the
  ranges by_range counts its operations through) and its by_range path,
  so that by_range's instances crossing an edge are merged into one
  (nsysmap.summaries.by_range.merge_by_range).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import polars as pl

from nsysmap.attribution.paths import PATH_SEPARATOR
from nsysmap.core.profile import NestedProfile, Profile
from nsysmap.read.nsys.window_plan import RowWindow
from nsysmap.summaries.by_range import MAX_PATH_DEPTH
from nsysmap.summaries.range_paths import path_keys
from nsysmap.summaries.range_tree import preorder

# What names a range across windows (with its place among identical ones).
KEY = ["pid", "tid", "start_ns", "end_ns", "name", "kind", "domain"]
_NESTED = ["range_id", "depth", "parent_id", "end_ns"]


def _keyed(ranges: pl.DataFrame) -> pl.DataFrame:
    """`ranges`' KEY and range_id, with `n`: the place among ranges of the same KEY."""
    return ranges.select(*KEY, "range_id").with_columns(
        n=pl.int_range(pl.len(), dtype=pl.Int64).over(KEY)
    )


@dataclass
class Carry:
    """What one window hands the next: its ranges open across the edge between them,
    as read (`outgoing`: KEY, n, range_id) and nested (`nested`: _NESTED)."""

    outgoing: pl.DataFrame | None = None
    nested: pl.DataFrame | None = None

    def identified(self, raw: Profile, window: RowWindow) -> tuple[Profile, str | None]:
        """`raw` (a window as read) with the ranges carried into it (those starting
        before it) under the ids they had in the window before; or why they differ."""
        if window.start_lo is None:
            return raw, None
        incoming = _keyed(raw.ranges.filter(pl.col("start_ns") < window.start_lo))
        outgoing = self.outgoing if self.outgoing is not None else incoming.clear()
        matched = incoming.join(
            outgoing.rename({"range_id": "carried"}), on=[*KEY, "n"], nulls_equal=True
        )
        if not (matched.height == incoming.height == outgoing.height):
            return raw, "ranges open across a window's edge not read on both sides of it"
        ids = pl.col("range_id").replace(matched["range_id"], matched["carried"])
        return replace(raw, ranges=raw.ranges.with_columns(ids)), None

    def handed_on(self, raw: Profile, nested: NestedProfile, window: RowWindow) -> str | None:
        """Take in a window's ranges open across its end (after `identified` and
        nesting); why the window's carried ranges would differ from a whole read's."""
        ranges, start = nested.ranges, window.start_lo
        carried_in = ranges.filter(pl.col("start_ns") < start) if start is not None else None
        before = self.nested if self.nested is not None else ranges.select(_NESTED).clear()
        alike = carried_in is None or carried_in.select(_NESTED).sort("range_id").equals(before)
        if not alike:
            return "ranges open across a window's edge nested apart on its two sides"
        self.outgoing, self.nested = None, None
        if window.start_hi is not None:
            out = raw.ranges.filter(pl.col("end_ns") >= window.start_hi)
            self.outgoing = _keyed(out)
            ids = out["range_id"].implode()
            self.nested = ranges.filter(pl.col("range_id").is_in(ids)).select(_NESTED)
            self.nested = self.nested.sort("range_id")
        sides = (ranges.clear(), carried_in, self._out(ranges))
        crossing = pl.concat([side for side in sides if side is not None])
        as_read = raw.ranges.select("range_id", read="end_ns")
        ends = crossing.select("range_id", "end_ns").join(as_read, on="range_id", how="left")
        if not ends["end_ns"].eq_missing(ends["read"]).all():
            return "a range open across a window's edge clipped to its parent or left open"
        return None

    def _out(self, ranges: pl.DataFrame) -> pl.DataFrame | None:
        if self.nested is None:
            return None
        return ranges.filter(pl.col("range_id").is_in(self.nested["range_id"].implode()))


def crossing_ids(ranges: pl.DataFrame, window: RowWindow) -> pl.Series:
    """The ids of a window's ranges open across either of its edges (nested ranges,
    ids as `Carry.identified` gave them)."""
    start, end = window.start_lo, window.start_hi
    before = pl.col("start_ns") < start if start is not None else pl.lit(False)
    after = pl.col("end_ns") >= end if end is not None else pl.lit(False)
    return ranges.filter(before | after)["range_id"]


def inside(ranges: pl.DataFrame, carried: pl.Series) -> pl.DataFrame | str:
    """range_id -> `carried`: each range inside (or being) one of the `carried` ranges,
    as by_range counts inclusive operations (the ranges after it in nesting
    pre-order, up to its stop); or why by_range could not be merged."""
    forest = preorder(ranges)
    tops = forest.filter(pl.col("range_id").is_in(carried.implode()))
    if (tops["depth"] > MAX_PATH_DEPTH).any():
        return f"a range open across a window's edge nested over {MAX_PATH_DEPTH} deep"
    parts = [
        forest.slice(pos, stop - pos).select("range_id", carried=pl.lit(top, pl.Int64))
        for pos, stop, top in tops.select("pos", "stop", "range_id").iter_rows()
    ]
    empty = pl.DataFrame(schema={"range_id": pl.Int64, "carried": pl.Int64})
    return pl.concat([empty, *parts])


def path_rows(ranges: pl.DataFrame, carried: pl.Series) -> pl.DataFrame:
    """Each carried range's by_range key: carried, range_path, range_name, domain,
    range_depth (its name and its ancestors', as by_range writes paths)."""
    names = ranges.select("range_id", "parent_id", "name")
    frontier = pl.DataFrame({"carried": carried, "id": carried}).with_columns(level=pl.lit(0))
    levels = []
    while frontier.height:
        found = frontier.join(names, left_on="id", right_on="range_id")
        levels.append(found.select("carried", "level", "name"))
        frontier = found.select("carried", id="parent_id", level=pl.col("level") + 1)
        frontier = frontier.drop_nulls("id")
    chain = pl.concat(levels).with_columns(key=path_keys(pl.concat(levels)["name"]))
    by_range = chain.sort("level", descending=True).group_by("carried", maintain_order=True)
    paths = by_range.agg(
        range_path=pl.col("key").str.join(PATH_SEPARATOR),
        range_name=pl.col("key").last(),
    )
    own = ranges.select(carried="range_id", domain="domain", range_depth="depth")
    return paths.join(own, on="carried")
