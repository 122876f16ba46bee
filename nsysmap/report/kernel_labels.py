"""Kernel names as people can read and tell apart (one rule for Markdown and HTML)."""

from __future__ import annotations

import polars as pl


def kernel_labels(frame: pl.DataFrame) -> list[str]:
    """nsys's short name, or the full name where different kernels share a short name."""
    if frame.is_empty():
        return []
    short = pl.coalesce("short_name", "name")
    shared = pl.col("name").n_unique().over(short) > 1
    named = frame.select(pl.when(shared).then(pl.col("name")).otherwise(short).fill_null("?"))
    return [str(text) for text in named.to_series()]
