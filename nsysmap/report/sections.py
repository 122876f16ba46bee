"""Report sections on where time and FLOPs go: by phase, layer, category; operator shapes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from nsysmap.report.flops_time import totals
from nsysmap.report.format import flop, kernel, ms, num, pct, table
from nsysmap.report.range_answers import shown_ranges
from nsysmap.scalars import to_int

if TYPE_CHECKING:
    from nsysmap.report.answers import Findings

LAYER_ROWS = 20
RANGE_ROWS = 15  # ranges by time inside them
OWN_ROWS = 10  # range paths by own time


def phases_section(f: Findings) -> list[str]:
    rows = [
        [
            r["phase"] or "(none)",
            str(r["ops"]),
            ms(r["time_ns"]),
            pct(r["time_share"]),
            flop(r["matmul_flop"]),
            num(r["tflops_per_s"], 3),
            pct(r["mfu"]),
        ]
        for r in f.phases.iter_rows(named=True)
    ]
    header = ["phase", "ops", "time", "share", "matmul FLOPs", "TFLOP/s", "MFU"]
    total = to_int(f.phases["time_ns"].sum())
    lines = ["## Where the time goes: by phase", "", denominator(total, f), ""]
    return [*lines, *_utilisation(f), *table(header, rows)]


def denominator(total: int | None, f: Findings) -> str:
    """The sentence naming what a section's shares divide by."""
    total, everything = int(total or 0), int(f.run.ops["dur_ns"].sum())
    if total == everything:
        return f"Shares are of all operations' time ({ms(total)}), devices together."
    return (
        f"Shares are of the time in steps ({ms(total)} of {ms(everything)} in all), devices "
        "together; the summary of `nsysmap attribute` divides by all of it."
    )


def _utilisation(f: Findings) -> list[str]:
    """Totals: FLOPs, achieved rate and MFU over kernel time and over the steps' wall time."""
    if f.source is None:
        return []
    total = totals(f.module_phase)
    matmul, busy = total["matmul_flop"], total["time_ns"]
    wall = f.wall["step_wall_ns"]
    lines = [
        f"Matmul FLOPs: {flop(matmul)} in {ms(busy)} of operations: "
        f"{num(total['tflops_per_s'], 3)} TFLOP/s, MFU {pct(total['mfu'])}.",
    ]
    if wall:
        lines.append(
            f"Over the steps' wall time ({ms(wall)}, first start to last end per step and "
            f"device): MFU {pct(f.wall['mfu_step_wall'])}."
        )
    return [*lines, ""]


def layers_section(f: Findings) -> list[str]:
    steps = f.steps or 1
    each = "per module and step" if f.steps else "per module"
    rows = [
        [
            f"`{r['layer'] or '(root)'}`",
            r["module_class"] or "–",
            str(r["modules"]),
            ms(r["time_ns"] / steps),
            ms(r["forward_ns"] / steps),
            ms(r["backward_ns"] / steps),
            flop(_per(r["matmul_flop"], steps * r["modules"])),
            flop(_per(r["other_flop_estimate"], steps * r["modules"])),
            num(r["tflops_per_s"], 3),
            pct(r["mfu"]),
        ]
        for r in f.layers.head(LAYER_ROWS).iter_rows(named=True)
    ]
    header = [
        "layer",
        "class",
        "modules",
        "time per step" if f.steps else "time",
        "forward",
        "backward",
        f"matmul FLOPs {each}",
        "other FLOPs ≈",
        "TFLOP/s",
        "MFU",
    ]
    lines = ["## Where the time goes: by layer", ""]
    lines.append(f"Numbered modules collapsed to `*`; top {LAYER_ROWS} by time; own time only")
    lines.append("(a module's kernels, not its submodules'); a step is one step on one device.")
    return [*lines, "", *table(header, rows)]


def _per(value: float | None, count: int) -> float | None:
    return None if value is None or not count else value / count


