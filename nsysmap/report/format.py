"""Number and table formatting for the Markdown of `nsysmap report`."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from nsysmap.core.inert import clipped, distinct_cuts, markdown_cell, markdown_code

# How every table of the report names work outside every phase.
OUTSIDE_PHASES = "(outside every phase)"
_UNITS = ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP"))


def ms(ns: float | None) -> str:
    """Nanoseconds as milliseconds."""
    return "–" if ns is None else f"{ns / 1e6:,.3f} ms"


def pct(x: float | None) -> str:
    """A share as a percentage."""
    return "–" if x is None else f"{100 * x:.1f} %"


def flop(x: float | None) -> str:
    """A FLOP count with a readable unit."""
    if x is None:
        return "–"
    scale, unit = next(((s, u) for s, u in _UNITS if abs(x) >= s), (None, "FLOP"))
    if scale is None:  # under a kFLOP: whole FLOPs (estimates are rounded)
        return f"{x:,.0f} {unit}"
    return f"{x / scale:,.3f} {unit}"


def num(x: float | None, digits: int = 2) -> str:
    """A plain number."""
    return "–" if x is None else f"{x:,.{digits}f}"


def per(x: float | None) -> str:
    """A count per something (calls per pass): whole counts without decimals (24), others
    with two (24.50)."""
    if x is None:
        return "–"
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.2f}"


def plural(n: int, noun: str) -> str:
    """ "1 launch call", "5,268 launch calls": a count and its noun, singular or plural."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def ratio(x: float | None) -> str:
    """A ratio to three significant digits (0.851, 0.0156, 0.750), 2 decimals from 1 on."""
    if x is None:
        return "–"
    if x == 0 or abs(x) >= 1:
        return f"{x:,.2f}"
    decimals = min(2 - math.floor(math.log10(abs(x))), 9)
    return f"{x:.{decimals}f}"


def kernel(text: Any, width: int = 70) -> str:
    """A kernel name as code, cut to `width` characters (nsysmap.core.inert.markdown_code)."""
    return markdown_code(clipped(str(text or "?"), width))


def names(texts: Sequence[Any], width: int) -> list[str]:
    """The names of a table's rows as code, each cut to `width` characters; names that
    would read alike once cut show where they differ (nsysmap.core.inert.distinct_cuts)."""
    full = [str(text or "?") for text in texts]
    labels = distinct_cuts(full, [clipped(text, width) for text in full], width)
    return [markdown_code(label) for label in labels]


def kernel_names(frame: pl.DataFrame) -> list[str]:
    """Short names, or the full name where kernels of different names share a short name."""
    short = pl.coalesce("short_name", "name")
    shared = pl.col("name").n_unique().over(short) > 1
    named = frame.select(pl.when(shared).then(pl.col("name")).otherwise(short))
    return [kernel(text, 90) for text in named.to_series()]


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table; a pipe in a cell never splits it (nsysmap.core.inert.markdown_cell)."""
    lines = ["| " + " | ".join(map(markdown_cell, header)) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(map(markdown_cell, row)) + " |" for row in rows] + [""]


def devices_text(
    devices: pl.DataFrame | list[dict[str, Any]], name: Callable[[str], str] = str
) -> str:
    """ "A100 (device 0), CPU": the run's devices as one phrase (empty when none); `name`
    shows a GPU's name (nsysmap.core.inert's function for the renderer)."""
    rows = devices.to_dicts() if isinstance(devices, pl.DataFrame) else devices
    return ", ".join(
        f"{name(row['device_name']) if row['device_name'] else 'unnamed GPU'} "
        f"(device {row['device_id']})"
        if row["device_id"] >= 0
        else "CPU"
        for row in rows
    )


def cap(text: str) -> str:
    """`text` with its first letter upper case, the rest as it is (range names keep theirs)."""
    return text[:1].upper() + text[1:]


def sentence(text: str) -> str:
    """`text` as a sentence: capitalised, ending in a full stop."""
    text = text.strip()
    if not text:
        return text
    return text[0].upper() + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")
