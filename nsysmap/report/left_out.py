"""What the answers leave out, and why, as instances of the structure model (pure).

Everything outside the step scope (nsysmap.report.scopes), by what it is:
the set-up before the first pass, the warm-up before the measured passes, the
tail after them, warm-up work inside the measured region, work between its
steps, and work the GPU ran from before the capture::

    {"what": "set-up: 112 operations before the first pass", "region": "setup",
     "time_ns": 33324898, "share": 0.536,
     "why": "before the first pass: 112 host-to-device copies (the model's weights ...)"}
"""

from __future__ import annotations

from typing import Any

import polars as pl

from nsysmap.report import scopes as rs
from nsysmap.structure.table import before_capture
from nsysmap.structure.words import code, passes_phrase, plural, region_counts

BEFORE_THE_CAPTURE = (
    "the GPU ran it as the capture began, launched before it: the tail of a step the"
    " profile does not hold"
)
_HTOD = r"(?i)htod|host ?-?> ?device"


def _kinds(ops: pl.DataFrame) -> pl.Expr:
    """Why each operation outside the step scope is outside it."""
    region = pl.col("s_region")
    return (
        pl.when(before_capture().fill_null(False))
        .then(pl.lit("before"))
        .when(region.is_in(["setup", "warmup", "tail"]))
        .then(region)
        .when(pl.col("warmup").fill_null(False))
        .then(pl.lit("warm"))
        .otherwise(pl.lit("between"))
    )


def left_out_of(ops: pl.DataFrame, structure: pl.DataFrame) -> list[dict[str, Any]]:
    """Every part of all time the step scope leaves out: what, time, share, why."""
    total = int(ops["dur_ns"].sum())
    marked = ops.with_row_index("_r")
    kept = rs.rows(marked, "step")["_r"]
    # Why, over every operation: "launched before the capture" asks the operation's whole
    # process (its other operations had a launch call), not only what is left out.
    out = marked.with_columns(_why=_kinds(ops)).filter(~pl.col("_r").is_in(kept.implode()))
    rows = []
    for kind in ("setup", "warmup", "tail", "warm", "between", "before"):
        part = out.filter(pl.col("_why") == kind)
        if part.is_empty():
            continue
        what, why = _said(kind, part, structure)
        ns = int(part["dur_ns"].sum())
        rows.append(
            {
                "what": what,
                "region": kind if kind in ("setup", "warmup", "tail") else None,
                "ops": part.height,
                "time_ns": ns,
                "share": ns / total if total else None,
                "why": why,
            }
        )
    return rows


def _said(kind: str, part: pl.DataFrame, structure: pl.DataFrame) -> tuple[str, str]:
    """(what, why) of one kind of work left out."""
    ops = plural(part.height, "operation")
    if kind == "setup":
        counts = region_counts(structure, "setup")
        where = f", in {code(counts['name'])}" if counts["name"] else ""
        copies = part.filter(
            (pl.col("kind").cast(pl.String) == "memcpy") & pl.col("name").str.contains(_HTOD)
        )
        held = (
            f"{plural(copies.height, 'host-to-device copy')} "
            f"({100 * int(copies['dur_ns'].sum()) / max(int(part['dur_ns'].sum()), 1):.0f} % "
            "of its time)"
            if copies.height
            else ops
        )
        return (
            f"set-up: {ops} before the first pass{where}",
            f"before the first pass: {held}, inputs copied in (a model's weights, data) and "
            "initialisation, not the measured work",
        )
    if kind == "warmup":
        counts = region_counts(structure, "warmup")
        held = passes_phrase(counts) or ops
        where = f" inside {code(counts['name'])}" if counts["name"] else ""
        return (
            f"warm-up: {held}{where}",
            "before the measured passes: warm-up work (first calls load kernels, allocate "
            "memory and choose algorithms), not the steady state",
        )
    if kind == "tail":
        return f"tail: {ops} after the measured passes", "after the measured region"
    if kind == "warm":
        return "warm-up work", "work in warm-up ranges is not the steady state"
    if kind == "before":
        return "work launched before the capture", BEFORE_THE_CAPTURE
    return (
        f"work between the measured steps ({ops})",
        "in the measured region but outside every step: not part of any step",
    )
