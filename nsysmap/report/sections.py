"""Report sections on where time and FLOPs go: by phase, layer, category; operator shapes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nsysmap.report.flops import totals
from nsysmap.report.format import flop, ms, num, pct, table

if TYPE_CHECKING:
    from nsysmap.report.answers import Findings

LAYER_ROWS = 20


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
    return ["## Where the time goes: by phase", "", *_utilisation(f), *table(header, rows)]


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
    return ["## Kernel categories: share of time and share of FLOPs", "", *table(header, rows)]


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
