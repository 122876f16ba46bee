"""`nsysmap diff --fail-above PCT`: a regression gate for CI jobs (pure).

The step time (each run's GPU time per step, `Diff.a.per_step_ns`) and the
rows of the levels asked for (`--by phase|module|kernel`) are checked: a
row *grew too much* when it is in both runs and B's time per step exceeds
A's by more than PCT percent of A's. Rows found in one run only have no
ratio and are not checked one by one (their time is in the step time).
"""

from __future__ import annotations

import polars as pl

from nsysmap.core.inert import terminal_text
from nsysmap.diff.compare import Diff
from nsysmap.diff.diff_text import name

GATED = ("phase", "module", "kernel")  # the levels --by takes
STEP = "step"  # the row that stands for the step time


def grown(diff: Diff, fail_above_pct: float, levels: tuple[str, ...] = ()) -> pl.DataFrame:
    """The rows that grew by more than `fail_above_pct` percent: the step time (level
    `step`), then those of `levels`, largest growth first; columns as diff.parquet's."""
    limit = fail_above_pct / 100
    a, b = diff.a.per_step_ns, diff.b.per_step_ns
    step = pl.DataFrame(
        {
            "level": [STEP],
            "key": [None],
            "label": ["time per step"],
            "match": ["both"],
            "a_ns_per_step": [a],
            "b_ns_per_step": [b],
            "change_ns_per_step": [b - a],
            "change_ratio": [(b - a) / a if a else None],
            "change_share": [1.0 if b != a else 0.0],
        },
        schema=diff.levels["phase"].schema,
    )
    rows = pl.concat([step, *(diff.levels[level] for level in levels)])
    over = rows.filter(pl.col("match") == "both", pl.col("change_ratio") > limit)
    return over.sort("change_ratio", descending=True, maintain_order=True)


def grown_lines(rows: pl.DataFrame, fail_above_pct: float) -> list[str]:
    """The terminal lines naming each row that grew too much (none: no lines)."""
    if rows.is_empty():
        return []
    lines = [f"Grew more than {fail_above_pct:g} % per step:"]
    for row in rows.iter_rows(named=True):
        level = row["level"]
        what = row["label"] if level == STEP else f"{level} {terminal_text(name(row, level))}"
        lines.append(
            f"  {what}: {row['a_ns_per_step'] / 1e6:,.3f} -> {row['b_ns_per_step'] / 1e6:,.3f} ms"
            f" ({100 * row['change_ratio']:+.1f} %)"
        )
    return lines
