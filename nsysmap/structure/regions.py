"""The regions of each process, from where its passes lie (pure).

Passes one after the other held by the same ranges (by key: `warmup_iter_3`
and `warmup_iter_4` alike; the pass's own forward or backward range aside)
and alike in being warm-up work or not form a *group*::

    setup_model    warm_up          timed_iterations
    copies         [fwd]            [fwd] [fwd] [fwd]
                   group 0 (warm)   group 1                 -> measured: group 1

The measured group is the one the user's `--measure` rule names; else the
last group that is not warm-up work (by the name rules, or ops.parquet's
`warmup`), unless that one lies in no range and an earlier one in a range
holds at least as many passes (an unranged pass after the timed loop is its
tail). Each group reaches as far as the outermost range that holds its passes
and no other group's. Before the first group is the set-up, between it and
the measured group the warm-up, after the measured group the tail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from nsysmap.attribution.rules import BadNameRule
from nsysmap.structure.ranges import HELD_ORDER, containing

# Confidence kept when the measured group is chosen by its position among others.
BY_POSITION = 0.8
# A process's first pass, in no range, launched over at least this many times as long
# as the passes after it (the median of at least FIRST_OF more), is warm-up work: the
# first call of each kernel loads it, allocates and tunes (a benchmark without ranges).
SLOW_FIRST = 3.0
FIRST_OF = 2


@dataclass(frozen=True)
class Regions:
    """One process's region boundaries (host clock) and how the measured one was found."""

    pid: int
    first: int  # where the first group begins
    start: int  # the measured region
    end: int
    name: str | None  # the range holding the measured passes
    warm_name: str | None  # the range holding the first warm-up passes
    evidence: str
    confidence: float
    warm_evidence: str
    measured_groups: tuple[int, ...]


def grouped(passes: pl.DataFrame, ranges: pl.DataFrame) -> pl.DataFrame:
    """`passes` (with `warm`) with their `group` per process and their holder span
    (`h_start`, `h_end`, `h_name`)."""
    spans = passes.sort("pid", "start_ns").with_row_index("span")
    spans = spans.with_columns(pl.col("span").cast(pl.Int64))
    # the ranges around a pass, not its own (a forward range, a module's call)
    held = containing(spans, ranges.filter(pl.col("phase").is_null() & pl.col("call").is_null()))
    chains = held.group_by("span", maintain_order=True).agg(
        place=pl.col("key").str.join(" > "),
        warm_range=pl.col("warmup").any(),
    )
    spans = spans.join(chains, on="span", how="left").with_columns(
        pl.col("place").fill_null(""),
        warm=pl.col("warm").fill_null(False) | pl.col("warm_range").fill_null(False),
    )
    change = (pl.col("place") != pl.col("place").shift(1)) | (
        pl.col("warm") != pl.col("warm").shift(1)
    )
    spans = _slow_first(spans)
    spans = spans.with_columns(group=change.fill_null(True).cum_sum().over("pid").cast(pl.Int64))
    return _holders(spans, held)


def _slow_first(spans: pl.DataFrame) -> pl.DataFrame:
    """`spans` (sorted by process and start) with `slow`: the first pass of a process, in
    no range, far slower to launch than the forward passes after it in no range."""
    took = pl.col("end_ns") - pl.col("start_ns")
    bare = spans.filter((pl.col("place") == "") & (pl.col("direction") == "forward"))
    first = bare.group_by("pid").agg(
        pl.col("span").first(),
        took.first().alias("took"),
        took.slice(1).median().alias("usual"),
        (pl.len() - 1).alias("after"),
    )
    slow = first.filter(
        (pl.col("after") >= FIRST_OF) & (pl.col("took") >= SLOW_FIRST * pl.col("usual"))
    )
    leading = spans.group_by("pid").agg(pl.col("span").first().alias("lead"))
    first_slow = slow.join(leading, on="pid").filter(pl.col("span") == pl.col("lead"))["span"]
    is_slow = pl.col("span").is_in(first_slow.implode())
    return spans.with_columns(slow=is_slow, warm=pl.col("warm") | is_slow)


