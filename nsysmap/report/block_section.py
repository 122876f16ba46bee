"""The Markdown section "per block": each numbered block by phase and by part."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nsysmap.report.blocks import block_totals, part_order
from nsysmap.report.format import ms, num, pct, table

if TYPE_CHECKING:
    from nsysmap.report.answers import Findings

MAX_PARTS = 6  # part columns; the rest are summed into "other parts"


def part_label(part: str) -> str:
    """How a part is named in tables and charts: the block's own operations are "(own)"."""
    return part or "(own)"


def blocks_section(f: Findings) -> list[str]:
    lines = ["## Per block: phases and parts", ""]
    if f.blocks.is_empty():
        return [*lines, "No numbered modules (blocks such as `transformer.h.0`).", ""]
    steps = f.steps or 1
    parts = part_order(f.blocks)
    shown, rest = parts[:MAX_PARTS], parts[MAX_PARTS:]
    per_part = {(r["block"], r["part"]): r["time_ns"] for r in f.blocks.iter_rows(named=True)}
    rows = []
    for r in block_totals(f.module_phase).iter_rows(named=True):
        cells = [ms(per_part.get((r["block"], p), 0) / steps) for p in shown]
        if rest:
            cells.append(ms(sum(per_part.get((r["block"], p), 0) for p in rest) / steps))
        rows.append(
            [
                f"`{r['block']}`",
                r["block_class"] or "–",
                ms(r["time_ns"] / steps),
                ms(r["forward_ns"] / steps),
                ms(r["backward_ns"] / steps),
                ms(r["other_ns"] / steps),
                *cells,
                num(r["tflops_per_s"], 3),
                pct(r["mfu"]),
            ]
        )
    header = [
        "block",
        "class",
        "time per step" if f.steps else "time",
        "forward",
        "backward",
        "no direction",
        *(f"`{part_label(p)}`" for p in shown),
        *(["other parts"] if rest else []),
        "TFLOP/s",
        "MFU",
    ]
    lines.append("Each block with every module below it; parts are its direct children,")
    lines.append("`(own)` its own operations (residual adds). Forward and backward are the time")
    lines.append("in forward and in backward calls, whatever the phase. Devices pooled; a step")
    lines.append("is one step on one device.")
    return [*lines, "", *table(header, rows)]
