"""Cross-rank tables (pure: rank-labelled frames in, frames out).

Clocks of different machines are not aligned, so ranks are compared by
durations, never by timestamps:

* `rank_steps`: per rank and step, GPU time, communication, compute (the
  rest), the step's span, and the collective wait: the rank's communication
  time minus the least any rank spent on communication in that step. In a
  synchronous job a collective ends on every rank when the last rank joins
  it, so a rank that arrives early spends the difference waiting inside the
  collective's kernels.
* `stragglers`: per step, the slowest and fastest rank by compute time and
  the straggler cost: the collective wait of the fastest rank, the time it
  loses waiting for the slowest.
* `rank_module_phase`: per module and phase, the time on each rank summed
  up as min, median and max, the slowest and fastest rank, and the excess of
  the slowest over the median (ranks without the module count as 0).
* `rank_module`: the same per module over its inclusive time (the module
  and every module inside it), so that a slow layer shows as one row.
* `rank_comm`: per rank, communication time, its overlapped and exposed parts
  (nsysmap.many.rank_overlap) and the collective wait summed over the steps.

Each reads the ranks' measured operations only: warm-up work is left out
(nsysmap.many.measured).
"""

from __future__ import annotations

import polars as pl

from nsysmap.core import rank_schemas, schemas

MODULE_KEYS = ["module", "module_class", "phase"]


def _first_by(value: str, order: pl.Expr, *, descending: bool) -> pl.Expr:
    """`value` of the row that comes first by `order` (ties: the lowest rank)."""
    return pl.col(value).sort_by([order, pl.col("rank")], descending=[descending, False]).first()


def rank_steps(steps: pl.DataFrame) -> pl.DataFrame:
    """Per rank and step: time, communication, compute, span and collective wait."""
    done = steps.group_by("rank", "step").agg(
        pl.col("ops").sum(),
        pl.col("time_ns").sum(),
        pl.col("comm_ns").sum(),
        pl.col("first_start_ns").min(),
        pl.col("last_end_ns").max(),
    )
    done = done.with_columns(
        (pl.col("time_ns") - pl.col("comm_ns")).alias("compute_ns"),
        (pl.col("last_end_ns") - pl.col("first_start_ns")).alias("span_ns"),
        (pl.col("comm_ns") - pl.col("comm_ns").min().over("step")).alias("collective_wait_ns"),
    ).sort("rank", "step", nulls_last=True)
    return schemas.conform(
        done.select(rank_schemas.RANK_STEPS.names()), rank_schemas.RANK_STEPS, "rank_steps"
    )


def stragglers(per_step: pl.DataFrame) -> pl.DataFrame:
    """Per step: slowest and fastest rank by compute, and the straggler cost."""
    compute = pl.col("compute_ns")
    out = (
        per_step.group_by("step")
        .agg(
            pl.len().cast(pl.Int64).alias("ranks"),
            _first_by("rank", compute, descending=True).alias("slowest_rank"),
            _first_by("rank", compute, descending=False).alias("fastest_rank"),
            compute.max().alias("slowest_compute_ns"),
            compute.median().alias("median_compute_ns"),
            compute.min().alias("fastest_compute_ns"),
            _first_by("collective_wait_ns", compute, descending=False).alias("straggler_cost_ns"),
        )
        .sort("step", nulls_last=True)
    )
    return schemas.conform(out, rank_schemas.STRAGGLERS, "stragglers")


def rank_module_phase(by_module_phase: pl.DataFrame, ranks: list[int]) -> pl.DataFrame:
    """Per module and phase: time per rank as min, median, max, slowest and fastest rank."""
    out = _spread(by_module_phase, MODULE_KEYS, "time_ns", ranks)
    return schemas.conform(out, rank_schemas.RANK_MODULE_PHASE, "rank_module_phase")


def rank_module(by_module: pl.DataFrame, ranks: list[int]) -> pl.DataFrame:
    """Per module, its inclusive time (with the modules inside it) compared across ranks."""
    out = _spread(by_module, ["module", "module_class"], "inclusive_ns", ranks)
    return schemas.conform(out, rank_schemas.RANK_MODULE, "rank_module")


def _spread(frame: pl.DataFrame, keys: list[str], value: str, ranks: list[int]) -> pl.DataFrame:
    """Per group of `keys`: `value` over every rank (0 where a rank lacks it), summed up."""
    per = frame.group_by("rank", *keys).agg(pl.col(value).sum().alias("time_ns"))
    every = pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int64})
    grid = per.select(keys).unique().join(every, how="cross")
    full = grid.join(per, on=["rank", *keys], how="left", nulls_equal=True)
    time = pl.col("time_ns")
    return (
        full.with_columns(time.fill_null(0))
        .group_by(keys)
        .agg(
            pl.len().cast(pl.Int64).alias("ranks"),
            time.min().alias("min_ns"),
            time.median().alias("median_ns"),
            time.max().alias("max_ns"),
            _first_by("rank", time, descending=True).alias("slowest_rank"),
            _first_by("rank", time, descending=False).alias("fastest_rank"),
        )
        .with_columns((pl.col("max_ns") - pl.col("median_ns")).alias("excess_ns"))
        .sort(["excess_ns", *keys], descending=[True, *[False] * len(keys)], nulls_last=True)
    )


def rank_comm(per_step: pl.DataFrame, overlap: pl.DataFrame, ranks: list[int]) -> pl.DataFrame:
    """Per rank of `ranks`: GPU time, compute, communication, its overlapped and exposed
    parts, wait (0 for a rank without steps: all its work was warm-up)."""
    sums = ["ops", "time_ns", "compute_ns", "comm_ns", "collective_wait_ns"]
    totals = per_step.group_by("rank").agg(pl.col(sums).sum())
    hidden = overlap.group_by("rank").agg(
        pl.col("comm_busy_ns").sum(), pl.col("overlapped_ns").sum(), pl.col("exposed_ns").sum()
    )
    every = pl.DataFrame({"rank": ranks}, schema={"rank": pl.Int64}).unique()
    out = (
        every.join(totals, on="rank", how="left")
        .join(hidden, on="rank", how="left")
        .with_columns(pl.exclude("rank").fill_null(0))
    )
    out = out.sort("rank").select(rank_schemas.RANK_COMM.names())
    return schemas.conform(out, rank_schemas.RANK_COMM, "rank_comm")
