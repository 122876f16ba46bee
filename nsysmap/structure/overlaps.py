"""Spans of candidate rows: those of one kind that overlap made one, and which rows overlap
another set's (pure). Spans include both ends::

    rows     [---a---]   [-b-]      [---c---]
    others        [----x----]                  -> a and b overlap x, c does not
"""

from __future__ import annotations

import polars as pl


def merged(frame: pl.DataFrame) -> pl.DataFrame:
    """Candidates of one kind of evidence with those that overlap (same device, process and
    direction) made one: operations launched at one instant (a CUDA graph's, from one
    launch call) cannot be told apart by when they were launched."""
    if frame.height < 2:
        return frame
    keys = ["dev", "pid", "direction"]
    ordered = frame.sort([*keys, "start_ns"], nulls_last=True)
    reach = pl.col("end_ns").cum_max().shift(1).over(keys)
    run = (reach.is_null() | (reach < pl.col("start_ns"))).cum_sum().over(keys)
    return (
        ordered.with_columns(_run=run)
        .group_by([*keys, "_run"], maintain_order=True)
        .agg(
            pl.col("start_ns").min(),
            pl.col("end_ns").max(),
            pl.col("confidence").max(),
            pl.exclude("start_ns", "end_ns", "confidence").first(),
        )
        .drop("_run")
        .select(frame.columns)
    )


def overlapping(rows: pl.DataFrame, others: pl.DataFrame, by: list[str]) -> pl.Series:
    """Which of `rows` overlap a row of `others` with the same `by` (spans with both ends
    included): the latest of `others` to start by a row's end, by an as-of join, and the
    furthest any of them reaches up to it (a running maximum of their ends)."""
    if rows.is_empty() or others.is_empty():
        return pl.repeat(False, rows.height, eager=True)
    reach = (
        others.select(*by, o_start="start_ns", o_end="end_ns")
        .sort([*by, "o_start"], nulls_last=True)
        .with_columns(o_reach=pl.col("o_end").cum_max().over(by))
        .drop("o_end")
        .sort("o_start")
    )
    joined = (
        rows.select(*by, "start_ns", "end_ns")
        .with_row_index("_i")
        .sort("end_ns")
        .join_asof(reach, left_on="end_ns", right_on="o_start", by=by, check_sortedness=False)
        .sort("_i")
    )
    return (joined["o_reach"] >= joined["start_ns"]).fill_null(False).alias("overlapping")
