"""The report's scopes as instances of the structure model (pure).

Operations carry their region, step and pass (nsysmap.structure.table.assign:
`s_region`, `s_step`, `s_step_region`, `s_pass`, `s_direction`,
`s_pass_region`); a scope is a set of those instances::

    step              the measured steps, where the measured region has steps;
                      else the measured region (all of it: work between passes too)
    forward           the forward passes of the measured region
    forward_backward  the forward and backward passes (and the loss work of their
                      steps) of the measured region, where it has backward passes;
                      else of the warm-up, where only the warm-up has them (said)

Warm-up work (ops.parquet's `warmup`) is in no measured scope, unless the
measured region is warm-up work itself (a `--measure` rule naming it). `describe`
names each scope by its instances ("3 forward passes inside
`timed_iterations`") for every sentence that uses it.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from nsysmap.structure.words import COUNTED_PASS, code, passes_phrase, region_counts

MEASURED = "measured"
WARMUP = "warmup"


def _not_warm(ops: pl.DataFrame) -> pl.Expr:
    """Not warm-up work: unless the measured region is warm-up work itself (a --measure
    rule naming the warm-up), whose warm-up work is then what is measured."""
    measured = ops.filter(pl.col("s_region") == MEASURED)
    warm = int(measured.filter(pl.col("warmup").fill_null(False))["dur_ns"].sum())
    if measured.height and warm >= 0.5 * int(measured["dur_ns"].sum()):
        return pl.lit(True)
    return ~pl.col("warmup").fill_null(False)


def backward_region(ops: pl.DataFrame) -> str | None:
    """Where the forward + backward scope is: the measured region when it has backward
    passes, else the warm-up when it has some, else none."""
    backward = ops.filter(pl.col("s_direction") == "backward")["s_pass_region"].unique()
    for region in (MEASURED, WARMUP):
        if region in backward.to_list():
            return region
    return None


def has_measured_steps(ops: pl.DataFrame) -> bool:
    return bool((ops["s_step_region"] == MEASURED).any())


def rows(ops: pl.DataFrame, scope: str) -> pl.DataFrame:
    """The operations of `scope` (ops with the assigned columns)."""
    if scope == "step":
        column = "s_step_region" if has_measured_steps(ops) else "s_region"
        return ops.filter((pl.col(column) == MEASURED) & _not_warm(ops))
    if scope == "forward":
        forward = (pl.col("s_pass_region") == MEASURED) & (pl.col("s_direction") == "forward")
        return ops.filter(forward & _not_warm(ops))
    region = backward_region(ops)
    if region is None:
        return ops.clear()
    passes = (pl.col("s_pass_region") == region) & pl.col("s_direction").is_in(
        ["forward", "backward"]
    )
    place = "s_step_region" if ops.filter(pl.col("s_step_region") == region).height else "s_region"
    loss = (pl.col("phase") == "loss") & (pl.col(place) == region)
    keep = (passes | loss).fill_null(False)
    return ops.filter(keep & _not_warm(ops)) if region == MEASURED else ops.filter(keep)


def pass_count(scope_rows: pl.DataFrame) -> int | None:
    """Passes (per device and process) among a scope's operations; None without any."""
    held = scope_rows.filter(pl.col("s_pass").is_not_null())
    found = held.select("device_id", "pid", "s_pass").unique().height
    return found or None


def step_count(scope_rows: pl.DataFrame) -> int | None:
    """Steps (per device and process) among a scope's operations; None without any."""
    held = scope_rows.filter(pl.col("s_step").is_not_null())
    found = held.select("device_id", "pid", "s_step").unique().height
    return found or None


def _passes(n: int, what: str) -> str:
    return f"{n:,} {what} pass" if n == 1 else f"{n:,} {what} passes"


def describe(ops: pl.DataFrame, structure: pl.DataFrame, scope: str) -> dict[str, Any]:
    """A scope as instances of the structure: `label` (the words every sentence uses),
    `region`, `passes`, `steps`, `name` (the range holding them) and `evidence`."""
    picked = rows(ops, scope)
    region = backward_region(ops) if scope == "forward_backward" else MEASURED
    counts = region_counts(structure, region) if region else None
    name = counts["name"] if counts else None
    where = f" inside {code(name)}" if name else ""
    only = len({r for r in structure["region"].unique().to_list() if r}) == 1
    everything = rows(ops, "step").height == ops.height
    passes, steps = pass_count(picked), step_count(picked)
    if scope == "forward":
        n = passes or 0
        label = _passes(n, "forward" if only or name else "measured forward") + where
        if steps and not name:
            label = f"forward passes of {steps:,} step{'s' if steps != 1 else ''}"
    elif scope == "forward_backward":
        label = _forward_backward(picked, counts, region, where)
    else:
        label = _step_label(steps, counts, everything, where)
    return {
        "label": label,
        "region": region,
        "passes": passes,
        "steps": steps,
        "name": name,
        "evidence": _evidence(structure, region, scope) if counts else [],
    }


def _evidence(structure: pl.DataFrame, region: str | None, scope: str) -> list[str]:
    """How a scope's instances were found: its passes' evidence (the forward ones for the
    forward scope), the region's for the step scope."""
    rows = structure.filter(pl.col("region") == region)
    if scope == "step":
        rows = rows.filter(pl.col("kind") == "region")
    else:
        wanted = ["forward"] if scope == "forward" else ["forward", "backward"]
        rows = rows.filter(COUNTED_PASS & pl.col("direction").is_in(wanted))
    return sorted({e for text in rows["evidence"].drop_nulls() for e in text.split(", ")})


def _forward_backward(
    picked: pl.DataFrame, counts: dict[str, Any] | None, region: str | None, where: str
) -> str:
    if counts is None:
        return "forward + backward (none)"
    forward = picked.filter(pl.col("s_direction") == "forward").select("device_id", "pid", "s_pass")
    backward = picked.filter(pl.col("s_direction") == "backward").select(
        "device_id", "pid", "s_pass"
    )
    n, m = forward.unique().height, backward.unique().height
    if region == WARMUP:
        steps = counts["steps_with_backward"]
        if steps:
            return (
                f"{steps:,} warm-up step{'s' if steps != 1 else ''} with forward and backward, "
                "the only ones in the capture"
            )
        return f"{n:,} forward and {m:,} backward warm-up passes, the only backward work"
    steps = counts["steps_with_backward"]
    if steps and not where:
        return f"forward and backward passes of {steps:,} step{'s' if steps != 1 else ''}"
    return f"{n:,} forward and {m:,} backward pass{'es' if m != 1 else ''}{where}"


def _step_label(
    steps: int | None, counts: dict[str, Any] | None, everything: bool, where: str
) -> str:
    """The step scope's name; "whole capture" only where it leaves nothing out."""
    if steps:
        plural = "s" if steps != 1 else ""
        return (
            f"{steps:,} step{plural}{where}"
            if everything
            else f"{steps:,} measured step{plural}{where}"
        )
    if everything:
        return "whole capture"
    if where:
        return f"measured region{where}"
    held = passes_phrase(counts) if counts else ""
    return f"measured region ({held})" if held else "measured region"
