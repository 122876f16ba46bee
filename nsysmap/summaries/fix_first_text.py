"""The terminal summary's lines on what to fix first (pure): the top rows of findings.parquet
(made by nsysmap.findings)."""

from __future__ import annotations

from typing import Any

import polars as pl

from nsysmap.core.findings_schema import saving_words, share_words
from nsysmap.core.inert import terminal_text

TOP = 3  # findings shown


def findings_lines(table: pl.DataFrame | None, top: int = TOP) -> str:
    """ "What to fix first" and the `top` findings of findings.parquet, or "" without any."""
    if table is None or table.is_empty():
        return ""
    ranked = table.sort("priority")
    words = saving_words(_per_steps(ranked))
    lines = [f"What to fix first ({words}; findings.parquet, docs/findings.md)"]
    for row in ranked.head(top).iter_rows(named=True):
        where = terminal_text(row["place"])
        lines.append(f"  {row['priority']}. {row['title']} ({where}): {_saving(row)}")
        lines.append(f"     fix: {row['fix']}")
    if table.height > top:
        lines.append(f"  ... {table.height - top} more in findings.parquet")
    return "\n".join(lines) + "\n"


def _saving(row: dict[str, Any]) -> str:
    saving = row["saving_ns_per_step"]
    if saving is None:
        return f"saving unknown; needs: {terminal_text(row['needs'])}"
    bound = "up to " if row["upper_bound"] else "about "
    share = f"{pct(row['saving_share'])} of {share_words(row.get('per_step'))}"
    return f"{bound}{ms(saving)} ({share}), confidence {row['confidence']}"


def _per_steps(table: pl.DataFrame) -> list[bool | None]:
    """Each finding's `per_step` (None for a table written before the column)."""
    return table["per_step"].to_list() if "per_step" in table.columns else [None] * table.height


def ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms"


def pct(share: float | None) -> str:
    return "–" if share is None else f"{100 * share:.1f} %"
