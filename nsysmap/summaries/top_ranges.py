"""Which ranges the terminal summary lists, and how much time lies inside none of them (pure).

The summary lists the range paths that explain the time, by time inside them
(by_range's inclusive time, devices together), from these families in turn:

1. the user's own ranges (not nsysmap's, not PyTorch's operator ranges);
2. nsysmap's step and phase ranges, when the user's ranges listed hold less
   than half of the time (none, or only slivers such as autograd's
   `BackwardHookFunction`): every operation of `nsysmap run` is inside them;
3. PyTorch's operator ranges, when the profile has neither.

A path holding less than SLIVER of the time is not listed, unless no path of
any family holds more. The time inside none of the listed paths is the total
less the time inside the outermost of them: an operation counts inside a path
when it was launched inside it, or took its step or phase from it on another
thread (as by_range's inclusive time). Outermost paths hold disjoint
operations except where one holds work that another gave its phase to (the
user's range on autograd's thread beside the user's `backward pass`); when
their sum exceeds the total that way, the time outside is not known (None).
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from nsysmap.attribution.labels import OPERATOR_RANGE
from nsysmap.attribution.paths import PATH_SEPARATOR
from nsysmap.core.range_names import PREFIX as NSYSMAP
from nsysmap.summaries.by_range import FOLDED
from nsysmap.summaries.range_paths import is_user_range

SLIVER = 0.01  # of all the time: paths with less inside them are not listed
ENOUGH = 0.5  # the user's listed ranges hold less: nsysmap's step and phase ranges too
# nsysmap's step and phase range names (`nsysmap:step:*` in paths, `nsysmap:phase:forward`).
OWN_SCOPE = rf"^{NSYSMAP}(?:step|phase):"


@dataclass(frozen=True)
class TopRanges:
    """The listed paths (range_path, calls, time_ns, inclusive_ns; most time inside first),
    how many other paths by_range has, and the time inside none of the listed ones."""

    rows: pl.DataFrame
    more: int
    total_ns: int
    outside_ns: int | None  # None: not known (see the module docstring)


def top_ranges(table: pl.DataFrame, top: int) -> TopRanges | None:
    """The paths of BY_RANGE `table` to list (at most `top`); None when it has none."""
    named = table.filter(pl.col("range_path").is_not_null() & (pl.col("range_name") != FOLDED))
    total = int(table["time_ns"].sum())
    paths = (
        named.group_by("range_path", "range_name")
        .agg(pl.col("calls", "time_ns", "inclusive_ns").sum())
        .with_columns(family=_family())
        .sort(["inclusive_ns", "range_path"], descending=[True, False])
    )
    shown = _choose(paths, total).head(top)
    if shown.is_empty():
        return None
    outermost = _outermost(shown)
    inside = int(outermost["inclusive_ns"].sum())
    outside = total - inside if inside <= total else None
    rows = shown.select("range_path", "calls", "time_ns", "inclusive_ns")
    return TopRanges(rows, paths.height - shown.height, total, outside)


def _family() -> pl.Expr:
    """ "user", "own" (nsysmap's step and phase ranges, and only those on the path),
    "operator", or null (nsysmap's module ranges and paths mixing families)."""
    name = pl.col("range_name")  # as paths write it: without PyTorch's per-call fields
    parts = pl.col("range_path").str.split(PATH_SEPARATOR)
    own = parts.list.eval(pl.element().str.contains(OWN_SCOPE)).list.all()
    return (
        pl.when(is_user_range(name))
        .then(pl.lit("user"))
        .when(own)
        .then(pl.lit("own"))
        .when(name.str.contains(OPERATOR_RANGE))
        .then(pl.lit("operator"))
    )


def _choose(paths: pl.DataFrame, total: int) -> pl.DataFrame:
    """The paths to list, most time inside first (see the module docstring)."""
    big = pl.col("inclusive_ns") >= SLIVER * total
    user = paths.filter((pl.col("family") == "user") & big)
    own = paths.filter((pl.col("family") == "own") & big)
    chosen = user
    if _inside(user) < ENOUGH * total:
        chosen = pl.concat([user, own])
    if chosen.is_empty() and not (paths["family"] == "own").any():
        chosen = paths.filter((pl.col("family") == "operator") & big)
    if chosen.is_empty():  # only slivers: the biggest of the first family there is
        for family in ("user", "own", "operator"):
            chosen = paths.filter(pl.col("family") == family)
            if not chosen.is_empty():
                break
    return chosen.sort(["inclusive_ns", "range_path"], descending=[True, False])


def _inside(rows: pl.DataFrame) -> int:
    return int(_outermost(rows)["inclusive_ns"].sum())


def _outermost(rows: pl.DataFrame) -> pl.DataFrame:
    """The rows whose path has no ancestor among the rows' paths."""
    paths = set(rows["range_path"])
    keep = [not any(a in paths for a in _ancestors(p)) for p in rows["range_path"]]
    return rows.filter(pl.Series(keep, dtype=pl.Boolean))


def _ancestors(path: str) -> list[str]:
    """ "a > b > c" -> ["a", "a > b"]."""
    parts = path.split(PATH_SEPARATOR)
    return [PATH_SEPARATOR.join(parts[:i]) for i in range(1, len(parts))]