def _holders(spans: pl.DataFrame, held: pl.DataFrame) -> pl.DataFrame:
    """Each pass's holder: the outermost range holding it and passes of its group only."""
    held = held.join(spans.select("span", "pid", "group"), on="span")
    own = held.group_by("pid", "range_id").agg(pl.col("group").n_unique().alias("groups"))
    alone = held.join(own, on=["pid", "range_id"]).filter(pl.col("groups") == 1)
    first = alone.sort(HELD_ORDER).unique("span", keep="first", maintain_order=True)
    spans = spans.join(
        first.select("span", h_start="r_start_ns", h_end="r_end_ns", h_name="name"),
        on="span",
        how="left",
    )
    return spans.with_columns(
        h_start=pl.coalesce("h_start", "start_ns"), h_end=pl.coalesce("h_end", "end_ns")
    )


def regions(grouped_passes: pl.DataFrame, measure: tuple[str, ...]) -> list[Regions]:
    """Each process's regions, from its grouped passes."""
    groups = grouped_passes.group_by("pid", "group", maintain_order=True).agg(
        start=pl.col("h_start").min(),
        end=pl.col("h_end").max(),
        place=pl.col("place").first(),
        warm=pl.col("warm").first(),
        slow=pl.col("slow").any(),
        passes=pl.len(),
        names=pl.col("h_name").drop_nulls().unique(maintain_order=True),
        named=pl.col("h_name").is_not_null().all(),
        evidence=pl.col("evidence").str.split(", ").list.explode().unique().sort(),
        confidence=pl.col("confidence").min(),
    )
    out = []
    for (pid,), rows in groups.sort("pid", "group").group_by("pid", maintain_order=True):
        out.append(_regions(int(pid), rows.to_dicts(), measure))
    return out


def _regions(pid: int, groups: list[dict[str, Any]], measure: tuple[str, ...]) -> Regions:
    chosen, how = _measured(groups, measure)
    first, last = chosen[0], chosen[-1]
    evidence = set().union(*(g["evidence"] for g in chosen))
    names = sorted({n for g in chosen if g["named"] for n in g["names"]})
    names = names if len(names) == 1 else []  # one range holds them, or none is named
    if names:
        evidence.add("range")
    if how != "only":
        evidence.add(how)
    confidence = min(g["confidence"] for g in chosen)
    confidence *= BY_POSITION if how == "position" else 1.0
    warm = groups[0]
    before = [g for g in groups if g["start"] < first["start"]]
    warm_evidence = "position"
    if before and all(g["warm"] for g in before):
        warm_evidence = "duration" if any(g["slow"] for g in before) else "range"
    return Regions(
        pid=pid,
        first=int(groups[0]["start"]),
        start=int(first["start"]),
        end=int(last["end"]),
        name=names[0] if names else None,
        warm_name=_name(warm) if warm is not first else None,
        evidence=", ".join(sorted(evidence)),
        confidence=1.0 if how == "rule" else confidence,
        warm_evidence=warm_evidence,
        measured_groups=tuple(int(g["group"]) for g in chosen),
    )


def _name(group: dict[str, Any]) -> str | None:
    """The range holding every pass of a group, where one name does."""
    names = group["names"]
    return str(names[0]) if group["named"] and len(names) == 1 else None


def _measured(
    groups: list[dict[str, Any]], measure: tuple[str, ...]
) -> tuple[list[dict[str, Any]], str]:
    """The measured groups and how they were chosen: "rule", "only" or "position"."""
    if measure:
        named = [i for i, g in enumerate(groups) if _matches(g["names"], measure)]
        if named:
            return groups[named[0] : named[-1] + 1], "rule"
    candidates = [g for g in groups if not g["warm"]] or groups
    chosen = candidates[-1]
    if not chosen["place"]:
        ranged = [g for g in candidates if g["place"] and g["passes"] >= chosen["passes"]]
        chosen = ranged[-1] if ranged else chosen
    return [chosen], "position" if len(candidates) > 1 else "only"


def _matches(names: list[str], measure: tuple[str, ...]) -> bool:
    """Does one of `names` match one of the --measure rules?"""
    series = pl.Series(names, dtype=pl.String)
    return any(bool(series.str.contains(rule).any()) for rule in measure)


def measure_rules(patterns: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The user's `--measure REGEX` rules, each checked; BadNameRule (exit code 2) for one
    that is not a regular expression."""
    for pattern in patterns:
        try:
            pl.Series([""], dtype=pl.String).str.contains(pattern)
        except pl.exceptions.ComputeError:
            raise BadNameRule(f"--measure '{pattern}': not a valid regular expression") from None
    return tuple(patterns)