def categories_section(f: Findings) -> list[str]:
    rows = [
        [
            r["category"] or "–",
            str(r["ops"]),
            ms(r["time_ns"]),
            pct(r["time_share"]),
            flop(r["matmul_flop"]),
            flop(r["other_flop_estimate"]),
            pct(r["flop_share"]),
        ]
        for r in f.categories.iter_rows(named=True)
    ]
    header = [
        "category",
        "ops",
        "time",
        "time share",
        "matmul FLOPs",
        "other FLOPs ≈",
        "FLOP share",
    ]
    lines = ["## Kernel categories: share of time and share of FLOPs", ""]
    return [*lines, denominator(to_int(f.categories["time_ns"].sum()), f), "", *table(header, rows)]


def _per_call(r: dict[str, Any]) -> str:
    value = flop(r["matmul_flop_per_call"] or r["other_flop_estimate_per_call"])
    return value if r["flop_counted"] else f"{value} (counted in its children)"


def shapes_section(f: Findings, full: bool) -> list[str]:
    lines = ["## Input shapes", ""]
    if f.asked.is_empty():
        return [*lines, "No operator carries recorded input shapes.", ""]
    rows = [
        [
            r["family"],
            f"`{r['aten_op']}`",
            r["direction"] or "–",
            f"`{r['input_shapes']}`",
            str(r["calls"]),
            _per_call(r),
            r["layers"][:80],
        ]
        for r in f.asked.iter_rows(named=True)
    ]
    header = [
        "family",
        "operator",
        "direction",
        "input shapes",
        "calls",
        "FLOPs per call",
        "layers",
    ]
    lines += table(header, rows)
    return lines + (_every_module(f) if full else [])


def _every_module(f: Findings) -> list[str]:
    """`--shapes`: every module's operators and their shapes."""
    rows = [
        [
            f"`{r['module'] or '(root)'}`",
            f"`{r['aten_op']}`",
            r["direction"] or "–",
            f"`{r['input_shapes']}`",
            str(r["calls"]),
        ]
        for r in f.shapes.iter_rows(named=True)
    ]
    header = ["module", "operator", "direction", "input shapes", "calls"]
    return ["### Every module", "", *table(header, rows)]


def ranges_section(f: Findings) -> list[str]:
    """Time per range path: the user's ranges by time inside them, every path by own time."""
    lines = ["## Where the time goes: by range", ""]
    if f.ranges is None:
        note = "No by_range.parquet here (written by an older nsysmap): run `nsysmap attribute`"
        return [*lines, note + " again for this section.", ""]
    if f.ranges.is_empty():
        return [*lines, "No operation was launched inside a range.", ""]
    lines.append("Whole capture, devices pooled. *Inside*: the range and every range below it;")
    lines.append("*own*: operations whose innermost range it is (they add up to all time);")
    lines.append("*GPU span*: first GPU start to last GPU end of each call, summed.")
    return [*lines, "", *_inside(f.ranges), *_own(f.ranges)]


def _inside(ranges: pl.DataFrame) -> list[str]:
    shown = shown_ranges(ranges)
    which = "The profile's own ranges" if shown.height < ranges.height else "Ranges"
    rows = [
        [
            kernel(r["range_path"], 100),
            str(r["calls"]),
            ms(r["time_ns"]),
            ms(r["inclusive_ns"]),
            pct(r["inclusive_share"]),
            ms(r["span_ns"]),
        ]
        for r in shown.head(RANGE_ROWS).iter_rows(named=True)
    ]
    header = ["range", "calls", "own", "inside", "share inside", "GPU span"]
    return [f"{which} with the most time inside them:", "", *table(header, rows)]


def _own(ranges: pl.DataFrame) -> list[str]:
    own = ranges.filter(pl.col("time_ns") > 0)
    own = own.sort(["time_ns", "range_path"], descending=[True, False]).head(OWN_ROWS)
    rows = [
        [
            kernel(r["range_path"], 100),
            str(r["calls"]),
            str(r["ops"]),
            ms(r["time_ns"]),
            pct(r["time_share"]),
        ]
        for r in own.iter_rows(named=True)
    ]
    header = ["range", "calls", "ops", "own", "share"]
    return ["Range paths with the most own time:", "", *table(header, rows)]
