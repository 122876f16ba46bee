"""The Markdown section on blocks inferred from the kernel sequence (nsysmap.infer).

Shown when the run has no numbered modules of its own, the usual case for a
profile without ranges; every figure in it is marked as inferred.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from nsysmap.report.format import kernel, ms, pct, table
from nsysmap.scalars import to_float

if TYPE_CHECKING:
    from nsysmap.report.answers import Findings


def inferred_section(f: Findings) -> list[str]:
    blocks = f.run.by_inferred_block
    if blocks is None or blocks.is_empty() or not f.blocks.is_empty():
        return []
    lines = [
        "## Per block, inferred from the repeating kernel sequence",
        "",
        "No ranges name the blocks; these are repeats of one kernel motif found in the "
        "kernel sequence (docs/inference.md), not measured modules.",
        "",
    ]
    for device, rows in blocks.group_by("device_id", maintain_order=True):
        placed = to_float(rows.filter(pl.col("inferred_block").is_not_null())["time_share"].sum())
        lines += [f"Device {device[0]}: {pct(placed)} of GPU time in inferred blocks.", ""]
        cells = [
            [
                r["inferred_phase"] or "–",
                "–" if r["inferred_block"] is None else str(r["inferred_block"]),
                f"{r['ops']:,}",
                ms(r["time_ns"]),
                pct(r["time_share"]),
                kernel(r["top_kernel"] or "", 50),
            ]
            for r in rows.iter_rows(named=True)
        ]
        header = ["inferred phase", "inferred block", "ops", "ms", "share", "top kernel"]
        lines += [*table(header, cells), ""]
    return lines
